// Fused softmax attention on CUDA, FlashAttention-2 style, f32, head dims up to 128. Tiles of
// 64 queries × 64 keys; products are block tile products (cuda_attention_tile.cuh) with slabs
// staged in shared memory and accumulators in registers.
//   forward:  one block per (g, query tile); online softmax (running max m and sum l per row,
//             the output accumulator rescaled when m grows); P goes through shared memory for P·V.
//   backward: Δ = rowsum(dO ∘ O) first; then one block per (g, key tile) accumulates dK and dV
//             over the query tiles, and one block per (g, query tile) accumulates dQ over the key
//             tiles (a separate pass instead of atomics: deterministic). P is recomputed from lse.
// Causal: query tiles stop at the diagonal key tile, key tiles start at the diagonal query tile.
// A query that sees no key (all its scores -inf) gets zeros, lse = -inf, and zero gradients.
#include <cmath>

#include "cuda/cuda_attention_tile.cuh"
#include "cuda/cuda_common.cuh"

namespace hh {
namespace cuda {
namespace {

// ---- device code ----

constexpr int kTile = tile::kRows;  // queries / keys per tile
constexpr int kLdp = kTile + 1;     // row stride of the (64,64) probability tiles in shared memory

// q (G,Lq,D), k (G,Lk,D), v (G,Lk,Dv), contiguous.
struct FlashArgs {
  const float* q;
  const float* k;
  const float* v;
  int64_t G;
  int Lq, Lk, D, Dv;
  int causal;
  float scale;
};

// Blocks are numbered g · tiles + tile (grid.x only: no 65535 limit on G).
struct BlockTile {
  int64_t g;
  int t0;
};
__device__ __forceinline__ BlockTile block_tile(int L) {
  const int tiles = (L + kTile - 1) / kTile;
  const int64_t b = blockIdx.x;
  return {b / tiles, static_cast<int>(b % tiles) * kTile};
}

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

// NJ·16 >= Dv. out (G,Lq,Dv), lse (G,Lq).
template <int NJ>
__global__ void __launch_bounds__(tile::kThreads) flash_forward_kernel(FlashArgs a, float* out, float* lse) {
  __shared__ float slab[tile::slab_elems<NJ>()];
  __shared__ float ps[kTile * kLdp];  // P of the current key tile (queries × keys)
  const BlockTile bt = block_tile(a.Lq);
  const int64_t g = bt.g;
  const int q0 = bt.t0, nq = imin(kTile, a.Lq - q0), tx = tile::tx(), ty = tile::ty();
  const float* kg = a.k + g * a.Lk * a.D;
  const float* vg = a.v + g * a.Lk * a.Dv;
  const tile::Operand<float> qop{a.q + (g * a.Lq + q0) * a.D, a.D, 1, nq, a.D};
  const float ninf = -INFINITY;
  float m[4], l[4], o[4][NJ];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = ninf;
    l[i] = 0.f;
  }
  tile::zero(o);
  const int kend = a.causal ? imin(a.Lk, q0 + nq) : a.Lk;
  for (int k0 = 0; k0 < kend; k0 += kTile) {
    const int nk = imin(kTile, kend - k0);
    float s[4][4];
    tile::zero(s);
    tile::mma<float, 4>(s, qop, {kg + static_cast<int64_t>(k0) * a.D, 1, a.D, a.D, nk}, a.D, slab);  // Q Kᵀ
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = ty * 4 + i;
      float mx = ninf;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = tx + 16 * j;
        const bool ok = c < nk && !(a.causal && k0 + c > q0 + r);
        s[i][j] = ok ? s[i][j] * a.scale : ninf;
        mx = s[i][j] > mx ? s[i][j] : mx;
      }
      mx = tile::row_max16(mx);
      const float mn = mx > m[i] ? mx : m[i];
      const float shift = mn == ninf ? 0.f : mn;  // a row with every key masked so far stays at 0
      const float alpha = expf(m[i] - shift);
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        s[i][j] = expf(s[i][j] - shift);
        sum += s[i][j];
        ps[r * kLdp + tx + 16 * j] = s[i][j];
      }
      sum = tile::row_sum16(sum);
      l[i] = l[i] * alpha + sum;
      m[i] = mn;
#pragma unroll
      for (int j = 0; j < NJ; ++j) o[i][j] *= alpha;
    }
    tile::mma<float, NJ>(o, {ps, kLdp, 1, kTile, nk}, {vg + static_cast<int64_t>(k0) * a.Dv, a.Dv, 1, nk, a.Dv}, nk,
                         slab);  // O += P V
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty * 4 + i;
    if (r >= nq) continue;
    const int64_t row = g * a.Lq + q0 + r;
    const bool any = l[i] > 0.f;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int c = tx + 16 * j;
      if (c < a.Dv) out[row * a.Dv + c] = any ? o[i][j] / l[i] : 0.f;
    }
    if (tx == 0) lse[row] = any ? m[i] + logf(l[i]) : ninf;
  }
}

// delta (rows) = Σ_c gout·out per row of (rows, Dv): one warp per row, 8 rows per block.
__global__ void __launch_bounds__(tile::kThreads)
    flash_delta_kernel(const float* out, const float* gout, float* delta, int64_t rows, int Dv) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.x) * 8; r0 < rows; r0 += static_cast<int64_t>(gridDim.x) * 8) {
    const int64_t row = r0 + warp;
    float s = 0.f;
    if (row < rows)
      for (int c = lane; c < Dv; c += 32) s += gout[row * Dv + c] * out[row * Dv + c];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (row < rows && lane == 0) delta[row] = s;
  }
}

// One block per (g, key tile): gk (G,Lk,D) = scale Σ dSᵀ Q, gv (G,Lk,Dv) = Σ Pᵀ dO. NJ·16 >= D, Dv.
// The tiles are computed transposed (keys × queries), so each thread keeps its own key rows.
template <int NJ>
__global__ void __launch_bounds__(tile::kThreads)
    flash_backward_kv_kernel(FlashArgs a, const float* gout, const float* lse, const float* delta, float* gk,
                             float* gv) {
  __shared__ float slab[tile::slab_elems<NJ>()];
  __shared__ float pt[kTile * kLdp], dst[kTile * kLdp];  // Pᵀ, dSᵀ (keys × queries)
  const BlockTile bt = block_tile(a.Lk);
  const int64_t g = bt.g;
  const int k0 = bt.t0, nk = imin(kTile, a.Lk - k0), tx = tile::tx(), ty = tile::ty();
  const float* qg = a.q + g * a.Lq * a.D;
  const float* og = gout + g * a.Lq * a.Dv;
  const float* lg = lse + g * a.Lq;
  const float* dg = delta + g * a.Lq;
  const tile::Operand<float> kop{a.k + (g * a.Lk + k0) * a.D, a.D, 1, nk, a.D};
  const tile::Operand<float> vop{a.v + (g * a.Lk + k0) * a.Dv, a.Dv, 1, nk, a.Dv};
  float dk[4][NJ], dv[4][NJ];
  tile::zero(dk);
  tile::zero(dv);
  for (int q0 = a.causal ? k0 : 0; q0 < a.Lq; q0 += kTile) {  // causal: earlier queries see no key here
    const int nq = imin(kTile, a.Lq - q0);
    float st[4][4], dpt[4][4];
    tile::zero(st);
    tile::zero(dpt);
    tile::mma<float, 4>(st, kop, {qg + static_cast<int64_t>(q0) * a.D, 1, a.D, a.D, nq}, a.D, slab);       // K Qᵀ
    tile::mma<float, 4>(dpt, vop, {og + static_cast<int64_t>(q0) * a.Dv, 1, a.Dv, a.Dv, nq}, a.Dv, slab);  // V dOᵀ
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = tx + 16 * j;  // query q0 + c
      const bool qok = c < nq;
      const float lq = qok ? lg[q0 + c] : 0.f, dq = qok ? dg[q0 + c] : 0.f;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = ty * 4 + i;  // key k0 + r
        // lse = -inf: the query sees no key, its output is a constant 0 and passes no gradient.
        const bool ok = qok && lq != -INFINITY && r < nk && !(a.causal && k0 + r > q0 + c);
        const float p = ok ? expf(st[i][j] * a.scale - lq) : 0.f;
        pt[r * kLdp + c] = p;
        dst[r * kLdp + c] = p * (dpt[i][j] - dq);
      }
    }
    tile::mma<float, NJ>(dv, {pt, kLdp, 1, kTile, nq}, {og + static_cast<int64_t>(q0) * a.Dv, a.Dv, 1, nq, a.Dv}, nq,
                         slab);  // dV += Pᵀ dO
    tile::mma<float, NJ>(dk, {dst, kLdp, 1, kTile, nq}, {qg + static_cast<int64_t>(q0) * a.D, a.D, 1, nq, a.D}, nq,
                         slab);  // dK += dSᵀ Q
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty * 4 + i;
    if (r >= nk) continue;
    const int64_t row = g * a.Lk + k0 + r;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int c = tx + 16 * j;
      if (c < a.D) gk[row * a.D + c] = dk[i][j] * a.scale;
      if (c < a.Dv) gv[row * a.Dv + c] = dv[i][j];
    }
  }
}

// One block per (g, query tile): gq (G,Lq,D) = scale Σ_keys dS K. NJ·16 >= D.
template <int NJ>
__global__ void __launch_bounds__(tile::kThreads)
    flash_backward_q_kernel(FlashArgs a, const float* gout, const float* lse, const float* delta, float* gq) {
  __shared__ float slab[tile::slab_elems<NJ>()];
  __shared__ float ds[kTile * kLdp];  // dS (queries × keys)
  const BlockTile bt = block_tile(a.Lq);
  const int64_t g = bt.g;
  const int q0 = bt.t0, nq = imin(kTile, a.Lq - q0), tx = tile::tx(), ty = tile::ty();
  const float* kg = a.k + g * a.Lk * a.D;
  const float* vg = a.v + g * a.Lk * a.Dv;
  const tile::Operand<float> qop{a.q + (g * a.Lq + q0) * a.D, a.D, 1, nq, a.D};
  const tile::Operand<float> oop{gout + (g * a.Lq + q0) * a.Dv, a.Dv, 1, nq, a.Dv};
  float lr[4], dr[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty * 4 + i;
    lr[i] = r < nq ? lse[g * a.Lq + q0 + r] : 0.f;
    dr[i] = r < nq ? delta[g * a.Lq + q0 + r] : 0.f;
  }
  float dq[4][NJ];
  tile::zero(dq);
  const int kend = a.causal ? imin(a.Lk, q0 + nq) : a.Lk;
  for (int k0 = 0; k0 < kend; k0 += kTile) {
    const int nk = imin(kTile, kend - k0);
    float s[4][4], dp[4][4];
    tile::zero(s);
    tile::zero(dp);
    tile::mma<float, 4>(s, qop, {kg + static_cast<int64_t>(k0) * a.D, 1, a.D, a.D, nk}, a.D, slab);       // Q Kᵀ
    tile::mma<float, 4>(dp, oop, {vg + static_cast<int64_t>(k0) * a.Dv, 1, a.Dv, a.Dv, nk}, a.Dv, slab);  // dO Vᵀ
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = ty * 4 + i;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = tx + 16 * j;
        const bool ok = r < nq && lr[i] != -INFINITY && c < nk && !(a.causal && k0 + c > q0 + r);  // as above
        const float p = ok ? expf(s[i][j] * a.scale - lr[i]) : 0.f;
        ds[r * kLdp + c] = p * (dp[i][j] - dr[i]);
      }
    }
    tile::mma<float, NJ>(dq, {ds, kLdp, 1, kTile, nk}, {kg + static_cast<int64_t>(k0) * a.D, a.D, 1, nk, a.D}, nk,
                         slab);  // dQ += dS K
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty * 4 + i;
    if (r >= nq) continue;
    const int64_t row = g * a.Lq + q0 + r;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int c = tx + 16 * j;
      if (c < a.D) gq[row * a.D + c] = dq[i][j] * a.scale;
    }
  }
}

// ---- launchers ----

FlashArgs flash_args(const float* q, const float* k, const float* v, int64_t G, int Lq, int Lk, int D, int Dv,
                     bool causal, float scale) {
  return {q, k, v, G, Lq, Lk, D, Dv, causal ? 1 : 0, scale};
}

unsigned tile_blocks(const FlashArgs& a, int L) {
  const int64_t b = a.G * ((L + kTile - 1) / kTile);
  HH_CHECK(b < (int64_t(1) << 31), "flash_attention: too many (batch·head, tile) blocks: ", b);
  return static_cast<unsigned>(b);
}

}  // namespace

// Head dims up to 128 use 128-wide accumulator tiles (NJ = 8), up to 64 the narrower ones (NJ = 4).
void flash_attention_cuda(const float* q, const float* k, const float* v, int64_t G, int Lq, int Lk, int D, int Dv,
                          bool causal, float scale, float* out, float* lse, cudaStream_t stream) {
  const FlashArgs a = flash_args(q, k, v, G, Lq, Lk, D, Dv, causal, scale);
  const unsigned blocks = tile_blocks(a, Lq);
  if (Dv <= 64)
    flash_forward_kernel<4><<<blocks, tile::kThreads, 0, stream>>>(a, out, lse);
  else
    flash_forward_kernel<8><<<blocks, tile::kThreads, 0, stream>>>(a, out, lse);
  check_launch("flash_attention");
}

void flash_attention_backward_cuda(CudaBackend& be, const float* q, const float* k, const float* v, const float* out,
                                   const float* lse, const float* gout, int64_t G, int Lq, int Lk, int D, int Dv,
                                   bool causal, float scale, float* gq, float* gk, float* gv, cudaStream_t stream) {
  const char* op = "flash_attention_backward";
  const FlashArgs a = flash_args(q, k, v, G, Lq, Lk, D, Dv, causal, scale);
  const int64_t rows = G * Lq;
  std::shared_ptr<void> dbuf = be.allocate(static_cast<size_t>(rows) * sizeof(float));  // Δ (G,Lq)
  float* delta = static_cast<float*>(dbuf.get());
  flash_delta_kernel<<<blocks_for(rows, 8), tile::kThreads, 0, stream>>>(out, gout, delta, rows, Dv);
  check_launch(op);
  if (Lk > 0) {
    const unsigned blocks = tile_blocks(a, Lk);
    if (D > 64 || Dv > 64)
      flash_backward_kv_kernel<8><<<blocks, tile::kThreads, 0, stream>>>(a, gout, lse, delta, gk, gv);
    else
      flash_backward_kv_kernel<4><<<blocks, tile::kThreads, 0, stream>>>(a, gout, lse, delta, gk, gv);
    check_launch(op);
  }
  const unsigned blocks = tile_blocks(a, Lq);
  if (D > 64)
    flash_backward_q_kernel<8><<<blocks, tile::kThreads, 0, stream>>>(a, gout, lse, delta, gq);
  else
    flash_backward_q_kernel<4><<<blocks, tile::kThreads, 0, stream>>>(a, gout, lse, delta, gq);
  check_launch(op);
}

}  // namespace cuda
}  // namespace hh
