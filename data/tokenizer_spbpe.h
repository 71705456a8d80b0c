// Llama-style SentencePiece BPE from an HF tokenizer.json (Llama-2's layout):
//   normalizer: Prepend("▁") then Replace(" " -> "▁") (a Sequence of Prepend/Replace steps, or
//               none);
//   pre_tokenizer: none, or Metaspace (newer conversions, with no normalizer): spaces become "▁",
//               and "▁" is prepended unless the text starts with one (prepend_scheme "always"),
//               only for the part at the start of the text ("first"), or never; split=true cuts
//               before every "▁";
//   model:      BPE over the characters of the whole normalized text (no pre-tokenizer); a
//               character outside the vocabulary becomes its UTF-8 bytes as "<0xNN>" tokens
//               (byte_fallback), else the unknown token (consecutive ones fused with fuse_unk);
//               merges as "a b" strings or ["a", "b"] pairs;
//   decoder:    a Sequence of Replace("▁" -> " "), ByteFallback (a run of byte tokens that is
//               not UTF-8 gives one U+FFFD per byte, as HF), Fuse and Strip steps;
//   post_processor: TemplateProcessing (Llama: "<s> $A").
// <s>, </s>, <unk> (and <pad> where present) are the bos, eos, unk (pad) ids.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/tokenizer.h"
#include "data/tokenizer_gpt2.h"

namespace hh::data {

class SpBpeTokenizer : public Tokenizer {
 public:
  static std::unique_ptr<SpBpeTokenizer> from_tokenizer_json(const std::string& path);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(vocab_.size()); }

 private:
  SpBpeTokenizer() = default;
  std::string normalize(std::string_view text) const;
  // The Metaspace step's rewrite (when there is one): spaces replaced, the replacement prepended
  // per prepend_scheme; `first`: the part starts the text. encode() cuts the pieces (split=true)
  // as views of the result.
  std::string metaspace(std::string_view text, bool first) const;
  // The id of the character c = word[start, end) (-1 when not in the vocabulary), without building
  // a string: ascii_ids_ and char_ids_ hold every one-character token.
  int32_t char_id(std::string_view word, size_t start, size_t end, char32_t c) const;
  void index_chars();  // fills ascii_ids_ and char_ids_ from the vocabulary
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  struct NormStep {
    bool prepend;  // true: prepend `text` (non-empty input); false: replace `from` by `text`
    std::string from, text;
  };
  struct DecodeStep {
    enum Kind { replace, byte_fallback, fuse, strip } kind;
    std::string from, to;  // replace
    std::string content;   // strip: one character
    int64_t start = 0, stop = 0;
  };
  std::vector<NormStep> norm_;
  struct Metaspace {
    bool on = false;
    std::string replacement;
    enum Scheme { always, first, never } scheme = always;
    bool split = false;
  } meta_;
  std::vector<DecodeStep> decoder_;
  BpeMerges merges_;
  bool byte_fallback_ = false, fuse_unk_ = false;
  int32_t byte_ids_[256] = {};  // "<0xNN>" ids, -1 where absent
  int32_t ascii_ids_[128] = {};  // the id of each one-byte token, -1 where absent
  std::unordered_map<char32_t, int32_t> char_ids_;  // the id of each one-character token of two or more bytes
};

}  // namespace hh::data
