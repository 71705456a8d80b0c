// Packed f32 GEMM, AVX2 + FMA: a 6×16 micro-tile (12 ymm accumulators, 2 B loads + 6 A
// broadcasts per k step). Eigen 3.4's own float kernel reached ~62% of the per-core FMA peak on
// Zen 3; this one ~80-90% (apps/bench_ops.cpp). Packing with in-register 8×8 transposes mattered:
// scalar packing of a row-major A cost 40% of the time for N = 64.
#include <cmath>

#include "core/cpu/sgemm_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include "core/cpu/sgemm_x86.h"

namespace hh::sgemm {
namespace {

constexpr int64_t MR = 6, NR = 16;

HH_TARGET_AVX2 void micro_6x16(int64_t kc, const float* __restrict a, const float* __restrict b, float* c,
                               int64_t ldc, int64_t m, int64_t n, float alpha, float beta) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t r = 0; r < m; ++r) _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    __m256 x = _mm256_broadcast_ss(a);
    c00 = _mm256_fmadd_ps(x, b0, c00);
    c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(x, b0, c10);
    c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(x, b0, c20);
    c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(x, b0, c30);
    c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(x, b0, c40);
    c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(x, b0, c50);
    c51 = _mm256_fmadd_ps(x, b1, c51);
    a += MR;
    b += NR;
  }
  const __m256 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  if (m == MR && n == NR) {
    for (int64_t r = 0; r < MR; ++r)
      for (int h = 0; h < 2; ++h) {
        float* p = c + r * ldc + 8 * h;
        __m256 v = _mm256_mul_ps(va, acc[r][h]);
        if (beta != 0.0f) v = _mm256_fmadd_ps(vb, _mm256_loadu_ps(p), v);
        _mm256_storeu_ps(p, v);
      }
    return;
  }
  alignas(32) float t[MR][NR];  // edge tile: spill, then write the valid part
  for (int64_t r = 0; r < MR; ++r) {
    _mm256_store_ps(t[r], acc[r][0]);
    _mm256_store_ps(t[r] + 8, acc[r][1]);
  }
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      float* p = c + r * ldc + j;
      *p = beta != 0.0f ? std::fma(beta, *p, alpha * t[r][j]) : alpha * t[r][j];  // as the full tile
    }
}

// A decoding step's rows (M <= 3): micro_6x16's arithmetic for those rows only (each element the
// same FMA chain from zero over k, so the same bits), B read once; bf16 B widened in registers.
template <int M, bool kBf16>
HH_TARGET_AVX2 void micro_rows(int64_t kc, const float* __restrict a, const void* __restrict bv, float* c, int64_t ldc,
                               int64_t n, float alpha, float beta) {
  __m256 acc[M][2];
  for (int r = 0; r < M; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const float* b = static_cast<const float*>(bv);
  const uint16_t* h = static_cast<const uint16_t*>(bv);
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    __m256 b0, b1;
    if constexpr (kBf16) {
      widen_words_avx2(h + k * NR, b0, b1);
    } else {
      b0 = _mm256_load_ps(b + k * NR);
      b1 = _mm256_load_ps(b + k * NR + 8);
    }
    for (int r = 0; r < M; ++r) {
      const __m256 x = _mm256_broadcast_ss(a + k * MR + r);
      acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
    }
  }
  alignas(32) float t[NR];
  for (int r = 0; r < M; ++r) {
    _mm256_store_ps(t, acc[r][0]);
    _mm256_store_ps(t + 8, acc[r][1]);
    for (int64_t j = 0; j < n; ++j) {
      float* p = c + r * ldc + j;
      *p = beta != 0.0f ? std::fma(beta, *p, alpha * t[j]) : alpha * t[j];  // as micro_6x16
    }
  }
}

template <bool kBf16>
void micro_rows_any(int64_t kc, const float* a, const void* b, float* c, int64_t ldc, int64_t m, int64_t n, float alpha,
                    float beta) {
  if (m == 1) micro_rows<1, kBf16>(kc, a, b, c, ldc, n, alpha, beta);
  else if (m == 2) micro_rows<2, kBf16>(kc, a, b, c, ldc, n, alpha, beta);
  else micro_rows<3, kBf16>(kc, a, b, c, ldc, n, alpha, beta);
}

void pack_b16(const float* b, int64_t rs, int64_t cs, int64_t kc, int64_t n, float* dst) {
  pack_b_avx<NR>(b, rs, cs, kc, n, dst);
}

// KC = kDepthBlock (AVX-512's, for the same bits): a 16-wide B sliver is 12 KiB (L1); MC = 144: the
// A block is 108 KiB (L2); NC = 3072: the B panel is 2.3 MiB (L3).
const Kernel kAvx2{"avx2", MR, NR, kDepthBlock, 144, 3072, &pack_a6, &pack_b16, &micro_6x16, &widen_bf16_avx2,
                  &micro_rows_any<false>, &micro_rows_any<true>};

}  // namespace

const Kernel* avx2_kernel() { return &kAvx2; }

}  // namespace hh::sgemm

#else
namespace hh::sgemm {
const Kernel* avx2_kernel() { return nullptr; }
}  // namespace hh::sgemm
#endif
