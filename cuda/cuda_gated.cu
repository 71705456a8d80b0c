// CUDA fills of the gated linear attention slots (core/kernels/gated_linear.h): the recurrence
// itself, one thread block per (batch, head) and one thread per value column e, each thread
// carrying its column of the (F,E) state in a global scratch buffer (coalesced across the block).
// Per token the block stages q_t, k_t and the decays in shared memory. The backward recomputes the
// states forward (gq, reduced over e by warp shuffles), runs the reverse state R backward (gk, gv),
// then reverse-sums q ⊙ gq - k ⊙ gk into the log gates' gradient. Simple rather than fast: every
// exponent is a single token's log gate (<= 0), so, as the CPU kernel, it cannot overflow; the
// chunked tensor-core form is issue 26's. Contiguous f32/f64.
#include <cmath>

#include "core/kernels/gated_linear.h"
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_kernel_fill.h"

namespace hh {
namespace cuda {
namespace {

extern __shared__ __align__(16) unsigned char hh_gated_smem[];

struct GatedArgs {
  int64_t G, L;
  int F, E, A;
};

// Stages row t of x (n values) into s.
template <typename T>
__device__ __forceinline__ void stage(T* s, const T* x, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = x[i];
}
template <typename T>
__device__ __forceinline__ void stage_exp(T* s, const T* x, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = exp(x[i]);
}

// red[f] += value over every thread of the block (warp sums, then one shared atomic per warp).
template <typename T>
__device__ __forceinline__ void block_add(T* red, int f, T value) {
  for (int o = 16; o > 0; o >>= 1) value += __shfl_down_sync(0xffffffffu, value, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(&red[f], value);
}

template <typename T>
__global__ void gated_forward_kernel(GatedArgs a, const T* q, const T* k, const T* v, const T* la, T* y, T* state) {
  const int64_t g = blockIdx.x;
  const int e = threadIdx.x;
  const bool col = e < a.E;
  T* qs = reinterpret_cast<T*>(hh_gated_smem);
  T *ks = qs + a.F, *ds = ks + a.F;
  T* S = state + g * a.F * a.E;
  if (col)
    for (int f = 0; f < a.F; ++f) S[f * a.E + e] = 0;
  for (int64_t t = 0; t < a.L; ++t) {
    const int64_t row = g * a.L + t;
    stage(qs, q + row * a.F, a.F);
    stage(ks, k + row * a.F, a.F);
    stage_exp(ds, la + row * a.A, a.A);
    __syncthreads();
    if (col) {
      const T ve = v[row * a.E + e];
      T acc = 0;
      for (int f = 0; f < a.F; ++f) {
        const T s = ds[a.A == 1 ? 0 : f] * S[f * a.E + e] + ks[f] * ve;
        S[f * a.E + e] = s;
        acc += qs[f] * s;
      }
      y[row * a.E + e] = acc;
    }
    __syncthreads();
  }
}

template <typename T>
__global__ void gated_backward_kernel(GatedArgs a, const T* q, const T* k, const T* v, const T* la, const T* gy,
                                      T* gq, T* gk, T* gv, T* ga, T* state) {
  const int64_t g = blockIdx.x;
  const int e = threadIdx.x;
  const bool col = e < a.E;
  T* qs = reinterpret_cast<T*>(hh_gated_smem);
  T *ks = qs + a.F, *ds = ks + a.F, *red = ds + a.F;
  T* S = state + g * a.F * a.E;
  // Forward sweep: gq_t = S_t gy_t.
  if (col)
    for (int f = 0; f < a.F; ++f) S[f * a.E + e] = 0;
  for (int64_t t = 0; t < a.L; ++t) {
    const int64_t row = g * a.L + t;
    stage(ks, k + row * a.F, a.F);
    stage_exp(ds, la + row * a.A, a.A);
    for (int f = threadIdx.x; f < a.F; f += blockDim.x) red[f] = 0;
    __syncthreads();
    const T ve = col ? v[row * a.E + e] : T(0), ge = col ? gy[row * a.E + e] : T(0);
    for (int f = 0; f < a.F; ++f) {
      T s = 0;
      if (col) {
        s = ds[a.A == 1 ? 0 : f] * S[f * a.E + e] + ks[f] * ve;
        S[f * a.E + e] = s;
      }
      block_add(red, f, s * ge);
    }
    __syncthreads();
    for (int f = threadIdx.x; f < a.F; f += blockDim.x) gq[row * a.F + f] = red[f];
    __syncthreads();
  }
  // Reverse sweep: R_t = q_t gy_tᵀ + diag(α_{t+1}) R_{t+1}; gk_t = R_t v_t, gv_t = R_tᵀ k_t.
  for (int64_t t = a.L - 1; t >= 0; --t) {
    const int64_t row = g * a.L + t;
    stage(qs, q + row * a.F, a.F);
    stage(ks, k + row * a.F, a.F);
    if (t + 1 < a.L) stage_exp(ds, la + (row + 1) * a.A, a.A);
    for (int f = threadIdx.x; f < a.F; f += blockDim.x) red[f] = 0;
    __syncthreads();
    const T ve = col ? v[row * a.E + e] : T(0), ge = col ? gy[row * a.E + e] : T(0);
    T acc = 0;
    for (int f = 0; f < a.F; ++f) {
      T r = 0;
      if (col) {
        r = qs[f] * ge + (t + 1 < a.L ? ds[a.A == 1 ? 0 : f] * S[f * a.E + e] : T(0));
        S[f * a.E + e] = r;
        acc += r * ks[f];
      }
      block_add(red, f, r * ve);
    }
    if (col) gv[row * a.E + e] = acc;
    __syncthreads();
    for (int f = threadIdx.x; f < a.F; f += blockDim.x) gk[row * a.F + f] = red[f];
    __syncthreads();
  }
  // glog_a_t = Σ_{u>=t} (q_u ⊙ gq_u - k_u ⊙ gk_u), summed over F for a per-head gate.
  if (a.A == 1) {
    for (int64_t t = threadIdx.x; t < a.L; t += blockDim.x) {
      const int64_t row = g * a.L + t;
      T d = 0;
      for (int f = 0; f < a.F; ++f) d += q[row * a.F + f] * gq[row * a.F + f] - k[row * a.F + f] * gk[row * a.F + f];
      ga[row] = d;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      T run = 0;
      for (int64_t t = a.L - 1; t >= 0; --t) run = ga[g * a.L + t] += run;
    }
  } else {
    for (int f = threadIdx.x; f < a.F; f += blockDim.x) {
      T run = 0;
      for (int64_t t = a.L - 1; t >= 0; --t) {
        const int64_t i = (g * a.L + t) * a.F + f;
        run += q[i] * gq[i] - k[i] * gk[i];
        ga[i] = run;
      }
    }
  }
}

template <typename T>
__global__ void gated_step_kernel(GatedArgs a, const T* q, const T* k, const T* v, const T* la, const T* S_in,
                                  T* S_out, T* y) {
  for (int64_t i = global_thread(); i < a.G * a.E; i += grid_threads()) {
    const int64_t g = i / a.E;
    const int e = static_cast<int>(i % a.E);
    const T ve = v[i];
    T acc = 0;
    for (int f = 0; f < a.F; ++f) {
      const int64_t s = (g * a.F + f) * a.E + e;
      const T val = exp(la[g * a.A + (a.A == 1 ? 0 : f)]) * S_in[s] + k[g * a.F + f] * ve;
      S_out[s] = val;
      acc += q[g * a.F + f] * val;
    }
    y[i] = acc;
  }
}

// The block of one head: E threads rounded up to a warp (every thread takes part in the warp sums).
int block_threads(const char* op, int E) {
  HH_CHECK(E >= 1 && E <= 1024, op, ": the CUDA kernel takes 1 to 1024 value columns, got ", E);
  return (E + 31) / 32 * 32;
}

GatedArgs args_of(const char* op, const Tensor& q, const Tensor& v, const Tensor& log_a) {
  HH_CHECK(q.size(2) <= 2048, op, ": the CUDA kernel takes up to 2048 features, got ", q.size(2));
  return {q.size(0), q.size(1), static_cast<int>(q.size(2)), static_cast<int>(v.size(2)),
          static_cast<int>(log_a.size(2))};
}

void gated_forward_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& log_a, int64_t /*chunk*/,
                        const Tensor& y) {
  const char* op = "gated_linear_forward";
  CudaBackend& b = backend_of(q, op);
  check_device(b, op, {&q, &k, &v, &log_a, &y});
  const GatedArgs a = args_of(op, q, v, log_a);
  check_operands(op, q, {{&q, a.G * a.L * a.F}, {&k, a.G * a.L * a.F}, {&v, a.G * a.L * a.E},
                         {&log_a, a.G * a.L * a.A}, {&y, a.G * a.L * a.E}});
  if (a.G * a.L == 0) return;
  const int threads = block_threads(op, a.E);
  DeviceGuard guard(b.index());
  Tensor state = empty({a.G, a.F, a.E}, {q.dtype(), q.device()});
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const size_t smem = sizeof(T) * (2 * static_cast<size_t>(a.F) + static_cast<size_t>(a.A));
    gated_forward_kernel<T><<<static_cast<unsigned>(a.G), threads, smem, b.stream()>>>(
        a, q.data<T>(), k.data<T>(), v.data<T>(), log_a.data<T>(), y.data<T>(), state.data<T>());
  });
  check_launch(op);
}

void gated_backward_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& log_a, int64_t /*chunk*/,
                         const Tensor& gy, const Tensor& gq, const Tensor& gk, const Tensor& gv,
                         const Tensor& glog_a) {
  const char* op = "gated_linear_backward";
  CudaBackend& b = backend_of(q, op);
  check_device(b, op, {&q, &k, &v, &log_a, &gy, &gq, &gk, &gv, &glog_a});
  const GatedArgs a = args_of(op, q, v, log_a);
  const int64_t nf = a.G * a.L * a.F, ne = a.G * a.L * a.E;
  check_operands(op, q, {{&q, nf}, {&k, nf}, {&v, ne}, {&log_a, a.G * a.L * a.A}, {&gy, ne}, {&gq, nf},
                         {&gk, nf}, {&gv, ne}, {&glog_a, a.G * a.L * a.A}});
  if (a.G * a.L == 0) return;
  const int threads = block_threads(op, a.E);
  DeviceGuard guard(b.index());
  Tensor state = empty({a.G, a.F, a.E}, {q.dtype(), q.device()});
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const size_t smem = sizeof(T) * 3 * static_cast<size_t>(a.F);  // q, k, decays (A <= F), sums
    gated_backward_kernel<T><<<static_cast<unsigned>(a.G), threads, smem + sizeof(T) * a.F, b.stream()>>>(
        a, q.data<T>(), k.data<T>(), v.data<T>(), log_a.data<T>(), gy.data<T>(), gq.data<T>(), gk.data<T>(),
        gv.data<T>(), glog_a.data<T>(), state.data<T>());
  });
  check_launch(op);
}

void gated_step_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& log_a, const Tensor& S,
                     const Tensor& S_next, const Tensor& y) {
  const char* op = "gated_linear_step";
  CudaBackend& b = backend_of(q, op);
  check_device(b, op, {&q, &k, &v, &log_a, &S, &S_next, &y});
  const GatedArgs a{q.size(0), 1, static_cast<int>(q.size(1)), static_cast<int>(v.size(1)),
                    static_cast<int>(log_a.size(1))};
  check_operands(op, q, {{&q, a.G * a.F}, {&k, a.G * a.F}, {&v, a.G * a.E}, {&log_a, a.G * a.A},
                         {&S, a.G * a.F * a.E}, {&S_next, a.G * a.F * a.E}, {&y, a.G * a.E}});
  if (a.G * a.E == 0) return;
  DeviceGuard guard(b.index());
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    gated_step_kernel<T><<<blocks_for(a.G * a.E), kBlock, 0, b.stream()>>>(
        a, q.data<T>(), k.data<T>(), v.data<T>(), log_a.data<T>(), S.data<T>(), S_next.data<T>(), y.data<T>());
  });
  check_launch(op);
}

const CudaKernelFill fill_forward(kernels::gated_linear_forward, &gated_forward_cuda);
const CudaKernelFill fill_backward(kernels::gated_linear_backward, &gated_backward_cuda);
const CudaKernelFill fill_step(kernels::gated_linear_step, &gated_step_cuda);

}  // namespace
}  // namespace cuda
}  // namespace hh
