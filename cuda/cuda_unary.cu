// CUDA unary elementwise kernels, forward and fused backward, on contiguous f32/f64 tensors.
// The math is core/unary_functors.h, shared with the CPU loops.
#include "core/unary_functors.h"
#include "cuda/cuda_common.cuh"

namespace hh {
namespace cuda {
namespace {

template <class F, typename T>
__global__ void unary_kernel(const T* x, T* y, int64_t n, UnaryParams p) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) y[i] = F::fwd(x[i], p);
}

// x or y may be unused by F (kUsesX / kUsesY); they are still valid pointers of n elements.
template <class F, typename T>
__global__ void unary_backward_kernel(const T* x, const T* y, const T* gy, T* gx, int64_t n, UnaryParams p) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const T xv = F::kUsesX ? x[i] : T(0);
    const T yv = F::kUsesY ? y[i] : T(0);
    gx[i] = F::bwd(xv, yv, gy[i], p);
  }
}

template <class F, typename T>
void unary_cuda(const T* x, T* y, int64_t n, const UnaryParams& p, cudaStream_t stream) {
  unary_kernel<F, T><<<blocks_for(n), kBlock, 0, stream>>>(x, y, n, p);
  check_launch("unary");
}

template <class F, typename T>
void unary_backward_cuda(const T* x, const T* y, const T* gy, T* gx, int64_t n, const UnaryParams& p,
                         cudaStream_t stream) {
  unary_backward_kernel<F, T><<<blocks_for(n), kBlock, 0, stream>>>(x, y, gy, gx, n, p);
  check_launch("unary_backward");
}

void check_unary_operand(const char* what, const Tensor& t, const Tensor& like) {
  HH_CHECK(t.is_contiguous() && t.shape() == like.shape() && t.dtype() == like.dtype(), "cuda unary: ", what,
           " must be contiguous ", like.dtype(), " of shape ", like.shape(), ", got ", t.dtype(), " ", t.shape(),
           t.is_contiguous() ? "" : " (non-contiguous)");
}

}  // namespace
}  // namespace cuda

void CudaBackend::unary(UnaryOp op, const Tensor& x, const Tensor& y, const UnaryParams& p) {
  cuda::check_device(*this, "unary", {&x, &y});
  cuda::check_unary_operand("x", x, y);
  cuda::check_unary_operand("y", y, y);
  const int64_t n = x.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(index_);
  dispatch_float(x.dtype(), "cuda unary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_unary(op, [&](auto f) { cuda::unary_cuda<decltype(f), T>(x.data<T>(), y.data<T>(), n, p, stream_); });
  });
}

void CudaBackend::unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy, const Tensor& gx,
                                 const UnaryParams& p) {
  cuda::check_device(*this, "unary_backward", {&x, &y, &gy, &gx});
  cuda::check_unary_operand("x", x, gx);
  cuda::check_unary_operand("y", y, gx);
  cuda::check_unary_operand("gy", gy, gx);
  cuda::check_unary_operand("gx", gx, gx);
  const int64_t n = gx.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(index_);
  dispatch_float(gx.dtype(), "cuda unary_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_unary(op, [&](auto f) {
      cuda::unary_backward_cuda<decltype(f), T>(x.data<T>(), y.data<T>(), gy.data<T>(), gx.data<T>(), n, p, stream_);
    });
  });
}

}  // namespace hh
