// Block-level tile products shared by the attention kernels (cuda_flash_attention.cu,
// cuda_attention.cu). A block of kThreads = 256 threads computes a kRows × (16·NJ) tile
// C += A·B: thread t (ty = t / 16, tx = t % 16) accumulates rows ty·4 + i (i < 4) and columns
// tx + 16·j (j < NJ) in registers, and the block stages kSlab-deep slabs of A and B in shared
// memory (the caller's `slab`, slab_elems<NJ>() elements). Operands are strided views of global or
// shared memory (generic pointers) that read as 0 outside their extent, so ragged tiles need no
// special cases. Every thread of the block must make the same calls (they synchronize the block):
// mma begins each slab with __syncthreads(), so shared memory that the caller wrote before the
// call is visible to it, and everything the caller read in shared memory before it is free to
// overwrite after it. Included by .cu files only.
#pragma once
#include <cstdint>

namespace hh::cuda::tile {

constexpr int kThreads = 256;
constexpr int kRows = 64;  // output tile rows: 16 thread rows × 4
constexpr int kSlab = 16;  // reduction depth staged per step

// Shared-memory elements mma<T, NJ> needs (padded rows keep the staging stores conflict-free).
template <int NJ>
constexpr int slab_elems() {
  return kSlab * (kRows + 1) + kSlab * (16 * NJ + 1);
}

template <typename T>
struct Operand {
  const T* p;
  int64_t rs, cs;  // element (r, c) at p[r·rs + c·cs]
  int rows, cols;  // extent; reads outside it give 0
};

__device__ __forceinline__ int tx() { return static_cast<int>(threadIdx.x) % 16; }
__device__ __forceinline__ int ty() { return static_cast<int>(threadIdx.x) / 16; }

template <typename T, int NJ>
__device__ __forceinline__ void zero(T (&acc)[4][NJ]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j) acc[i][j] = T(0);
}

// acc (kRows × 16·NJ, this thread's part) += A (kRows × K) · B (K × 16·NJ).
template <typename T, int NJ>
__device__ void mma(T (&acc)[4][NJ], const Operand<T>& a, const Operand<T>& b, int K, T* slab) {
  constexpr int kCols = 16 * NJ, lda = kRows + 1, ldb = kCols + 1;
  T* as = slab;                // [kSlab][lda]: A slab, transposed
  T* bs = slab + kSlab * lda;  // [kSlab][ldb]
  const int t = static_cast<int>(threadIdx.x), r0 = ty() * 4, c0 = tx();
  for (int k0 = 0; k0 < K; k0 += kSlab) {
    __syncthreads();  // the previous slab (or the caller's shared data) is no longer being read
    // Consecutive threads walk the operand's unit-stride direction (coalesced global reads).
    for (int e = t; e < kRows * kSlab; e += kThreads) {
      const bool kfast = a.cs == 1;
      const int r = kfast ? e / kSlab : e % kRows, k = kfast ? e % kSlab : e / kRows, kk = k0 + k;
      as[k * lda + r] = (r < a.rows && kk < a.cols && kk < K) ? a.p[r * a.rs + kk * a.cs] : T(0);
    }
    for (int e = t; e < kSlab * kCols; e += kThreads) {
      const bool cfast = b.cs == 1;
      const int c = cfast ? e % kCols : e / kSlab, k = cfast ? e / kCols : e % kSlab, kk = k0 + k;
      bs[k * ldb + c] = (kk < b.rows && kk < K && c < b.cols) ? b.p[kk * b.rs + c * b.cs] : T(0);
    }
    __syncthreads();
#pragma unroll 4
    for (int k = 0; k < kSlab; ++k) {
      T av[4], bv[NJ];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = as[k * lda + r0 + i];
#pragma unroll
      for (int j = 0; j < NJ; ++j) bv[j] = bs[k * ldb + c0 + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < NJ; ++j) acc[i][j] += av[i] * bv[j];
    }
  }
}

// Sum and max over the 16 threads of a thread row (one half warp). Every thread must call them.
template <typename T>
__device__ __forceinline__ T row_sum16(T v) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <typename T>
__device__ __forceinline__ T row_max16(T v) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) {
    const T w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}

}  // namespace hh::cuda::tile
