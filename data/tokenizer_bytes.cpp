#include "data/tokenizer_bytes.h"

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/tokenizer_gpt2.h"
#include "data/unicode.h"

namespace hh::data {

ByteTokenizer::ByteTokenizer() {
  // The vocabulary's strings: the raw byte for 0..255 (what id_to_token returns), then the special.
  std::vector<std::string> vocab;
  vocab.reserve(257);
  for (int b = 0; b < 256; ++b) vocab.emplace_back(1, static_cast<char>(b));
  vocab.emplace_back("<|endoftext|>");
  set_vocab(std::move(vocab));
  add_added_token("<|endoftext|>", /*special=*/true);  // marks id 256 special; encode() never matches it
  special_ids().bos = kEndOfText;
  special_ids().eos = kEndOfText;
}

std::vector<int32_t> ByteTokenizer::encode(std::string_view text, bool /*add_special_tokens*/) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  check_ids(ids);
  std::string bytes;
  bytes.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 256) {
      bytes.push_back(static_cast<char>(id));
    } else if (!skip_special_tokens) {
      bytes += "<|endoftext|>";
    }
  }
  return unicode::sanitize_utf8(bytes);
}

void write_byte_tokenizer_files(const std::string& folder) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string token;
    unicode::append_utf8(token, gpt2_byte_to_char(static_cast<uint8_t>(b)));
    vocab[token] = b;
  }
  vocab["<|endoftext|>"] = ByteTokenizer::kEndOfText;
  write_file_atomic(folder + "/vocab.json", vocab.dump());
  write_file_atomic(folder + "/merges.txt", "#version: 0.2\n");
}

std::shared_ptr<Tokenizer> make_lm_tokenizer(const std::string& spec) {
  if (spec == "bytes") return std::make_shared<ByteTokenizer>();
  try {
    return std::shared_ptr<Tokenizer>(load_tokenizer(spec));
  } catch (const Error& e) {
    fail(str("tokenizer '", spec, "': ", e.what(),
             " (give an HF tokenizer folder: tokenizer.json, or vocab.json + merges.txt; or \"bytes\" for the "
             "byte-level tokenizer)"));
  }
}

}  // namespace hh::data
