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

// Row r of a micro-tile of R rows (nothing when r >= R): c0, c1 += its 4 activations · b0, b1.
template <int r, int R>
HH_TARGET_VNNI __attribute__((always_inline)) inline void row_step(const uint8_t* x, int64_t ldx, __m512i b0,
                                                                    __m512i b1, __m512i& c0, __m512i& c1) {
  if constexpr (r < R) {
    int32_t a4;
    std::memcpy(&a4, x + r * ldx, 4);
    const __m512i a = _mm512_set1_epi32(a4);
    c0 = _mm512_dpbusd_epi32(c0, a, b0);
    c1 = _mm512_dpbusd_epi32(c1, a, b1);
  }
}

// y tile (R rows, n <= 32 columns) = the sliver's product; xq uint8. The accumulators are named
// locals, not an array: with an array GCC 12 copied each one to another register and back around
// every vpdpbusd (and spilled two per k-group), 2.5 instructions per vpdpbusd.
template <int R>
HH_TARGET_VNNI void micro(int64_t kp, const uint8_t* xq, int64_t ldx, const float* sx, const int8_t* w,
                          const int32_t* comp, const float* sw, const float* bias, float* y, int64_t ldy, int64_t n) {
  const __m512i z = _mm512_setzero_si512();
  __m512i c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z;
  __m512i c40 = z, c41 = z, c50 = z, c51 = z, c60 = z, c61 = z, c70 = z, c71 = z;
  const int8_t* b = w;
  for (int64_t g = 0; g < kp / kGroup; ++g, b += kGroup * kNR) {
    const __m512i b0 = _mm512_load_si512(b), b1 = _mm512_load_si512(b + 64);
    const uint8_t* x = xq + g * kGroup;
    row_step<0, R>(x, ldx, b0, b1, c00, c01);
    row_step<1, R>(x, ldx, b0, b1, c10, c11);
    row_step<2, R>(x, ldx, b0, b1, c20, c21);
    row_step<3, R>(x, ldx, b0, b1, c30, c31);
    row_step<4, R>(x, ldx, b0, b1, c40, c41);
    row_step<5, R>(x, ldx, b0, b1, c50, c51);
    row_step<6, R>(x, ldx, b0, b1, c60, c61);
    row_step<7, R>(x, ldx, b0, b1, c70, c71);
  }
  const __m512i acc[8][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31},
                             {c40, c41}, {c50, c51}, {c60, c61}, {c70, c71}};
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
