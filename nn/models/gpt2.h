// GPT-2 (GPT2LMHeadModel) with HF's module tree: transformer.{wte, wpe, h.N.{ln_1, attn.c_attn,
// attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}, ln_f}; the LM head is tied to wte. Pre-LN.
// HF stores the Conv1D weights (in, out); they are transposed once on load into Linear's (out, in),
// so the forward is the same linear op every other family uses (no per-call transpose).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "nn/layers.h"
#include "nn/models/hf_model.h"

namespace hh::nn {

struct GPT2Config {
  int64_t vocab_size = 0, n_positions = 0, n_embd = 0, n_layer = 0, n_head = 0, n_inner = 0;
  double layer_norm_epsilon = 1e-5;
  Activation activation = Activation::gelu_tanh;
  // Reads every field that changes the computation; unsupported values are errors naming the key.
  static GPT2Config from_hf(const HFConfig& config);
};

// c_attn (C -> 3C, columns q|k|v), the mixer, c_proj. The feature map (linear mixers) is the
// child "feature_map".
class GPT2Attention : public Module {
 public:
  GPT2Attention(const GPT2Config& c, const HFModelOptions& o, Init init);
  Tensor forward(const Tensor& x, TraceRequest* trace) const;  // x (B,L,C) -> (B,L,C)
  Tensor step(const Tensor& x, DecodeCache& cache) const;      // x (B,1,C) -> (B,1,C)
  // x (N,1,C), row i on caches[i] (at its own position) -> (N,1,C): CausalLM::step_many's layer.
  Tensor step_rows(const Tensor& x, const std::vector<DecodeCache*>& caches) const;
  Tensor prefill(const Tensor& x, DecodeCache& cache) const;   // x (B,L,C) at position cache.pos() -> (B,L,C)
  std::shared_ptr<Linear> c_attn, c_proj;
  std::shared_ptr<FeatureMap> feature_map;
  AttentionMixer mixer;

 private:
  void split_heads(const Tensor& x, Tensor& q, Tensor& k, Tensor& v) const;  // -> (B,H,L,D) each
  Tensor merge_heads(const Tensor& y) const;                                  // (B,H,L,D) -> c_proj(B,L,C)
  int64_t heads_, head_dim_;
};

class GPT2MLP : public Module {
 public:
  GPT2MLP(const GPT2Config& c, Init init);
  // c_proj(act(c_fc(x))), bias + GELU fused (gpt2.cpp).
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<Linear> c_fc, c_proj;
  Activation act;
};

class GPT2Block : public Module {
 public:
  GPT2Block(const GPT2Config& c, const HFModelOptions& o, Init init);
  Tensor forward(const Tensor& x, TraceRequest* trace) const;
  Tensor step(const Tensor& x, DecodeCache& cache) const;
  Tensor step_rows(const Tensor& x, const std::vector<DecodeCache*>& caches) const;
  Tensor prefill(const Tensor& x, DecodeCache& cache) const;
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<GPT2Attention> attn;
  std::shared_ptr<GPT2MLP> mlp;
};

class GPT2Model : public Module {
 public:
  GPT2Model(const GPT2Config& c, const HFModelOptions& o, Init init);
  // ids (B,L) i64 at positions pos .. pos+L-1 -> embeddings (B,L,C).
  Tensor embed(const Tensor& ids, int64_t pos) const;
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<ModuleList<GPT2Block>> h;
  std::shared_ptr<LayerNorm> ln_f;
};

// With options.draw_weights = false (load_hf_model) the HF weights are allocated, not drawn; a
// linear mixer's feature maps are drawn from options.seed.
class GPT2LMHeadModel : public CausalLM {
 public:
  GPT2LMHeadModel(const HFConfig& config, const HFModelOptions& options);
  Tensor forward(const Tensor& ids, TraceRequest* trace = nullptr) override;
  Tensor hidden(const Tensor& ids, TraceRequest* trace = nullptr) override;
  DecodeState start_decoding() const override;
  Tensor step(const Tensor& ids, DecodeState& state) override;
  Tensor step_many(const Tensor& ids, const std::vector<DecodeState*>& states) override;
  Tensor prefill(const Tensor& ids, DecodeState& state) override;  // one pass, fresh or started state
  int64_t vocab_size() const override { return cfg.vocab_size; }
  int64_t max_positions() const override { return cfg.n_positions; }
  int64_t num_layers() const override { return cfg.n_layer; }
  Tensor embed(const Tensor& ids) const override;  // token + position embeddings from position 0
  Tensor layer_forward(int64_t layer, const Tensor& x, TraceRequest* trace) const override;
  std::vector<AttentionSite> attention_sites() override;
  NamedTensors hf_state_dict() const override;  // Conv1D weights back to (in, out)

  GPT2Config cfg;
  std::shared_ptr<GPT2Model> transformer;
  std::shared_ptr<TiedHead> lm_head;  // tied to transformer.wte (no parameter of its own)

 private:
  Tensor head(const Tensor& h) const { return lm_head->forward(h); }  // h (B,L,C) -> (B,L,V)
};

}  // namespace hh::nn
