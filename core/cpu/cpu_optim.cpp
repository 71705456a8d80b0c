// CPU fused optimizer step: AdamW with decoupled weight decay, following torch.optim.AdamW
// (single-tensor path) operation by operation so results match it to rounding.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu/cpu_backend.h"

namespace hh {
namespace {

template <typename T>
struct AdamWConsts {
  T decay, one_b1, b2, one_b2, step_size, bc2_sqrt, eps;
};

// The per-tensor constants, with bias corrections bc1 = 1 - b1^t and bc2 = 1 - b2^t.
template <typename T>
AdamWConsts<T> adamw_consts(const AdamWParams& p, double lr, double weight_decay) {
  const double bc1 = 1.0 - std::pow(p.beta1, static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(p.beta2, static_cast<double>(p.step));
  return {static_cast<T>(1.0 - lr * weight_decay), static_cast<T>(1.0 - p.beta1), static_cast<T>(p.beta2),
          static_cast<T>(1.0 - p.beta2),           static_cast<T>(lr / bc1),      static_cast<T>(std::sqrt(bc2)),
          static_cast<T>(p.eps)};
}

// Elements [0, n) of one tensor, per element:
//   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g²;
//   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
// Both the single- and the multi-tensor step run this loop, so they round alike.
template <typename T>
void adamw_range(T* pp, const T* gp, T* mp, T* vp, int64_t n, const AdamWConsts<T>& c) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const T g = gp[i];
    const T mi = mp[i] + c.one_b1 * (g - mp[i]);  // torch: exp_avg.lerp_(grad, 1 - beta1)
    const T vi = c.b2 * vp[i] + c.one_b2 * g * g;
    mp[i] = mi;
    vp[i] = vi;
    pp[i] = pp[i] * c.decay - c.step_size * mi / (std::sqrt(vi) / c.bc2_sqrt + c.eps);
  }
}

// Elements per unit of parallel work (a tensor's last chunk may be shorter).
constexpr int64_t kChunk = 8192;

void check_adamw_args(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const char* op) {
  for (const Tensor* t : {&grad, &m, &v}) {
    HH_CHECK(t->shape() == param.shape(), op, ": param has shape ", param.shape(), " but grad/m/v has ", t->shape());
    HH_CHECK(t->dtype() == param.dtype(), op, ": param has dtype ", param.dtype(), " but grad/m/v has ", t->dtype());
  }
  for (const Tensor* t : {&param, &grad, &m, &v})
    HH_CHECK(t->is_contiguous(), op, ": param, grad, m and v must be contiguous (shape ", t->shape(), ")");
}

}  // namespace

void CpuBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                            const AdamWParams& p) {
  check_adamw_args(param, grad, m, v, "adamw_step");
  HH_CHECK(p.step >= 1, "adamw_step: step is 1-based, got ", p.step);
  dispatch_float(param.dtype(), "adamw_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = param.numel();
    T* pp = param.data<T>();
    const T* gp = grad.data<T>();
    T* mp = m.data<T>();
    T* vp = v.data<T>();
    const AdamWConsts<T> c = adamw_consts<T>(p, p.lr, p.weight_decay);
#pragma omp parallel for if (n > kParallelGrain)
    for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
      const int64_t len = std::min(kChunk, n - i0);
      adamw_range(pp + i0, gp + i0, mp + i0, vp + i0, len, c);
    }
  });
}

void CpuBackend::adamw_multi_step(const std::vector<AdamWTensor>& ts, const AdamWParams& p) {
  HH_CHECK(p.step >= 1, "adamw_multi_step: step is 1-based, got ", p.step);
  if (ts.empty()) return;
  const DType dt = ts.front().param.dtype();
  for (const AdamWTensor& t : ts) {
    HH_CHECK(t.param.defined() && t.grad.defined() && t.m.defined() && t.v.defined(),
             "adamw_multi_step: an entry has an undefined param, grad, m or v");
    check_adamw_args(t.param, t.grad, t.m, t.v, "adamw_multi_step");
    HH_CHECK(t.param.dtype() == dt, "adamw_multi_step: all tensors must have one dtype, got ", dt, " and ",
             t.param.dtype());
    HH_CHECK(t.param.device().is_cpu(), "adamw_multi_step: the CPU backend got a tensor on ", t.param.device());
  }
  dispatch_float(dt, "adamw_multi_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // The chunk table: every tensor cut into kChunk-element pieces, all tensors in one list, so
    // one parallel loop shares the work of small and large tensors alike.
    struct Chunk {
      size_t tensor;
      int64_t begin, len;
    };
    std::vector<Chunk> chunks;
    std::vector<AdamWConsts<T>> consts;
    int64_t total = 0;
    for (size_t i = 0; i < ts.size(); ++i) {
      consts.push_back(adamw_consts<T>(p, ts[i].lr, ts[i].weight_decay));
      const int64_t n = ts[i].param.numel();
      for (int64_t b = 0; b < n; b += kChunk) chunks.push_back({i, b, std::min(kChunk, n - b)});
      total += n;
    }
    const int64_t nchunks = static_cast<int64_t>(chunks.size());
#pragma omp parallel for if (total > kParallelGrain)
    for (int64_t ci = 0; ci < nchunks; ++ci) {
      const Chunk& c = chunks[static_cast<size_t>(ci)];
      const AdamWTensor& t = ts[c.tensor];
      adamw_range(t.param.data<T>() + c.begin, t.grad.data<T>() + c.begin, t.m.data<T>() + c.begin,
                  t.v.data<T>() + c.begin, c.len, consts[c.tensor]);
    }
  });
}

}  // namespace hh
