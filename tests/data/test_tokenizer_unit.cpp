// Tokenizers: UTF-8 handling, Unicode helpers, special tokens, batches (against HF's own batch
// encodings in bert_batch.json) and the errors for unreadable or malformed tokenizer files.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <random>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/tokenizer.h"
#include "data/tokenizer_gpt2.h"
#include "data/tokenizer_wordpiece.h"
#include "data/unicode.h"

using namespace hh;
using namespace hh::data;
namespace fs = std::filesystem;

namespace {

const std::string kDir = std::string(HH_SOURCE_DIR) + "/tests/fixtures/tokenizers/";
const std::string kFFFD = "\xEF\xBF\xBD";

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// A fresh private folder holding the given files.
struct TempFolder {
  fs::path path;
  explicit TempFolder(const std::vector<std::pair<std::string, std::string>>& files) {
    static int counter = 0;
    path = fs::temp_directory_path() / ("hh_tok_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
    for (const auto& [name, text] : files) std::ofstream(path / name, std::ios::binary) << text;
  }
  ~TempFolder() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

// The message load_tokenizer(folder with `files`) fails with ("" when it loads).
std::string load_error(const std::vector<std::pair<std::string, std::string>>& files) {
  TempFolder dir(files);
  try {
    load_tokenizer(dir.str());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const std::string kTinyVocab = R"({"a": 0, "b": 1, "ab": 2})";

// A byte-level vocab.json: the 256 byte stand-ins, plus extra tokens.
std::string byte_vocab_json(const std::vector<std::string>& extra) {
  nlohmann::json j = nlohmann::json::object();
  for (unsigned b = 0; b < 256; ++b) {
    std::string s;
    unicode::append_utf8(s, gpt2_byte_to_char(static_cast<uint8_t>(b)));
    j[s] = b;
  }
  int id = 256;
  for (const auto& e : extra) j[e] = id++;
  return j.dump();
}

}  // namespace

TEST_CASE("unicode: invalid UTF-8 becomes U+FFFD per maximal subpart, as Python's decode(errors='replace')") {
  // Expected counts from Python 3.11: bytes.decode("utf-8", "replace").
  const std::vector<std::pair<std::string, int>> cases = {
      {"\xff", 1}, {"\xfe\xfe", 2}, {"\xc0\xaf", 2}, {"\xe2\x82", 1}, {"\xed\xa0\x80", 3}, {"\xf0\x9f\x98", 1},
      {"\x80\x81", 2}, {"\xf4\x90\x80\x80", 4}, {"\xf8\x88\x80\x80\x80", 5}, {"\xe0\x80\xaf", 3}, {"\xc3", 1},
      {"\xf0\x80", 2}};
  for (const auto& [bytes, n] : cases) {
    CHECK_FALSE(unicode::is_valid_utf8(bytes));
    CHECK(unicode::sanitize_utf8(bytes) == repeat(kFFFD, n));
  }
  CHECK(unicode::sanitize_utf8("a\xe2\x82" "b") == "a" + kFFFD + "b");
  CHECK(unicode::is_valid_utf8("\xf0\x9f\x98\x80 " + kFFFD));
  CHECK(unicode::decode_utf8("\xf0\x9f\x98\x80") == std::u32string{0x1F600});
  CHECK(unicode::encode_utf8(U"\u00e9\U0001F600") == "\xc3\xa9\xf0\x9f\x98\x80");
}

TEST_CASE("unicode: categories, NFD/NFC and lower-casing come from utf8proc") {
  CHECK(unicode::is_letter(U'\u00e9'));
  CHECK(unicode::is_letter(U'\u4e2d'));
  CHECK_FALSE(unicode::is_letter(U'\u0301'));
  CHECK(unicode::is_number(U'\u0663'));  // Arabic-Indic three
  CHECK(unicode::is_whitespace(U'\u3000'));
  CHECK(unicode::is_whitespace(U'\u0085'));
  CHECK_FALSE(unicode::is_whitespace(U'\u200b'));  // zero-width space is Cf, not White_Space
  CHECK_FALSE(unicode::is_whitespace(U'\u001c'));  // Python's isspace() says yes; White_Space no
  CHECK(unicode::is_punctuation(U'\u3002'));
  CHECK(unicode::nfd("\xc3\xa9") == "e\xcc\x81");
  CHECK(unicode::nfc("e\xcc\x81") == "\xc3\xa9");
  CHECK(unicode::lowercase("\xc3\x89T\xc3\x89 \xce\x91\xce\xa3") == "\xc3\xa9t\xc3\xa9 \xce\xb1\xcf\x83");  // no final sigma
  CHECK(unicode::lowercase("\xc4\xb0") == "i\xcc\x87");  // İ -> i + U+0307
}

TEST_CASE("gpt2 tokenizer: pre-tokenizer pieces, special tokens, invalid bytes, decode") {
  const auto tok = load_tokenizer(kDir + "gpt2");
  const std::string text = "I'll  go\t\tnow 12ab ?!";
  std::vector<std::string> pieces;
  for (const auto& [b, e] : Gpt2Tokenizer::pre_tokenize(text)) pieces.push_back(text.substr(b, e - b));
  CHECK(pieces == std::vector<std::string>{"I", "'ll", " ", " go", "\t", "\t", "now", " 12", "ab", " ?!"});
  // "<|endoftext|>" in the text is the special token; decode can skip it.
  const std::vector<int32_t> ids = tok->encode("a<|endoftext|>b");
  CHECK(ids.size() == 3);
  CHECK(ids[1] == 50256);
  CHECK(tok->decode(ids) == "a<|endoftext|>b");
  CHECK(tok->decode(ids, true) == "ab");
  CHECK(tok->is_special(50256));
  // Invalid bytes are encoded as U+FFFD; a lone byte token decodes to U+FFFD.
  CHECK(tok->encode("x\xff") == tok->encode("x" + kFFFD));
  CHECK(tok->decode({tok->token_to_id("\xc3\xa2")}) == kFFFD);  // "â" stands for byte 0xE2
  CHECK(tok->id_to_token(15496) == "Hello");
  CHECK(tok->token_to_id("no such token") == -1);
  CHECK_THROWS_AS(tok->decode({50257}), Error);
  CHECK_THROWS_AS(tok->decode({-1}), Error);
  CHECK_THROWS_AS(tok->id_to_token(1 << 20), Error);
  // A long word (the heap path) gives the same ids as HF's fixture does for repeated text.
  const std::string longword(5000, 'x');
  CHECK(tok->decode(tok->encode(longword)) == longword);
}

TEST_CASE("qwen2 tokenizer: the pre-tokenizer cuts as HF's Split with Qwen2's regex") {
  // The pieces HF tokenizers' pre_tokenize_str gives for this text (tokenizers 0.22, Split(Regex(
  // QWEN2_PATTERN of tools/make_tokenizer_fixtures.py), "isolated")): case-blind contractions, one
  // digit per piece, a non-letter joined to the letters after it, newlines kept with what precedes.
  const std::string text = "I'LL  go\t\tnow 12ab ?!\n\n  x(\"quoted\" 'sounds\r\n\tend  ";
  std::vector<std::string> pieces;
  for (const auto& [b, e] : Gpt2Tokenizer::pre_tokenize_qwen2(text)) pieces.push_back(text.substr(b, e - b));
  CHECK(pieces == std::vector<std::string>{"I", "'LL", " ", " go", "\t", "\tnow", " ", "1", "2", "ab", " ?!\n\n", " ",
                                           " x", "(\"", "quoted", "\"", " '", "sounds", "\r\n", "\tend", "  "});
  // Random texts over the characters each alternative turns on: the pieces are non-empty and tile
  // the text in order (the HF parity of the ids is tests/data/test_tokenizer_parity.cpp's).
  const std::vector<std::string> atoms = {" ", "  ", "\r", "\n", "\t", "'", "s", "LL", "a", "7", "!", "(", "\xc3\xa9",
                                          "\xe6\x9d\xb1", "\xcc\x81", "\xe2\x80\xa8", "\xf0\x9f\x91\x8b"};
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string t;
    const int len = static_cast<int>(rng() % 24);
    for (int k = 0; k < len; ++k) t += atoms[rng() % atoms.size()];
    size_t at = 0;
    bool tiled = true;
    for (const auto& piece : Gpt2Tokenizer::pre_tokenize_qwen2(t)) {
      tiled = tiled && piece.first == at && piece.second > piece.first;
      at = piece.second;
    }
    CHECK_MESSAGE((tiled && at == t.size()), "text '", t, "'");
  }
}

TEST_CASE("gpt2 tokenizer: concurrent encodes share the word cache safely and agree") {
  const auto tok = load_tokenizer(kDir + "gpt2");
  std::vector<std::string> texts;
  for (int i = 0; i < 400; ++i) texts.push_back("word" + std::to_string(i * 7919) + " shared text, again " + std::to_string(i));
  std::vector<std::vector<int32_t>> a(texts.size()), b(texts.size());
  std::thread t1([&] { for (size_t i = 0; i < texts.size(); ++i) a[i] = tok->encode(texts[i]); });
  std::thread t2([&] { for (size_t i = texts.size(); i-- > 0;) b[i] = tok->encode(texts[i]); });
  t1.join();
  t2.join();
  CHECK(a == b);
  const auto fresh = load_tokenizer(kDir + "gpt2");  // empty cache
  for (size_t i = 0; i < texts.size(); i += 37) CHECK(fresh->encode(texts[i]) == a[i]);
}

TEST_CASE("wordpiece tokenizer: basic-tokenizer rules, [UNK], the pair template") {
  const auto tok = WordPieceTokenizer::from_vocab_txt(kDir + "bert/vocab.txt");
  CHECK(tok->basic_tokenize("H\xc3\xa9llo,\tW\xc3\x96RLD!\x01 \xe4\xb8\xad\xe6\x96\x87x") ==
        std::vector<std::string>{"hello", ",", "world", "!", "\xe4\xb8\xad", "\xe6\x96\x87", "x"});
  const std::vector<int32_t> ids = tok->encode("hello");
  REQUIRE(ids.size() >= 3);
  CHECK(ids.front() == tok->cls_id());
  CHECK(ids.back() == tok->sep_id());
  CHECK(tok->encode(std::string(101, 'a'), false) == std::vector<int32_t>{tok->unk_id()});
  std::vector<int32_t> types;
  const std::vector<int32_t> a = {10, 11}, b = {12};
  CHECK(tok->add_special_tokens(a, &b, &types) ==
        std::vector<int32_t>{tok->cls_id(), 10, 11, tok->sep_id(), 12, tok->sep_id()});
  CHECK(types == std::vector<int32_t>{0, 0, 0, 0, 1, 1});
  CHECK(tok->num_special_tokens(true) == 3);
  CHECK(tok->num_special_tokens(false) == 2);
}

TEST_CASE("encode_batch: padding, truncation, masks and token types match HF (bert_batch.json)") {
  const auto tok = load_tokenizer(kDir + "bert");
  std::ifstream in(kDir + "bert_batch.json");
  REQUIRE(in);
  const auto cases = nlohmann::json::parse(in);
  REQUIRE(cases.size() == 6);
  for (const auto& c : cases) {
    BatchOptions o;
    o.padding = Padding::longest;
    if (!c["max_length"].is_null()) {
      o.truncation = true;
      o.max_length = c["max_length"].get<int64_t>();
    }
    BatchEncoding enc;
    if (c["pairs"].get<bool>()) {
      std::vector<std::pair<std::string, std::string>> pairs;
      for (const auto& p : c["inputs"]) pairs.emplace_back(p[0].get<std::string>(), p[1].get<std::string>());
      enc = encode_batch_pairs(*tok, pairs, o);
    } else {
      enc = encode_batch(*tok, c["inputs"].get<std::vector<std::string>>(), o);
    }
    std::vector<int64_t> ids, mask, types;
    for (const auto& row : c["input_ids"]) for (const auto& v : row) ids.push_back(v.get<int64_t>());
    for (const auto& row : c["attention_mask"]) for (const auto& v : row) mask.push_back(v.get<int64_t>());
    for (const auto& row : c["token_type_ids"]) for (const auto& v : row) types.push_back(v.get<int64_t>());
    INFO("case ", c.dump());
    CHECK(enc.input_ids.dtype() == DType::i64);
    CHECK(enc.attention_mask.dtype() == DType::boolean);
    CHECK(enc.input_ids.shape() == Shape{static_cast<int64_t>(c["input_ids"].size()),
                                         static_cast<int64_t>(c["input_ids"][0].size())});
    CHECK(to_vector<int64_t>(enc.input_ids) == ids);
    CHECK(to_vector<int64_t>(enc.attention_mask) == mask);
    CHECK(to_vector<int64_t>(enc.token_type_ids) == types);
  }
}

TEST_CASE("encode_batch: left padding, max_length padding and the errors") {
  const auto bert = load_tokenizer(kDir + "bert");
  BatchOptions o;
  o.padding = Padding::max_length;
  o.max_length = 10;
  o.pad_left = true;
  const BatchEncoding enc = encode_batch(*bert, {"hello", "a b c"}, o);
  CHECK(enc.input_ids.shape() == Shape{2, 10});
  const std::vector<int64_t> mask = to_vector<int64_t>(enc.attention_mask);
  CHECK(mask[0] == 0);
  CHECK(mask[9] == 1);
  CHECK(to_vector<int64_t>(enc.input_ids)[0] == bert->pad_id());
  CHECK(enc.lengths == std::vector<int64_t>{static_cast<int64_t>(bert->encode("hello").size()), 5});
  // GPT-2 has no pad token: padding needs BatchOptions::pad_id.
  const auto gpt2 = load_tokenizer(kDir + "gpt2");
  CHECK_THROWS_WITH_AS(encode_batch(*gpt2, {"a", "a b c"}), doctest::Contains("pad id"), Error);
  BatchOptions with_pad;
  with_pad.pad_id = 50256;
  CHECK(encode_batch(*gpt2, {"a", "a b c"}, with_pad).input_ids.shape() == Shape{2, 3});
  BatchOptions none;
  none.padding = Padding::none;
  CHECK_THROWS_WITH_AS(encode_batch(*gpt2, {"a", "a b c"}, none), doctest::Contains("same length"), Error);
  BatchOptions bad;
  bad.truncation = true;
  CHECK_THROWS_WITH_AS(encode_batch(*bert, {"a"}, bad), doctest::Contains("max_length"), Error);
  bad.max_length = 2;
  CHECK_THROWS_WITH_AS(encode_batch(*bert, {"a"}, bad), doctest::Contains("no room"), Error);
  CHECK_THROWS_AS(encode_batch(*bert, std::vector<std::string>{}), Error);
}

TEST_CASE("spbpe tokenizer: Metaspace with split=true and prepend_scheme always/never match HF") {
  // Expected ids from HF tokenizers 0.23.3 on the llama_metaspace fixture with this pre-tokenizer.
  std::ifstream in(kDir + "llama_metaspace/tokenizer.json");
  REQUIRE(in);
  nlohmann::json j = nlohmann::json::parse(in);
  const std::vector<std::string> texts = {"the quick  brown fox", " leading space", "<s>after bos"};
  const std::vector<std::pair<std::string, std::vector<std::vector<int32_t>>>> cases = {
      {"always",
       {{1, 399, 568, 399, 749, 453, 333, 399, 672, 467, 345, 336, 399, 328, 337, 346},
        {1, 399, 470, 502, 439, 1192, 440, 327},
        {1, 1, 399, 323, 328, 866, 672, 337, 341}}},
      {"never",
       {{1, 568, 399, 749, 453, 333, 399, 672, 467, 345, 336, 399, 328, 337, 346},
        {1, 399, 470, 502, 439, 1192, 440, 327},
        {1, 1, 323, 328, 866, 672, 337, 341}}}};
  for (const auto& c : cases) {  // (no structured binding: clang 14 cannot capture one in INFO)
    const std::string& scheme = c.first;
    const std::vector<std::vector<int32_t>>& want = c.second;
    j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", scheme}, {"split", true}};
    TempFolder dir({{"tokenizer.json", j.dump()}});
    const auto tok = load_tokenizer(dir.str());
    for (size_t i = 0; i < texts.size(); ++i) {
      INFO(scheme, ": '", texts[i], "'");
      CHECK(tok->encode(texts[i]) == want[i]);
    }
  }
}

TEST_CASE("load_tokenizer: unreadable or malformed files give errors naming the file and key/line") {
  CHECK(contains(load_error({}), "has no tokenizer.json"));
  CHECK_THROWS_WITH_AS(load_tokenizer("/nonexistent/hh_tok"), doctest::Contains("/nonexistent/hh_tok"), Error);
  // vocab.json + merges.txt
  CHECK(contains(load_error({{"vocab.json", "{"}, {"merges.txt", ""}}), "vocab.json: not valid JSON"));
  CHECK(contains(load_error({{"vocab.json", "[1]"}, {"merges.txt", ""}}), "vocab.json: expected a JSON object"));
  CHECK(contains(load_error({{"vocab.json", R"({"a": "x"})"}, {"merges.txt", ""}}), "the id of 'a' is not an integer"));
  CHECK(contains(load_error({{"vocab.json", R"({"a": 0, "b": 0})"}, {"merges.txt", ""}}), "id 0 is given to both"));
  CHECK(contains(load_error({{"vocab.json", R"({"a": 0, "b": 2})"}, {"merges.txt", ""}}), "no token has id 1"));
  CHECK(contains(load_error({{"vocab.json", kTinyVocab}, {"merges.txt", ""}}), "merges.txt: the vocabulary has no token for byte 0x0"));
  CHECK(contains(load_error({{"vocab.json", kTinyVocab}}), "vocab.json has no merges.txt"));
  const std::string bytes = byte_vocab_json({"ab", "abc"});
  CHECK(load_error({{"vocab.json", bytes}, {"merges.txt", "#version: 0.2\na b\n"}}).empty());
  CHECK(contains(load_error({{"vocab.json", bytes}, {"merges.txt", "#version: 0.2\na b\nab  c\n"}}), "merges.txt:3: expected two tokens"));
  CHECK(contains(load_error({{"vocab.json", bytes}, {"merges.txt", "a b\nab d\n"}}), "merges.txt: merge 2 'ab d': 'abd' is not in the vocabulary"));
  // Raw bytes of a bad line are escaped in the message, never copied to the terminal (issue 27).
  CHECK(contains(load_error({{"vocab.json", bytes}, {"merges.txt", std::string("a b\n\x01\xff\x1b[2J\n")}}),
                 "merges.txt:2: expected two tokens separated by one space, got '\\x01\\xFF\\x1B[2J'"));
  // tokenizer.json
  CHECK(contains(load_error({{"tokenizer.json", "nope"}}), "tokenizer.json: not valid JSON"));
  CHECK(contains(load_error({{"tokenizer.json", "{}"}}), "tokenizer.json: no string key \"model.type\""));
  CHECK(contains(load_error({{"tokenizer.json", R"({"model": {"type": "Unigram"}})"}}), "model type \"Unigram\" is not supported"));
  CHECK(contains(load_error({{"tokenizer.json", R"({"model": {"type": "BPE", "vocab": {}}})"}}), "model.merges"));
  CHECK(contains(load_error({{"tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [3]}})"}}),
                 "model.merges[0]"));
  CHECK(contains(load_error({{"tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                                                     "normalizer": {"type": "NFKC"}})"}}),
                 "normalizer step {\"type\":\"NFKC\"} is not supported"));
  CHECK(contains(load_error({{"tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                                                     "post_processor": {"type": "RobertaProcessing"}})"}}),
                 "post_processor type \"RobertaProcessing\""));
  CHECK(contains(load_error({{"tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "byte_fallback": 3}})"}}),
                 "tokenizer.json: "));
  CHECK(contains(load_error({{"tokenizer.json", R"({"model": {"type": "WordPiece", "vocab": {"[UNK]": 0}},
                                                     "pre_tokenizer": {"type": "Whitespace"}})"}}),
                 "pre_tokenizer {\"type\":\"Whitespace\"} is not supported"));
  {  // a byte-level tokenizer.json with a normalizer it would otherwise ignore
    nlohmann::json j;
    j["model"] = {{"type", "BPE"}, {"vocab", nlohmann::json::parse(byte_vocab_json({}))}, {"merges", nlohmann::json::array()}};
    j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
    CHECK(load_error({{"tokenizer.json", j.dump()}}).empty());
    {  // its post_processor is honoured: a template that adds a BOS
      j["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing",
          "single": [{"SpecialToken": {"id": "!", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
          "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
          "special_tokens": {"!": {"id": "!", "ids": [33], "tokens": ["!"]}}})");
      TempFolder dir({{"tokenizer.json", j.dump()}});
      const auto tok = load_tokenizer(dir.str());
      CHECK(tok->encode("a") == std::vector<int32_t>{33, 97});
      CHECK(tok->encode("a", false) == std::vector<int32_t>{97});
      j.erase("post_processor");
    }
    j["normalizer"] = {{"type", "NFKC"}};  // NFC (Qwen2's) is implemented, NFKC is not
    CHECK(contains(load_error({{"tokenizer.json", j.dump()}}), "normalizer {\"type\":\"NFKC\"} is not supported for a byte-level BPE"));
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Split"}}, {{"type", "ByteLevel"}}}}};
    CHECK(contains(load_error({{"tokenizer.json", j.dump()}}), "pre_tokenizer {\"type\":\"Split\"} is not supported"));
    // Qwen2's Split is implemented, but not followed by ByteLevel's own regex (HF would cut twice).
    const std::string qwen2_split = R"({"type": "Split", "behavior": "Isolated", "invert": false, "pattern": {"Regex":
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}})";
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", {nlohmann::json::parse(qwen2_split), {{"type", "ByteLevel"}, {"use_regex", false}}}}};
    CHECK(load_error({{"tokenizer.json", j.dump()}}).empty());
    j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true;
    CHECK(contains(load_error({{"tokenizer.json", j.dump()}}), "pre_tokenizer ByteLevel with use_regex=true after a Split"));
    j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
    CHECK(contains(load_error({{"tokenizer.json", j.dump()}}), "(a Split: only Qwen2's pattern, Isolated)"));
  }
  CHECK(contains(load_error({{"tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
      "added_tokens": [{"id": 0, "content": "a", "special": true, "lstrip": true}]})"}}),
                 "added token 'a': lstrip, rstrip and single_word are not supported"));
  // vocab.txt
  CHECK(contains(load_error({{"vocab.txt", "[UNK]\na\na\n"}}), "vocab.txt:3: token 'a' repeats line 2"));
  CHECK(contains(load_error({{"vocab.txt", "[UNK]\n\na\n"}}), "vocab.txt:2: empty token"));
  CHECK(contains(load_error({{"vocab.txt", "a\nb\n"}}), "the unknown token '[UNK]' is not in the vocabulary"));
  CHECK(load_error({{"vocab.txt", "[UNK]\na\n"}}).empty());
}
