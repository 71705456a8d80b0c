// The gate on a linear mixer's state as a type (autograd/ops/gated_attention.h): none (the plain
// prefix sum), decay (RetNet's fixed per-head γ_h = 1 - 2^(-5-h)), gla (GLA's data-dependent
// per-key-channel gate log α = logsigmoid(W x)/16, W a low-rank projection of the layer input),
// liger (Liger's gate from the key projection, no new parameters) and delta (Gated DeltaNet's gated
// delta rule, autograd/ops/delta_attention.h: per head a write strength β = σ(b_proj x) and a decay
// log α = −exp(A_log)·softplus(a_proj x + dt_bias), on L2-normalized features). Text becomes a
// Gate once where it enters (a flag, a JSON key) through parse_gate; name() gives the text back.
// GateOutput is how a gated mixer's output is scaled: the engine's normalizer, or (GLA, Gated
// DeltaNet) none and a per-head RMSNorm of the output instead.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/feature_maps.h"

namespace hh::nn {

enum class Gate { none, decay, gla, liger, delta };

// "none", "decay", "gla", "liger" or "delta" -> Gate; anything else fails naming `what` and the
// value: "<what>: unknown gate 'x' (expected none, decay, gla, liger, delta)".
Gate parse_gate(const std::string& text, const std::string& what);
std::string name(Gate g);
// An app's --gate list, already split at commas: each item parsed as above, each gate once, at
// least one ("<what>: 'gla' is listed twice", "<what>: empty list").
std::vector<Gate> parse_gate_list(const std::vector<std::string>& items, const std::string& what);
// A run's label: the mixer's name, then "+<gate>" when gated ("hedgehog+gla").
std::string gated_label(const std::string& mixer_name, Gate g);

// A gated mixer's output. normalizer: y = pq·S / (pq·z + eps) (the engine's linear attention; the
// delta rule has none: y = Sᵀq); group_norm: the unnormalized y = pq·S (the delta rule as it is),
// then an RMSNorm per head over the value dim with a learnable weight shared by the heads, as
// fla's GLA and GatedDeltaNet layers (g_norm, eps kGroupNormEps), without their output gate.
enum class GateOutput { normalizer, group_norm };
// "normalizer" or "groupnorm" -> GateOutput; anything else fails naming `what` and the value.
GateOutput parse_gate_output(const std::string& text, const std::string& what);
std::string name(GateOutput o);  // "normalizer" or "groupnorm"
// A run's output for its list of gates (an app's --gate): as above, and refused unless one of
// `gates` is a gate ("<what>: 'groupnorm' needs a gate ..."). The list's ungated runs keep the
// normalizer.
GateOutput parse_gate_output(const std::string& text, const std::vector<Gate>& gates, const std::string& what);
constexpr double kGroupNormEps = 1e-5;  // fla's norm_eps default (GLA, GatedDeltaNet)

// GLA's gate projection: the low-rank rank of W (fla's GLA: gate_low_rank_dim 16) and τ
// (gate_logit_normalizer 16; Liger divides its gate by 16 too).
constexpr int64_t kGlaGateRank = 16;
constexpr double kGateLogitNormalizer = 16.0;

// What a gate reads besides the features: the layer input x (B,L,C) (gla, delta) and the key
// projection k (B,H,L,D) before RoPE (liger).
struct GateInput {
  Tensor x;
  Tensor k;
};

// The per-head gates of the delta rule, each (B,H,L): β_t in (0,1) and log α_t <= 0.
struct DeltaGates {
  Tensor beta, log_alpha;
};

// The feature map of a gated linear mixer: the map as child "map", and for gla the gate
// projection x (B,L,C) -> (B,L,H·F) as children gate_down (C -> 16, no bias) and gate_up (16 ->
// H·F, bias), as fla's GLA (gk_proj). All sit under the attention's "feature_map" child, so they
// are the new weights of a converted model. For delta, as fla's GatedDeltaNet layer: children
// a_proj and b_proj (C -> H, no bias) and parameters A_log (H), log of U(0,16), and dt_bias (H),
// softplus⁻¹ of a log-uniform dt in [0.001, 0.1] (floor 1e-4). With GateOutput::group_norm, the
// output norm as child g_norm (an RMSNorm of the value dim, weight 1). forward is the inner map's.
class GatedFeatureMap : public FeatureMap {
 public:
  // model_dim: C, the width of x (gla only); value_dim: Dv, a head's value width (group_norm only).
  GatedFeatureMap(std::shared_ptr<FeatureMap> map, Gate gate, int64_t heads, int64_t model_dim, Init init,
                  GateOutput output = GateOutput::normalizer, int64_t value_dim = 0);
  Tensor forward(const Tensor& x, bool is_query, const FeatureContext& ctx) override {
    return map->forward(x, is_query, ctx);
  }
  int64_t feature_dim() const override { return map->feature_dim(); }
  void on_step() override { map->on_step(); }
  // log α for gated_attention_*, as `dtype`: (B,H,L,1) for decay, (B,H,L,F) for gla and liger.
  // B and L are read from in.x or in.k (decay: either).
  Tensor log_gate(const GateInput& in, DType dtype) const;
  // delta only: β = σ(b_proj x) and log α = −exp(A_log)·softplus(a_proj x + dt_bias) from in.x
  // (B,L,C), each (B,H,L), as `dtype`.
  DeltaGates delta_gates(const GateInput& in, DType dtype) const;
  // group_norm only: y (B,H,L,Dv) -> g_norm(y) over Dv, computed in y's dtype.
  Tensor norm_output(const Tensor& y) const;

  std::shared_ptr<FeatureMap> map;
  Gate gate;
  int64_t heads;
  std::shared_ptr<Linear> gate_down, gate_up;  // gla only
  std::shared_ptr<Linear> a_proj, b_proj;       // delta only
  Tensor A_log, dt_bias;                        // delta only, (H) each
  GateOutput output;
  std::shared_ptr<RMSNorm> g_norm;              // group_norm only, weight (Dv)
};

// RetNet's per-head decays log γ_h = log(1 - 2^(-5-h)), (H) in f64 order h = 0..H-1.
std::vector<double> retnet_log_decays(int64_t heads);
// Liger's gate: logsigmoid(pool(k))/16 with pool the adaptive average pooling of each head's key
// (D values) to F values (torch's AdaptiveAvgPool1d bins: output i averages inputs
// floor(i·D/F) .. ceil((i+1)·D/F)-1; the identity when F = D). k (B,H,L,D) -> (B,H,L,F).
Tensor liger_log_gate(const Tensor& k, int64_t F);
// fla's l2norm of the delta rule's q and k (use_qk_l2norm_in_kernel): x / sqrt(Σ x² + 1e-6) over
// the last dim.
Tensor delta_l2norm(const Tensor& x);

}  // namespace hh::nn
