// Transformer block (pre-LN or post-LN), a decoder language model (RoPE or learned positions,
// optional tied embeddings) and an encoder classifier (CLS or mean pooling).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/attention.h"

namespace hh::nn {

struct TransformerConfig {
  int64_t vocab = 40;
  int64_t dim = 256;
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t head_dim = 64;
  int64_t mlp_hidden = 1024;
  int64_t max_len = 512;        // learned positions table size
  std::string positions = "rope";  // "rope", "learned" or "none"
  bool pre_ln = true;
  std::string norm = "layernorm";  // "layernorm" or "rmsnorm"
  std::string mlp = "gelu";        // "gelu", "gelu_tanh", "relu", "silu", or "swiglu"
  double norm_eps = 1e-5;
  double dropout = 0.0;
  bool tie_embeddings = false;
  bool bias = true;
  AttentionConfig attention;  // mixer, form, chunk, eps, feature map options; sizes are filled in
  uint64_t seed = 0;
};

class Norm : public Module {
 public:
  Norm(const std::string& kind, int64_t dim, double eps, Init init);
  Tensor forward(const Tensor& x) const { return ln ? ln->forward(x) : rms->forward(x); }
  std::shared_ptr<LayerNorm> ln;
  std::shared_ptr<RMSNorm> rms;
};

class TransformerBlock : public Module {
 public:
  TransformerBlock(const TransformerConfig& cfg, int64_t index, Init init);
  Tensor forward(const Tensor& x, const Tensor& key_mask, TraceRequest* trace);
  Tensor step(const Tensor& x, DecodeCache& cache);
  std::shared_ptr<Norm> norm1, norm2;
  std::shared_ptr<Attention> attn;
  std::shared_ptr<MLP> mlp;
  std::shared_ptr<SwiGLU> swiglu;
  std::shared_ptr<Dropout> drop;
  bool pre_ln;

 private:
  Tensor feed_forward(const Tensor& x) const;  // bias + GELU fused when it can be (transformer.cpp)
};

class DecoderLM : public Module {
 public:
  DecoderLM(const TransformerConfig& cfg, Init init);
  // ids (B,L) i64 -> logits (B,L,V).
  Tensor forward(const Tensor& ids, TraceRequest* trace = nullptr);
  // Recurrent decoding, one token per call: ids (B,1) -> logits (B,1,V). Linear mixers only.
  Tensor step(const Tensor& ids, std::vector<DecodeCache>& caches);
  void on_optimizer_step();
  TransformerConfig cfg;
  std::shared_ptr<Embedding> embed;
  std::shared_ptr<Embedding> pos_embed;  // learned positions
  std::shared_ptr<ModuleList<TransformerBlock>> blocks;
  std::shared_ptr<Norm> norm_f;
  std::shared_ptr<Linear> lm_head;  // null when tied

 private:
  Tensor logits(const Tensor& h) const;
};

class EncoderClassifier : public Module {
 public:
  // classes 0 builds no classifier: forward then returns the pooled features (B,dim), the encoder
  // of a two-tower model (experiments/lra/lra_classifier.h). Attention is bidirectional, except a
  // gated linear mixer's (cfg.attention.gate), which runs causally.
  EncoderClassifier(const TransformerConfig& cfg, int64_t classes, const std::string& pooling, Init init);
  // ids (B,L), key_mask (B,L) bool or undefined -> logits (B,classes), or (B,dim) when classes is 0.
  Tensor forward(const Tensor& ids, const Tensor& key_mask = Tensor(), TraceRequest* trace = nullptr);
  TransformerConfig cfg;
  std::string pooling;  // "cls" (token 0) or "mean" (over unmasked tokens)
  std::shared_ptr<Embedding> embed, pos_embed;
  std::shared_ptr<ModuleList<TransformerBlock>> blocks;
  std::shared_ptr<Norm> norm_f;
  std::shared_ptr<Linear> classifier;  // null when classes is 0
};

}  // namespace hh::nn
