// The gate on a linear mixer's state as a type (autograd/ops/gated_attention.h): none (the plain
// prefix sum), decay (RetNet's fixed per-head γ_h = 1 - 2^(-5-h)), gla (GLA's data-dependent
// per-key-channel gate log α = logsigmoid(W x)/16, W a low-rank projection of the layer input),
// liger (Liger's gate from the key projection, no new parameters) and delta (the gated delta rule,
// parsed but not built yet). Text becomes a Gate once where it enters (a flag, a JSON key) through
// parse_gate; name() gives the text back.
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
// Fails with "<what> delta: not built yet" for the delta gate (its op is not wired into the
// mixers yet); the others pass.
void check_gate_built(Gate g, const std::string& what);
// A run's label: the mixer's name, then "+<gate>" when gated ("hedgehog+gla").
std::string gated_label(const std::string& mixer_name, Gate g);

// GLA's gate projection: the low-rank rank of W (fla's GLA: gate_low_rank_dim 16) and τ
// (gate_logit_normalizer 16; Liger divides its gate by 16 too).
constexpr int64_t kGlaGateRank = 16;
constexpr double kGateLogitNormalizer = 16.0;

// What a gate reads besides the features: the layer input x (B,L,C) (gla) and the key projection
// k (B,H,L,D) before RoPE (liger).
struct GateInput {
  Tensor x;
  Tensor k;
};

// The feature map of a gated linear mixer: the map as child "map", and for gla the gate
// projection x (B,L,C) -> (B,L,H·F) as children gate_down (C -> 16, no bias) and gate_up (16 ->
// H·F, bias), as fla's GLA (gk_proj). All sit under the attention's "feature_map" child, so they
// are the new weights of a converted model. forward is the inner map's.
class GatedFeatureMap : public FeatureMap {
 public:
  // model_dim: C, the width of x (gla only).
  GatedFeatureMap(std::shared_ptr<FeatureMap> map, Gate gate, int64_t heads, int64_t model_dim, Init init);
  Tensor forward(const Tensor& x, bool is_query, const FeatureContext& ctx) override {
    return map->forward(x, is_query, ctx);
  }
  int64_t feature_dim() const override { return map->feature_dim(); }
  void on_step() override { map->on_step(); }
  // log α for gated_attention_*, as `dtype`: (B,H,L,1) for decay, (B,H,L,F) for gla and liger.
  // B and L are read from in.x or in.k (decay: either).
  Tensor log_gate(const GateInput& in, DType dtype) const;

  std::shared_ptr<FeatureMap> map;
  Gate gate;
  int64_t heads;
  std::shared_ptr<Linear> gate_down, gate_up;  // gla only
};

// RetNet's per-head decays log γ_h = log(1 - 2^(-5-h)), (H) in f64 order h = 0..H-1.
std::vector<double> retnet_log_decays(int64_t heads);
// Liger's gate: logsigmoid(pool(k))/16 with pool the adaptive average pooling of each head's key
// (D values) to F values (torch's AdaptiveAvgPool1d bins: output i averages inputs
// floor(i·D/F) .. ceil((i+1)·D/F)-1; the identity when F = D). k (B,H,L,D) -> (B,H,L,F).
Tensor liger_log_gate(const Tensor& k, int64_t F);

}  // namespace hh::nn
