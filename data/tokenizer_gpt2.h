// GPT-2's byte-level BPE (HF's ByteLevel pre-tokenizer + BPE model + ByteLevel decoder).
//
// Encode: added tokens are split out; the rest is cut by GPT-2's pre-tokenizer pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (hand-written over utf8proc's categories, data/unicode.h; \s is the White_Space property); each
// piece's UTF-8 bytes are the initial symbols and the merges apply in rank order. Pieces already
// seen are looked up in a cache. The vocabulary files spell bytes with GPT-2's printable stand-ins
// (space = "Ġ"); internally every token is its raw bytes.
// Qwen2's tokenizer.json (Qwen2, Qwen2.5, Qwen3) is the same model behind an NFC normalizer and a
// Split with Qwen2's pattern (then ByteLevel without its own regex):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// also hand-written; any other Split pattern is refused.
// Decode: the tokens' bytes concatenated, then read as UTF-8 with replacement.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/tokenizer.h"

namespace hh::data {

// A BPE merge table: (left id, right id) -> (rank, merged id), rank = order of add().
class BpeMerges {
 public:
  // Adds the next merge (a later add of the same pair replaces the earlier one, as HF).
  void add(int32_t left, int32_t right, int32_t merged);
  // Merges `symbols` in place: repeatedly the adjacent pair of lowest rank, leftmost first, until no
  // pair is in the table. O(n log n).
  void apply(std::vector<int32_t>& symbols) const;
  size_t size() const { return table_.size(); }

 private:
  struct Merge {
    int32_t rank, merged;
  };
  const Merge* find(int32_t left, int32_t right) const;
  std::unordered_map<uint64_t, Merge> table_;
  int32_t next_rank_ = 0;
};

// GPT-2's table of printable stand-ins: byte b -> code point (b itself for printable Latin-1).
char32_t gpt2_byte_to_char(uint8_t b);

class Gpt2Tokenizer : public Tokenizer {
 public:
  // vocab.json ({"token": id}) + merges.txt ("a b" per line, an optional "#version" first line).
  // "<|endoftext|>", when in the vocabulary, is the special bos/eos/unk token.
  static std::unique_ptr<Gpt2Tokenizer> from_files(const std::string& vocab_json, const std::string& merges_txt);
  // tokenizer.json with a BPE model and a ByteLevel pre-tokenizer; its added_tokens are honoured.
  static std::unique_ptr<Gpt2Tokenizer> from_tokenizer_json(const std::string& path);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(vocab_.size()); }

  // The pre-tokenizer alone: the byte ranges [begin, end) of the pieces of valid UTF-8 `text`.
  static std::vector<std::pair<size_t, size_t>> pre_tokenize(std::string_view text);
  // The same with Qwen2's pattern.
  static std::vector<std::pair<size_t, size_t>> pre_tokenize_qwen2(std::string_view text);

 private:
  Gpt2Tokenizer() = default;
  static std::unique_ptr<Gpt2Tokenizer> from_tokenizer_json_unchecked(const std::string& path);
  // vocab: the file's token strings by id; merges: pairs of token strings; `where` names the file.
  void build(std::vector<std::string> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
             const std::string& merges_where);
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  std::vector<std::string> raw_;  // id -> the token's bytes
  int32_t byte_id_[256] = {};
  BpeMerges merges_;
  bool add_prefix_space_ = false;
  bool qwen2_pattern_ = false;  // pre_tokenize_qwen2 instead of pre_tokenize
  bool nfc_ = false;            // an NFC normalizer before pre-tokenizing
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;  // piece bytes -> ids
};

}  // namespace hh::data
