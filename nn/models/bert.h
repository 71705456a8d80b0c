// BERT (transformers' BertModel / BertForSequenceClassification) with HF's own parameter names:
// bert.embeddings.{word,position,token_type}_embeddings, bert.embeddings.LayerNorm,
// bert.encoder.layer.N.attention.self.{query,key,value}, ...attention.output.{dense,LayerNorm},
// ...intermediate.dense, ...output.{dense,LayerNorm}, bert.pooler.dense, classifier.
// Post-LN encoder; every attention takes the mixer of HFModelOptions (softmax as trained, or any
// feature map), registered as the attention module's child "feature_map". A linear mixer runs the
// quadratic form when options.form asks for it (or a trace wants weights), else the non-causal
// form: the causal forms (chunked, recurrent) do not apply to a bidirectional encoder.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "nn/attention.h"
#include "nn/models/hf_config.h"
#include "nn/models/hf_model.h"
#include "nn/models/hf_weights.h"

namespace hh::nn {

// The config.json fields that change BERT's computation.
struct BertConfig {
  int64_t vocab_size = 0, hidden_size = 0, num_hidden_layers = 0, num_attention_heads = 0;
  int64_t intermediate_size = 0, max_position_embeddings = 0, type_vocab_size = 0;
  int64_t num_labels = 0;  // from "id2label" (its size) or "num_labels"; 2 when neither is given
  double layer_norm_eps = 1e-12;
  Activation hidden_act = Activation::gelu_erf;
  // Reads and checks config.json; errors name the file and the key (unsupported
  // position_embedding_type, unknown hidden_act, non-positive sizes, heads not dividing the width).
  static BertConfig from_hf(const HFConfig& c);
};

// The bidirectional self-attention of an encoder layer: query/key/value projections (HF names)
// and the mixer. Shared by BERT ("attention.self") and ViT ("attention.attention").
class EncoderSelfAttention : public Module {
 public:
  EncoderSelfAttention(int64_t hidden, int64_t heads, bool bias, const HFModelOptions& opts, Init init);
  // x (B,L,C) -> the merged head outputs (B,L,C) before the output dense. key_mask (B,L) bool or undefined.
  Tensor forward(const Tensor& x, const Tensor& key_mask, TraceRequest* trace) const;
  int64_t heads, head_dim;
  std::shared_ptr<Linear> query, key, value;
  std::shared_ptr<FeatureMap> feature_map;  // null for softmax
  AttentionMixer mixer;
};

// dense (+ LayerNorm(x + residual) when `norm`): BERT's attention.output / output, ViT's
// attention.output / output (no norm there: ViT is pre-LN), intermediate and pooler (no norm).
class DenseBlock : public Module {
 public:
  DenseBlock(int64_t in, int64_t out, bool norm, double eps, Init init);
  // dense(x), then norm(. + residual) when this block has a norm.
  Tensor forward(const Tensor& x, const Tensor& residual = Tensor()) const;
  std::shared_ptr<Linear> dense;
  std::shared_ptr<LayerNorm> norm;  // registered as HF's "LayerNorm"; null when !norm
};

// "layer.0", "layer.1", ...: the encoder of BERT and ViT.
template <typename L>
class LayerStack : public Module {
 public:
  LayerStack() { layer = register_module("layer", std::make_shared<ModuleList<L>>()); }
  // Each layer's self-attention ("attention.self" in BERT, "attention.attention" in ViT).
  std::vector<AttentionSite> attention_sites() {
    std::vector<AttentionSite> out;
    for (const auto& l : *layer) {
      EncoderSelfAttention& a = *l->attention->self;
      out.push_back({&a, &a.mixer, &a.feature_map});
    }
    return out;
  }
  std::shared_ptr<ModuleList<L>> layer;
};

// An encoder layer's "attention": the self-attention (named "self" in BERT, "attention" in ViT)
// and "output" (dense, then LayerNorm(. + x) in post-LN BERT; dense alone in pre-LN ViT).
class EncoderAttention : public Module {
 public:
  EncoderAttention(const std::string& self_name, int64_t hidden, int64_t heads, bool qkv_bias, bool post_norm,
                   double eps, const HFModelOptions& opts, Init init);
  Tensor forward(const Tensor& x, const Tensor& key_mask, TraceRequest* trace) const {
    return output->forward(self->forward(x, key_mask, trace), x);
  }
  std::shared_ptr<EncoderSelfAttention> self;
  std::shared_ptr<DenseBlock> output;
};

class BertLayer : public Module {
 public:
  BertLayer(const BertConfig& cfg, const HFModelOptions& opts, Init init);
  Tensor forward(const Tensor& x, const Tensor& key_mask, TraceRequest* trace) const;  // (B,L,C) -> (B,L,C)
  Activation act;
  std::shared_ptr<EncoderAttention> attention;
  std::shared_ptr<DenseBlock> intermediate, output;
};

class BertEmbeddings : public Module {
 public:
  BertEmbeddings(const BertConfig& cfg, Init init);
  // input_ids, token_type_ids (B,L) i64 (token types may be undefined: all 0) -> (B,L,C).
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids) const;
  std::shared_ptr<Embedding> word_embeddings, position_embeddings, token_type_embeddings;
  std::shared_ptr<LayerNorm> norm;  // "LayerNorm"
};

// transformers' BertModel: embeddings, encoder.layer.N, pooler (when with_pooler).
class BertModel : public HFModel {
 public:
  BertModel(const BertConfig& cfg, const HFConfig& config, bool with_pooler, const HFModelOptions& opts, Init init);
  // input_ids (B,L) i64; token_type_ids (B,L) i64 or undefined; attention_mask (B,L) (1 = token,
  // 0 = padding; any integer/float/bool dtype) or undefined -> last_hidden_state (B,L,C).
  // Ids out of range and L > max_position_embeddings are errors naming the input.
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask,
                 TraceRequest* trace = nullptr) const;
  // tanh(pooler.dense(hidden[:, 0])) -> (B,C); needs the pooler.
  Tensor pool(const Tensor& last_hidden_state) const;
  std::vector<AttentionSite> attention_sites() override { return encoder->attention_sites(); }
  BertConfig cfg;
  std::shared_ptr<BertEmbeddings> embeddings;
  std::shared_ptr<LayerStack<BertLayer>> encoder;
  std::shared_ptr<DenseBlock> pooler;            // null without the pooler
};

// transformers' BertForSequenceClassification: "bert" + "classifier" on the pooled output.
class BertForSequenceClassification : public HFModel {
 public:
  BertForSequenceClassification(const BertConfig& cfg, const HFConfig& config, const HFModelOptions& opts, Init init);
  // -> logits (B,num_labels); last_hidden_state (B,L,C) is written when asked.
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask,
                 TraceRequest* trace = nullptr, Tensor* last_hidden_state = nullptr) const;
  std::vector<AttentionSite> attention_sites() override { return bert->attention_sites(); }
  std::shared_ptr<BertModel> bert;
  std::shared_ptr<Linear> classifier;
};

// File names -> model names for BERT: old checkpoints' LayerNorm.gamma/beta -> weight/bias; the
// position_ids/token_type_ids buffers some files carry are dropped. For a bare BertModel a
// "bert." prefix is stripped and pretraining heads ("cls.*") are dropped, as transformers does
// when it loads a BertForMaskedLM/BertForPreTraining file into a BertModel.
std::string bert_rename(const std::string& file_name, bool bare_model);

// make_bert (declared in hf_model.h) builds a BertModel or a BertForSequenceClassification from
// config "architectures" (none: BertModel; BertForMaskedLM and BertForPreTraining files load as
// their BertModel) and loads its weights; a BertModel gets the pooler when the file has its weights.

}  // namespace hh::nn
