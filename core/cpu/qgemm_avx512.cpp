// The int8 GEMM, AVX-512 VNNI: uint8 activations (xq + 128) × int8 weights with vpdpbusd, 4
// products per int32 lane and instruction, minus comp[n] = 128 · Σ_k wq[n, k] at the end: the same
// exact int32 sum as the scalar and AVX2 paths. A micro-tile is up to 8 rows × 32 channels (16 zmm
// accumulators; per group of 4 k: 2 weight loads, 8 broadcasts folded into the vpdpbusd, 16
// vpdpbusd). Target attributes, not -m flags: see core/cpu/sgemm_kernels.h.
#include "core/cpu/qgemm.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <cmath>
#include <cstring>

#define HH_TARGET_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma")))

namespace hh::qgemm {

void quantize_u8_avx2(const float* x, int64_t ldx, int64_t m, int64_t k, int64_t kp, uint8_t* xq, float* sx);

namespace {

constexpr int64_t MR = 8;

// y tile (R rows, n <= 32 columns) = the sliver's product; xq uint8.
template <int R>
HH_TARGET_VNNI void micro(int64_t kp, const uint8_t* xq, int64_t ldx, const float* sx, const int8_t* w,
                          const int32_t* comp, const float* sw, const float* bias, float* y, int64_t ldy, int64_t n) {
  __m512i acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
  const int8_t* b = w;
  for (int64_t g = 0; g < kp / kGroup; ++g, b += kGroup * kNR) {
    const __m512i b0 = _mm512_load_si512(b), b1 = _mm512_load_si512(b + 64);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t a4;
      std::memcpy(&a4, xq + r * ldx + g * kGroup, 4);
      const __m512i a = _mm512_set1_epi32(a4);
      acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], a, b0);
      acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], a, b1);
    }
  }
  for (int64_t q = 0; q < 2; ++q) {
    const int64_t c0 = 16 * q, cols = n - c0;
    if (cols <= 0) break;
    const __mmask16 mask = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1u);
    const __m512i cp = _mm512_loadu_si512(comp + c0);
    const __m512 vsw = _mm512_loadu_ps(sw + c0);
    const __m512 bb = bias ? _mm512_maskz_loadu_ps(mask, bias + c0) : _mm512_setzero_ps();
    for (int r = 0; r < R; ++r) {
      // The masked form: GCC 12's _mm512_cvtepi32_ps reads an "uninitialized" source (-Wmaybe-uninitialized).
      const __m512 v = _mm512_mask_cvtepi32_ps(_mm512_setzero_ps(), 0xFFFF, _mm512_sub_epi32(acc[r][q], cp));
      const __m512 s = _mm512_mul_ps(_mm512_set1_ps(sx[r]), vsw);
      _mm512_mask_storeu_ps(y + r * ldy + c0, mask, _mm512_fmadd_ps(v, s, bb));
    }
  }
}

void micro_any(int64_t kp, const uint8_t* xq, int64_t ldx, const float* sx, int64_t m, const int8_t* w,
               const int32_t* comp, const float* sw, const float* bias, float* y, int64_t ldy, int64_t n) {
  switch (m) {
    case 8: micro<8>(kp, xq, ldx, sx, w, comp, sw, bias, y, ldy, n); break;
    case 7: micro<7>(kp, xq, ldx, sx, w, comp, sw, bias, y, ldy, n); break;
    case 6: micro<6>(kp, xq, ldx, sx, w, comp, sw, bias, y, ldy, n); break;
    case 5: micro<5>(kp, xq, ldx, sx, w, comp, sw, bias, y, ldy, n); break;
    case 4: micro<4>(kp, xq, ldx, sx, w, comp, sw, bias, y, ldy, n); break;
    case 3: micro<3>(kp, xq, ldx, sx, w, comp, sw, bias, y, ldy, n); break;
    case 2: micro<2>(kp, xq, ldx, sx, w, comp, sw, bias, y, ldy, n); break;
    default: micro<1>(kp, xq, ldx, sx, w, comp, sw, bias, y, ldy, n); break;
  }
}

const Kernel kVnni{"avx512_vnni", true, MR, &quantize_u8_avx2, &micro_any};

}  // namespace

const Kernel* avx512_vnni_kernel() { return &kVnni; }

}  // namespace hh::qgemm

#else
namespace hh::qgemm {
const Kernel* avx512_vnni_kernel() { return nullptr; }
}  // namespace hh::qgemm
#endif
