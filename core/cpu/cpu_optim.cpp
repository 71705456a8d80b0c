// CPU fused optimizer step: AdamW with decoupled weight decay, following torch.optim.AdamW
// (single-tensor path) operation by operation so results match it to rounding.
#include <cmath>

#include "core/cpu/cpu_backend.h"

namespace hh {

// Per element, with bias corrections bc1 = 1 - b1^t and bc2 = 1 - b2^t:
//   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g²;
//   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
void CpuBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                            const AdamWParams& p) {
  for (const Tensor* t : {&grad, &m, &v}) {
    HH_CHECK(t->shape() == param.shape(), "adamw_step: param has shape ", param.shape(), " but grad/m/v has ",
             t->shape());
    HH_CHECK(t->dtype() == param.dtype(), "adamw_step: param has dtype ", param.dtype(), " but grad/m/v has ",
             t->dtype());
  }
  for (const Tensor* t : {&param, &grad, &m, &v})
    HH_CHECK(t->is_contiguous(), "adamw_step: param, grad, m and v must be contiguous (shape ", t->shape(), ")");
  HH_CHECK(p.step >= 1, "adamw_step: step is 1-based, got ", p.step);
  dispatch_float(param.dtype(), "adamw_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = param.numel();
    T* pp = param.data<T>();
    const T* gp = grad.data<T>();
    T* mp = m.data<T>();
    T* vp = v.data<T>();
    const double bc1 = 1.0 - std::pow(p.beta1, static_cast<double>(p.step));
    const double bc2 = 1.0 - std::pow(p.beta2, static_cast<double>(p.step));
    const T decay = static_cast<T>(1.0 - p.lr * p.weight_decay);
    const T one_b1 = static_cast<T>(1.0 - p.beta1);
    const T b2 = static_cast<T>(p.beta2), one_b2 = static_cast<T>(1.0 - p.beta2);
    const T step_size = static_cast<T>(p.lr / bc1);
    const T bc2_sqrt = static_cast<T>(std::sqrt(bc2));
    const T eps = static_cast<T>(p.eps);
#pragma omp parallel for simd if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T g = gp[i];
      const T mi = mp[i] + one_b1 * (g - mp[i]);  // torch: exp_avg.lerp_(grad, 1 - beta1)
      const T vi = b2 * vp[i] + one_b2 * g * g;
      mp[i] = mi;
      vp[i] = vi;
      pp[i] = pp[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
    }
  });
}

}  // namespace hh
