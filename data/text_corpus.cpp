#include "data/text_corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <utility>

#include "core/error.h"
#include "core/regular_file.h"
#include "data/unicode.h"

namespace hh::data {

namespace {

// Throws naming the first ill-formed UTF-8 sequence of `text` (read from `path`).
void report_invalid_utf8(const std::string& text, const std::string& path) {
  int64_t line = 1;
  size_t line_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '\n') {
      ++line;
      line_start = ++i;
      continue;
    }
    const size_t at = i;
    const char32_t cp = unicode::next_code_point(text, i);
    // U+FFFD comes back for an ill-formed sequence, and for the (valid) bytes EF BF BD.
    if (cp == unicode::kReplacement && text.compare(at, 3, "\xEF\xBF\xBD") != 0)
      fail(str("text: ", path, ":", line, ": invalid UTF-8 at byte ", at - line_start + 1, " of the line"));
  }
  fail(str("text: ", path, ": invalid UTF-8"));  // not reached: the caller saw an ill-formed sequence
}

LmWindows make_windows(std::vector<int32_t> ids, int64_t context, int64_t stride, bool drop_partial) {
  const int64_t T = static_cast<int64_t>(ids.size());
  LmWindows w;
  w.ids = std::move(ids);
  w.context = context;
  int64_t scored_end = 1;  // predictions of ids[1 .. scored_end) are taken; ids[0] is never predicted
  for (int64_t b = 0;; b += stride) {
    const int64_t e = std::min(b + context + 1, T);  // the window holds ids[b, e)
    if (drop_partial && e - b < context + 1) break;
    const int64_t first = std::max(b + 1, scored_end);
    w.begin.push_back(b);
    w.first_scored.push_back(first);
    w.num_scored += e - first;
    scored_end = e;
    if (e == T) break;
  }
  return w;
}

void check_rows(const LmWindows& w, const std::vector<int64_t>& rows) {
  for (int64_t r : rows) HH_CHECK(r >= 0 && r < w.size(), "lm windows: row ", r, " out of range [0, ", w.size(), ")");
}

}  // namespace

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  HH_CHECK(!std::filesystem::is_directory(path, ec), "text: ", path, ": is a directory, not a text file");
  check_regular_file(path, "text");  // a FIFO would block the open below forever
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  HH_CHECK(f.good(), "text: ", path, ": cannot open the file");
  const std::streamoff size = f.tellg();
  HH_CHECK(size >= 0, "text: ", path, ": cannot tell the file's size");
  std::string text(static_cast<size_t>(size), '\0');
  f.seekg(0);
  f.read(text.data(), size);
  HH_CHECK(f.gcount() == size, "text: ", path, ": read error (", f.gcount(), " of ", size, " bytes)");
  if (!unicode::is_valid_utf8(text)) report_invalid_utf8(text, path);
  return text;
}

std::string wikitext_split_path(const std::string& dir, const std::string& split) {
  HH_CHECK(split == "train" || split == "valid" || split == "test", "wikitext: unknown split '", split,
           "' (valid: train, valid, test)");
  const std::string raw = "wiki." + split + ".raw", tokens = "wiki." + split + ".tokens";
  for (const std::string& name : {raw, tokens}) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) return path;
  }
  fail(str("wikitext: no ", raw, " or ", tokens, " in ", dir));
}

LmWindows lm_blocks(std::vector<int32_t> ids, int64_t context) {
  HH_CHECK(context >= 1, "lm_blocks: context must be >= 1, got ", context);
  HH_CHECK(static_cast<int64_t>(ids.size()) >= context + 1, "lm_blocks: a stream of ", ids.size(),
           " tokens is shorter than one window of context + 1 = ", context + 1);
  return make_windows(std::move(ids), context, context, /*drop_partial=*/true);
}

LmWindows lm_strided(std::vector<int32_t> ids, int64_t context, int64_t stride) {
  HH_CHECK(context >= 1, "lm_strided: context must be >= 1, got ", context);
  HH_CHECK(stride >= 1 && stride <= context, "lm_strided: stride must be in [1, context = ", context, "], got ", stride);
  HH_CHECK(ids.size() >= 2, "lm_strided: a stream of ", ids.size(), " tokens has nothing to predict (need >= 2)");
  return make_windows(std::move(ids), context, stride, /*drop_partial=*/false);
}

Tensor LmWindows::tokens(const std::vector<int64_t>& rows, int32_t pad_id) const {
  check_rows(*this, rows);
  const int64_t T = static_cast<int64_t>(ids.size()), W = context + 1;
  std::vector<int64_t> out(rows.size() * static_cast<size_t>(W), pad_id);
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t b = begin[static_cast<size_t>(rows[r])];
    for (int64_t j = 0; j < W && b + j < T; ++j) out[r * static_cast<size_t>(W) + static_cast<size_t>(j)] = ids[static_cast<size_t>(b + j)];
  }
  return from_vector(out, {static_cast<int64_t>(rows.size()), W});
}

Tensor LmWindows::targets(const std::vector<int64_t>& rows) const {
  check_rows(*this, rows);
  const int64_t T = static_cast<int64_t>(ids.size()), L = context;
  std::vector<int64_t> out(rows.size() * static_cast<size_t>(L), kLmIgnoreIndex);
  for (size_t r = 0; r < rows.size(); ++r) {
    const size_t w = static_cast<size_t>(rows[r]);
    for (int64_t j = 0; j < L; ++j) {
      const int64_t p = begin[w] + 1 + j;  // the stream position predicted at column j
      if (p < T && p >= first_scored[w]) out[r * static_cast<size_t>(L) + static_cast<size_t>(j)] = ids[static_cast<size_t>(p)];
    }
  }
  return from_vector(out, {static_cast<int64_t>(rows.size()), L});
}

}  // namespace hh::data
