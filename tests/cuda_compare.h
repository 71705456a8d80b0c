// Shared by the CUDA test files: inputs made on the CPU, and the elementwise comparison of a CUDA
// result with the CPU one.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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

}  // namespace hh::test
