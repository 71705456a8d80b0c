// Parity with HF `tokenizers` on tests/fixtures/tokenizers (tools/make_tokenizer_fixtures.py): the
// corpus of real text (English, many scripts, emoji, odd whitespace, invalid UTF-8), the ids HF
// gives each line and HF's decode of them. Every id must match, and decode must give HF's text
// (for the BPE tokenizers: the line itself, read with U+FFFD for its invalid bytes).
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "data/tokenizer_wordpiece.h"
#include "data/unicode.h"

using namespace hh::data;

namespace {

const std::string kDir = std::string(HH_SOURCE_DIR) + "/tests/fixtures/tokenizers/";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in, "cannot open ", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t pos = 0;
  while (true) {
    const size_t end = text.find('\n', pos);
    lines.push_back(text.substr(pos, end == std::string::npos ? std::string::npos : end - pos));
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return lines;
}

struct Expected {
  std::vector<int32_t> ids;
  std::string decoded;
};

// Compares `tok` with expected_<name>.jsonl over the whole corpus; returns the mismatch count.
void check_parity(const Tokenizer& tok, const std::string& name) {
  const std::vector<std::string> corpus = split_lines(slurp(kDir + "corpus.txt"));
  const std::vector<std::string> rows = split_lines(slurp(kDir + "expected_" + name + ".jsonl"));
  REQUIRE(rows.size() >= corpus.size());
  size_t id_mismatch = 0, decode_mismatch = 0, total_ids = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const auto row = nlohmann::json::parse(rows[i]);
    const std::vector<int32_t> want = row["ids"].get<std::vector<int32_t>>();
    const std::string want_text = row.contains("decoded") ? row["decoded"].get<std::string>()
                                                          : unicode::sanitize_utf8(corpus[i]);
    const std::vector<int32_t> got = tok.encode(corpus[i]);
    total_ids += want.size();
    if (got != want && ++id_mismatch <= 5) {
      std::ostringstream os;
      os << name << " line " << i + 1 << " '" << corpus[i].substr(0, 80) << "':\n  got ";
      for (int32_t v : got) os << v << ' ';
      os << "\n want ";
      for (int32_t v : want) os << v << ' ';
      MESSAGE(os.str());
    }
    const std::string text = tok.decode(want, true);
    if (text != want_text && ++decode_mismatch <= 5)
      MESSAGE(name, " line ", i + 1, ": decode gives '", text.substr(0, 120), "', HF '", want_text.substr(0, 120), "'");
  }
  MESSAGE(name, ": ", corpus.size(), " lines, ", total_ids, " ids, ", id_mismatch, " lines with other ids, ",
          decode_mismatch, " other decodes");
  CHECK(corpus.size() > 2000);
  CHECK(id_mismatch == 0);
  CHECK(decode_mismatch == 0);
}

}  // namespace

TEST_CASE("tokenizer parity: GPT-2 (real vocabulary, vocab.json + merges.txt) matches HF on the corpus") {
  const auto tok = load_tokenizer(kDir + "gpt2");
  CHECK(tok->encode("Hello world") == std::vector<int32_t>{15496, 995});
  CHECK(tok->vocab_size() == 50257);
  CHECK(tok->eos_id() == 50256);
  check_parity(*tok, "gpt2");
}

TEST_CASE("tokenizer parity: byte-level BPE from tokenizer.json (merges as \"a b\") matches HF") {
  check_parity(*load_tokenizer(kDir + "bytebpe"), "bytebpe");
}

TEST_CASE("tokenizer parity: WordPiece (tokenizer.json and vocab.txt) matches HF") {
  const auto tok = load_tokenizer(kDir + "bert");
  check_parity(*tok, "bert");
  check_parity(*WordPieceTokenizer::from_vocab_txt(kDir + "bert/vocab.txt"), "bert");
}

TEST_CASE("tokenizer parity: Llama-style SentencePiece BPE (byte fallback, merges as pairs) matches HF") {
  const auto tok = load_tokenizer(kDir + "llama");
  CHECK(tok->bos_id() == 1);
  CHECK(tok->eos_id() == 2);
  CHECK(tok->unk_id() == 0);
  check_parity(*tok, "llama");
}

TEST_CASE("tokenizer parity: the same Llama model with a Metaspace pre-tokenizer (prepend_scheme first) matches HF") {
  const auto tok = load_tokenizer(kDir + "llama_metaspace");
  check_parity(*tok, "llama_metaspace");
  // "first": only the part at the start of the text gets the "▁"; the one after "<s>" does not.
  const std::vector<int32_t> a = tok->encode("<s>hello", false), b = tok->encode("hello", false);
  REQUIRE(a.size() >= 2);
  CHECK(a[0] == tok->bos_id());
  CHECK(std::vector<int32_t>(a.begin() + 1, a.end()) != b);
}

TEST_CASE("tokenizer parity: a Qwen2-style byte-level BPE (NFC, Qwen2's Split regex) matches HF") {
  const auto tok = load_tokenizer(kDir + "qwen2");
  CHECK(tok->eos_id() == 0);  // <|endoftext|>
  // NFC: a decomposed é encodes as the composed one.
  CHECK(tok->encode("caf\x65\xcc\x81") == tok->encode("caf\xc3\xa9"));
  check_parity(*tok, "qwen2");
}
