#include "nn/rope.h"

#include <cmath>
#include <vector>

#include "autograd/ops.h"

namespace hh::nn {

Tensor apply_rope(const Tensor& x, int64_t pos_offset, double theta) {
  HH_CHECK(x.dim() == 4, "rope: expected x (B,H,L,D), got ", x.shape());
  const int64_t L = x.size(2), D = x.size(3), half = D / 2;
  HH_CHECK(D % 2 == 0, "rope: head dim must be even, got ", D);
  std::vector<double> c(static_cast<size_t>(L * half)), s(static_cast<size_t>(L * half));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t j = 0; j < half; ++j) {
      double ang = static_cast<double>(pos_offset + l) * std::pow(theta, -2.0 * static_cast<double>(j) / static_cast<double>(D));
      c[static_cast<size_t>(l * half + j)] = std::cos(ang);
      s[static_cast<size_t>(l * half + j)] = std::sin(ang);
    }
  Tensor cs = from_vector(c, {L, half}, {x.dtype(), x.device()});
  Tensor sn = from_vector(s, {L, half}, {x.dtype(), x.device()});
  return rope(x, cs, sn);  // the fused op (autograd/ops/fused.h)
}

}  // namespace hh::nn
