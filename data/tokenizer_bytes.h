// The byte-level tokenizer of train_lm (no files needed), and the one switch between it and an HF
// tokenizer folder that the LM apps take as a flag.
//
// Byte-level: id b (0..255) is the byte b of the UTF-8 text; id 256 is "<|endoftext|>" (eos = bos =
// 256); vocabulary 257. encode() never fails and adds nothing (no template); the text
// "<|endoftext|>" written in a document stays its 13 bytes (only LM data preparation inserts 256,
// between documents). decode() of ids whose bytes are not UTF-8 follows the Tokenizer rule (each
// maximal ill-formed subpart becomes U+FFFD); id 256 decodes to "<|endoftext|>" unless skipped.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace hh::data {

class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int32_t kEndOfText = 256;

  ByteTokenizer();
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const override;
  int64_t vocab_size() const override { return 257; }
};

// The byte-level tokenizer as HF GPT-2 tokenizer files in `folder` (an existing folder): vocab.json
// (byte b -> id b through GPT-2's printable stand-ins, "<|endoftext|>" -> 256) and merges.txt with
// no merges, which load_tokenizer and transformers' GPT2Tokenizer read as the same tokenizer (the
// same ids for every text). Written atomically; an error names the file.
void write_byte_tokenizer_files(const std::string& folder);

// "bytes" -> ByteTokenizer; anything else is an HF tokenizer folder -> load_tokenizer(folder). A
// spec that is not a folder with a tokenizer is an error naming the spec and saying that "bytes" is
// the other choice.
std::shared_ptr<Tokenizer> make_lm_tokenizer(const std::string& spec);

}  // namespace hh::data
