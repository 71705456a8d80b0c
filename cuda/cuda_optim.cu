// CUDA fused AdamW step, operation by operation the CPU's (core/cpu/cpu_optim.cpp, which follows
// torch.optim.AdamW), so both backends round alike up to FMA contraction.
#include <cmath>
#include <vector>

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
__device__ __forceinline__ void adamw_element(T& param, T g, T& m, T& v, T decay, T step_size, const AdamWConsts<T>& c) {
  const T mi = m + c.one_b1 * (g - m);
  const T vi = c.b2 * v + c.one_b2 * g * g;
  m = mi;
  v = vi;
  param = param * decay - step_size * mi / (umath::sqrt(vi) / c.bc2_sqrt + c.eps);
}

template <typename T>
__global__ void adamw_kernel(T* param, const T* grad, T* m, T* v, int64_t n, AdamWConsts<T> c) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    adamw_element(param[i], grad[i], m[i], v[i], c.decay, c.step_size, c);
}

// ---- multi-tensor step (the chunk table of apex's multi_tensor_apply) ----
// Up to kMultiTensors tensors per launch, passed by value in the kernel parameters (4 KB, no
// upload, nothing to free, capture-safe). Every tensor is cut into kMultiChunk-element chunks and
// each block updates one chunk: block b belongs to the tensor i with first_block[i] <= b <
// first_block[i+1]. Each tensor has its own decay (1 - lr·wd) and step size (lr / bc1).
constexpr int kMultiTensors = 36;
constexpr int64_t kMultiChunk = 16384;

template <typename T>
struct AdamWBatch {
  T* param[kMultiTensors];
  const T* grad[kMultiTensors];
  T* m[kMultiTensors];
  T* v[kMultiTensors];
  int64_t n[kMultiTensors];
  T decay[kMultiTensors], step_size[kMultiTensors];
  int64_t first_block[kMultiTensors + 1];
  int count;
  AdamWConsts<T> c;  // the shared betas, eps and bc2 (its decay / step_size are unused)
};
static_assert(sizeof(AdamWBatch<double>) <= 4000, "AdamWBatch must fit the 4 KB kernel parameter space");

template <typename T>
__global__ void adamw_multi_kernel(AdamWBatch<T> b) {
  const int64_t block = blockIdx.x;
  int t = 0;
  while (t + 1 < b.count && b.first_block[t + 1] <= block) ++t;
  const int64_t begin = (block - b.first_block[t]) * kMultiChunk;
  const int64_t end = begin + kMultiChunk < b.n[t] ? begin + kMultiChunk : b.n[t];
  T* p = b.param[t];
  const T* g = b.grad[t];
  T* m = b.m[t];
  T* v = b.v[t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    adamw_element(p[i], g[i], m[i], v[i], b.decay[t], b.step_size[t], b.c);
}

template <typename T>
void adamw_cuda(T* param, const T* grad, T* m, T* v, int64_t n, const AdamWConsts<T>& c, cudaStream_t stream) {
  adamw_kernel<T><<<blocks_for(n), kBlock, 0, stream>>>(param, grad, m, v, n, c);
  check_launch("adamw_step");
}

template <typename T>
void adamw_multi_launch(const AdamWBatch<T>& b, cudaStream_t stream) {
  const int64_t blocks = b.first_block[b.count];
  if (blocks == 0) return;
  adamw_multi_kernel<T><<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(b);
  check_launch("adamw_multi_step");
}

template <typename T>
AdamWConsts<T> adamw_consts(const AdamWParams& p, double lr, double weight_decay) {
  const double bc1 = 1.0 - std::pow(p.beta1, static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(p.beta2, static_cast<double>(p.step));
  return {static_cast<T>(1.0 - lr * weight_decay),
          static_cast<T>(1.0 - p.beta1),
          static_cast<T>(p.beta2),
          static_cast<T>(1.0 - p.beta2),
          static_cast<T>(lr / bc1),
          static_cast<T>(std::sqrt(bc2)),
          static_cast<T>(p.eps)};
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
    const cuda::AdamWConsts<T> c = cuda::adamw_consts<T>(p, p.lr, p.weight_decay);
    cuda::adamw_cuda<T>(param.data<T>(), grad.data<T>(), m.data<T>(), v.data<T>(), n, c, stream_);
  });
}

void CudaBackend::adamw_multi_step(const std::vector<AdamWTensor>& ts, const AdamWParams& p) {
  HH_CHECK(p.step >= 1, "adamw_multi_step: step is 1-based, got ", p.step);
  if (ts.empty()) return;
  const DType dt = ts.front().param.dtype();
  for (const AdamWTensor& t : ts) {
    HH_CHECK(t.param.defined() && t.grad.defined() && t.m.defined() && t.v.defined(),
             "adamw_multi_step: an entry has an undefined param, grad, m or v");
    cuda::check_device(*this, "adamw_multi_step", {&t.param, &t.grad, &t.m, &t.v});
    for (const Tensor* x : {&t.grad, &t.m, &t.v}) {
      HH_CHECK(x->shape() == t.param.shape(), "adamw_multi_step: param has shape ", t.param.shape(),
               " but grad/m/v has ", x->shape());
      HH_CHECK(x->dtype() == dt, "adamw_multi_step: all tensors must have one dtype, got ", dt, " and ", x->dtype());
    }
    HH_CHECK(t.param.dtype() == dt, "adamw_multi_step: all tensors must have one dtype, got ", dt, " and ",
             t.param.dtype());
    for (const Tensor* x : {&t.param, &t.grad, &t.m, &t.v})
      HH_CHECK(x->is_contiguous(), "adamw_multi_step: param, grad, m and v must be contiguous (shape ", x->shape(),
               ")");
  }
  cuda::DeviceGuard guard(index_);
  dispatch_float(dt, "adamw_multi_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::AdamWBatch<T> b{};
    b.c = cuda::adamw_consts<T>(p, p.lr, 0.0);
    for (const AdamWTensor& t : ts) {
      const int64_t n = t.param.numel();
      if (n == 0) continue;
      const cuda::AdamWConsts<T> own = cuda::adamw_consts<T>(p, t.lr, t.weight_decay);
      const int i = b.count++;
      b.param[i] = t.param.data<T>();
      b.grad[i] = t.grad.data<T>();
      b.m[i] = t.m.data<T>();
      b.v[i] = t.v.data<T>();
      b.n[i] = n;
      b.decay[i] = own.decay;
      b.step_size[i] = own.step_size;
      b.first_block[i + 1] = b.first_block[i] + (n + cuda::kMultiChunk - 1) / cuda::kMultiChunk;
      if (b.count == cuda::kMultiTensors) {  // a full table: launch it and start the next
        cuda::adamw_multi_launch(b, stream_);
        b.count = 0;
      }
    }
    if (b.count > 0) cuda::adamw_multi_launch(b, stream_);
  });
}

}  // namespace hh
