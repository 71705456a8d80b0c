// libFuzzer harness: the tokenizers. The first byte picks what the rest is:
//   0: vocab.json and merges.txt (split at the first NUL byte), loaded by load_tokenizer;
//   1: a tokenizer.json, loaded by load_tokenizer;
//   2: a vocab.txt, loaded by load_tokenizer;
//   3..: text, encoded and decoded by the committed fixture tokenizers (tests/fixtures/tokenizers:
//        the real GPT-2 vocabulary, the byte-level BPE, WordPiece, the Llama-style BPE), and as
//        a batch of pairs split at the first NUL.
// A tokenizer that loads must then encode and decode a few texts. Every call must succeed or
// throw hh::Error; encoded ids must lie in the vocabulary; the byte-level and SentencePiece BPEs
// must give the text back exactly (read with U+FFFD for invalid bytes) from decode(ids,
// skip_special_tokens=true) when the text holds no special token (Llama's "<s>" would be skipped)
// and, for Llama, no "▁" (it decodes as a space, in HF too).
#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "data/unicode.h"
#include "fuzz/fuzz_common.h"

using namespace hh;
using namespace hh::data;

namespace {

struct Fixture {
  std::unique_ptr<Tokenizer> tok;
  bool exact_roundtrip;
  std::vector<std::string> no_roundtrip;  // texts that, when present, do not come back from decode
};

const std::vector<Fixture>& fixtures() {
  static const std::vector<Fixture> all = [] {
    const std::string dir = std::string(HH_SOURCE_DIR) + "/tests/fixtures/tokenizers/";
    std::vector<Fixture> v;
    v.push_back({load_tokenizer(dir + "gpt2"), true, {"<|endoftext|>"}});
    v.push_back({load_tokenizer(dir + "bytebpe"), true, {"<|endoftext|>"}});
    v.push_back({load_tokenizer(dir + "bert"), false, {}});
    // "▁" in the text decodes as a space (SentencePiece's and HF's decoder replace every one).
    v.push_back({load_tokenizer(dir + "llama"), true, {"<s>", "</s>", "<unk>", "\xE2\x96\x81"}});
    // NFC: a decomposed character comes back composed.
    v.push_back({load_tokenizer(dir + "qwen2"), false, {}});
    return v;
  }();
  return all;
}

void check_ids(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size()) fuzz::finding("encode gave id " + std::to_string(id) + " outside the vocabulary");
}

void exercise(const Tokenizer& tok, const std::string& text) {
  const std::vector<int32_t> ids = tok.encode(text);
  check_ids(tok, ids);
  tok.decode(ids);
  tok.decode(ids, true);
}

void load_and_use(const std::vector<std::pair<std::string, std::string>>& files) {
  const std::string dir = fuzz::scratch_path("tok.d");
  ::mkdir(dir.c_str(), 0700);
  for (const char* name : {"vocab.json", "merges.txt", "tokenizer.json", "vocab.txt"}) std::remove((dir + "/" + name).c_str());
  for (const auto& [name, bytes] : files) fuzz::write_file(dir + "/" + name, bytes);
  std::unique_ptr<Tokenizer> tok;
  if (!fuzz::accepted([&] { tok = load_tokenizer(dir); })) return;
  for (const std::string text : {"Hello world", " a  b\t\xff\xe4\xb8\xad 12 <|endoftext|> [CLS] <s>", ""})
    fuzz::accepted([&] { exercise(*tok, text); });
  fuzz::accepted([&] {
    BatchOptions o;
    o.pad_id = 0;
    o.truncation = true;
    o.max_length = 8;
    encode_batch_pairs(*tok, {{"a b", "c d e f g h i"}, {"", "x"}}, o);
  });
}

void encode_text(const std::string& text) {
  for (const Fixture& f : fixtures()) {
    std::vector<int32_t> ids;
    if (!fuzz::accepted([&] { ids = f.tok->encode(text); })) fuzz::finding("encode rejected a text");
    check_ids(*f.tok, ids);
    std::string back;
    if (!fuzz::accepted([&] { back = f.tok->decode(ids, true); })) fuzz::finding("decode rejected encode's ids");
    bool plain = true;
    for (const std::string& s : f.no_roundtrip) plain = plain && text.find(s) == std::string::npos;
    if (f.exact_roundtrip && plain && back != unicode::sanitize_utf8(text)) fuzz::finding("decode(encode(text)) != text");
    if (!unicode::is_valid_utf8(back)) fuzz::finding("decode gave invalid UTF-8");
  }
  const size_t nul = text.find('\0');
  if (nul != std::string::npos) {
    BatchOptions o;
    o.truncation = true;
    o.max_length = 16;
    fuzz::accepted([&] { encode_batch_pairs(*fixtures()[2].tok, {{text.substr(0, nul), text.substr(nul + 1)}}, o); });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0]) {
    case 0: {
      const size_t nul = rest.find('\0');
      load_and_use({{"vocab.json", rest.substr(0, nul)},
                    {"merges.txt", nul == std::string::npos ? std::string() : rest.substr(nul + 1)}});
      break;
    }
    case 1: load_and_use({{"tokenizer.json", rest}}); break;
    case 2: load_and_use({{"vocab.txt", rest}}); break;
    default: encode_text(rest); break;
  }
  return 0;
}
