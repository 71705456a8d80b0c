// Llama (LlamaForCausalLM) with HF's module tree: model.{embed_tokens, layers.N.{input_layernorm,
// self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj}, norm}, lm_head
// (absent when tie_word_embeddings). RMSNorm, SwiGLU, half-split RoPE (rope_theta and the scaled
// variants linear, dynamic, yarn and llama3: nn/rope.h), grouped-query
// attention: k and v are repeated to the query heads before the mixer, so a feature map is per
// query head. A linear mixer may be gated (HFModelOptions::gate): GLA's gate reads the layer
// input, Liger's the key projection before RoPE (no new weights).
// The same decoder, with typed options, is Mistral (a sliding window on every layer), Qwen2 (q/k/v
// biases, sliding windows on the layers layer_types names) and Qwen3 (per-head q_norm/k_norm before
// RoPE, head_dim independent of hidden_size): each family is a config reader (LlamaConfig::from_hf),
// and every family reports family() "llama" with its own architecture().
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/gate.h"
#include "nn/layers.h"
#include "nn/models/hf_model.h"
#include "nn/rope.h"

namespace hh::nn {

// The HF families read into a LlamaConfig (load_hf_model picks one from config.json).
enum class DecoderFamily { llama, mistral, qwen2, qwen3 };

struct LlamaConfig {
  DecoderFamily family = DecoderFamily::llama;
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0;
  int64_t num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0, max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeScaling rope;  // rope_theta and the rope_type of rope_parameters / rope_scaling
  Activation hidden_act = Activation::silu;
  bool qkv_bias = false, o_bias = false;  // Llama's attention_bias sets both; Qwen2 has q/k/v biases only
  bool mlp_bias = false, tie_word_embeddings = false;
  bool qk_norm = false;  // Qwen3: RMSNorm over head_dim of every q and k head, before RoPE
  // Per layer: 0 = causal attention over every earlier key; W > 0 = only the last W keys.
  std::vector<int64_t> layer_window;
  // Reads every field of `family`'s config that changes the computation; unsupported values (a
  // rope_type other than default, linear, dynamic, yarn and llama3, an unknown activation, a
  // sliding_window <= 0) are errors naming the key and the file.
  static LlamaConfig from_hf(const HFConfig& config, DecoderFamily family = DecoderFamily::llama);
  // The positions forward and step accept: max_position_embeddings, or factor times that under
  // dynamic RoPE (which exists to stretch the context past max_position_embeddings).
  int64_t position_limit() const;
};

const char* family_name(DecoderFamily f);          // "llama", "mistral", "qwen2", "qwen3" (the model_type)
const char* family_architecture(DecoderFamily f);  // "LlamaForCausalLM", ...

class LlamaAttention : public Module {
 public:
  // layer: which entry of c.layer_window this attention uses.
  LlamaAttention(const LlamaConfig& c, const HFModelOptions& o, Init init, size_t layer);
  Tensor forward(const Tensor& x, TraceRequest* trace) const;  // x (B,L,C) -> (B,L,C)
  Tensor step(const Tensor& x, DecodeCache& cache) const;      // x (B,1,C) at position cache.pos()
  // x (N,1,C), row i on caches[i] at its own position -> (N,1,C): CausalLM::step_many's layer.
  Tensor step_rows(const Tensor& x, const std::vector<DecodeCache*>& caches) const;
  Tensor prefill(const Tensor& x, DecodeCache& cache) const;   // x (B,L,C) at position cache.pos()
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, o_proj;
  std::shared_ptr<RMSNorm> q_norm, k_norm;  // Qwen3 (qk_norm) only, else null
  std::shared_ptr<FeatureMap> feature_map;
  AttentionMixer mixer;

  // The two halves of forward, public for layer-by-layer attention transfer (train/layerwise_distill):
  // x (B,L,C) at positions pos.. -> q, k, v (B,H,L,D) with RoPE on q, k and k, v repeated to H heads;
  // k_raw (when given): the key before RoPE (after Qwen3's k_norm), repeated to H heads, which a
  // Liger gate reads.
  void project(const Tensor& x, int64_t pos, Tensor& q, Tensor& k, Tensor& v, Tensor* k_raw = nullptr) const;
  Tensor merge(const Tensor& y) const;  // (B,H,L,D) -> o_proj(B,L,H·D)

 private:
  bool gated() const { return mixer.cfg.gate != Gate::none; }
  // project's second half: the projections qp (B,L,H·D), kp, vp (B,L,Hkv·D) into heads, normed
  // (Qwen3), rotated from position pos and repeated.
  void rotate(const Tensor& qp, const Tensor& kp, const Tensor& vp, int64_t pos, Tensor& q, Tensor& k, Tensor& v,
              Tensor* k_raw) const;
  int64_t heads_, kv_heads_, head_dim_;
  RopeScaling rope_;
};

class LlamaMLP : public Module {
 public:
  LlamaMLP(const LlamaConfig& c, Init init);
  Tensor forward(const Tensor& x) const {
    return down_proj->forward(mul(activate(gate_proj->forward(x), act), up_proj->forward(x)));
  }
  std::shared_ptr<Linear> gate_proj, up_proj, down_proj;
  Activation act;
};

class LlamaDecoderLayer : public Module {
 public:
  LlamaDecoderLayer(const LlamaConfig& c, const HFModelOptions& o, Init init, size_t layer);
  Tensor forward(const Tensor& x, TraceRequest* trace) const;
  Tensor step(const Tensor& x, DecodeCache& cache) const;
  Tensor step_rows(const Tensor& x, const std::vector<DecodeCache*>& caches) const;
  Tensor prefill(const Tensor& x, DecodeCache& cache) const;
  std::shared_ptr<RMSNorm> input_layernorm, post_attention_layernorm;
  std::shared_ptr<LlamaAttention> self_attn;
  std::shared_ptr<LlamaMLP> mlp;
};

class LlamaModel : public Module {
 public:
  LlamaModel(const LlamaConfig& c, const HFModelOptions& o, Init init);
  std::shared_ptr<Embedding> embed_tokens;
  std::shared_ptr<ModuleList<LlamaDecoderLayer>> layers;
  std::shared_ptr<RMSNorm> norm;
};

// With options.draw_weights = false (load_hf_model) the HF weights are allocated, not drawn; a
// linear mixer's feature maps are drawn from options.seed.
class LlamaForCausalLM : public CausalLM {
 public:
  LlamaForCausalLM(const HFConfig& config, const HFModelOptions& options,
                   DecoderFamily family = DecoderFamily::llama);
  Tensor forward(const Tensor& ids, TraceRequest* trace = nullptr) override;
  Tensor hidden(const Tensor& ids, TraceRequest* trace = nullptr) override;
  // ids (B,L) i64 (checked as forward does) -> the hidden state entering layer 0, (B,L,C).
  Tensor embed(const Tensor& ids) const override;
  int64_t num_layers() const override { return cfg.num_hidden_layers; }
  Tensor layer_forward(int64_t layer, const Tensor& x, TraceRequest* trace) const override;
  std::vector<AttentionSite> attention_sites() override;
  DecodeState start_decoding() const override;
  Tensor step(const Tensor& ids, DecodeState& state) override;
  Tensor step_many(const Tensor& ids, const std::vector<DecodeState*>& states) override;
  Tensor prefill(const Tensor& ids, DecodeState& state) override;  // one pass, fresh or started state
  int64_t vocab_size() const override { return cfg.vocab_size; }
  int64_t max_positions() const override { return cfg.position_limit(); }

  LlamaConfig cfg;
  std::shared_ptr<LlamaModel> model;
  std::shared_ptr<Linear> lm_head;       // null when tied to model.embed_tokens
  std::shared_ptr<TiedHead> tied_head;  // then this one (registered as lm_head; no parameter)

 private:
  Tensor head(const Tensor& h) const;  // (B,L,C) -> (B,L,V)
};

}  // namespace hh::nn
