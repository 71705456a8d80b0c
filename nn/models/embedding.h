// Sentence embeddings from an encoder's last hidden state, as sentence-transformers computes them:
// the pooling (CLS token, mean, max, mean / sqrt(length), last token) over the real tokens and an
// optional L2 normalization, configured by the folder's sentence-transformers files (modules.json,
// <pooling>/config.json, sentence_bert_config.json) when present.
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "nn/attention.h"
#include "nn/models/hf_model.h"

namespace hh::nn {

// The last hidden state of an encoder, whatever head the folder has:
//   text: BertModel / BertForSequenceClassification, ids (B,L) i64, token types (B,L) or
//         undefined, mask (B,L) or undefined -> (B,L,C);
//   image: ViTModel / ViTForImageClassification, pixels (B,3,H,W) -> (B,1+N,C) after the final
//          layer norm (ViTModel's output).
// Undefined when m is not of that family. `trace` collects the attention traces (conversion).
Tensor text_encoder_hidden(const HFModel& m, const Tensor& ids, const Tensor& token_types, const Tensor& mask,
                           TraceRequest* trace = nullptr);
Tensor image_encoder_hidden(const HFModel& m, const Tensor& pixels);
// The longest input text_encoder_hidden takes (max_position_embeddings); 0 for other families.
int64_t text_encoder_max_positions(const HFModel& m);

enum class Pooling { cls, mean, max, mean_sqrt_len, last };

// "cls", "mean", "max", "mean_sqrt_len_tokens" (also "mean_sqrt_len"), "lasttoken" (also "last");
// an error names `what` (a flag or file: key) and the value.
Pooling parse_pooling(const std::string& text, const std::string& what);
const char* pooling_name(Pooling p);  // sentence-transformers' spelling

struct EmbeddingConfig {
  Pooling pooling = Pooling::mean;  // sentence-transformers' default for a bare transformer
  bool normalize = false;
  int64_t max_seq_length = 0;       // tokens per text, specials included; 0: the model's positions
  bool from_folder = false;         // read from the folder's sentence-transformers files
  std::string source;               // what decided it, for reports ("modules.json", "default")
};

// The embedding configuration of an HF folder: its modules.json (a Transformer, a Pooling, an
// optional Normalize; any other module is an error naming it, rather than a different vector),
// the pooling config in the old (pooling_mode_*_tokens booleans) or new ("pooling_mode") format,
// max_seq_length from sentence_bert_config.json or tokenizer_config.json's model_max_length.
// A folder without modules.json gets mean pooling, no normalization. Errors name file and key.
EmbeddingConfig read_embedding_config(const std::string& folder);

// hidden (B,L,C) and mask (B,L) (nonzero = a real token; undefined: all real) -> (B,C), as
// sentence-transformers computes it: pads never count (mean divides by max(count, 1e-9); max sees
// pads as -1e9; lasttoken takes each right-padded row's last real token).
Tensor pool_hidden(const Tensor& hidden, const Tensor& mask, Pooling p);
// Rows of x (B,C) divided by max(||row||, 1e-12), as torch.nn.functional.normalize.
Tensor l2_normalize(const Tensor& x);
// Cosine similarity of the rows of a (N,C) and b (M,C) -> (N,M).
Tensor cosine_similarity(const Tensor& a, const Tensor& b);

}  // namespace hh::nn
