// Text -> token ids and back, as HF `tokenizers` does for the three families the paper uses:
//   GPT-2 byte-level BPE      data/tokenizer_gpt2.h      (vocab.json + merges.txt, or tokenizer.json)
//   BERT WordPiece            data/tokenizer_wordpiece.h (vocab.txt, or tokenizer.json)
//   Llama SentencePiece BPE   data/tokenizer_spbpe.h     (tokenizer.json)
// load_tokenizer(folder) picks the right one from the files in an HF model folder.
//
// Text is UTF-8. Bytes that are not well-formed UTF-8 are read as U+FFFD, one per maximal
// ill-formed subpart, exactly as Python's bytes.decode("utf-8", "replace") (HF takes Python str,
// so that is the text HF would see). decode() returns valid UTF-8: byte sequences that the ids
// spell but that are not UTF-8 (a lone byte-fallback token, say) become U+FFFD the same way.
//
// Special ("added") tokens written in the text, such as "<|endoftext|>" or "[SEP]", are matched on
// the raw text (longest first) and become their ids, as HF does for added tokens with
// normalized=false (the form every supported tokenizer uses for its special tokens).
//
// Batches follow HF's defaults: padding on the right with pad_id() (mask 0 there), truncation of
// the ids before the special tokens are added so that the result fits max_length, and for pairs
// HF's "longest_first" strategy (the longer sequence is cut first; when both are long, each keeps
// half, the longer one the odd token).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace hh::data {

// Ids of the special tokens; -1 where a tokenizer has none.
struct SpecialIds {
  int32_t bos = -1, eos = -1, pad = -1, unk = -1, cls = -1, sep = -1;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The ids of `text`; with add_special_tokens, the tokenizer's template around them (BERT:
  // [CLS] ... [SEP]; Llama: <s> ...; GPT-2: none).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const = 0;
  // The text of `ids` (HF's decoder of the family). Ids outside [0, vocab_size()) are an error.
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const = 0;
  virtual int64_t vocab_size() const = 0;

  // The template for one sequence (b == nullptr) or a pair; type_ids (when given) receives the
  // segment of each id (0 for a and its specials, 1 for b's part). Default: a then b, no specials.
  virtual std::vector<int32_t> add_special_tokens(const std::vector<int32_t>& a, const std::vector<int32_t>* b,
                                                  std::vector<int32_t>* type_ids) const;
  // How many ids add_special_tokens adds to one sequence or a pair.
  int64_t num_special_tokens(bool pair) const;

  int32_t token_to_id(std::string_view token) const;  // -1 when absent
  std::string id_to_token(int32_t id) const;           // the vocabulary's string; error when out of range
  bool is_special(int32_t id) const;                   // an added special token (skipped by decode(.., true))

  int32_t bos_id() const { return special_.bos; }
  int32_t eos_id() const { return special_.eos; }
  int32_t pad_id() const { return special_.pad; }
  int32_t unk_id() const { return special_.unk; }
  int32_t cls_id() const { return special_.cls; }
  int32_t sep_id() const { return special_.sep; }

 protected:
  // Vocabulary as the files spell it (for GPT-2, the byte-to-printable form, "Ġworld").
  void set_vocab(std::vector<std::string> id_to_token);
  // Tokens matched in the raw text before the model runs ("<|endoftext|>", "[CLS]", ...).
  // special: skipped by decode(ids, true). The token must be in the vocabulary.
  void add_added_token(const std::string& token, bool special);
  // Added tokens are matched on the raw text, as they are written: tokenizer.json options that
  // would change the match (lstrip, rstrip, single_word) are refused with an error naming `where`.
  static void check_added_token_options(const std::string& token, bool lstrip, bool rstrip, bool single_word,
                                        const std::string& where);
  SpecialIds& special_ids() { return special_; }
  // The template add_special_tokens follows: each item is special ids or sequence 0 (a) / 1 (b),
  // with its type id. Without one, add_special_tokens gives a then b.
  struct TemplateItem {
    std::vector<int32_t> special;  // empty for a sequence
    int sequence = -1;             // 0: a, 1: b
    int32_t type_id = 0;
  };
  void set_template(std::vector<TemplateItem> single, std::vector<TemplateItem> pair);
  bool has_template() const { return has_template_; }
  // From tokenizer.json's "post_processor" (its JSON text): null, ByteLevel (adds nothing),
  // TemplateProcessing or BertProcessing; anything else is an error naming `where`.
  void set_post_processor_json(const std::string& json_text, const std::string& where);
  // Calls piece(text_part) for the parts of `text` between added tokens and added(id) for each
  // added token found, in order.
  template <typename Piece, typename Added>
  void split_on_added_tokens(std::string_view text, Piece&& piece, Added&& added) const;
  void check_ids(const std::vector<int32_t>& ids) const;  // error naming the first id out of range

  std::vector<std::string> vocab_;
  std::unordered_map<std::string, int32_t> token_ids_;

 private:
  struct AddedToken {
    std::string text;
    int32_t id;
  };
  std::vector<AddedToken> added_;     // longest first
  std::vector<bool> special_mask_;
  bool added_first_byte_[256] = {};
  SpecialIds special_;
  bool has_template_ = false;
  std::vector<TemplateItem> single_, pair_;
};

// Chooses the tokenizer from the files of an HF folder: tokenizer.json (its "model.type": BPE with
// a ByteLevel pre-tokenizer -> GPT-2, BPE otherwise -> SentencePiece BPE, WordPiece -> BERT),
// else vocab.json + merges.txt (GPT-2), else vocab.txt (BERT, uncased). Errors name the file.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& folder);

// ---- batches ----
enum class Padding { none, longest, max_length };

struct BatchOptions {
  bool add_special_tokens = true;
  Padding padding = Padding::longest;  // none: every row must have the same length (else an error)
  bool truncation = false;             // cut each row (pair) to max_length ids, specials included
  int64_t max_length = 0;              // for truncation and Padding::max_length; > 0 there
  bool pad_left = false;               // HF's padding_side="left" (decoder-only generation)
  int32_t pad_id = -1;                 // -1: the tokenizer's pad_id() (an error if it has none)
};

struct BatchEncoding {
  Tensor input_ids;       // (B,L) i64
  Tensor attention_mask;  // (B,L) bool: true on real tokens, false on padding
  Tensor token_type_ids;  // (B,L) i64: 0 for the first sequence, 1 for the second; 0 on padding
  std::vector<int64_t> lengths;  // real tokens per row
};

// One text per row.
BatchEncoding encode_batch(const Tokenizer& tok, const std::vector<std::string>& texts,
                           const BatchOptions& options = {});
// Pairs (BERT: [CLS] a [SEP] b [SEP], token types 0 then 1).
BatchEncoding encode_batch_pairs(const Tokenizer& tok, const std::vector<std::pair<std::string, std::string>>& pairs,
                           const BatchOptions& options = {});

namespace detail {
std::string read_file(const std::string& path);  // the whole file; an error naming it when unreadable
}  // namespace detail

// ---- implementation of the template above ----
template <typename Piece, typename Added>
void Tokenizer::split_on_added_tokens(std::string_view text, Piece&& piece, Added&& added) const {
  size_t start = 0;
  if (!added_.empty()) {
    for (size_t i = 0; i < text.size(); ++i) {
      if (!added_first_byte_[static_cast<unsigned char>(text[i])]) continue;
      for (const AddedToken& a : added_) {  // longest first: the first that matches is the longest
        if (text.compare(i, a.text.size(), a.text) != 0) continue;
        if (i > start) piece(text.substr(start, i - start));
        added(a.id);
        i += a.text.size() - 1;
        start = i + 1;
        break;
      }
    }
  }
  if (start < text.size()) piece(text.substr(start));
}

}  // namespace hh::data
