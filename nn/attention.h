// Attention with a pluggable mixer: softmax (causal or bidirectional, padding mask), linear
// attention with a FeatureMap in one of four forms: quadratic (weights materialized), chunked
// causal (fused op, the training path), non-causal, and recurrent (O(1) state per step), or the
// causal hybrid of a sliding softmax window and linear attention (autograd/ops/hybrid_attention.h);
// a linear mixer may gate its state (nn/gate.h, autograd/ops/gated_attention.h) or write it with
// the gated delta rule (autograd/ops/delta_attention.h).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/ops/delta_attention.h"
#include "autograd/ops/gated_attention.h"
#include "autograd/ops/hybrid_attention.h"
#include "nn/feature_maps.h"
#include "nn/gate.h"
#include "nn/layers.h"
#include "nn/mixer.h"

namespace hh::nn {

enum class LinearForm { quadratic, chunked, noncausal, recurrent };
LinearForm parse_linear_form(const std::string& s);

struct AttentionConfig {
  int64_t dim = 256;
  int64_t heads = 4;
  int64_t head_dim = 64;
  Mixer mixer;  // softmax, or linear attention with a feature map
  bool causal = true;
  LinearForm form = LinearForm::chunked;  // for linear mixers; causal=false forces noncausal/quadratic
  int64_t chunk = 64;
  double eps = 1e-6;
  int64_t window = 64;  // hybrid mixers: the sliding window W
  Gate gate = Gate::none;  // linear (non-hybrid) mixers: the gate on the state
  GateOutput gate_output = GateOutput::normalizer;  // gated mixers: the output's scaling (nn/gate.h)
  bool rope = false;
  double rope_theta = 10000.0;
  bool bias = false;
  FeatureMapConfig feature_map;  // name/heads/head_dim are filled from this config
};

// What one attention layer exposes to distillation and diagnostics when asked.
struct AttentionTrace {
  Tensor weights;  // (B,H,L,L) the layer's own attention weights (softmax, or linear quadratic form)
  Tensor teacher;  // (B,H,L,L) softmax weights from the same q, k (no grad), for distillation
  Tensor scores;   // (B,H,L,L) q·k/√D (no grad), for monotonicity plots
  Tensor output;   // (B,H,L,D) attention output before o_proj (student), when distilling
  Tensor teacher_output;  // (B,H,L,D) softmax attention output (no grad)
};
struct TraceRequest {
  bool weights = false;   // fill weights (forces the quadratic form for linear mixers)
  bool teacher = false;   // fill teacher
  bool outputs = false;   // output and teacher_output (the output-MSE term); with weights off the
                          // student runs its efficient form and the teacher the fused softmax
  bool scores = false;
  // The layer returns the teacher's (softmax) output, so the residual stream carries the teacher's
  // hidden states (LoLCATs' attention transfer); the student's output is traced (output), and
  // teacher_output is filled.
  bool teacher_forward = false;
  std::vector<AttentionTrace> layers;  // appended in layer order by each Attention::forward
};

// Recurrent decoding state for one layer: S (B,H,F,D), z (B,H,F), tokens seen; a gated mixer
// keeps its state in `gated`, the delta rule its (B,H,F,D) state in `delta`. pos counts the
// tokens of every kind.
struct RecurrentState {
  Tensor S, z;
  GatedDecodeState gated;
  DeltaDecodeState delta;
  int64_t pos = 0;
};

// Pure functions of the mixer forms (exposed for tests and benchmarks).
// Softmax: q, k (B,H,L,D), v (B,H,L,Dv); mask (B,L) bool keeps keys; returns (out, weights).
// window > 0 (causal only): query i sees only keys j with i - window < j <= i (Mistral's and Qwen's
// sliding window); 0 = every earlier key. A window shorter than L takes the composed path (the
// fused kernel has no window): O(L²) memory.
Tensor softmax_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor& key_mask,
                         Tensor* weights = nullptr, int64_t window = 0);
Tensor softmax_attention_weights(const Tensor& q, const Tensor& k, bool causal, const Tensor& key_mask,
                                 int64_t window = 0);
// Queries continuing a sequence: q (B,H,Lq,D) at positions query_pos.. over k (B,H,Lk,D),
// v (B,H,Lk,Dv) at positions key_pos.. (a KV cache followed by the queries' own keys): query i sees
// key j when key_pos + j <= query_pos + i and, with window > 0, query_pos + i - (key_pos + j) < window.
// The weights are materialized for 256 queries at a time ((256,Lk) per batch and head).
Tensor softmax_attention_continued(const Tensor& q, const Tensor& k, const Tensor& v, int64_t query_pos,
                                   int64_t key_pos, int64_t window = 0);
// Linear: phi_q, phi_k (B,H,L,F), v (B,H,L,D).
Tensor linear_attention_weights(const Tensor& phi_q, const Tensor& phi_k, bool causal, double eps,
                                const Tensor& key_mask = Tensor());
Tensor linear_attention_quadratic(const Tensor& phi_q, const Tensor& phi_k, const Tensor& v, bool causal, double eps,
                                  const Tensor& key_mask = Tensor(), Tensor* weights = nullptr);
Tensor linear_attention_noncausal(const Tensor& phi_q, const Tensor& phi_k, const Tensor& v, double eps,
                                  const Tensor& key_mask = Tensor());
// One token: phi_q, phi_k (B,H,1,F), v (B,H,1,D); updates state; returns (B,H,1,D).
Tensor linear_attention_step(const Tensor& phi_q, const Tensor& phi_k, const Tensor& v, double eps, RecurrentState& st);
// The recurrent form over a whole sequence, token by token (reference for the other forms).
Tensor linear_attention_recurrent(const Tensor& phi_q, const Tensor& phi_k, const Tensor& v, double eps);

// The attention computation after the projections, shared by nn::Attention and the HF model
// families (nn/models/): softmax (the fused kernel unless weights or a padding mask are asked for)
// or a feature map in one of the linear forms, the distillation/diagnostic traces, and one-token
// decoding. Not a Module: the owner registers the feature map under its own "feature_map" child,
// so parameter paths stay the owner's (HF names plus ".feature_map." for the new weights).
struct MixerConfig {
  Mixer mixer;  // softmax, or linear attention with a feature map
  bool causal = true;
  LinearForm form = LinearForm::chunked;  // linear mixers; causal=false uses noncausal/quadratic
  int64_t chunk = 64;
  double eps = 1e-6;
  // Hybrid mixers (causal only): softmax over the last `window` keys, linear attention with the
  // feature map over the keys before them; the chunked op (chunk = `chunk`) unless weights are asked.
  int64_t window = 64;
  // Linear (non-hybrid, causal) mixers: a gate on the state (none: the plain prefix sum). A gated
  // mixer runs gated_attention in its normalized form (y = pq·S / (pq·z + eps), as the ungated
  // mixer); its feature map is a GatedFeatureMap (make_mixer_feature_map with the gate).
  // Gate::delta runs the gated delta rule instead (Gated DeltaNet): q, k through the feature map
  // then L2-normalized per head (fla's use_qk_l2norm_in_kernel), scale 1/sqrt(F), β and log α per
  // head from the layer input, the state (F,Dv); the chunked WY op in training and prefill (the
  // recurrent op with LinearForm::recurrent), delta_attention_step in decoding. The rule has no
  // normalizer (eps unused). Its "weights" (quadratic form, traces) are the (L,L) matrix W with
  // y = W v (the op applied to identity values): exact, but rows need not be positive or sum to 1.
  Gate gate = Gate::none;
  // Gated mixers: GateOutput::group_norm drops the normalizer (gated_attention with normalize =
  // false; the delta rule as it is) and applies the feature map's g_norm (an RMSNorm per head over
  // Dv) to the output, in every form and in decoding (make_mixer_feature_map with the same
  // output). The traced weights are then the unnormalized ones, before the norm.
  GateOutput gate_output = GateOutput::normalizer;
  // Softmax (causal only): each query sees only the last `sliding_window` keys, itself included
  // (a Mistral/Qwen sliding-window layer), in forward and in decoding; 0 = all keys. Linear and
  // hybrid mixers ignore it: they replace the whole softmax (the softmax teacher keeps it).
  int64_t sliding_window = 0;
};

// Decoding state of one layer: softmax keeps its keys/values (a KV cache), a linear mixer its O(1)
// recurrent state, a hybrid its window ring plus the linear state of the keys that left it.
struct DecodeCache {
  Tensor k, v;               // (B,H,T,D) softmax: every key/value so far (the last sliding_window ones)
  int64_t evicted = 0;       // softmax with a sliding window: keys dropped from the front of k, v
  RecurrentState linear;     // linear mixers
  HybridDecodeState hybrid;  // hybrid mixers (its window is set by the first step)
  int64_t pos() const {      // tokens seen
    return k.defined() ? evicted + k.size(2) : (hybrid.tokens > 0 ? hybrid.tokens : linear.pos);
  }
};

// Runs fn(i) for i in [0, n) on the calling thread's OpenMP threads, each row on one thread (its
// kernels single-threaded, alone or among many rows, so its arithmetic never depends on n) under
// the caller's grad mode and batch-invariance guard (thread-local switches): the per-row attention
// steps of CausalLM::step_many. The first exception is rethrown.
void parallel_rows(int64_t n, const std::function<void(int64_t)>& fn);

class AttentionMixer {
 public:
  AttentionMixer() = default;
  // feature_map: null for softmax; for a linear or hybrid mixer, built with make_mixer_feature_map
  // (a HybridFeatureMap for a hybrid).
  AttentionMixer(MixerConfig cfg, std::shared_ptr<FeatureMap> feature_map);
  // q, k (B,H,L,D), v (B,H,L,Dv) -> (B,H,L,Dv). key_mask (B,L) bool (true = real token) or undefined.
  // trace (may be null) gets this layer's AttentionTrace appended.
  // gate: what a gated mixer's gate reads (GateInput: the layer input for gla, the key projection
  // before RoPE for liger).
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                 TraceRequest* trace, const GateInput& gate = GateInput()) const;
  // A whole prompt at once (causal only): q, k, v (B,H,L,D) -> (B,H,L,Dv) as L steps from
  // `cache` would give, which is left as those steps leave it. A fresh cache: The forward's efficient form
  // computes it (the fused softmax, the chunked linear, gated, delta and hybrid ops, whatever
  // cfg.form says) and the state comes from the same tensors: the keys/values (the last
  // sliding_window of them), S and z after L tokens (one matmul; the delta op's final state), the
  // hybrid's ring and linear state. Keys go through the feature map one by one
  // (FeatureContext::keys_one_by_one), as the steps map them. A started cache (pos() > 0, the
  // tokens at positions pos().. continue it): continue_prefill.
  Tensor prefill(const Tensor& q, const Tensor& k, const Tensor& v, DecodeCache& cache,
                 const GateInput& gate = GateInput()) const;
  // One token per call (causal only): q, k, v (B,H,1,D) -> (B,H,1,Dv); the cache grows by one.
  Tensor step(const Tensor& q, const Tensor& k, const Tensor& v, DecodeCache& cache,
              const GateInput& gate = GateInput()) const;
  // One token for each of N sequences, each on its own cache (its own position): q, k, v
  // (N,H,1,D), gate's tensors (N,...) -> (N,H,1,Dv), row r what step on row r and *caches[r] gives
  // (hybrid: up to rounding; the same whatever the other rows). A hybrid mixer whose feature map
  // does not read positions maps every row at once and steps them in one kernel
  // (hybrid_attention_step_rows); the others step row by row (parallel_rows).
  Tensor step_rows(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<DecodeCache*>& caches,
                   const GateInput& gate = GateInput()) const;
  // The linear recurrent step alone (what nn::Attention::step uses).
  Tensor linear_step(const Tensor& q, const Tensor& k, const Tensor& v, RecurrentState& state,
                     const GateInput& gate = GateInput()) const;
  // Has a feature map (linear or hybrid; see Mixer::is_linear).
  bool is_linear() const { return feature_map != nullptr; }
  bool is_hybrid() const { return cfg.mixer.is_hybrid(); }

  MixerConfig cfg;
  std::shared_ptr<FeatureMap> feature_map;

 private:
  // forward, and with `fill` (prefill) the chunked forms, the keys mapped one by one, and *fill
  // set to the state after these tokens.
  Tensor run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, TraceRequest* trace,
             const GateInput& gate, DecodeCache* fill) const;
  // prefill from a started cache, every form in one pass: softmax over the cached keys and the new
  // ones (softmax_attention_continued, the sliding window kept); a hybrid's chunked op from the
  // cache's ring and S, z; the gated op from the carried S, z (the plain linear mixer as the gated
  // op with a zero log gate); the delta rule from its state (delta_forward).
  Tensor continue_prefill(const Tensor& q, const Tensor& k, const Tensor& v, DecodeCache& cache,
                          const GateInput& gate) const;
  // The delta gate's forward (see MixerConfig::gate); *weights (when given) gets W, y = W v;
  // *fill (when given) the recurrent state after these tokens (continuing the state it holds).
  Tensor delta_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                       const GateInput& gate, Tensor* weights, DecodeCache* fill) const;
};

// The feature map of a mixer (null for softmax): fc with name/heads/head_dim set from the arguments;
// for a hybrid, a HybridFeatureMap around that map (window factors init 0); with a gate, a
// GatedFeatureMap around it (model_dim: the layer input's width, for gla's projection; output:
// with group_norm the map holds g_norm over head_dim, the value width).
std::shared_ptr<FeatureMap> make_mixer_feature_map(const Mixer& mixer, FeatureMapConfig fc, int64_t heads,
                                                   int64_t head_dim, Init init, Gate gate = Gate::none,
                                                   int64_t model_dim = 0,
                                                   GateOutput output = GateOutput::normalizer);

class Attention : public Module {
 public:
  Attention(const AttentionConfig& cfg, Init init);
  // x (B,L,C) -> (B,L,C). key_mask (B,L) bool (true = real token) or undefined.
  Tensor forward(const Tensor& x, const Tensor& key_mask = Tensor(), TraceRequest* trace = nullptr);
  // Decoding: x (B,1,C), the cache carried across calls (a KV cache for softmax, the O(1) state of
  // a linear mixer, the window ring + linear state of a hybrid).
  Tensor step(const Tensor& x, DecodeCache& cache);
  bool is_linear() const { return feature_map != nullptr; }
  void on_optimizer_step() {
    if (feature_map) feature_map->on_step();
  }

  AttentionConfig cfg;
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, o_proj;
  std::shared_ptr<FeatureMap> feature_map;  // null for softmax
  AttentionMixer mixer;

 private:
  // x (B,L,C) -> q, k, v (B,H,L,D) with RoPE applied to q and k; *k_raw (when given) gets k
  // before RoPE (Liger's gate reads it).
  void project(const Tensor& x, int64_t pos_offset, Tensor& q, Tensor& k, Tensor& v, Tensor* k_raw = nullptr) const;
};

}  // namespace hh::nn
