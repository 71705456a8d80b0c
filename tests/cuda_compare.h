// Shared by the CUDA test files: inputs made on the CPU, and the elementwise comparison of a CUDA
// result with the CPU one.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "autograd/ops.h"
#include "core/backend.h"
#include "tests/op_table.h"

namespace hh::test {

inline Backend& cpu() { return backend_for(Device::cpu()); }
inline Backend& gpu() { return backend_for(test_device()); }
inline Tensor place(const Tensor& t, Device d) { return d.is_cpu() ? t : t.to(d).detach(); }
inline Tensor like_on(const Shape& s, DType t, Device d) { return empty(s, {t, d}); }

inline Tensor input(const Shape& s, double lo, double hi, DType t, uint64_t seed) {
  Generator g(seed);
  return uniform(s, lo, hi, g, {DType::f64}).to(t);
}

// |got - want| <= rtol |want| + atol·scale elementwise, scale = max(max|want|, floor): the
// absolute part follows the tensor's magnitude (or `floor`, the magnitude of the terms it sums,
// where the result is mostly cancellation), so small entries next to large ones are judged
// fairly. NaN must meet NaN; infinities must match exactly.
inline void expect_close(const Tensor& got, const Tensor& want, double rtol, double atol, const std::string& what,
                         double floor = 0) {
  REQUIRE_MESSAGE(got.shape() == want.shape(), what, ": shape ", shape_str(got.shape()), " vs ",
                  shape_str(want.shape()));
  CHECK(got.device() == test_device());
  std::vector<double> g = to_vector<double>(got.to(Device::cpu())), w = to_vector<double>(want);
  double scale = floor;
  for (double x : w)
    if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok;
    if (std::isnan(w[i]) || std::isnan(g[i]))
      ok = std::isnan(w[i]) && std::isnan(g[i]);
    else if (std::isinf(w[i]))
      ok = g[i] == w[i];
    else
      ok = std::fabs(g[i] - w[i]) <= rtol * std::fabs(w[i]) + atol * scale;
    if (!ok && bad++ == 0) first = static_cast<int64_t>(i);
  }
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", g.size(), " elements differ; first at ", first, ": cuda ",
                first >= 0 ? g[static_cast<size_t>(first)] : 0.0, " cpu ",
                first >= 0 ? w[static_cast<size_t>(first)] : 0.0);
}

// scaled_dot_product_attention forward and backward on the device against the CPU, through
// autograd, for q, k, v of `shape` (B,H,L,D), full and causal.
inline void check_sdpa_autograd(const Shape& shape) {
  const Device d = test_device();
  for (bool causal : {false, true}) {
    Generator g(11);
    std::vector<Tensor> base = {uniform(shape, -1, 1, g), uniform(shape, -1, 1, g), uniform(shape, -1, 1, g)};
    Tensor w = uniform(shape, -1, 1, g);
    std::vector<Tensor> xc, xd;
    for (const Tensor& x : base) {
      xc.push_back(x.clone().requires_grad_(true));
      xd.push_back(x.to(d).detach().requires_grad_(true));
    }
    Tensor yc = scaled_dot_product_attention(xc[0], xc[1], xc[2], causal);
    Tensor yd = scaled_dot_product_attention(xd[0], xd[1], xd[2], causal);
    const std::string what = std::string("sdpa ") + (causal ? "causal" : "full");
    expect_close(yd, yc, 1e-4, 1e-5, what);
    sum(mul(yc, w)).backward();
    sum(mul(yd, w.to(d))).backward();
    for (size_t i = 0; i < 3; ++i) expect_close(xd[i].grad(), xc[i].grad(), 1e-4, 1e-5, what + " grad " + std::to_string(i));
  }
}

}  // namespace hh::test
