// The f32 row sum (a reduction over a contiguous last dim: sum and mean), accumulated in double in
// one fixed order on every ISA path, so its bits never depend on the machine:
//   lane[j] = Σ over i ≡ j (mod kLanes), i ascending, of double(p[i]);  sum = lane[0] + lane[1] + ... in order.
// kLanes independent accumulators keep the adds' latency off the critical path: one vector
// accumulator ran at 25 GB/s (an add's latency per 8 doubles), torch's row sum at 44.
#pragma once
#include <cstdint>

namespace hh::rowsum {

constexpr int64_t kLanes = 32;

// The lanes of p[0..n) (whole blocks of kLanes only: n a multiple of kLanes), added onto lane[].
// nullptr where the compiler cannot target the ISA.
using BlockFn = void (*)(const float* p, int64_t n, double* lane);
BlockFn avx2_blocks();
BlockFn avx512_blocks();

// The sum above, on the widest path cpu_isa() allows.
double sum_f32(const float* p, int64_t n);

}  // namespace hh::rowsum
