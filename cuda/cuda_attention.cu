// Chunked causal linear attention on CUDA (the contract is in core/backend.h), f32 and f64. The
// sequence of each (batch·head) g is cut into P segments of whole chunks, and one block walks one
// segment's chunks in order, exactly like core/cpu/cpu_attention.cpp: inside a chunk the masked
// quadratic form, across chunks a running state (S (F,D) and z (F) forward; R and r in the
// backward's reverse sweep). A segment's starting state is what the earlier segments add up to
// (later ones for R, r): segment_state_kernel sums each segment's Kᵀ V (Qᵀ GN in the backward) and
// scan_segments_kernel turns those sums into exclusive prefix (suffix) sums. P is picked so that
// G·P blocks fill the GPU (a few blocks per multiprocessor) within a workspace budget; P = 1 is the
// plain sequential walk. The running state lives in shared memory when F·(D+1) fits next to the
// kernel's static tiles (dynamic shared memory, opted in up to the device limit), otherwise in a
// global workspace (e.g. Taylor features: F = 1 + D + D² = 4161 for D = 64), through the same
// generic pointer. Products are block tile products (cuda_attention_tile.cuh), tiled over F and D
// in 64-wide tiles, so F and D are unbounded. The kernels use chunks of at most kChunk rows (64 in
// f32, 32 in f64): the chunk length and P only change rounding. A non-finite denominator or output
// is reported like the CPU kernel does (one device flag, read after the forward).
#include <algorithm>
#include <cmath>
#include <memory>

#include "cuda/cuda_attention_tile.cuh"
#include "cuda/cuda_common.cuh"

namespace hh {
namespace cuda {

extern __shared__ __align__(16) unsigned char hh_linear_attention_state[];  // F·(D+1) elements when used

namespace {

// ---- device code ----

template <typename T>
struct ChunkCap {
  static constexpr int value = sizeof(T) == 4 ? 64 : 32;  // the (C,C) tiles fit static shared memory
};

// q, k (G,L,F), v (G,L,D), contiguous; C = chunk rows (<= ChunkCap); P segments of `seg` rows
// (a multiple of C) per g: block b walks rows [p·seg, min(L, (p+1)·seg)) of g = b / P, p = b % P.
template <typename T>
struct LinArgs {
  const T* q;
  const T* k;
  const T* v;
  int64_t G;
  int L, F, D, C;
  int P, seg;
};

// The rows [begin, end) of this block's segment, and its g.
struct Segment {
  int64_t g;
  int begin, end;
};
template <typename T>
__device__ __forceinline__ Segment segment_of(const LinArgs<T>& a) {
  const int p = static_cast<int>(blockIdx.x % a.P);
  const int begin = p * a.seg;
  return {static_cast<int64_t>(blockIdx.x / a.P), begin, begin + a.seg < a.L ? begin + a.seg : a.L};
}

__device__ __forceinline__ int jmin(int a, int b) { return a < b ? a : b; }

// The state of block g: `ws` + g·F·(D+1) in global memory, or the dynamic shared memory.
template <typename T>
__device__ __forceinline__ T* state_of(const LinArgs<T>& a, T* ws) {
  return ws ? ws + blockIdx.x * static_cast<int64_t>(a.F) * (a.D + 1) : reinterpret_cast<T*>(hh_linear_attention_state);
}

// The state starts as this block's slot of `init` (G·P states of F·(D+1)), or zero when null.
template <typename T>
__device__ void load_state(const LinArgs<T>& a, T* st, const T* init) {
  __syncthreads();  // every earlier use of the state is finished
  const int64_t n = static_cast<int64_t>(a.F) * (a.D + 1);
  const T* src = init ? init + blockIdx.x * n : nullptr;
  for (int64_t e = threadIdx.x; e < n; e += tile::kThreads) st[e] = src ? src[e] : T(0);
  __syncthreads();
}

// S (F,D) += Xᵀ Y and z (F) += Xᵀ w (w = 1 when null) for a chunk: X (n,F) rows of stride F,
// Y (n,D) rows of stride D. Each state element has one owner thread.
template <typename T>
__device__ void add_outer(const LinArgs<T>& a, T* S, T* z, const T* X, const T* Y, const T* w, int n, T* slab) {
  for (int f0 = 0; f0 < a.F; f0 += tile::kRows) {
    const int nf = jmin(tile::kRows, a.F - f0);
    for (int d0 = 0; d0 < a.D; d0 += 64) {
      const int nd = jmin(64, a.D - d0);
      T u[4][4];
      tile::zero(u);
      tile::mma<T, 4>(u, {X + f0, 1, a.F, nf, n}, {Y + d0, a.D, 1, n, nd}, n, slab);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = tile::ty() * 4 + i;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = tile::tx() + 16 * j;
          if (r < nf && c < nd) S[static_cast<int64_t>(f0 + r) * a.D + d0 + c] += u[i][j];
        }
      }
    }
  }
  for (int f = threadIdx.x; f < a.F; f += tile::kThreads) {
    T s = 0;
    for (int i = 0; i < n; ++i) s += X[static_cast<int64_t>(i) * a.F + f] * (w ? w[i] : T(1));
    z[f] += s;
  }
}

// Writes the lower triangle (j <= i < n) of a (64,64) register tile plus `add` per row into the
// (C,C) shared tile `dst` (row stride C + 1), zeros above it; returns this thread's row sums.
template <typename T, int C>
__device__ void store_lower(T (&acc)[4][4], const T (&add)[4], int n, T* dst, T (&rowsum)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = tile::ty() * 4 + i;
    rowsum[i] = T(0);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = tile::tx() + 16 * j;
      const T val = (r < n && c <= r) ? acc[i][j] + add[i] : T(0);
      rowsum[i] += val;
      if (r < C && c < C) dst[r * (C + 1) + c] = val;
    }
  }
}

// y (G,L,D), den (G,L). ws: global state or null (shared state); init: the segments' starting
// states (null when P = 1).
template <typename T>
__global__ void __launch_bounds__(tile::kThreads)
    linear_forward_kernel(LinArgs<T> a, T eps, T* y, T* den, T* ws, const T* init, unsigned long long* bad) {
  constexpr int C = ChunkCap<T>::value;
  __shared__ T slab[tile::slab_elems<4>()];
  __shared__ T as[C * (C + 1)];  // A = (Qc Kcᵀ) masked to j <= i
  __shared__ T dens[C];
  const Segment sg = segment_of(a);
  T* S = state_of(a, ws);
  T* z = S + static_cast<int64_t>(a.F) * a.D;
  load_state(a, S, init);
  const T zero4[4] = {T(0), T(0), T(0), T(0)};
  for (int c0 = sg.begin; c0 < sg.end; c0 += a.C) {
    const int n = jmin(a.C, sg.end - c0);
    const int64_t row0 = sg.g * a.L + c0;
    const T* qc = a.q + row0 * a.F;
    const T* kc = a.k + row0 * a.F;
    const T* vc = a.v + row0 * a.D;
    const tile::Operand<T> qop{qc, a.F, 1, n, a.F};
    T acc[4][4], qz[4][1], rs[4];
    tile::zero(acc);
    tile::zero(qz);
    tile::mma<T, 4>(acc, qop, {kc, 1, a.F, a.F, n}, a.F, slab);  // Qc Kcᵀ
    tile::mma<T, 1>(qz, qop, {z, 1, 0, a.F, 1}, a.F, slab);      // Qc z (column 0: threads with tx == 0)
    store_lower<T, C>(acc, zero4, n, as, rs);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = tile::ty() * 4 + i;
      const T d = tile::row_sum16(rs[i] + qz[i][0]) + eps;
      if (tile::tx() == 0 && r < n) {
        dens[r] = d;
        den[row0 + r] = d;
        if (!isfinite(d)) flag_bad(bad, row0 + r);
      }
    }
    // y = (Qc S + A Vc) / den, per 64-column tile (S is read before this chunk's update below).
    for (int d0 = 0; d0 < a.D; d0 += 64) {
      const int nd = jmin(64, a.D - d0);
      tile::zero(acc);
      tile::mma<T, 4>(acc, qop, {S + d0, a.D, 1, a.F, nd}, a.F, slab);
      tile::mma<T, 4>(acc, {as, C + 1, 1, n, n}, {vc + d0, a.D, 1, n, nd}, n, slab);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = tile::ty() * 4 + i;
        if (r >= n) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = tile::tx() + 16 * j;
          if (c >= nd) continue;
          const T val = acc[i][j] / dens[r];
          y[(row0 + r) * a.D + d0 + c] = val;
          if (!isfinite(val)) flag_bad(bad, row0 + r);
        }
      }
    }
    if (c0 + a.C < sg.end) add_outer<T>(a, S, z, kc, vc, nullptr, n, slab);  // S += Kcᵀ Vc, z += Σ Kc
  }
}

// The sum over each segment's chunks of Xᵀ Y (F,D) and Xᵀ w (F) (w = 1 when null) into its slot
// of `out` (G·P states of F·(D+1)): X (G,L,F), Y (G,L,D), w (G,L).
template <typename T>
__global__ void __launch_bounds__(tile::kThreads)
    segment_state_kernel(LinArgs<T> a, const T* X, const T* Y, const T* w, T* out) {
  __shared__ T slab[tile::slab_elems<4>()];
  const Segment sg = segment_of(a);
  T* S = out + blockIdx.x * static_cast<int64_t>(a.F) * (a.D + 1);
  T* z = S + static_cast<int64_t>(a.F) * a.D;
  load_state<T>(a, S, nullptr);
  for (int c0 = sg.begin; c0 < sg.end; c0 += a.C) {
    const int64_t row0 = sg.g * a.L + c0;
    add_outer<T>(a, S, z, X + row0 * a.F, Y + row0 * a.D, w ? w + row0 : nullptr, jmin(a.C, sg.end - c0), slab);
  }
}

// Each g's P states (E elements each) become exclusive prefix sums in segment order (suffix sums
// when `reverse`): the state segment p starts from. One thread per (g, element).
template <typename T>
__global__ void scan_segments_kernel(T* st, int64_t G, int P, int64_t E, bool reverse) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < G * E;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    T* base = st + (i / E) * P * E + i % E;
    T acc = 0;
    for (int j = 0; j < P; ++j) {
      T* x = base + static_cast<int64_t>(reverse ? P - 1 - j : j) * E;
      const T t = *x;
      *x = acc;
      acc += t;
    }
  }
}

// gn (rows,D) = gy / den, gd (rows) = -(gy·y) / den: one warp per row, 8 rows per block.
template <typename T>
__global__ void __launch_bounds__(tile::kThreads)
    linear_backward_prep_kernel(const T* y, const T* den, const T* gy, T* gn, T* gd, int64_t rows, int D) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.x) * 8; r0 < rows; r0 += static_cast<int64_t>(gridDim.x) * 8) {
    const int64_t row = r0 + warp;
    T s = 0;
    if (row < rows) {
      const T dn = den[row];
      for (int c = lane; c < D; c += 32) {
        s += gy[row * D + c] * y[row * D + c];
        gn[row * D + c] = gy[row * D + c] / dn;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (row < rows && lane == 0) gd[row] = -s / den[row];
  }
}

// gq, gk (G,L,F), gv (G,L,D) from gn (G,L,D), gd (G,L). See core/cpu/cpu_attention.cpp for the
// derivation: M_ij = gn_i·v_j + gd_i and A_ij = q_i·k_j for j <= i inside a chunk;
// forward sweep  gq_i = S gn_i + z gd_i + Σ_j M_ij k_j            (S, z over earlier chunks);
// reverse sweep  gk_j = R v_j + r + Σ_i M_ij q_i,  gv_j = Rᵀ k_j + Σ_i A_ij gn_i
//                (R = Σ q gnᵀ, r = Σ q gd over later chunks).
// init_s, init_r: the segments' starting S, z and R, r (null when P = 1).
template <typename T>
__global__ void __launch_bounds__(tile::kThreads)
    linear_backward_kernel(LinArgs<T> a, const T* gn, const T* gd, T* gq, T* gk, T* gv, T* ws, const T* init_s,
                           const T* init_r) {
  constexpr int C = ChunkCap<T>::value;
  __shared__ T slab[tile::slab_elems<4>()];
  __shared__ T ms[C * (C + 1)], as[C * (C + 1)];
  const Segment sg = segment_of(a);
  T* S = state_of(a, ws);  // S, z in the forward sweep; R, r in the reverse sweep
  T* z = S + static_cast<int64_t>(a.F) * a.D;
  const T zero4[4] = {T(0), T(0), T(0), T(0)};
  T acc[4][4], rs[4];
  // M for the chunk at row0 (n rows) into ms.
  auto chunk_m = [&](int64_t row0, int n) {
    T gdr[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = tile::ty() * 4 + i;
      gdr[i] = r < n ? gd[row0 + r] : T(0);
    }
    tile::zero(acc);
    tile::mma<T, 4>(acc, {gn + row0 * a.D, a.D, 1, n, a.D}, {a.v + row0 * a.D, 1, a.D, a.D, n}, a.D, slab);
    store_lower<T, C>(acc, gdr, n, ms, rs);
  };
  auto write = [&](T* dst, int64_t row0, int n, int ld, int c0, int nc) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = tile::ty() * 4 + i;
      if (r >= n) continue;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = tile::tx() + 16 * j;
        if (c < nc) dst[(row0 + r) * ld + c0 + c] = acc[i][j];
      }
    }
  };

  load_state(a, S, init_s);
  for (int c0 = sg.begin; c0 < sg.end; c0 += a.C) {
    const int n = jmin(a.C, sg.end - c0);
    const int64_t row0 = sg.g * a.L + c0;
    const T* kc = a.k + row0 * a.F;
    const T* gnc = gn + row0 * a.D;
    chunk_m(row0, n);
    for (int f0 = 0; f0 < a.F; f0 += 64) {
      const int nf = jmin(64, a.F - f0);
      tile::zero(acc);
      tile::mma<T, 4>(acc, {gnc, a.D, 1, n, a.D}, {S + static_cast<int64_t>(f0) * a.D, 1, a.D, a.D, nf}, a.D, slab);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = tile::ty() * 4 + i;
        const T gdr = r < n ? gd[row0 + r] : T(0);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = tile::tx() + 16 * j;
          if (c < nf) acc[i][j] += gdr * z[f0 + c];
        }
      }
      tile::mma<T, 4>(acc, {ms, C + 1, 1, n, n}, {kc + f0, a.F, 1, n, nf}, n, slab);
      write(gq, row0, n, a.F, f0, nf);
    }
    if (c0 + a.C < sg.end) add_outer<T>(a, S, z, kc, a.v + row0 * a.D, nullptr, n, slab);  // S += Kcᵀ Vc, z += Σ Kc
  }

  load_state(a, S, init_r);  // now R, r
  const int last = sg.begin + ((sg.end - 1 - sg.begin) / a.C) * a.C;
  for (int c0 = last; c0 >= sg.begin; c0 -= a.C) {
    const int n = jmin(a.C, sg.end - c0);
    const int64_t row0 = sg.g * a.L + c0;
    const T* qc = a.q + row0 * a.F;
    const T* kc = a.k + row0 * a.F;
    const T* vc = a.v + row0 * a.D;
    const T* gnc = gn + row0 * a.D;
    chunk_m(row0, n);
    tile::zero(acc);
    tile::mma<T, 4>(acc, {qc, a.F, 1, n, a.F}, {kc, 1, a.F, a.F, n}, a.F, slab);  // Qc Kcᵀ
    store_lower<T, C>(acc, zero4, n, as, rs);
    for (int f0 = 0; f0 < a.F; f0 += 64) {  // gk = Vc Rᵀ + r + Mᵀ Qc
      const int nf = jmin(64, a.F - f0);
      tile::zero(acc);
      tile::mma<T, 4>(acc, {vc, a.D, 1, n, a.D}, {S + static_cast<int64_t>(f0) * a.D, 1, a.D, a.D, nf}, a.D, slab);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = tile::tx() + 16 * j;
          if (c < nf) acc[i][j] += z[f0 + c];
        }
      tile::mma<T, 4>(acc, {ms, 1, C + 1, n, n}, {qc + f0, a.F, 1, n, nf}, n, slab);
      write(gk, row0, n, a.F, f0, nf);
    }
    for (int d0 = 0; d0 < a.D; d0 += 64) {  // gv = Kc R + Aᵀ GNc
      const int nd = jmin(64, a.D - d0);
      tile::zero(acc);
      tile::mma<T, 4>(acc, {kc, a.F, 1, n, a.F}, {S + d0, a.D, 1, a.F, nd}, a.F, slab);
      tile::mma<T, 4>(acc, {as, 1, C + 1, n, n}, {gnc + d0, a.D, 1, n, nd}, n, slab);
      write(gv, row0, n, a.D, d0, nd);
    }
    if (c0 > sg.begin) add_outer<T>(a, S, z, qc, gnc, gd + row0, n, slab);  // R += Qcᵀ GNc, r += Qcᵀ gd
  }
}

// ---- launchers ----

// Where the state goes: the dynamic shared memory (returns its bytes, after opting the kernel in)
// or a global workspace (returns 0).
template <typename Kernel>
size_t shared_state_bytes(Kernel kernel, size_t state_bytes, const char* op) {
  int dev = 0, optin = 0;
  HH_CUDA_CHECK(cudaGetDevice(&dev), op);
  HH_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), op);
  cudaFuncAttributes attr{};
  HH_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel), op);
  if (attr.sharedSizeBytes + state_bytes > static_cast<size_t>(optin)) return 0;
  HH_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(state_bytes)), op);
  return state_bytes;
}

template <typename T>
LinArgs<T> lin_args(const T* q, const T* k, const T* v, int64_t G, int L, int F, int D, int chunk) {
  HH_CHECK(G < (int64_t(1) << 31), "linear_attention_causal: too many (batch·head) blocks: ", G);
  return {q, k, v, G, L, F, D, chunk < ChunkCap<T>::value ? chunk : ChunkCap<T>::value, 1, L};
}

// Device memory the segments' starting states may take (each of `buffers` holds G·P states).
constexpr int64_t kSegmentBudget = int64_t(256) << 20;

// Sets a.P and a.seg: about four blocks per multiprocessor in all (G·P), whole chunks per segment,
// and the starting states within kSegmentBudget. P = 1 (one sequential walk per g) when G alone
// fills the GPU or the states would not fit.
template <typename T>
void plan_segments(LinArgs<T>& a, int buffers, const char* op) {
  int dev = 0, sms = 1;
  HH_CUDA_CHECK(cudaGetDevice(&dev), op);
  HH_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), op);
  const int64_t chunks = (a.L + a.C - 1) / a.C;
  const int64_t states_bytes = static_cast<int64_t>(a.F) * (a.D + 1) * static_cast<int64_t>(sizeof(T)) * a.G * buffers;
  int64_t p = std::min<int64_t>(chunks, (4 * static_cast<int64_t>(sms) + a.G - 1) / a.G);
  p = std::max<int64_t>(1, std::min<int64_t>(p, kSegmentBudget / std::max<int64_t>(1, states_bytes)));
  const int64_t per = (chunks + p - 1) / p;  // chunks per segment
  a.seg = static_cast<int>(std::min<int64_t>(per * a.C, a.L));
  a.P = static_cast<int>((chunks + per - 1) / per);
  HH_CHECK(a.G * a.P < (int64_t(1) << 31), op, ": too many blocks: ", a.G, " x ", a.P);
}

// The segments' starting states into `st` (G·P·F·(D+1)): each segment's sum of Xᵀ Y and Xᵀ w, then
// the exclusive prefix (suffix when `reverse`) over the segments of each g.
template <typename T>
void segment_states(const LinArgs<T>& a, const T* X, const T* Y, const T* w, bool reverse, T* st,
                    cudaStream_t stream, const char* op) {
  segment_state_kernel<T><<<static_cast<unsigned>(a.G * a.P), tile::kThreads, 0, stream>>>(a, X, Y, w, st);
  check_launch(op);
  const int64_t E = static_cast<int64_t>(a.F) * (a.D + 1);
  scan_segments_kernel<T><<<blocks_for(a.G * E), kBlock, 0, stream>>>(st, a.G, a.P, E, reverse);
  check_launch(op);
}

}  // namespace

// F >= 1, D >= 1, L >= 1, G >= 1; chunk >= 1.
template <typename T>
void linear_attention_causal_cuda(CudaBackend& be, const T* q, const T* k, const T* v, int64_t G, int L, int F, int D,
                                  int chunk, double eps, T* y, T* den, cudaStream_t stream) {
  const char* op = "linear_attention_causal";
  LinArgs<T> a = lin_args(q, k, v, G, L, F, D, chunk);
  plan_segments(a, 1, op);
  const size_t state = static_cast<size_t>(F) * (D + 1) * sizeof(T);
  const size_t blocks = static_cast<size_t>(G) * static_cast<size_t>(a.P);
  std::shared_ptr<void> init;
  if (a.P > 1) {
    init = be.allocate(state * blocks);
    segment_states<T>(a, k, v, nullptr, false, static_cast<T*>(init.get()), stream, op);  // S, z before each segment
  }
  const size_t smem = shared_state_bytes(linear_forward_kernel<T>, state, op);
  std::shared_ptr<void> ws;
  if (smem == 0) ws = be.allocate(state * blocks);
  BadPosition bad(be);
  linear_forward_kernel<T><<<static_cast<unsigned>(blocks), tile::kThreads, smem, stream>>>(
      a, static_cast<T>(eps), y, den, static_cast<T*>(ws.get()), static_cast<const T*>(init.get()), bad.ptr());
  check_launch(op);
  const int64_t at = bad.first();
  HH_CHECK(at < 0, "linear_attention: the state or normalizer became NaN/Inf (feature map overflow?) at row ", at);
}

template <typename T>
void linear_attention_causal_backward_cuda(CudaBackend& be, const T* q, const T* k, const T* v, const T* y,
                                           const T* den, const T* gy, int64_t G, int L, int F, int D, int chunk, T* gq,
                                           T* gk, T* gv, cudaStream_t stream) {
  const char* op = "linear_attention_causal_backward";
  LinArgs<T> a = lin_args(q, k, v, G, L, F, D, chunk);
  plan_segments(a, 2, op);
  const int64_t rows = G * L;
  std::shared_ptr<void> gbuf = be.allocate(static_cast<size_t>(rows) * (D + 1) * sizeof(T));
  T* gn = static_cast<T*>(gbuf.get());  // (G,L,D)
  T* gd = gn + rows * D;                // (G,L)
  linear_backward_prep_kernel<T><<<blocks_for(rows, 8), tile::kThreads, 0, stream>>>(y, den, gy, gn, gd, rows, D);
  check_launch(op);
  const size_t state = static_cast<size_t>(F) * (D + 1) * sizeof(T);
  const size_t blocks = static_cast<size_t>(G) * static_cast<size_t>(a.P);
  std::shared_ptr<void> init;
  T* init_s = nullptr;
  T* init_r = nullptr;
  if (a.P > 1) {
    init = be.allocate(2 * state * blocks);
    init_s = static_cast<T*>(init.get());
    init_r = init_s + blocks * static_cast<size_t>(F) * (D + 1);
    segment_states<T>(a, k, v, nullptr, false, init_s, stream, op);  // S, z before each segment
    segment_states<T>(a, q, gn, gd, true, init_r, stream, op);       // R, r after each segment
  }
  const size_t smem = shared_state_bytes(linear_backward_kernel<T>, state, op);
  std::shared_ptr<void> ws;
  if (smem == 0) ws = be.allocate(state * blocks);
  linear_backward_kernel<T><<<static_cast<unsigned>(blocks), tile::kThreads, smem, stream>>>(
      a, gn, gd, gq, gk, gv, static_cast<T*>(ws.get()), init_s, init_r);
  check_launch(op);
}

template void linear_attention_causal_cuda<float>(CudaBackend&, const float*, const float*, const float*, int64_t, int,
                                                  int, int, int, double, float*, float*, cudaStream_t);
template void linear_attention_causal_cuda<double>(CudaBackend&, const double*, const double*, const double*, int64_t,
                                                   int, int, int, int, double, double*, double*, cudaStream_t);
template void linear_attention_causal_backward_cuda<float>(CudaBackend&, const float*, const float*, const float*,
                                                           const float*, const float*, const float*, int64_t, int, int,
                                                           int, int, float*, float*, float*, cudaStream_t);
template void linear_attention_causal_backward_cuda<double>(CudaBackend&, const double*, const double*, const double*,
                                                            const double*, const double*, const double*, int64_t, int,
                                                            int, int, int, double*, double*, double*, cudaStream_t);

}  // namespace cuda
}  // namespace hh
