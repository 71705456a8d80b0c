// Text corpora (data/text_corpus.h): UTF-8 files read whole (invalid bytes named by file and line),
// the WikiText split names, and the LM windows (non-overlapping blocks and HF-style strided windows).
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/temp_dir.h"
#include "data/text_corpus.h"

using namespace hh;
using namespace hh::data;
namespace fs = std::filesystem;

namespace {

using TempDir = test::TempDir;

std::vector<int32_t> iota_ids(int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 100 + i;  // id of stream position i
  return v;
}

std::vector<int64_t> all_rows(const LmWindows& w) {
  std::vector<int64_t> r;
  for (int64_t i = 0; i < w.size(); ++i) r.push_back(i);
  return r;
}

}  // namespace

TEST_CASE("text corpus: files are read whole; invalid UTF-8 names the file and the line") {
  TempDir dir("text");
  const std::string text = " = Valkyria Chronicles III = \n\n Senj\xC5\x8D no Valkyria 3 : 1 @,@ 000 <unk> \xEF\xBF\xBD\n";
  CHECK(read_text_file(dir.write("wiki.test.raw", text)) == text);
  CHECK(read_text_file(dir.write("empty.raw", "")).empty());
  CHECK_THROWS_WITH_AS(read_text_file(dir.write("bad.raw", "ok\nfine\nabc\xC3(d\n")),
                       doctest::Contains("bad.raw:3: invalid UTF-8 at byte 4 of the line"), Error);
  CHECK_THROWS_WITH_AS(read_text_file(dir.write("bad2.raw", "\xED\xA0\x80")),  // a surrogate
                       doctest::Contains("bad2.raw:1: invalid UTF-8 at byte 1"), Error);
  CHECK_THROWS_WITH_AS(read_text_file(dir.write("bad3.raw", "a\n\nb\xF0\x9F\x98\n")),  // truncated 4-byte sequence
                       doctest::Contains("bad3.raw:3: invalid UTF-8 at byte 2"), Error);
  CHECK_THROWS_WITH_AS(read_text_file(dir.file("missing.raw")), doctest::Contains("missing.raw: cannot open"), Error);
  CHECK_THROWS_WITH_AS(read_text_file(dir.path.string()), doctest::Contains("is a directory"), Error);
}

TEST_CASE("text corpus: WikiText split files (.raw first, then .tokens)") {
  TempDir dir("text");
  dir.write("wiki.train.tokens", "x");
  dir.write("wiki.valid.raw", "x");
  dir.write("wiki.valid.tokens", "x");
  CHECK(wikitext_split_path(dir.path.string(), "train") == dir.file("wiki.train.tokens"));
  CHECK(wikitext_split_path(dir.path.string(), "valid") == dir.file("wiki.valid.raw"));
  CHECK_THROWS_WITH_AS(wikitext_split_path(dir.path.string(), "test"),
                       doctest::Contains(("wikitext: no wiki.test.raw or wiki.test.tokens in " + dir.path.string()).c_str()), Error);
  CHECK_THROWS_WITH_AS(wikitext_split_path(dir.path.string(), "validation"),
                       doctest::Contains("unknown split 'validation' (valid: train, valid, test)"), Error);
}

TEST_CASE("text corpus: non-overlapping blocks") {
  const LmWindows w = lm_blocks(iota_ids(11), 4);  // positions 0..10
  REQUIRE(w.size() == 2);                          // [0..4], [4..8]; the tail 9, 10 is dropped
  CHECK(w.num_scored == 8);
  CHECK(to_vector<int64_t>(w.tokens({1, 0})) == std::vector<int64_t>{104, 105, 106, 107, 108, 100, 101, 102, 103, 104});
  const Tensor t = w.targets({0, 1});
  CHECK(t.shape() == Shape{2, 4});
  CHECK(to_vector<int64_t>(t) == std::vector<int64_t>{101, 102, 103, 104, 105, 106, 107, 108});
  CHECK(lm_blocks(iota_ids(5), 4).size() == 1);  // exactly one window
  CHECK_THROWS_WITH_AS(lm_blocks(iota_ids(4), 4), doctest::Contains("shorter than one window of context + 1 = 5"), Error);
  CHECK_THROWS_WITH_AS(lm_blocks(iota_ids(4), 0), doctest::Contains("context must be >= 1"), Error);
  CHECK_THROWS_WITH_AS(w.tokens({2}), doctest::Contains("row 2 out of range [0, 2)"), Error);
  CHECK_THROWS_WITH_AS(w.targets({-1}), doctest::Contains("row -1 out of range"), Error);
}

TEST_CASE("text corpus: strided windows score each token once, the last one padded") {
  // T = 10, L = 4, stride 3: windows [0,5) scores 1..4, [3,8) scores 5..7, [6,10) scores 8..9.
  const LmWindows w = lm_strided(iota_ids(10), 4, 3);
  REQUIRE(w.size() == 3);
  CHECK(w.begin == std::vector<int64_t>{0, 3, 6});
  CHECK(w.first_scored == std::vector<int64_t>{1, 5, 8});
  CHECK(w.num_scored == 9);
  CHECK(to_vector<int64_t>(w.tokens({2}, -7)) == std::vector<int64_t>{106, 107, 108, 109, -7});
  CHECK(to_vector<int64_t>(w.targets({0, 1, 2})) == std::vector<int64_t>{101, 102, 103, 104,  //
                                                                          -100, 105, 106, 107,  //
                                                                          -100, 108, 109, -100});
  // A stream shorter than one window: one padded window.
  const LmWindows s = lm_strided(iota_ids(3), 4, 2);
  REQUIRE(s.size() == 1);
  CHECK(to_vector<int64_t>(s.targets({0})) == std::vector<int64_t>{101, 102, -100, -100});
  CHECK_THROWS_WITH_AS(lm_strided(iota_ids(10), 4, 5), doctest::Contains("stride must be in [1, context = 4], got 5"), Error);
  CHECK_THROWS_WITH_AS(lm_strided(iota_ids(10), 4, 0), doctest::Contains("stride must be in"), Error);
  CHECK_THROWS_WITH_AS(lm_strided(iota_ids(1), 4, 2), doctest::Contains("nothing to predict"), Error);
}

TEST_CASE("text corpus: strided windows, every length/context/stride: each prediction once, enough context") {
  for (int32_t T = 2; T <= 23; ++T)
    for (int64_t L = 1; L <= 7; ++L)
      for (int64_t s = 1; s <= L; ++s) {
        CAPTURE(T);
        CAPTURE(L);
        CAPTURE(s);
        const LmWindows w = lm_strided(iota_ids(T), L, s);
        const std::vector<int64_t> tok = to_vector<int64_t>(w.tokens(all_rows(w), -1));
        const std::vector<int64_t> tgt = to_vector<int64_t>(w.targets(all_rows(w)));
        std::vector<int> times(static_cast<size_t>(T), 0);
        bool ok = true;
        for (int64_t r = 0; r < w.size(); ++r)
          for (int64_t j = 0; j < L; ++j) {
            const int64_t y = tgt[static_cast<size_t>(r * L + j)];
            if (y == kLmIgnoreIndex) continue;
            const int64_t p = y - 100;  // the stream position predicted
            ok = ok && tok[static_cast<size_t>(r * (L + 1) + j + 1)] == y;  // the next token of the window
            ok = ok && j + 1 >= std::min<int64_t>(p, L - s + 1);          // tokens read before predicting it
            ++times[static_cast<size_t>(p)];
          }
        CHECK(ok);
        CHECK(times[0] == 0);
        for (int32_t p = 1; p < T; ++p) CHECK(times[static_cast<size_t>(p)] == 1);
        CHECK(w.num_scored == T - 1);
      }
}
