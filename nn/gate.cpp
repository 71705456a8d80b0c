// Gates of linear mixers: parsing and naming, and the log gates the gated attention op takes
// (RetNet's decays, GLA's low-rank projection, Liger's pooled key), and the delta rule's β and
// log α (Gated DeltaNet's a_proj, b_proj, A_log, dt_bias).
#include "nn/gate.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "core/error.h"

namespace hh::nn {

Gate parse_gate(const std::string& text, const std::string& what) {
  if (text == "none") return Gate::none;
  if (text == "decay") return Gate::decay;
  if (text == "gla") return Gate::gla;
  if (text == "liger") return Gate::liger;
  if (text == "delta") return Gate::delta;
  fail(str(what, ": unknown gate '", text, "' (expected none, decay, gla, liger, delta)"));
}

std::string name(Gate g) {
  switch (g) {
    case Gate::none: return "none";
    case Gate::decay: return "decay";
    case Gate::gla: return "gla";
    case Gate::liger: return "liger";
    case Gate::delta: return "delta";
  }
  return "none";
}

GateOutput parse_gate_output(const std::string& text, const std::string& what) {
  if (text == "normalizer") return GateOutput::normalizer;
  if (text == "groupnorm") return GateOutput::group_norm;
  fail(str(what, ": unknown gate output '", text, "' (expected normalizer, groupnorm)"));
}

std::vector<Gate> parse_gate_list(const std::vector<std::string>& items, const std::string& what) {
  std::vector<Gate> gates;
  for (const std::string& item : items) {
    const Gate g = parse_gate(item, what);
    HH_CHECK(std::find(gates.begin(), gates.end(), g) == gates.end(), what, ": '", item, "' is listed twice");
    gates.push_back(g);
  }
  HH_CHECK(!gates.empty(), what, ": empty list");
  return gates;
}

GateOutput parse_gate_output(const std::string& text, const std::vector<Gate>& gates, const std::string& what) {
  const GateOutput o = parse_gate_output(text, what);
  const bool gated = std::any_of(gates.begin(), gates.end(), [](Gate g) { return g != Gate::none; });
  HH_CHECK(o == GateOutput::normalizer || gated, what, ": '", text,
           "' needs a gate (--gate decay, gla, liger or delta); an ungated linear mixer keeps the normalizer");
  return o;
}

std::string name(GateOutput o) { return o == GateOutput::group_norm ? "groupnorm" : "normalizer"; }

std::string gated_label(const std::string& mixer_name, Gate g) {
  return g == Gate::none ? mixer_name : mixer_name + "+" + name(g);
}

std::vector<double> retnet_log_decays(int64_t heads) {
  std::vector<double> d(static_cast<size_t>(heads));
  for (int64_t h = 0; h < heads; ++h) d[static_cast<size_t>(h)] = std::log1p(-std::pow(2.0, -5.0 - double(h)));
  return d;
}

Tensor liger_log_gate(const Tensor& k, int64_t F) {
  HH_CHECK(k.dim() == 4 && F > 0, "liger gate: expected k (B,H,L,D) and F > 0, got ", k.shape(), " and ", F);
  const int64_t D = k.size(3);
  // Liger (Lan et al. 2025, OpenSparseLLMs/Linearization, LigerGatedLinearAttention): g =
  // AdaptiveAvgPool1d(k_proj(x)), log α = logsigmoid(g) / 16 (gate_logit_normalizer); its pool's
  // output size is the key width, so g is the key projection itself, taken before RoPE. Here the
  // pool maps each head's D values to the F feature channels (the identity when F = D).
  std::vector<double> pool(static_cast<size_t>(D * F), 0.0);  // (D,F): column i averages its bin
  for (int64_t i = 0; i < F; ++i) {
    const int64_t lo = (i * D) / F, hi = ((i + 1) * D + F - 1) / F;
    for (int64_t d = lo; d < hi; ++d) pool[static_cast<size_t>(d * F + i)] = 1.0 / double(hi - lo);
  }
  Tensor g = matmul(k, from_vector(pool, {D, F}, {k.dtype(), k.device()}));  // (B,H,L,F)
  return div(neg(softplus(neg(g))), kGateLogitNormalizer);                   // logsigmoid(g) / 16
}

GatedFeatureMap::GatedFeatureMap(std::shared_ptr<FeatureMap> m, Gate g, int64_t h, int64_t model_dim, Init init,
                                 GateOutput out, int64_t value_dim)
    : FeatureMap(m->name()), map(std::move(m)), gate(g), heads(h), output(out) {
  HH_CHECK(heads > 0, "feature map '", name(), "': heads must be positive, got ", heads);
  HH_CHECK(gate != Gate::none, "feature map '", name(), "': a gated map needs a gate");
  register_module("map", map);
  if (gate == Gate::gla) {
    HH_CHECK(model_dim > 0, "feature map '", name(), "': the gla gate needs the model width, got ", model_dim);
    gate_down = register_module("gate_down", std::make_shared<Linear>(model_dim, kGlaGateRank, false, init));
    gate_up = register_module("gate_up",
                              std::make_shared<Linear>(kGlaGateRank, heads * map->feature_dim(), true, init));
  }
  if (gate == Gate::delta) {
    HH_CHECK(model_dim > 0, "feature map '", name(), "': the delta gate needs the model width, got ", model_dim);
    a_proj = register_module("a_proj", std::make_shared<Linear>(model_dim, heads, false, init));
    b_proj = register_module("b_proj", std::make_shared<Linear>(model_dim, heads, false, init));
    // fla's GatedDeltaNet: A ~ U(0,16), A_log = log A; dt = exp(U(0,1)·(log 0.1 − log 0.001) +
    // log 0.001) clamped to >= 1e-4, dt_bias = softplus⁻¹(dt) = dt + log(−expm1(−dt)).
    const std::vector<double> ua = to_vector<double>(rand({heads}, init.gen, {DType::f64})),
                              ud = to_vector<double>(rand({heads}, init.gen, {DType::f64}));
    std::vector<double> a_log(static_cast<size_t>(heads)), dt_b(static_cast<size_t>(heads));
    for (size_t h = 0; h < a_log.size(); ++h) {
      a_log[h] = std::log(16.0 * ua[h]);  // rand is U(0,1]: A > 0
      const double dt = std::max(std::exp(ud[h] * (std::log(0.1) - std::log(0.001)) + std::log(0.001)), 1e-4);
      dt_b[h] = dt + std::log(-std::expm1(-dt));
    }
    register_parameter("A_log", &A_log, from_vector(a_log, {heads}, {init.dtype, init.device}));
    register_parameter("dt_bias", &dt_bias, from_vector(dt_b, {heads}, {init.dtype, init.device}));
  }
  if (output == GateOutput::group_norm) {
    HH_CHECK(value_dim > 0, "feature map '", name(), "': the group norm needs the value width, got ", value_dim);
    g_norm = register_module("g_norm", std::make_shared<RMSNorm>(value_dim, kGroupNormEps, init));
  }
}

Tensor GatedFeatureMap::norm_output(const Tensor& y) const {
  HH_CHECK(g_norm != nullptr, "feature map '", name(), "': no group norm (gate output '", hh::nn::name(output), "')");
  HH_CHECK(y.dim() == 4 && y.size(3) == g_norm->weight.size(0), "group norm: expected y (B,H,L,",
           g_norm->weight.size(0), "), got ", y.shape());
  return rms_norm(y, g_norm->weight.to(y.dtype()), g_norm->eps);
}

DeltaGates GatedFeatureMap::delta_gates(const GateInput& in, DType dtype) const {
  HH_CHECK(gate == Gate::delta, "feature map '", name(), "': delta gates asked of gate '", hh::nn::name(gate), "'");
  HH_CHECK(in.x.defined() && in.x.dim() == 3, "gate delta: needs the layer input x (B,L,C), got ",
           in.x.defined() ? in.x.shape() : Shape{});
  auto per_head = [](const Tensor& t) { return transpose(t, 1, 2); };  // (B,L,H) -> (B,H,L)
  Tensor beta = sigmoid(per_head(b_proj->forward(in.x)));
  // log α = −exp(A_log)·softplus(a x + dt_bias) <= 0, in f32 or f64 whatever x's dtype (fla: .float()).
  Tensor a = per_head(a_proj->forward(in.x)).to(dtype);
  Tensor bias = reshape(dt_bias.to(dtype), {1, heads, 1}), A = reshape(exp(A_log.to(dtype)), {1, heads, 1});
  return {beta.to(dtype), neg(mul(A, softplus(add(a, bias))))};
}

Tensor delta_l2norm(const Tensor& x) { return mul(x, rsqrt(add(sum(mul(x, x), {-1}, true), 1e-6))); }

Tensor GatedFeatureMap::log_gate(const GateInput& in, DType dtype) const {
  const int64_t F = map->feature_dim();
  if (gate == Gate::liger) {
    HH_CHECK(in.k.defined() && in.k.dim() == 4 && in.k.size(1) == heads, "gate liger: needs the key projection k ",
             "(B,", heads, ",L,D), got ", in.k.defined() ? in.k.shape() : Shape{});
    return liger_log_gate(in.k, F).to(dtype);
  }
  if (gate == Gate::gla) {
    HH_CHECK(in.x.defined() && in.x.dim() == 3, "gate gla: needs the layer input x (B,L,C), got ",
             in.x.defined() ? in.x.shape() : Shape{});
    const int64_t B = in.x.size(0), L = in.x.size(1);
    Tensor z = transpose(reshape(gate_up->forward(gate_down->forward(in.x)), {B, L, heads, F}), 1, 2);  // (B,H,L,F)
    return div(neg(softplus(neg(z))), kGateLogitNormalizer).to(dtype);  // logsigmoid(z) / τ
  }
  // decay: fixed, no parameters.
  const Tensor& ref = in.x.defined() ? in.x : in.k;
  HH_CHECK(ref.defined(), "gate decay: needs x or k for the batch and length");
  const int64_t B = ref.size(0), L = in.x.defined() ? in.x.size(1) : in.k.size(2);
  Tensor d = from_vector(retnet_log_decays(heads), {1, heads, 1, 1}, {dtype, ref.device()});
  return expand(d, {B, heads, L, 1});
}

}  // namespace hh::nn
