// Packed f32 GEMM, AVX-512F: a 6×32 micro-tile (12 zmm accumulators, 2 B loads + 6 A
// broadcasts per k step, 12 FMAs: FMA-bound on two 512-bit FMA ports). It keeps the AVX2
// kernel's 6-row A packing, so only B's sliver is twice as wide.
#include "core/cpu/sgemm_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include "core/cpu/sgemm_x86.h"

#define HH_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))

namespace hh::sgemm {
namespace {

constexpr int64_t MR = 6, NR = 32;

// One row of a c tile: p[0..n) (n <= 32) = alpha · (acc[0], acc[1]) + beta · p; masked stores write
// only the valid columns of an edge tile, and beta == 0 never reads p.
HH_TARGET_AVX512 inline void store_row(float* p, const __m512 acc[2], int64_t n, float alpha, float beta) {
  for (int h = 0; h < 2; ++h) {
    const int64_t cols = n - 16 * h;
    if (cols <= 0) break;
    const __mmask16 mask = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1u);
    __m512 v = _mm512_mul_ps(_mm512_set1_ps(alpha), acc[h]);
    if (beta != 0.0f) v = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(mask, p + 16 * h), v);
    _mm512_mask_storeu_ps(p + 16 * h, mask, v);
  }
}

HH_TARGET_AVX512 void micro_6x32(int64_t kc, const float* __restrict a, const float* __restrict b, float* c,
                                 int64_t ldc, int64_t m, int64_t n, float alpha, float beta) {
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t r = 0; r < m; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 16), _MM_HINT_T0);
  }
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
    __m512 x = _mm512_set1_ps(a[0]);
    c00 = _mm512_fmadd_ps(x, b0, c00);
    c01 = _mm512_fmadd_ps(x, b1, c01);
    x = _mm512_set1_ps(a[1]);
    c10 = _mm512_fmadd_ps(x, b0, c10);
    c11 = _mm512_fmadd_ps(x, b1, c11);
    x = _mm512_set1_ps(a[2]);
    c20 = _mm512_fmadd_ps(x, b0, c20);
    c21 = _mm512_fmadd_ps(x, b1, c21);
    x = _mm512_set1_ps(a[3]);
    c30 = _mm512_fmadd_ps(x, b0, c30);
    c31 = _mm512_fmadd_ps(x, b1, c31);
    x = _mm512_set1_ps(a[4]);
    c40 = _mm512_fmadd_ps(x, b0, c40);
    c41 = _mm512_fmadd_ps(x, b1, c41);
    x = _mm512_set1_ps(a[5]);
    c50 = _mm512_fmadd_ps(x, b0, c50);
    c51 = _mm512_fmadd_ps(x, b1, c51);
    a += MR;
    b += NR;
  }
  const __m512 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int64_t r = 0; r < m; ++r) store_row(c + r * ldc, acc[r], n, alpha, beta);  // rows past m skipped
}

// 16 words of a bf16 sliver row (32 values, bf16_column's order) -> columns 0..15 and 16..31 as f32:
// one shift and one mask (a bf16 is the top half of its f32). The maskz forms with a full mask:
// GCC 12 warns (maybe-uninitialized) inside the plain ones.
HH_TARGET_AVX512 inline void widen_words(const uint16_t* src, __m512& lo, __m512& hi) {
  const __mmask16 all = 0xFFFF;
  const __m512i w = _mm512_loadu_si512(src);
  lo = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, w, 16));
  hi = _mm512_castsi512_ps(_mm512_maskz_and_epi32(all, w, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// A decoding step's rows (M <= 3): micro_6x32's arithmetic for those rows only (each element the
// same FMA chain from zero over k, so the same bits), B read once; bf16 B widened in registers.
template <int M, bool kBf16>
HH_TARGET_AVX512 void micro_rows(int64_t kc, const float* __restrict a, const void* __restrict bv, float* c, int64_t ldc,
                                 int64_t n, float alpha, float beta) {
  __m512 acc[M][2];
  for (int r = 0; r < M; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const float* b = static_cast<const float*>(bv);
  const uint16_t* h = static_cast<const uint16_t*>(bv);
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    __m512 b0, b1;
    if constexpr (kBf16) {
      widen_words(h + k * NR, b0, b1);
    } else {
      b0 = _mm512_load_ps(b + k * NR);
      b1 = _mm512_load_ps(b + k * NR + 16);
    }
    for (int r = 0; r < M; ++r) {
      const __m512 x = _mm512_set1_ps(a[k * MR + r]);
      acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
    }
  }
  for (int r = 0; r < M; ++r) store_row(c + r * ldc, acc[r], n, alpha, beta);  // as micro_6x32's stores
}

template <bool kBf16>
void micro_rows_any(int64_t kc, const float* a, const void* b, float* c, int64_t ldc, int64_t m, int64_t n, float alpha,
                    float beta) {
  if (m == 1) micro_rows<1, kBf16>(kc, a, b, c, ldc, n, alpha, beta);
  else if (m == 2) micro_rows<2, kBf16>(kc, a, b, c, ldc, n, alpha, beta);
  else micro_rows<3, kBf16>(kc, a, b, c, ldc, n, alpha, beta);
}

void pack_b32(const float* b, int64_t rs, int64_t cs, int64_t kc, int64_t n, float* dst) {
  pack_b_avx<NR>(b, rs, cs, kc, n, dst);
}

// A 32-wide bf16 sliver -> f32 (count a multiple of 32).
HH_TARGET_AVX512 void widen_bf16_avx512(const uint16_t* src, int64_t count, float* dst) {
  for (int64_t i = 0; i < count; i += 32) {
    __m512 lo, hi;
    widen_words(src + i, lo, hi);
    _mm512_store_ps(dst + i, lo);
    _mm512_store_ps(dst + i + 16, hi);
  }
}

// KC = kDepthBlock: a 32-wide B sliver is 24 KiB (L1 is 32-48 KiB on AVX-512 cores); MC = 144: the A
// block is 108 KiB (L2); NC = 3072: the B panel is 2.3 MiB.
const Kernel kAvx512{"avx512", MR, NR, kDepthBlock, 144, 3072, &pack_a6, &pack_b32, &micro_6x32,
                    &widen_bf16_avx512, &micro_rows_any<false>, &micro_rows_any<true>};

}  // namespace

const Kernel* avx512_kernel() { return &kAvx512; }

}  // namespace hh::sgemm

#else
namespace hh::sgemm {
const Kernel* avx512_kernel() { return nullptr; }
}  // namespace hh::sgemm
#endif
