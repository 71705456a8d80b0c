// The int8 GEMM, AVX2: int8 activations × int8 weights with vpmaddubsw on (|x|, sign(w, x)) (the
// sign moved onto the weight makes the unsigned operand |x| ≤ 127, so a pair of products is at most
// 2 · 127² = 32258 and never saturates int16), then vpmaddwd by 1 into int32: exact, the same sum
// as the scalar and VNNI paths. A micro-tile is up to 4 rows × 16 channels (8 ymm accumulators; the
// 32-channel sliver in two halves). Target attributes, not -m flags: see core/cpu/sgemm_kernels.h.
#include "core/cpu/qgemm.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <cmath>
#include <cstring>

#define HH_TARGET_AVX2 __attribute__((target("avx2,fma")))

namespace hh::qgemm {
namespace {

constexpr int64_t MR = 4;

// Rows of x (f32) -> int8 (or uint8 = int8 + 128 when u8); see qgemm.h for the arithmetic.
HH_TARGET_AVX2 void quantize_rows(const float* x, int64_t ldx, int64_t m, int64_t k, int64_t kp, uint8_t* xq, float* sx,
                                  bool u8) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7), lo = _mm256_set1_epi32(-127),
                hi = _mm256_set1_epi32(127), flip = _mm256_set1_epi8(static_cast<char>(u8 ? 0x80 : 0));
  for (int64_t r = 0; r < m; ++r) {
    const float* row = x + r * ldx;
    uint8_t* q = xq + r * kp;
    __m256 vmax = _mm256_setzero_ps(), vnan = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
      const __m256 v = _mm256_loadu_ps(row + i);
      vmax = _mm256_max_ps(vmax, _mm256_and_ps(v, absmask));
      vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, vmax);
    float amax = 0.0f;
    bool nan = _mm256_movemask_ps(vnan) != 0;
    for (float l : lanes) amax = l > amax ? l : amax;
    for (; i < k; ++i) {
      const float a = std::fabs(row[i]);
      nan |= std::isnan(a);
      amax = a > amax ? a : amax;
    }
    if (nan) amax = NAN;
    float inv;
    row_scale(amax, sx[r], inv);
    if (!std::isfinite(sx[r])) {
      std::memset(q, u8 ? 0x80 : 0, static_cast<size_t>(kp));
      continue;
    }
    const __m256 vinv = _mm256_set1_ps(inv);
#define HH_QUANT8(p) _mm256_min_epi32(hi, _mm256_max_epi32(lo, _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p), vinv))))
    i = 0;
    for (; i + 32 <= k; i += 32) {
      // cvtps rounds half to even (the default mode); the packs interleave the 128-bit lanes.
      const __m256i a = _mm256_packs_epi32(HH_QUANT8(row + i), HH_QUANT8(row + i + 8));
      const __m256i b = _mm256_packs_epi32(HH_QUANT8(row + i + 16), HH_QUANT8(row + i + 24));
      const __m256i c = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, b), perm);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), _mm256_xor_si256(c, flip));
    }
#undef HH_QUANT8
    for (; i < k; ++i) {
      const float v = std::nearbyint(row[i] * inv);
      const auto s = static_cast<int8_t>(v < -127.0f ? -127.0f : (v > 127.0f ? 127.0f : v));
      q[i] = static_cast<uint8_t>(static_cast<uint8_t>(s) ^ (u8 ? 0x80 : 0));
    }
    for (; i < kp; ++i) q[i] = u8 ? 0x80 : 0;
  }
}

void quantize_i8(const float* x, int64_t ldx, int64_t m, int64_t k, int64_t kp, uint8_t* xq, float* sx) {
  quantize_rows(x, ldx, m, k, kp, xq, sx, false);
}

// Row r of a micro-tile of R rows (nothing when r >= R): c0, c1 += its 4 activations · b0, b1.
template <int r, int R>
HH_TARGET_AVX2 __attribute__((always_inline)) inline void row_step(const uint8_t* x, int64_t ldx, __m256i b0,
                                                                    __m256i b1, __m256i ones, __m256i& c0, __m256i& c1) {
  if constexpr (r < R) {
    int32_t a4;
    std::memcpy(&a4, x + r * ldx, 4);
    const __m256i a = _mm256_set1_epi32(a4), aa = _mm256_abs_epi8(a);
    c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(_mm256_maddubs_epi16(aa, _mm256_sign_epi8(b0, a)), ones));
    c1 = _mm256_add_epi32(c1, _mm256_madd_epi16(_mm256_maddubs_epi16(aa, _mm256_sign_epi8(b1, a)), ones));
  }
}

// y tile (R rows, n <= 32 columns) = the sliver's product; xq int8. Named accumulators, not an
// array (see qgemm_avx512.cpp: GCC 12 copied and spilled an array's around every step).
template <int R>
HH_TARGET_AVX2 void micro(int64_t kp, const uint8_t* xq, int64_t ldx, const float* sx, const int8_t* w,
                          const float* sw, const float* bias, float* y, int64_t ldy, int64_t n) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t h = 0; h < 2 && 16 * h < n; ++h) {
    const __m256i z = _mm256_setzero_si256();
    __m256i c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z;
    const int8_t* b = w + h * 64;
    for (int64_t g = 0; g < kp / kGroup; ++g, b += kGroup * kNR) {
      const __m256i b0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(b));
      const __m256i b1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(b + 32));
      const uint8_t* x = xq + g * kGroup;
      row_step<0, R>(x, ldx, b0, b1, ones, c00, c01);
      row_step<1, R>(x, ldx, b0, b1, ones, c10, c11);
      row_step<2, R>(x, ldx, b0, b1, ones, c20, c21);
      row_step<3, R>(x, ldx, b0, b1, ones, c30, c31);
    }
    const __m256i acc[4][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}};
    for (int r = 0; r < R; ++r)
      for (int64_t q = 0; q < 2; ++q) {
        const int64_t c0 = 16 * h + 8 * q, cols = n - c0;
        if (cols <= 0) break;
        const __m256 s = _mm256_mul_ps(_mm256_set1_ps(sx[r]), _mm256_loadu_ps(sw + c0));
        const __m256 v = _mm256_cvtepi32_ps(acc[r][q]);
        float* out = y + r * ldy + c0;
        if (cols >= 8) {
          const __m256 bb = bias ? _mm256_loadu_ps(bias + c0) : _mm256_setzero_ps();
          _mm256_storeu_ps(out, _mm256_fmadd_ps(v, s, bb));
        } else {
          float vs[8], ss[8];
          _mm256_storeu_ps(vs, v);
          _mm256_storeu_ps(ss, s);
          for (int64_t j = 0; j < cols; ++j) out[j] = std::fma(vs[j], ss[j], bias ? bias[c0 + j] : 0.0f);
        }
      }
  }
}

void micro_any(int64_t kp, const uint8_t* xq, int64_t ldx, const float* sx, int64_t m, const int8_t* w,
               const int32_t* /*comp*/, const float* sw, const float* bias, float* y, int64_t ldy, int64_t n) {
  switch (m) {
    case 4: micro<4>(kp, xq, ldx, sx, w, sw, bias, y, ldy, n); break;
    case 3: micro<3>(kp, xq, ldx, sx, w, sw, bias, y, ldy, n); break;
    case 2: micro<2>(kp, xq, ldx, sx, w, sw, bias, y, ldy, n); break;
    default: micro<1>(kp, xq, ldx, sx, w, sw, bias, y, ldy, n); break;
  }
}

const Kernel kAvx2{"avx2", false, MR, &quantize_i8, &micro_any};

}  // namespace

const Kernel* avx2_kernel() { return &kAvx2; }

// The AVX-512 file's quantizer is this one with u8 = true (the row pass is memory-bound).
void quantize_u8_avx2(const float* x, int64_t ldx, int64_t m, int64_t k, int64_t kp, uint8_t* xq, float* sx) {
  quantize_rows(x, ldx, m, k, kp, xq, sx, true);
}

}  // namespace hh::qgemm

#else
namespace hh::qgemm {
const Kernel* avx2_kernel() { return nullptr; }
}  // namespace hh::qgemm
#endif
