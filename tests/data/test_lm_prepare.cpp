// LM corpus preparation (data/lm_prepare.h): parallel tokenizing equals serial, WikiText folders
// and folders of files become train/valid(/test) shards plus meta.json, and bad input is a clear
// error naming the file; a preparation over a prepared folder is all or nothing (a bad input, a full
// disk or a crash never loses the previous result).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/lm_prepare.h"
#include "data/token_shards.h"
#include "data/tokenizer_bytes.h"
#include "data/tokenizer_gpt2.h"
#include "data/unicode.h"
#include "tests/temp_dir.h"

using namespace hh;
using namespace hh::data;
namespace fs = std::filesystem;

namespace {

using TempDir = test::TempDir;

const std::string kGpt2 = std::string(HH_SOURCE_DIR) + "/tests/fixtures/tokenizers/gpt2";
const std::string kWikiText = std::string(HH_SOURCE_DIR) + "/tests/fixtures/wikitext";

// Text with many whitespace patterns: runs of spaces, tabs, blank lines, CRLF, spaces before
// newlines, Unicode spaces (NBSP, U+2028, ideographic), contractions, numbers, special tokens.
std::string whitespace_zoo() {
  std::string s;
  const char* lines[] = {
      "Hello world.\n\n  Indented line\twith\ttabs \t\n",
      "\r\nCRLF line\r\nnumbers 123 4,567.89 and 2024-01-01 don't it's we'll I'M\n",
      "   \n\n\nthree blank lines above; trailing spaces   \n",
      " = Heading = \n \n A WikiText-like line , with @-@ tokens and <unk> . \n",
      "Unicode: na\xC3\xAFve caf\xC3\xA9 \xE2\x80\x94 \xE2\x80\x9Cquotes\xE2\x80\x9D \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
      "\xC2\xA0nbsp\xC2\xA0 x\xE2\x80\xA8sep\xE3\x80\x80ideographic space\n",
      "<|endoftext|> after a special token\n<|endoftext|>\n\n",
      "x\n\ny\n \nz \n\tw\v\fv!\n\n!!  ?? ...\n",
      "end without newline",
  };
  for (int rep = 0; rep < 3; ++rep)
    for (const char* l : lines) s += l;
  return s;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<int32_t> bytes_of(const std::string& s) { return ByteTokenizer().encode(s); }

// Every entry of a folder (hidden ones included) -> its bytes ("<folder>" for a folder).
std::map<std::string, std::string> folder_bytes(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    out[e.path().filename().string()] = e.is_directory() ? std::string("<folder>") : read_file(e.path().string());
  return out;
}

}  // namespace

TEST_CASE("lm prepare: cuts fall between printable ASCII and ASCII whitespace, chunk_bytes apart") {
  const std::string text = whitespace_zoo();
  for (size_t chunk : {size_t{1}, size_t{5}, size_t{40}}) {
    const std::vector<size_t> cuts = lm_text_cuts(text, chunk);
    REQUIRE(!cuts.empty());
    size_t last = 0;
    for (size_t c : cuts) {
      CHECK(c >= last + chunk);
      CHECK(c < text.size());
      CHECK(text[c - 1] >= 0x21);
      CHECK(text[c - 1] <= 0x7E);
      CHECK((text[c] == ' ' || text[c] == '\n' || text[c] == '\t' || text[c] == '\r' || text[c] == '\v' || text[c] == '\f'));
      last = c;
    }
  }
  CHECK(lm_text_cuts("abc def", 100).empty());
  CHECK(lm_text_cuts("a b", 1) == std::vector<size_t>{1});
  CHECK(lm_text_cuts("\xC3\xA9 \xC2\xA0x  y", 1) == std::vector<size_t>{6});  // not after a multi-byte char
}

TEST_CASE("lm prepare: parallel tokenizing equals serial (GPT-2 BPE and bytes)") {
  const auto gpt2 = make_lm_tokenizer(kGpt2);
  const ByteTokenizer bytes;
  CHECK(lm_tokenizer_allows_cuts(*gpt2));
  CHECK(lm_tokenizer_allows_cuts(bytes));
  std::string wiki = read_file(kWikiText + "/wiki.train.raw");
  for (const std::string& text : {whitespace_zoo(), wiki}) {
    const std::vector<int32_t> serial = gpt2->encode(text, false);
    for (size_t chunk : {size_t{1}, size_t{2}, size_t{7}, size_t{64}}) {
      CAPTURE(chunk);
      CHECK(lm_encode_parallel(*gpt2, text, 3, chunk) == serial);
      CHECK(lm_encode_parallel(bytes, text, 3, chunk) == bytes.encode(text, false));
    }
    CHECK(lm_encode_parallel(*gpt2, text, 0) == serial);  // all cores, one piece
  }
  // Why not any "\n" before a non-space: the whole "a\n\nB" has "\n" and "\n" where the piece "a\n\n"
  // ends in the token "\n\n" (GPT-2 merges it).
  CHECK(gpt2->encode("a\n\nB", false) != cat(gpt2->encode("a\n\n", false), gpt2->encode("B", false)));
  // Nor after a space run that ends in "\n": "  \nB" is "  " + "\n" + "B", the piece "  \n" is one run.
  CHECK(gpt2->encode("x \n\nB", false) != cat(gpt2->encode("x \n\n", false), gpt2->encode("B", false)));
}

TEST_CASE("lm prepare: a WikiText folder becomes train/valid/test shards and meta.json") {
  TempDir dir("lmprep");
  const std::string out = dir.file("prepared");
  for (const std::string& spec : {std::string("bytes"), kGpt2}) {
    CAPTURE(spec);
    PrepareOptions o;
    o.inputs = {kWikiText};
    o.out_dir = out;
    o.tokenizer = spec;
    o.shard_tokens = 100;  // several shards per split
    o.threads = 3;
    o.chunk_bytes = 50;
    o.progress = false;
    const PrepareResult r = prepare_lm_data(o);
    const auto tok = make_lm_tokenizer(spec);
    CHECK(r.vocab_size == tok->vocab_size());
    CHECK(r.tokens.size() == 3);
    for (const char* split : {"train", "valid", "test"}) {
      CAPTURE(split);
      const std::string text = read_file(kWikiText + "/wiki." + split + ".raw");
      const std::vector<int32_t> expected = tok->encode(text, false);
      const TokenDataset data = TokenDataset::open(out, split);
      CHECK(data.all() == expected);
      CHECK(r.tokens.at(split) == static_cast<int64_t>(expected.size()));
      CHECK(data.num_shards() == (static_cast<int64_t>(expected.size()) + 99) / 100);
    }
    CHECK(r.files.back() == (fs::path(out) / "meta.json").string());
    const PreparedInfo info = read_prepared_info(out);
    CHECK(info.vocab_size == tok->vocab_size());
    CHECK(info.eos_id == tok->eos_id());
    CHECK(info.tokens == r.tokens);
    CHECK(info.tokenizer == (spec == "bytes" ? spec : fs::absolute(spec).lexically_normal().string()));
    CHECK(make_lm_tokenizer(info.tokenizer)->vocab_size() == tok->vocab_size());
  }
  // The GPT-2 run (larger shards_tokens would do the same) left no shard of the longer byte run behind.
  CHECK_FALSE(fs::exists(token_shard_path(out, "train", 30)));
  size_t bins = 0;
  for (const auto& e : fs::directory_iterator(out)) bins += e.path().extension() == ".bin";
  const PreparedInfo info = read_prepared_info(out);
  size_t expected_bins = 0;
  for (const auto& [split, n] : info.tokens) expected_bins += static_cast<size_t>((n + 99) / 100);
  CHECK(bins == expected_bins);
}

TEST_CASE("lm prepare: a folder of files, each document's tail to valid, eos between documents") {
  TempDir dir("lmprep");
  const std::string a = std::string(40, 'a') + "\n", b = "bbbbbbbbbbbbbbbbbbb\n", c = "c c c c c c c c c c c c c c c c c c c\n";
  dir.write("in/b.txt", b);
  dir.write("in/a.txt", a);
  dir.write("in/sub/c.md", c);
  dir.write("in/.hidden", "\x01\x02 not read");
  dir.write("in/.git/objects/x", std::string("\0\0binary", 8));
  PrepareOptions o;
  o.inputs = {dir.file("in")};
  o.out_dir = dir.file("in/out");  // inside the input: skipped when listing, also on a second run
  o.valid_fraction = 0.25;
  o.shard_tokens = 16;
  o.threads = 2;
  o.chunk_bytes = 3;
  o.progress = false;
  for (int run = 0; run < 2; ++run) {
    const PrepareResult r = prepare_lm_data(o);
    // Sorted by path: a.txt, b.txt, sub/c.md. n_valid = round(n / 4): 41 -> 10, 20 -> 5, 38 -> 10.
    const std::vector<int32_t> eos = {256};
    const std::vector<int32_t> train =
        cat(cat(cat(cat(bytes_of(a.substr(0, 31)), eos), bytes_of(b.substr(0, 15))), eos), bytes_of(c.substr(0, 28)));
    const std::vector<int32_t> valid =
        cat(cat(cat(cat(bytes_of(a.substr(31)), eos), bytes_of(b.substr(15))), eos), bytes_of(c.substr(28)));
    CHECK(TokenDataset::open(o.out_dir, "train").all() == train);
    CHECK(TokenDataset::open(o.out_dir, "valid").all() == valid);
    CHECK_FALSE(fs::exists(token_shard_path(o.out_dir, "test", 0)));
    CHECK(r.tokens.at("train") == 76);
    CHECK(r.tokens.at("valid") == 27);
    CHECK(read_prepared_info(o.out_dir).eos_id == 256);
    CHECK(TokenShard::open(token_shard_path(o.out_dir, "train", 0)).bytes_per_id() == 2);
  }
  // Files given one by one keep the order given; valid_fraction 0 leaves valid empty (one empty shard).
  o.inputs = {dir.file("in/b.txt"), dir.file("in/a.txt")};
  o.valid_fraction = 0.0;
  const PrepareResult r = prepare_lm_data(o);
  CHECK(TokenDataset::open(o.out_dir, "train").all() == cat(cat(bytes_of(b), {256}), bytes_of(a)));
  CHECK(r.tokens.at("valid") == 0);
  CHECK(TokenDataset::open(o.out_dir, "valid").size() == 0);
}

TEST_CASE("lm prepare: uint32 shards for a vocabulary past 65536, and the error when 2 bytes are forced") {
  TempDir dir("lmprep");
  // A GPT-2 style tokenizer with 70,000 tokens: the 256 bytes, then filler tokens, no merges.
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    unicode::append_utf8(s, gpt2_byte_to_char(static_cast<uint8_t>(b)));
    vocab[s] = b;
  }
  for (int id = 256; id < 70000; ++id) vocab["filler" + std::to_string(id)] = id;
  dir.write("tok/vocab.json", vocab.dump());
  dir.write("tok/merges.txt", "#version: 0.2\n");
  dir.write("text.txt", "zz top\n");
  PrepareOptions o;
  o.inputs = {dir.file("text.txt")};
  o.out_dir = dir.file("out");
  o.tokenizer = dir.file("tok");
  o.valid_fraction = 0.0;
  o.progress = false;
  o.bytes_per_id = 2;
  CHECK_THROWS_WITH_AS(prepare_lm_data(o), doctest::Contains("vocabulary of 70000 does not fit uint16 shards"), Error);
  CHECK_FALSE(fs::exists(dir.file("out")));  // refused before any work
  o.bytes_per_id = 0;
  const PrepareResult r = prepare_lm_data(o);
  CHECK(r.vocab_size == 70000);
  const TokenShard s = TokenShard::open(token_shard_path(o.out_dir, "train", 0));
  CHECK(s.bytes_per_id() == 4);
  CHECK(TokenDataset::open(o.out_dir, "train").all() == bytes_of("zz top\n"));
}

TEST_CASE("lm prepare: bad input is an error naming the file and what was wrong") {
  TempDir dir("lmprep");
  PrepareOptions o;
  o.out_dir = dir.file("out");
  o.progress = false;
  const auto fails_with = [&](std::vector<std::string> inputs, const std::string& message) {
    o.inputs = std::move(inputs);
    CHECK_THROWS_WITH_AS(prepare_lm_data(o), doctest::Contains(message.c_str()), Error);
  };
  fails_with({dir.file("missing.txt")}, "input " + dir.file("missing.txt") + ": no such file or folder");
  fails_with({dir.write("empty.txt", "")}, dir.file("empty.txt") + ": empty file");
  dir.write("hidden_only/.x", "text");
  fails_with({dir.file("hidden_only")}, "input folder " + dir.file("hidden_only") + " has no files");
  fails_with({dir.write("nul.bin", std::string("line one\nab\0cd", 14))},
             dir.file("nul.bin") + ":2: NUL byte at byte 3 of the line (a binary file");
  fails_with({dir.write("latin1.txt", "ok\ncaf\xE9 au lait\n")}, dir.file("latin1.txt") + ":2: invalid UTF-8 at byte 4");
  fails_with({}, "no input files or folders");
  fails_with({kWikiText, dir.write("more.txt", "x")}, "is a WikiText folder (it has wiki.train.*), which must be the only input");
  dir.write("wiki_no_valid/wiki.train.tokens", "x");
  fails_with({dir.file("wiki_no_valid")}, "no wiki.valid.raw or wiki.valid.tokens");
  o.tokenizer = dir.file("no_tokenizer_here");
  fails_with({dir.write("ok.txt", "fine")}, "\"bytes\"");
  o.tokenizer = "bytes";
  o.valid_fraction = 1.0;
  fails_with({dir.file("ok.txt")}, "valid_fraction 1 is outside [0, 1)");
  CHECK_FALSE(fs::exists(dir.file("out/meta.json")));

  // A failed preparation over a prepared folder leaves it as it was (issue 27: it used to be emptied).
  o.valid_fraction = 0.5;
  o.shard_tokens = 2;
  o.inputs = {dir.file("ok.txt")};
  prepare_lm_data(o);
  REQUIRE(fs::exists(dir.file("out/meta.json")));
  REQUIRE(fs::exists(dir.file("out/train_00000.bin")));
  const auto before = folder_bytes(dir.file("out"));
  fails_with({dir.file("ok.txt"), dir.file("nul.bin")}, "NUL byte");
  CHECK(folder_bytes(dir.file("out")) == before);
}

TEST_CASE("lm prepare: over a prepared folder, a bad input or a full disk leaves it byte for byte as it was") {
  TempDir dir("lmprep");
  const std::string out = dir.file("out");
  PrepareOptions o;
  o.inputs = {kWikiText};
  o.out_dir = out;
  o.shard_tokens = 500;  // several shards per split
  o.progress = false;
  prepare_lm_data(o);
  const auto before = folder_bytes(out);
  REQUIRE(before.count("meta.json") == 1);
  REQUIRE(before.count("train_00001.bin") == 1);
  // issue 27's repro: a file holding printf 'ok\n\xff bad\n'.
  o.inputs = {dir.write("bad.txt", "ok\n\xff bad\n")};
  CHECK_THROWS_WITH_AS(prepare_lm_data(o), doctest::Contains((dir.file("bad.txt") + ":2: invalid UTF-8").c_str()), Error);
  CHECK(folder_bytes(out) == before);
  // A bad file late in the run (after shards of the good ones were written).
  o.inputs = {kWikiText + "/wiki.train.raw", kWikiText + "/wiki.valid.raw", dir.file("bad.txt")};
  o.shard_tokens = 50;
  CHECK_THROWS_WITH_AS(prepare_lm_data(o), doctest::Contains("invalid UTF-8"), Error);
  CHECK(folder_bytes(out) == before);
  // A full disk: the writes fail after N bytes, at several points of the run (the first shard, a
  // later shard, meta.json: a good run writes `total` bytes, meta.json last).
  o.inputs = {kWikiText + "/wiki.train.raw", kWikiText + "/wiki.valid.raw"};
  PrepareOptions scratch = o;
  scratch.out_dir = dir.file("scratch");
  prepare_lm_data(scratch);
  int64_t total = 0, meta = 0;
  for (const auto& [name, bytes] : folder_bytes(scratch.out_dir)) total += static_cast<int64_t>(bytes.size());
  meta = static_cast<int64_t>(folder_bytes(scratch.out_dir).at("meta.json").size());
  REQUIRE(total > 2 * meta);
  for (int64_t limit : {int64_t{0}, int64_t{100}, total / 2, total - meta, total - 1}) {
    CAPTURE(limit);
    set_write_limit_for_tests(limit);
    CHECK_THROWS_WITH_AS(prepare_lm_data(o), doctest::Contains("No space left on device"), Error);
    set_write_limit_for_tests(-1);
    CHECK(folder_bytes(out) == before);
  }
  // Files that are not the preparation's are kept, and a good run swaps its result in.
  write_file_atomic(out + "/NOTES.txt", "mine");
  const PrepareResult r = prepare_lm_data(o);
  const auto after = folder_bytes(out);
  CHECK(after.at("NOTES.txt") == "mine");
  CHECK(after.count("test_00000.bin") == 0);  // the old preparation's test split is gone
  CHECK(after.count("train_00001.bin") == 1);
  CHECK(r.files.back() == out + "/meta.json");
  for (const auto& f : r.files) CHECK(fs::exists(f));
  CHECK(after.size() == r.files.size() + 1);  // no stage folder left (folder_bytes lists folders too)
  CHECK(read_prepared_info(out).tokens.count("test") == 0);
}

TEST_CASE("lm prepare: a preparation killed during its swap is finished by the next one") {
  TempDir dir("lmprep");
  const std::string out = dir.file("out");
  PrepareOptions o;
  o.inputs = {kWikiText};
  o.out_dir = out;
  o.shard_tokens = 500;
  o.progress = false;
  prepare_lm_data(o);  // the result the dead process had built ...
  const auto complete = folder_bytes(out);
  // ... then died in its swap: meta.json removed, one shard moved in, the rest still in its stage
  // (a pid that cannot exist, the stage older than this process).
  const std::string stage = out + "/.hh-prepare.999999999.0";
  fs::create_directory(stage);
  for (const auto& [name, bytes] : complete)
    if (name != "train_00000.bin") fs::rename(out + "/" + name, stage + "/" + name);
  write_file_atomic(out + "/test_00007.bin", "an old shard");  // of the preparation before
  fs::last_write_time(stage, fs::file_time_type::clock::now() - std::chrono::hours(1));
  REQUIRE_FALSE(fs::exists(out + "/meta.json"));
  // An incomplete stage of another dead run is just removed.
  fs::create_directory(out + "/.hh-prepare.999999998.3");
  write_file_atomic(out + "/.hh-prepare.999999998.3/train_00000.bin", "partial");
  fs::last_write_time(out + "/.hh-prepare.999999998.3", fs::file_time_type::clock::now() - std::chrono::hours(1));
  // The next run fails (bad input), but first it finished the swap: the folder is prepared.
  o.inputs = {dir.write("bad.txt", "ok\n\xff bad\n")};
  CHECK_THROWS_WITH_AS(prepare_lm_data(o), doctest::Contains("invalid UTF-8"), Error);
  CHECK(folder_bytes(out) == complete);
}

TEST_CASE("lm prepare: meta.json round trip and its errors") {
  TempDir dir("lmprep");
  CHECK_THROWS_WITH_AS(read_prepared_info(dir.path.string()),
                       doctest::Contains((dir.file("meta.json") + " is missing (the folder was not prepared").c_str()), Error);
  dir.write("meta.json", "{\"tokenizer\": \"bytes\", \"vocab_size\": 257, \"eos_id\": 256,");
  CHECK_THROWS_WITH_AS(read_prepared_info(dir.path.string()), doctest::Contains("meta.json: not valid JSON"), Error);
  dir.write("meta.json", "{\"tokenizer\": \"bytes\", \"vocab_size\": \"257\", \"eos_id\": 256, \"tokens\": {}}");
  CHECK_THROWS_WITH_AS(read_prepared_info(dir.path.string()), doctest::Contains("\"vocab_size\" is missing or not an integer"),
                       Error);
  dir.write("meta.json", "{\"tokenizer\": \"bytes\", \"vocab_size\": 257, \"eos_id\": 300, \"tokens\": {}}");
  CHECK_THROWS_WITH_AS(read_prepared_info(dir.path.string()), doctest::Contains("eos_id 300 is outside the vocabulary"),
                       Error);
  dir.write("meta.json", "{\"tokenizer\": \"bytes\", \"vocab_size\": 257, \"eos_id\": 256, \"tokens\": {\"train\": -4}}");
  CHECK_THROWS_WITH_AS(read_prepared_info(dir.path.string()), doctest::Contains("tokens.train is not a count"), Error);

  dir.write("in.txt", "some text to prepare\n");
  PrepareOptions o;
  o.inputs = {dir.file("in.txt")};
  o.out_dir = dir.path.string();
  o.progress = false;
  const PrepareResult r = prepare_lm_data(o);
  const PreparedInfo info = read_prepared_info(dir.path.string());
  CHECK(info.tokenizer == "bytes");
  CHECK(info.vocab_size == 257);
  CHECK(info.eos_id == 256);
  CHECK(info.tokens == r.tokens);
  CHECK(info.tokens.at("train") + info.tokens.at("valid") == 21);
  const nlohmann::json meta = nlohmann::json::parse(read_file(dir.file("meta.json")));
  CHECK(meta["files"] == nlohmann::json::array({"train_00000.bin", "valid_00000.bin"}));
  CHECK(meta["bytes_per_id"] == 2);
}
