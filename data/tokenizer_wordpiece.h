// BERT's WordPiece (HF's BertNormalizer + BertPreTokenizer + WordPiece model + WordPiece decoder).
//
// Encode, per part of the text between added tokens:
//   1. clean: drop NUL, U+FFFD and other control/format characters (category C*, except \t \n \r),
//      turn every White_Space character into a space;
//   2. put spaces around CJK ideographs (the CJK Unified Ideographs blocks and extensions A-E, and
//      the compatibility ideographs);
//   3. uncased models: strip accents (NFD, then drop nonspacing marks Mn) and lower-case;
//   4. split on whitespace, and isolate every punctuation character (category P*, or ASCII
//      punctuation such as $ + < = > ^ ` | ~);
//   5. each word: greedy longest match from the left, continuations spelled "##..."; a word with
//      a piece that matches nothing, or longer than max_chars_per_word characters, is [UNK].
// With special tokens: [CLS] a [SEP] (b [SEP]), token types 0 for a's part, 1 for b's.
// Decode: tokens joined by spaces, "##" continuations glued to the previous token, and HF's
// clean-up of spaces before punctuation and contractions (" ." -> ".", " n't" -> "n't", ...).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace hh::data {

struct WordPieceOptions {
  bool lowercase = true;     // uncased model
  int strip_accents = -1;    // -1: as lowercase (HF's strip_accents=None), 0 / 1: off / on
  bool clean_text = true;
  bool handle_chinese_chars = true;
  std::string unk_token = "[UNK]";
  std::string prefix = "##";
  int64_t max_chars_per_word = 100;
  bool cleanup = true;       // the decoder's clean-up of spaces
};

class WordPieceTokenizer : public Tokenizer {
 public:
  // vocab.txt: one token per line, id = line number. [PAD] [UNK] [CLS] [SEP] [MASK], where
  // present, are special tokens; [CLS] and [SEP] make the template.
  static std::unique_ptr<WordPieceTokenizer> from_vocab_txt(const std::string& path, WordPieceOptions options = {});
  // tokenizer.json with a WordPiece model (BertNormalizer and BertPreTokenizer, or none).
  static std::unique_ptr<WordPieceTokenizer> from_tokenizer_json(const std::string& path);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(vocab_.size()); }

  // Steps 1-4 alone: the words of valid UTF-8 `text`.
  std::vector<std::string> basic_tokenize(std::string_view text) const;

 private:
  WordPieceTokenizer() = default;
  void finish(const std::string& where);  // special ids, checks
  void encode_word(const std::string& word, std::vector<int32_t>& out) const;

  WordPieceOptions options_;
  bool normalize_ = true;     // tokenizer.json with normalizer null: no BertNormalizer
};

}  // namespace hh::data
