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
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  // Masked stores write only the valid columns of an edge tile; rows past m are skipped.
  for (int64_t r = 0; r < m; ++r)
    for (int h = 0; h < 2; ++h) {
      const int64_t cols = n - 16 * h;
      if (cols <= 0) break;
      const __mmask16 mask = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1u);
      float* p = c + r * ldc + 16 * h;
      __m512 v = _mm512_mul_ps(va, acc[r][h]);
      if (beta != 0.0f) v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask, p), v);
      _mm512_mask_storeu_ps(p, mask, v);
    }
}

void pack_b32(const float* b, int64_t rs, int64_t cs, int64_t kc, int64_t n, float* dst) {
  pack_b_avx<NR>(b, rs, cs, kc, n, dst);
}

// KC = kDepthBlock: a 32-wide B sliver is 24 KiB (L1 is 32-48 KiB on AVX-512 cores); MC = 144: the A
// block is 108 KiB (L2); NC = 3072: the B panel is 2.3 MiB.
const Kernel kAvx512{"avx512", MR, NR, kDepthBlock, 144, 3072, &pack_a6, &pack_b32, &micro_6x32};

}  // namespace

const Kernel* avx512_kernel() { return &kAvx512; }

}  // namespace hh::sgemm

#else
namespace hh::sgemm {
const Kernel* avx512_kernel() { return nullptr; }
}  // namespace hh::sgemm
#endif
