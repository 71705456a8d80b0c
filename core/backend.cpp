#include "core/backend.h"

#include "core/cpu/cpu_backend.h"
#include "core/tensor.h"

namespace hh {

namespace {
// Half h (0 or 1) of the rows of y (N,2F): an (N,F) view with row stride 2F.
Tensor half_of(const Tensor& y, int64_t h) {
  const int64_t n = y.size(0), f = y.size(1) / 2;
  return y.as_strided({n, f}, {2 * f, 1}, y.offset() + h * f);
}
// y (N,2F) contiguous read as (2N,F): rows 2i and 2i+1 are row i's halves.
Tensor as_half_rows(const Tensor& y) { return y.as_strided({2 * y.size(0), y.size(1) / 2}, {y.size(1) / 2, 1}, y.offset()); }
}  // namespace

void Backend::hedgehog_features(const Tensor& z, const Tensor& y) {
  Tensor u = empty(y.shape(), {y.dtype(), y.device()});  // [z, -z] per row
  Tensor neg = empty(z.shape(), {z.dtype(), z.device()});  // unary writes contiguous outputs only
  unary(UnaryOp::neg, z, neg, UnaryParams{});
  copy(half_of(u, 0), z);
  copy(half_of(u, 1), neg);
  softmax(as_half_rows(u), as_half_rows(y), false);
}

void Backend::hedgehog_features_backward(const Tensor& y, const Tensor& gy, const Tensor& gz) {
  Tensor gu = empty(y.shape(), {y.dtype(), y.device()});
  softmax_backward(as_half_rows(y), as_half_rows(gy), as_half_rows(gu), false);
  binary(BinaryOp::sub, half_of(gu, 0), half_of(gu, 1), gz);
}

Backend& backend_for(Device d) {
  static CpuBackend cpu;
  if (d.is_cpu()) return cpu;
  return cuda_backend(d.index);
}

}  // namespace hh
