// Helpers shared by the AVX2 and AVX-512 packed-GEMM files (x86 only). Internal linkage and a
// target attribute on every function: see sgemm_kernels.h for why.
#pragma once
#include <immintrin.h>

#include <cstdint>

#define HH_TARGET_AVX2 __attribute__((target("avx2,fma")))

namespace hh::sgemm {
namespace {

// In-register 8×8 transpose: r[i][j] -> r[j][i].
HH_TARGET_AVX2 inline void transpose8(__m256* r) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// A block (mc, kc) at a with strides (rs, cs) -> slivers of 6 rows, k-major (both x86 kernels
// use mr = 6). Writes 2 floats of slack past the last sliver.
HH_TARGET_AVX2 inline void pack_a6(const float* a, int64_t rs, int64_t cs, int64_t mc, int64_t kc, float* dst) {
  constexpr int64_t MR = 6;
  for (int64_t i0 = 0; i0 < mc; i0 += MR, dst += MR * kc) {
    const int64_t m = mc - i0 < MR ? mc - i0 : MR;
    const float* src = a + i0 * rs;
    if (m == MR && cs == 1) {  // row-major: 6 rows × 8 k, transposed in registers
      int64_t k = 0;
      for (; k + 8 <= kc; k += 8) {
        __m256 r[8];
        for (int i = 0; i < 6; ++i) r[i] = _mm256_loadu_ps(src + i * rs + k);
        r[6] = r[7] = _mm256_setzero_ps();
        transpose8(r);
        // Each store writes 8 floats for a 6-float column; the 2 extra are overwritten next.
        for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + (k + i) * MR, r[i]);
      }
      for (; k < kc; ++k)
        for (int64_t i = 0; i < MR; ++i) dst[k * MR + i] = src[i * rs + k];
    } else if (m == MR && rs == 1) {  // column-major: each k is 6 consecutive floats already
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t i = 0; i < MR; ++i) dst[k * MR + i] = src[k * cs + i];
    } else {
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t i = 0; i < MR; ++i) dst[k * MR + i] = i < m ? src[i * rs + k * cs] : 0.0f;
    }
  }
}

// One B sliver (kc, n <= NR) at b with strides (rs, cs) -> dst[k·NR + j] (dst 32-byte aligned),
// for NR a multiple of 8: row-major rows are vector copies, column-major ones 8×8 transposes.
template <int64_t NR>
HH_TARGET_AVX2 inline void pack_b_avx(const float* b, int64_t rs, int64_t cs, int64_t kc, int64_t n, float* dst) {
  if (n == NR && cs == 1) {
    for (int64_t k = 0; k < kc; ++k)
      for (int64_t h = 0; h < NR; h += 8) _mm256_store_ps(dst + k * NR + h, _mm256_loadu_ps(b + k * rs + h));
  } else if (n == NR && rs == 1) {  // column-major (e.g. linear's weightᵀ)
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8)
      for (int64_t h = 0; h < NR; h += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(b + (h + i) * cs + k);
        transpose8(r);
        for (int i = 0; i < 8; ++i) _mm256_store_ps(dst + (k + i) * NR + h, r[i]);
      }
    for (; k < kc; ++k)
      for (int64_t j = 0; j < NR; ++j) dst[k * NR + j] = b[j * cs + k];
  } else {
    for (int64_t k = 0; k < kc; ++k)
      for (int64_t j = 0; j < NR; ++j) dst[k * NR + j] = j < n ? b[k * rs + j * cs] : 0.0f;
  }
}

// 8 words of a bf16 sliver row (16 values, bf16_column's order) -> columns 0..7 and 8..15 as f32:
// a bf16 is the top half of its f32.
HH_TARGET_AVX2 inline void widen_words_avx2(const uint16_t* src, __m256& lo, __m256& hi) {
  const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  lo = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  hi = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// A 16-wide bf16 sliver -> f32 (count a multiple of 16).
HH_TARGET_AVX2 inline void widen_bf16_avx2(const uint16_t* src, int64_t count, float* dst) {
  for (int64_t i = 0; i < count; i += 16) {
    __m256 lo, hi;
    widen_words_avx2(src + i, lo, hi);
    _mm256_store_ps(dst + i, lo);
    _mm256_store_ps(dst + i + 8, hi);
  }
}

}  // namespace
}  // namespace hh::sgemm
