// CUDA fills of the feature-map slots (core/kernels/feature_maps.h), composed of the backend's
// kernels: [z, -z] per row, then one softmax over rows of F (five passes where the CPU kernel
// makes one; a fused kernel is left for when a GPU can time it).
#include "core/kernels/feature_maps.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_kernel_fill.h"

namespace hh::cuda {
namespace {

// Half h (0 or 1) of the rows of y (N,2F): an (N,F) view with row stride 2F.
Tensor half_of(const Tensor& y, int64_t h) {
  const int64_t n = y.size(0), f = y.size(1) / 2;
  return y.as_strided({n, f}, {2 * f, 1}, y.offset() + h * f);
}
// y (N,2F) contiguous read as (2N,F): rows 2i and 2i+1 are row i's halves.
Tensor as_half_rows(const Tensor& y) {
  return y.as_strided({2 * y.size(0), y.size(1) / 2}, {y.size(1) / 2, 1}, y.offset());
}

void hedgehog_features_cuda(const Tensor& z, const Tensor& y) {
  CudaBackend& b = backend_of(y, "hedgehog_features");
  Tensor u = empty(y.shape(), {y.dtype(), y.device()});    // [z, -z] per row
  Tensor neg = empty(z.shape(), {z.dtype(), z.device()});  // unary writes contiguous outputs only
  b.unary(UnaryOp::neg, z, neg, UnaryParams{});
  b.copy(half_of(u, 0), z);
  b.copy(half_of(u, 1), neg);
  b.softmax(as_half_rows(u), as_half_rows(y), false);
}

void hedgehog_features_backward_cuda(const Tensor& y, const Tensor& gy, const Tensor& gz) {
  CudaBackend& b = backend_of(gz, "hedgehog_features_backward");
  Tensor gu = empty(y.shape(), {y.dtype(), y.device()});
  b.softmax_backward(as_half_rows(y), as_half_rows(gy), as_half_rows(gu), false);
  b.binary(BinaryOp::sub, half_of(gu, 0), half_of(gu, 1), gz);
}

const CudaKernelFill fill_forward(kernels::hedgehog_features, &hedgehog_features_cuda);
const CudaKernelFill fill_backward(kernels::hedgehog_features_backward, &hedgehog_features_backward_cuda);

}  // namespace
}  // namespace hh::cuda
