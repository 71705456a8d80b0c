#include "nn/rope.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/ops.h"
#include "core/error.h"

namespace hh::nn {

namespace {
constexpr double kPi = 3.14159265358979323846;

// x rotated by the cos and sin tables c, s (L, D/2, row-major), taken to x's dtype and device.
Tensor rotate(const Tensor& x, const std::vector<double>& c, const std::vector<double>& s) {
  const int64_t L = x.size(2), half = x.size(3) / 2;
  Tensor cs = from_vector(c, {L, half}, {x.dtype(), x.device()});
  Tensor sn = from_vector(s, {L, half}, {x.dtype(), x.device()});
  return rope(x, cs, sn);  // the fused op (autograd/ops/fused.h)
}

void check_x(const Tensor& x) {
  HH_CHECK(x.dim() == 4, "rope: expected x (B,H,L,D), got ", x.shape());
  HH_CHECK(x.size(3) % 2 == 0, "rope: head dim must be even, got ", x.size(3));
}

// theta^(2j/D) for j < D/2, as transformers' `base ** (torch.arange(0, dim, 2).float() / dim)` (f32).
std::vector<float> powers(float base, int64_t dim) {
  std::vector<float> p(static_cast<size_t>(dim / 2));
  for (int64_t j = 0; j < dim / 2; ++j)
    p[static_cast<size_t>(j)] = std::pow(base, static_cast<float>(2 * j) / static_cast<float>(dim));
  return p;
}
}  // namespace

Tensor apply_rope(const Tensor& x, int64_t pos_offset, double theta) {
  check_x(x);
  const int64_t L = x.size(2), D = x.size(3), half = D / 2;
  std::vector<double> c(static_cast<size_t>(L * half)), s(static_cast<size_t>(L * half));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t j = 0; j < half; ++j) {
      double ang = static_cast<double>(pos_offset + l) * std::pow(theta, -2.0 * static_cast<double>(j) / static_cast<double>(D));
      c[static_cast<size_t>(l * half + j)] = std::cos(ang);
      s[static_cast<size_t>(l * half + j)] = std::sin(ang);
    }
  return rotate(x, c, s);
}

const char* rope_type_name(RopeType t) {
  switch (t) {
    case RopeType::plain: return "default";
    case RopeType::linear: return "linear";
    case RopeType::dynamic: return "dynamic";
    case RopeType::yarn: return "yarn";
    case RopeType::llama3: return "llama3";
  }
  return "default";
}

// Each branch follows its transformers function (_compute_*_parameters) step by step, in f32 as
// the tensors there are (a Python float meeting an f32 tensor is rounded to f32 first).
std::vector<float> rope_inv_freq(const RopeScaling& r, int64_t head_dim, int64_t seq_len) {
  HH_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head dim must be positive and even, got ", head_dim);
  const auto f = [](double v) { return static_cast<float>(v); };
  float base = f(r.theta);
  // dynamic (_compute_dynamic_ntk_parameters): past max_positions the base grows with the length,
  // base · (factor · seq_len / max_positions - (factor - 1))^(D / (D - 2)).
  if (r.type == RopeType::dynamic && seq_len > r.max_positions) {
    const float grown = f(r.factor) * f(static_cast<double>(seq_len)) / f(static_cast<double>(r.max_positions)) -
                        f(r.factor - 1.0);
    base = f(r.theta) * std::pow(grown, f(static_cast<double>(head_dim) / static_cast<double>(head_dim - 2)));
  }
  const std::vector<float> p = powers(base, head_dim);
  std::vector<float> inv(p.size());
  for (size_t j = 0; j < p.size(); ++j) inv[j] = 1.0f / p[j];
  switch (r.type) {
    case RopeType::plain:
    case RopeType::dynamic: break;
    case RopeType::linear:  // positions / factor, i.e. every frequency / factor
      for (float& v : inv) v /= f(r.factor);
      break;
    case RopeType::llama3: {
      // Wavelengths shorter than original / high_freq_factor keep their frequency, longer than
      // original / low_freq_factor are divided by factor, and the band between is interpolated.
      const auto old = static_cast<double>(r.original_max_positions);
      const float low_wavelen = f(old / r.low_freq_factor), high_wavelen = f(old / r.high_freq_factor);
      for (float& v : inv) {
        const float wavelen = (1.0f / v) * f(2 * kPi);
        const float scaled = wavelen > low_wavelen ? v / f(r.factor) : v;
        const float smooth = ((1.0f / wavelen) * f(old) - f(r.low_freq_factor)) / f(r.high_freq_factor - r.low_freq_factor);
        const float smoothed = (1.0f - smooth) * scaled / f(r.factor) + smooth * scaled;
        v = !(wavelen < high_wavelen) && !(wavelen > low_wavelen) ? smoothed : scaled;
      }
      break;
    }
    case RopeType::yarn: {
      // Dimensions that turn more than beta_fast times over the original context keep their
      // frequency (extrapolation), fewer than beta_slow times are divided by factor
      // (interpolation), with a linear ramp between (the correction range, in dimension units).
      const double D = static_cast<double>(head_dim), orig = static_cast<double>(r.original_max_positions);
      const auto correction_dim = [&](double rotations) {
        return D * std::log(orig / (rotations * 2 * kPi)) / (2 * std::log(r.theta));
      };
      double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
      if (r.truncate) low = std::floor(low), high = std::ceil(high);
      low = std::max(low, 0.0);
      high = std::min(high, D - 1);
      if (low == high) high += 0.001;  // as transformers: no zero-width ramp
      for (size_t j = 0; j < inv.size(); ++j) {
        const float ramp = std::clamp((static_cast<float>(j) - f(low)) / f(high - low), 0.0f, 1.0f);
        const float extrapolate = 1.0f - ramp;
        const float interpolated = 1.0f / (f(r.factor) * p[j]);
        inv[j] = interpolated * (1.0f - extrapolate) + inv[j] * extrapolate;
      }
      break;
    }
  }
  return inv;
}

Tensor apply_rope(const Tensor& x, int64_t pos_offset, const RopeScaling& r) {
  check_x(x);
  // An f64 model keeps the default rotation in f64 angles: the f64 gradient goldens compute it so
  // (tools/make_grad_goldens.py, exact_f64), and f32 angles would bound an f64 model at 1e-10.
  if (x.dtype() == DType::f64 && r.type == RopeType::plain && r.attention_factor == 1.0)
    return apply_rope(x, pos_offset, r.theta);
  const int64_t L = x.size(2), half = x.size(3) / 2;
  const std::vector<float> inv = rope_inv_freq(r, x.size(3), pos_offset + L);
  const auto scale = static_cast<float>(r.attention_factor);
  std::vector<double> c(static_cast<size_t>(L * half)), s(static_cast<size_t>(L * half));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t j = 0; j < half; ++j) {
      // position · θ_j rounded to f32 (transformers' freqs), then cos/sin of exactly that angle.
      const float ang = static_cast<float>(pos_offset + l) * inv[static_cast<size_t>(j)];
      const auto at = static_cast<size_t>(l * half + j);
      c[at] = static_cast<double>(static_cast<float>(std::cos(static_cast<double>(ang))) * scale);
      s[at] = static_cast<double>(static_cast<float>(std::sin(static_cast<double>(ang))) * scale);
    }
  return rotate(x, c, s);
}

}  // namespace hh::nn
