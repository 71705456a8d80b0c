// The f32 row sum's AVX2 and AVX-512 blocks (core/cpu/rowsum.h): functions with a target attribute,
// called only when cpu_isa() allows them (see core/cpu/sgemm_kernels.h for why not -m flags).
#include "core/cpu/rowsum.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

namespace hh::rowsum {
namespace {

// 8 ymm accumulators of 4 doubles: accumulator q, element t holds lane 4q + t.
__attribute__((target("avx2"))) void blocks_avx2(const float* p, int64_t n, double* lane) {
  __m256d acc[8];
  for (int q = 0; q < 8; ++q) acc[q] = _mm256_loadu_pd(lane + 4 * q);
  for (int64_t i = 0; i < n; i += kLanes)
    for (int q = 0; q < 8; ++q) acc[q] = _mm256_add_pd(acc[q], _mm256_cvtps_pd(_mm_loadu_ps(p + i + 4 * q)));
  for (int q = 0; q < 8; ++q) _mm256_storeu_pd(lane + 4 * q, acc[q]);
}

// 4 zmm accumulators of 8 doubles: accumulator q, element t holds lane 8q + t.
__attribute__((target("avx512f"))) void blocks_avx512(const float* p, int64_t n, double* lane) {
  __m512d acc[4];
  for (int q = 0; q < 4; ++q) acc[q] = _mm512_loadu_pd(lane + 8 * q);
  const __mmask8 all = 0xFF;  // the maskz form: GCC 12 warns (maybe-uninitialized) inside the plain one
  for (int64_t i = 0; i < n; i += kLanes)
    for (int q = 0; q < 4; ++q)
      acc[q] = _mm512_add_pd(acc[q], _mm512_maskz_cvtps_pd(all, _mm256_loadu_ps(p + i + 8 * q)));
  for (int q = 0; q < 4; ++q) _mm512_storeu_pd(lane + 8 * q, acc[q]);
}

}  // namespace

BlockFn avx2_blocks() { return &blocks_avx2; }
BlockFn avx512_blocks() { return &blocks_avx512; }

}  // namespace hh::rowsum

#else
namespace hh::rowsum {
BlockFn avx2_blocks() { return nullptr; }
BlockFn avx512_blocks() { return nullptr; }
}  // namespace hh::rowsum
#endif
