// ViT (transformers' ViTForImageClassification) with HF's own parameter names:
// vit.embeddings.{cls_token,position_embeddings,patch_embeddings.projection},
// vit.encoder.layer.N.{layernorm_before,attention.attention.{query,key,value},attention.output.dense,
// layernorm_after,intermediate.dense,output.dense}, vit.layernorm, classifier.
// Pre-LN encoder; the attention takes any mixer of HFModelOptions, as BERT's.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "nn/models/bert.h"

namespace hh::nn {

struct ViTConfig {
  int64_t hidden_size = 0, num_hidden_layers = 0, num_attention_heads = 0, intermediate_size = 0;
  int64_t image_size = 0, patch_size = 0, num_channels = 0;
  int64_t num_labels = 0;  // "id2label" size or "num_labels" (2 when neither is given)
  int64_t pooler_output_size = 0;  // ViTModel's pooler ("pooler_output_size", default hidden_size)
  bool qkv_bias = true;
  double layer_norm_eps = 1e-12;
  Activation hidden_act = Activation::gelu_erf;
  int64_t num_patches() const { return (image_size / patch_size) * (image_size / patch_size); }
  // Errors name the file and the key (unknown hidden_act, a patch size that does not divide the image, ...).
  static ViTConfig from_hf(const HFConfig& c);
};

// Conv2d with kernel = stride = patch, as unfold + matmul: pixels (B,C,H,W) -> (B,N,hidden),
// patches in row-major order (as transformers' flatten(2).transpose(1, 2)).
class PatchProjection : public Module {
 public:
  PatchProjection(int64_t channels, int64_t hidden, int64_t patch, Init init);
  Tensor forward(const Tensor& pixels) const;
  int64_t patch;
  Tensor weight;  // (hidden, C, patch, patch) as torch's Conv2d
  Tensor bias;    // (hidden)
};

// "patch_embeddings": holds "projection".
class PatchEmbeddings : public Module {
 public:
  PatchEmbeddings(int64_t channels, int64_t hidden, int64_t patch, Init init);
  std::shared_ptr<PatchProjection> projection;
};

class ViTEmbeddings : public Module {
 public:
  ViTEmbeddings(const ViTConfig& cfg, Init init);
  Tensor forward(const Tensor& pixels) const;  // (B,C,H,W) -> (B,1+N,hidden)
  Tensor cls_token;            // (1,1,hidden)
  Tensor position_embeddings;  // (1,1+N,hidden)
  std::shared_ptr<PatchEmbeddings> patch_embeddings;
};

class ViTLayer : public Module {
 public:
  ViTLayer(const ViTConfig& cfg, const HFModelOptions& opts, Init init);
  Tensor forward(const Tensor& x, TraceRequest* trace) const;  // (B,L,C) -> (B,L,C)
  Activation act;
  std::shared_ptr<LayerNorm> layernorm_before, layernorm_after;
  std::shared_ptr<EncoderAttention> attention;  // "attention.attention", "attention.output"
  std::shared_ptr<DenseBlock> intermediate, output;
};

// transformers' ViTModel: embeddings, encoder.layer.N, layernorm, pooler (when with_pooler;
// "pooler_act" must be tanh).
class ViTModel : public HFModel {
 public:
  ViTModel(const ViTConfig& cfg, const HFConfig& config, bool with_pooler, const HFModelOptions& opts, Init init);
  // pixel_values (B,C,H,W) floating, H = W = image_size (else an error naming the sizes).
  // last_hidden_state_before_norm, when given, gets the encoder output before "layernorm".
  // -> layernorm(encoder output) (B,1+N,C).
  Tensor forward(const Tensor& pixel_values, TraceRequest* trace = nullptr,
                 Tensor* last_hidden_state_before_norm = nullptr) const;
  // tanh(pooler.dense(hidden[:, 0])) -> (B,pooler_output_size); needs the pooler.
  Tensor pool(const Tensor& last_hidden_state) const;
  std::vector<AttentionSite> attention_sites() override { return encoder->attention_sites(); }
  ViTConfig cfg;
  std::shared_ptr<ViTEmbeddings> embeddings;
  std::shared_ptr<LayerStack<ViTLayer>> encoder;
  std::shared_ptr<LayerNorm> layernorm;
  std::shared_ptr<DenseBlock> pooler;  // null without the pooler
};

// transformers' ViTForImageClassification: "vit" + "classifier" on the CLS token.
class ViTForImageClassification : public HFModel {
 public:
  ViTForImageClassification(const ViTConfig& cfg, const HFConfig& config, const HFModelOptions& opts, Init init);
  // -> logits (B,num_labels); the encoder output before vit.layernorm when asked (transformers'
  // hidden_states[-1]).
  Tensor forward(const Tensor& pixel_values, TraceRequest* trace = nullptr, Tensor* last_hidden_state = nullptr) const;
  std::vector<AttentionSite> attention_sites() override { return vit->attention_sites(); }
  std::shared_ptr<ViTModel> vit;
  std::shared_ptr<Linear> classifier;
};

// make_vit (declared in hf_model.h) builds a ViTForImageClassification or a ViTModel from config
// "architectures" (none: ViTModel; its file may carry a "vit." prefix) and loads its weights; a
// ViTModel gets the pooler when the file has its weights.

}  // namespace hh::nn
