// CUDA kernels for the sliding-window softmax part of the hybrid attention
// (Backend::hybrid_window_attention, autograd/ops/hybrid_attention.h): one thread per query row,
// the window's W scores recomputed per pass (max, then exp); the backward accumulates the keys'
// and values' gradients with atomics. Contiguous f32/f64. Simple rather than fast: a row's work
// is O(W·(D+Dv)).
#include <cmath>

#include "cuda/cuda_common.cuh"

namespace hh {
namespace cuda {
namespace {

constexpr int kRowThreads = 128;

struct WindowArgs {
  const bool* mask;  // (B,L) or null: every key real
  int64_t heads, G, L, W;
  int D, Dv;
};

// Whether key j of group g is real.
__device__ __forceinline__ bool real_key(const WindowArgs& a, int64_t g, int64_t j) {
  return !a.mask || a.mask[(g / a.heads) * a.L + j];
}

template <typename T>
__device__ __forceinline__ T score(const T* qi, const T* kj, int D, T scale) {
  T acc = 0;
  for (int d = 0; d < D; ++d) acc += qi[d] * kj[d];
  return acc * scale;
}

template <typename T>
__global__ void window_forward_kernel(WindowArgs a, const T* q, const T* k, const T* v, T scale, T* num, T* den,
                                      T* m) {
  for (int64_t row = global_thread(); row < a.G * a.L; row += grid_threads()) {
    const int64_t g = row / a.L, i = row % a.L, j0 = i - a.W + 1 > 0 ? i - a.W + 1 : 0;
    const T* qi = q + row * a.D;
    T mx = 0;
    bool any = false;
    for (int64_t j = j0; j <= i; ++j) {
      if (!real_key(a, g, j)) continue;
      const T s = score(qi, k + (g * a.L + j) * a.D, a.D, scale);
      mx = any && mx > s ? mx : s;
      any = true;
    }
    T* out = num + row * a.Dv;
    for (int d = 0; d < a.Dv; ++d) out[d] = 0;
    T sum = 0;
    for (int64_t j = j0; any && j <= i; ++j) {
      if (!real_key(a, g, j)) continue;
      const T e = exp(score(qi, k + (g * a.L + j) * a.D, a.D, scale) - mx);
      sum += e;
      const T* vj = v + (g * a.L + j) * a.Dv;
      for (int d = 0; d < a.Dv; ++d) out[d] += e * vj[d];
    }
    den[row] = sum;
    m[row] = any ? mx : T(0);
  }
}

// dS_ij = e_ij (gnum_i·v_j + gden_i) - [s_ij == m_i] Σ_j' e_ij' (...) / ties (the max's share, as
// amax). gq written per row; gk, gv (zeroed first) accumulated with atomics.
template <typename T>
__global__ void window_backward_kernel(WindowArgs a, const T* q, const T* k, const T* v, const T* m, const T* gnum,
                                       const T* gden, T scale, T* gq, T* gk, T* gv) {
  for (int64_t row = global_thread(); row < a.G * a.L; row += grid_threads()) {
    const int64_t g = row / a.L, i = row % a.L, j0 = i - a.W + 1 > 0 ? i - a.W + 1 : 0;
    const T *qi = q + row * a.D, *gn = gnum + row * a.Dv;
    const T mi = m[row], gd = gden[row];
    T tot = 0;
    int ties = 0;
    for (int64_t j = j0; j <= i; ++j) {
      if (!real_key(a, g, j)) continue;
      const T s = score(qi, k + (g * a.L + j) * a.D, a.D, scale);
      const T* vj = v + (g * a.L + j) * a.Dv;
      T gv_dot = 0;
      for (int d = 0; d < a.Dv; ++d) gv_dot += gn[d] * vj[d];
      tot += exp(s - mi) * (gv_dot + gd);
      ties += s == mi;
    }
    T* gqi = gq + row * a.D;
    for (int d = 0; d < a.D; ++d) gqi[d] = 0;
    if (ties == 0) continue;  // no real key in the window
    const T share = tot / static_cast<T>(ties);
    for (int64_t j = j0; j <= i; ++j) {
      if (!real_key(a, g, j)) continue;
      const T *kj = k + (g * a.L + j) * a.D, *vj = v + (g * a.L + j) * a.Dv;
      const T s = score(qi, kj, a.D, scale), e = exp(s - mi);
      T gv_dot = 0;
      for (int d = 0; d < a.Dv; ++d) gv_dot += gn[d] * vj[d];
      const T ds = (e * (gv_dot + gd) - (s == mi ? share : T(0))) * scale;
      T* gkj = gk + (g * a.L + j) * a.D;
      T* gvj = gv + (g * a.L + j) * a.Dv;
      for (int d = 0; d < a.D; ++d) {
        gqi[d] += ds * kj[d];
        atomicAdd(gkj + d, ds * qi[d]);
      }
      for (int d = 0; d < a.Dv; ++d) atomicAdd(gvj + d, e * gn[d]);
    }
  }
}

WindowArgs window_args(const CudaBackend& b, const char* op, const Tensor& q, const Tensor& v,
                       const Tensor& key_mask, int64_t heads, int64_t window) {
  HH_CHECK(q.dim() == 3 && v.dim() == 3, op, ": expected q (G,L,D), v (G,L,Dv), got ", q.shape(), ", ", v.shape());
  HH_CHECK(heads > 0 && q.size(0) % heads == 0, op, ": heads ", heads, " do not divide G = ", q.size(0));
  HH_CHECK(window >= 1, op, ": window must be >= 1, got ", window);
  HH_CHECK(q.size(2) < (1 << 30) && v.size(2) < (1 << 30), op, ": head dims too large: ", q.shape(), ", ", v.shape());
  if (key_mask.defined()) {
    HH_CHECK(key_mask.device() == b.device() && key_mask.is_contiguous() && key_mask.dtype() == DType::boolean &&
                 key_mask.numel() == q.size(0) / heads * q.size(1),
             op, ": expected a contiguous (B,L) bool key mask on ", b.device(), ", got ", key_mask.shape(), " ",
             key_mask.dtype());
  }
  return {key_mask.defined() ? key_mask.data<bool>() : nullptr, heads, q.size(0), q.size(1), window,
          static_cast<int>(q.size(2)), static_cast<int>(v.size(2))};
}

}  // namespace
}  // namespace cuda

void CudaBackend::hybrid_window_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                          int64_t heads, int64_t window, double scale, const Tensor& num,
                                          const Tensor& den, const Tensor& m) {
  const char* op = "hybrid_window_attention";
  cuda::check_device(*this, op, {&q, &k, &v, &num, &den, &m});
  const cuda::WindowArgs a = cuda::window_args(*this, op, q, v, key_mask, heads, window);
  const int64_t rows = a.G * a.L;
  cuda::check_operands(op, q, {{&q, rows * a.D}, {&k, rows * a.D}, {&v, rows * a.Dv}, {&num, rows * a.Dv},
                               {&den, rows}, {&m, rows}});
  if (rows == 0) return;
  cuda::DeviceGuard guard(index_);
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::window_forward_kernel<T><<<cuda::blocks_for(rows, cuda::kRowThreads), cuda::kRowThreads, 0, stream_>>>(
        a, q.data<T>(), k.data<T>(), v.data<T>(), static_cast<T>(scale), num.data<T>(), den.data<T>(), m.data<T>());
  });
  cuda::check_launch(op);
}

void CudaBackend::hybrid_window_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                   const Tensor& key_mask, int64_t heads, int64_t window,
                                                   double scale, const Tensor& m, const Tensor& gnum,
                                                   const Tensor& gden, const Tensor& gq, const Tensor& gk,
                                                   const Tensor& gv) {
  const char* op = "hybrid_window_attention_backward";
  cuda::check_device(*this, op, {&q, &k, &v, &m, &gnum, &gden, &gq, &gk, &gv});
  const cuda::WindowArgs a = cuda::window_args(*this, op, q, v, key_mask, heads, window);
  const int64_t rows = a.G * a.L;
  cuda::check_operands(op, q, {{&q, rows * a.D}, {&k, rows * a.D}, {&v, rows * a.Dv}, {&m, rows},
                               {&gnum, rows * a.Dv}, {&gden, rows}, {&gq, rows * a.D}, {&gk, rows * a.D},
                               {&gv, rows * a.Dv}});
  if (rows == 0) return;
  cuda::DeviceGuard guard(index_);
  fill(gk, 0.0);
  fill(gv, 0.0);
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::window_backward_kernel<T><<<cuda::blocks_for(rows, cuda::kRowThreads), cuda::kRowThreads, 0, stream_>>>(
        a, q.data<T>(), k.data<T>(), v.data<T>(), m.data<T>(), gnum.data<T>(), gden.data<T>(), static_cast<T>(scale),
        gq.data<T>(), gk.data<T>(), gv.data<T>());
  });
  cuda::check_launch(op);
}

}  // namespace hh
