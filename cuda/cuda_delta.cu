// CUDA fills of the gated delta rule slots (core/kernels/delta_rule.h): the recurrence itself,
// one thread block per (batch, head) and one thread per value column e. The rule is column-local:
// thread e keeps column e of the (F,E) state (in global memory, coalesced across the block) and
// computes p_e = Σ_f S_fe k_f, u_e = β (v_e − α p_e), S_fe <- α S_fe + k_f u_e and y_e alone; per
// token the block stages q_t and k_t in shared memory. The backward follows core/cpu/cpu_delta.inc
// (the derivation is there): chunk by chunk from the last, the chunk's states recomputed from its
// checkpoint into a scratch buffer, then the reverse sweep of R = ∂ℓ/∂S, whose reductions over e
// (gq, gk, gβ, log α's) are warp shuffles and one shared atomic per warp. Simple rather than fast
// (the tensor-core chunked form is issue 26's). Contiguous f32/f64.
#include <cmath>

#include "core/kernels/delta_rule.h"
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_kernel_fill.h"

namespace hh {
namespace cuda {
namespace {

extern __shared__ __align__(16) unsigned char hh_delta_smem[];

struct DeltaArgs {
  int64_t G, L, C, N;  // groups, tokens, chunk (checkpoint interval), checkpoints
  int F, E;
};

template <typename T>
__device__ __forceinline__ void stage(T* s, const T* x, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = x[i];
}

// red[i] += value over every thread of the block (warp sums, then one shared atomic per warp).
template <typename T>
__device__ __forceinline__ void block_add(T* red, int i, T value) {
  for (int o = 16; o > 0; o >>= 1) value += __shfl_down_sync(0xffffffffu, value, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(&red[i], value);
}

// Column e of one token (ks = k_t staged): in -> out (S_{t-1} -> S_t, stride E; they may be the
// same), p_e and u_e returned; y_e = S_tᵀ q when qs is not null.
template <typename T>
__device__ __forceinline__ T token_column(const DeltaArgs& a, int e, const T* in, T* out, const T* ks, const T* qs,
                                          T alpha, T beta, T ve, T* p_out, T* u_out) {
  T p = 0;
  for (int f = 0; f < a.F; ++f) p += in[f * a.E + e] * ks[f];
  const T u = beta * (ve - alpha * p);
  T acc = 0;
  for (int f = 0; f < a.F; ++f) {
    const T s = alpha * in[f * a.E + e] + ks[f] * u;
    out[f * a.E + e] = s;
    if (qs) acc += qs[f] * s;
  }
  *p_out = p;
  *u_out = u;
  return acc;
}

template <typename T>
__global__ void delta_forward_kernel(DeltaArgs a, const T* q, const T* k, const T* v, const T* beta, const T* la,
                                     const T* S0, T* y, T* S_last, T* ckpt) {
  const int64_t g = blockIdx.x;
  const int e = threadIdx.x;
  const bool col = e < a.E;
  const int64_t FE = static_cast<int64_t>(a.F) * a.E;
  T* qs = reinterpret_cast<T*>(hh_delta_smem);
  T* ks = qs + a.F;
  T* S = S_last + g * FE;
  if (col)
    for (int f = 0; f < a.F; ++f) S[f * a.E + e] = S0[g * FE + f * a.E + e];
  for (int64_t t = 0; t < a.L; ++t) {
    const int64_t row = g * a.L + t;
    stage(qs, q + row * a.F, a.F);
    stage(ks, k + row * a.F, a.F);
    __syncthreads();
    if (col) {
      if (t % a.C == 0) {
        T* c = ckpt + (g * a.N + t / a.C) * FE;
        for (int f = 0; f < a.F; ++f) c[f * a.E + e] = S[f * a.E + e];
      }
      T p, u;
      y[row * a.E + e] = token_column(a, e, S, S, ks, qs, exp(la[row]), beta[row], v[row * a.E + e], &p, &u);
    }
    __syncthreads();
  }
}

// scratch per group: (C+1) states (F,E), then p and u of the chunk's tokens (C,E) each.
template <typename T>
__global__ void delta_backward_kernel(DeltaArgs a, const T* q, const T* k, const T* v, const T* beta, const T* la,
                                      const T* ckpt, const T* gy, const T* gS_last, T* gq, T* gk, T* gv, T* gbeta,
                                      T* gla, T* gS0, T* scratch) {
  const int64_t g = blockIdx.x;
  const int e = threadIdx.x;
  const bool col = e < a.E;
  const int64_t FE = static_cast<int64_t>(a.F) * a.E;
  T* qs = reinterpret_cast<T*>(hh_delta_smem);
  T *ks = qs + a.F, *red_q = ks + a.F, *red_k = red_q + a.F, *red_s = red_k + a.F;  // red_s: gβ, w·p, ⟨R,S⟩
  T* states = scratch + g * ((a.C + 1) * FE + 2 * a.C * a.E);
  T *P = states + (a.C + 1) * FE, *U = P + a.C * a.E;
  T* R = gS0 + g * FE;
  if (col)
    for (int f = 0; f < a.F; ++f) R[f * a.E + e] = gS_last[g * FE + f * a.E + e];
  for (int64_t c = a.N - 1; c >= 0; --c) {
    const int64_t t0 = c * a.C, m = a.L - t0 < a.C ? a.L - t0 : a.C;
    if (col)
      for (int f = 0; f < a.F; ++f) states[f * a.E + e] = ckpt[(g * a.N + c) * FE + f * a.E + e];
    for (int64_t r = 0; r < m; ++r) {  // recompute S_{t0+1} … S_{t0+m}
      const int64_t row = g * a.L + t0 + r;
      stage(ks, k + row * a.F, a.F);
      __syncthreads();
      if (col)
        token_column<T>(a, e, states + r * FE, states + (r + 1) * FE, ks, nullptr, exp(la[row]), beta[row],
                        v[row * a.E + e], &P[r * a.E + e], &U[r * a.E + e]);
      __syncthreads();
    }
    for (int64_t r = m - 1; r >= 0; --r) {
      const int64_t row = g * a.L + t0 + r;
      stage(qs, q + row * a.F, a.F);
      stage(ks, k + row * a.F, a.F);
      for (int i = threadIdx.x; i < 2 * a.F + 3; i += blockDim.x) red_q[i] = 0;
      __syncthreads();
      const T alpha = exp(la[row]), b = beta[row];
      const T* prev = states + r * FE;
      const T* next = prev + FE;
      const T ge = col ? gy[row * a.E + e] : T(0), ve = col ? v[row * a.E + e] : T(0);
      const T p = col ? P[r * a.E + e] : T(0), u = col ? U[r * a.E + e] : T(0);
      // R += q_t gy_tᵀ; gq_t = S_t gy_t; w = R_tᵀ k.
      T w = 0;
      for (int f = 0; f < a.F; ++f) {
        T part = 0;
        if (col) {
          part = next[f * a.E + e] * ge;
          const T rv = R[f * a.E + e] + qs[f] * ge;
          R[f * a.E + e] = rv;
          w += rv * ks[f];
        }
        block_add(red_q, f, part);
      }
      if (col) gv[row * a.E + e] = b * w;
      block_add(red_s, 0, w * (ve - alpha * p));
      block_add(red_s, 1, w * p);
      // gk_t = R u − αβ S_{t-1} w; ⟨R, S_{t-1}⟩; R <- α (R − β k wᵀ).
      T inner = 0;
      for (int f = 0; f < a.F; ++f) {
        T part = 0;
        if (col) {
          const T rv = R[f * a.E + e], sp = prev[f * a.E + e];
          part = rv * u - alpha * b * sp * w;
          inner += rv * sp;
          R[f * a.E + e] = alpha * (rv - b * ks[f] * w);
        }
        block_add(red_k, f, part);
      }
      block_add(red_s, 2, inner);
      __syncthreads();
      for (int f = threadIdx.x; f < a.F; f += blockDim.x) {
        gq[row * a.F + f] = red_q[f];
        gk[row * a.F + f] = red_k[f];
      }
      if (threadIdx.x == 0) {
        gbeta[row] = red_s[0];
        gla[row] = alpha * (red_s[2] - b * red_s[1]);
      }
      __syncthreads();
    }
  }
}

template <typename T>
__global__ void delta_step_kernel(DeltaArgs a, const T* q, const T* k, const T* v, const T* beta, const T* la,
                                  const T* S_in, T* S_out, T* y) {
  for (int64_t i = global_thread(); i < a.G * a.E; i += grid_threads()) {
    const int64_t g = i / a.E;
    const int e = static_cast<int>(i % a.E);
    const T* in = S_in + g * a.F * a.E;
    T* out = S_out + g * a.F * a.E;
    const T *kg = k + g * a.F, *qg = q + g * a.F;
    const T alpha = exp(la[g]);
    T p = 0;
    for (int f = 0; f < a.F; ++f) p += in[f * a.E + e] * kg[f];
    const T u = beta[g] * (v[i] - alpha * p);
    T acc = 0;
    for (int f = 0; f < a.F; ++f) {
      const T s = alpha * in[f * a.E + e] + kg[f] * u;
      out[f * a.E + e] = s;
      acc += qg[f] * s;
    }
    y[i] = acc;
  }
}

// The block of one head: E threads rounded up to a warp (every thread takes part in the warp sums).
int block_threads(const char* op, int64_t E) {
  HH_CHECK(E >= 1 && E <= 1024, op, ": the CUDA kernel takes 1 to 1024 value columns, got ", E);
  return static_cast<int>((E + 31) / 32 * 32);
}

DeltaArgs args_of(const char* op, const Tensor& q, const Tensor& v, int64_t chunk) {
  // Shared memory: 4 F + 3 values (32 KiB in f64 at F = 1024).
  HH_CHECK(q.size(2) <= 1024, op, ": the CUDA kernel takes up to 1024 key features, got ", q.size(2));
  HH_CHECK(chunk > 0, op, ": chunk must be positive, got ", chunk);
  const int64_t L = q.size(1);
  return {q.size(0), L, chunk, (L + chunk - 1) / chunk, static_cast<int>(q.size(2)), static_cast<int>(v.size(2))};
}

void delta_forward_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                        const Tensor& log_alpha, const Tensor& S0, int64_t chunk, const Tensor& y,
                        const Tensor& S_last, const Tensor& checkpoints) {
  const char* op = "delta_rule_forward";
  CudaBackend& b = backend_of(q, op);
  check_device(b, op, {&q, &k, &v, &beta, &log_alpha, &S0, &y, &S_last, &checkpoints});
  const DeltaArgs a = args_of(op, q, v, chunk);
  const int64_t nf = a.G * a.L * a.F, ne = a.G * a.L * a.E, fe = static_cast<int64_t>(a.F) * a.E;
  check_operands(op, q, {{&q, nf}, {&k, nf}, {&v, ne}, {&beta, a.G * a.L}, {&log_alpha, a.G * a.L},
                         {&S0, a.G * fe}, {&y, ne}, {&S_last, a.G * fe}, {&checkpoints, a.G * a.N * fe}});
  if (a.G * a.L == 0) return;
  const int threads = block_threads(op, a.E);
  DeviceGuard guard(b.index());
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const size_t smem = sizeof(T) * 2 * static_cast<size_t>(a.F);
    delta_forward_kernel<T><<<static_cast<unsigned>(a.G), threads, smem, b.stream()>>>(
        a, q.data<T>(), k.data<T>(), v.data<T>(), beta.data<T>(), log_alpha.data<T>(), S0.data<T>(), y.data<T>(),
        S_last.data<T>(), checkpoints.data<T>());
  });
  check_launch(op);
}

void delta_backward_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                         const Tensor& log_alpha, const Tensor& checkpoints, int64_t chunk, const Tensor& gy,
                         const Tensor& gS_last, const Tensor& gq, const Tensor& gk, const Tensor& gv,
                         const Tensor& gbeta, const Tensor& glog_alpha, const Tensor& gS0) {
  const char* op = "delta_rule_backward";
  CudaBackend& b = backend_of(q, op);
  check_device(b, op, {&q, &k, &v, &beta, &log_alpha, &checkpoints, &gy, &gS_last, &gq, &gk, &gv, &gbeta,
                       &glog_alpha, &gS0});
  const DeltaArgs a = args_of(op, q, v, chunk);
  const int64_t nf = a.G * a.L * a.F, ne = a.G * a.L * a.E, fe = static_cast<int64_t>(a.F) * a.E;
  check_operands(op, q, {{&q, nf}, {&k, nf}, {&v, ne}, {&beta, a.G * a.L}, {&log_alpha, a.G * a.L},
                         {&checkpoints, a.G * a.N * fe}, {&gy, ne}, {&gS_last, a.G * fe}, {&gq, nf}, {&gk, nf},
                         {&gv, ne}, {&gbeta, a.G * a.L}, {&glog_alpha, a.G * a.L}, {&gS0, a.G * fe}});
  if (a.G * a.L == 0) return;
  const int threads = block_threads(op, a.E);
  DeviceGuard guard(b.index());
  Tensor scratch = empty({a.G, (a.C + 1) * fe + 2 * a.C * a.E}, {q.dtype(), q.device()});
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const size_t smem = sizeof(T) * (4 * static_cast<size_t>(a.F) + 3);  // q, k, the gq and gk sums, 3 scalars
    delta_backward_kernel<T><<<static_cast<unsigned>(a.G), threads, smem, b.stream()>>>(
        a, q.data<T>(), k.data<T>(), v.data<T>(), beta.data<T>(), log_alpha.data<T>(), checkpoints.data<T>(),
        gy.data<T>(), gS_last.data<T>(), gq.data<T>(), gk.data<T>(), gv.data<T>(), gbeta.data<T>(),
        glog_alpha.data<T>(), gS0.data<T>(), scratch.data<T>());
  });
  check_launch(op);
}

void delta_step_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& log_alpha,
                     const Tensor& S, const Tensor& S_next, const Tensor& y) {
  const char* op = "delta_rule_step";
  CudaBackend& b = backend_of(q, op);
  check_device(b, op, {&q, &k, &v, &beta, &log_alpha, &S, &S_next, &y});
  const DeltaArgs a{q.size(0), 1, 1, 1, static_cast<int>(q.size(1)), static_cast<int>(v.size(1))};
  const int64_t fe = static_cast<int64_t>(a.F) * a.E;
  check_operands(op, q, {{&q, a.G * a.F}, {&k, a.G * a.F}, {&v, a.G * a.E}, {&beta, a.G}, {&log_alpha, a.G},
                         {&S, a.G * fe}, {&S_next, a.G * fe}, {&y, a.G * a.E}});
  if (a.G * a.E == 0) return;
  DeviceGuard guard(b.index());
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    delta_step_kernel<T><<<blocks_for(a.G * a.E), kBlock, 0, b.stream()>>>(
        a, q.data<T>(), k.data<T>(), v.data<T>(), beta.data<T>(), log_alpha.data<T>(), S.data<T>(), S_next.data<T>(),
        y.data<T>());
  });
  check_launch(op);
}

const CudaKernelFill fill_forward(kernels::delta_rule_forward, &delta_forward_cuda);
const CudaKernelFill fill_backward(kernels::delta_rule_backward, &delta_backward_cuda);
const CudaKernelFill fill_step(kernels::delta_rule_step, &delta_step_cuda);

}  // namespace
}  // namespace cuda
}  // namespace hh
