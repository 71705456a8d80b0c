// CUDA fused AdamW step, operation by operation the CPU's (core/cpu/cpu_optim.cpp, which follows
// torch.optim.AdamW), so both backends round alike up to FMA contraction.
#include <cmath>

#include "core/unary_functors.h"
#include "cuda/cuda_common.cuh"

namespace hh {
namespace cuda {
namespace {

template <typename T>
struct AdamWConsts {
  T decay, one_b1, b2, one_b2, step_size, bc2_sqrt, eps;
};

// p *= 1 - lr*wd;  m = m + (1-b1)(g - m);  v = b2 v + (1-b2) g²;  p -= (lr/bc1) m / (sqrt(v)/sqrt(bc2) + eps)
template <typename T>
__global__ void adamw_kernel(T* param, const T* grad, T* m, T* v, int64_t n, AdamWConsts<T> c) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const T g = grad[i];
    const T mi = m[i] + c.one_b1 * (g - m[i]);
    const T vi = c.b2 * v[i] + c.one_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * c.decay - c.step_size * mi / (umath::sqrt(vi) / c.bc2_sqrt + c.eps);
  }
}

template <typename T>
void adamw_cuda(T* param, const T* grad, T* m, T* v, int64_t n, const AdamWConsts<T>& c, cudaStream_t stream) {
  adamw_kernel<T><<<blocks_for(n), kBlock, 0, stream>>>(param, grad, m, v, n, c);
  check_launch("adamw_step");
}

}  // namespace
}  // namespace cuda

void CudaBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                             const AdamWParams& p) {
  cuda::check_device(*this, "adamw_step", {&param, &grad, &m, &v});
  for (const Tensor* t : {&grad, &m, &v}) {
    HH_CHECK(t->shape() == param.shape(), "adamw_step: param has shape ", param.shape(), " but grad/m/v has ",
             t->shape());
    HH_CHECK(t->dtype() == param.dtype(), "adamw_step: param has dtype ", param.dtype(), " but grad/m/v has ",
             t->dtype());
  }
  for (const Tensor* t : {&param, &grad, &m, &v})
    HH_CHECK(t->is_contiguous(), "adamw_step: param, grad, m and v must be contiguous (shape ", t->shape(), ")");
  HH_CHECK(p.step >= 1, "adamw_step: step is 1-based, got ", p.step);
  const int64_t n = param.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(index_);
  dispatch_float(param.dtype(), "adamw_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const double bc1 = 1.0 - std::pow(p.beta1, static_cast<double>(p.step));
    const double bc2 = 1.0 - std::pow(p.beta2, static_cast<double>(p.step));
    cuda::AdamWConsts<T> c{static_cast<T>(1.0 - p.lr * p.weight_decay),
                           static_cast<T>(1.0 - p.beta1),
                           static_cast<T>(p.beta2),
                           static_cast<T>(1.0 - p.beta2),
                           static_cast<T>(p.lr / bc1),
                           static_cast<T>(std::sqrt(bc2)),
                           static_cast<T>(p.eps)};
    cuda::adamw_cuda<T>(param.data<T>(), grad.data<T>(), m.data<T>(), v.data<T>(), n, c, stream_);
  });
}

}  // namespace hh
