// Philox4x32-10 counter-based RNG (Salmon et al. 2011), host and device. The same (seed, counter)
// gives the same numbers on the CPU and on CUDA, which makes init, dropout and data order
// reproducible across backends and checkpointable as (seed, offset).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/dtype.h"

namespace hh {

struct Philox4 {
  uint32_t v[4];
};

HH_HOST_DEVICE inline void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// One 128-bit block: counter (c0..c3) under key (k0, k1), 10 rounds.
HH_HOST_DEVICE inline Philox4 philox4x32_10(uint64_t counter_lo, uint64_t counter_hi, uint64_t seed) {
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(0xD2511F53u, c0, hi0, lo0);
    philox_mulhilo(0xCD9E8D57u, c2, hi1, lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Uniform in (0, 1]: 24 random bits, never 0 so log() is safe.
HH_HOST_DEVICE inline float philox_uniform(uint32_t x) { return ((x >> 8) + 1u) * (1.0f / 16777216.0f); }
// Uniform in (0, 1] with 53 bits from two words (f64 tensors).
HH_HOST_DEVICE inline double philox_uniform53(uint32_t a, uint32_t b) {
  uint64_t m = (static_cast<uint64_t>(a >> 5) << 26) | (b >> 6);  // 27 + 26 bits
  return (m + 1.0) * (1.0 / 9007199254740992.0);
}

// The stream layout shared by every backend. Element i of a draw of n values at `offset`
// (counted in 128-bit blocks) uses block offset + i / per_block; each draw advances the
// generator by ceil(n / per_block) blocks.
//   uniform f32, randint, bernoulli: 4 per block (one word each)
//   uniform f64: 2 per block (two words each)
//   normal (f32 or f64): 2 per block, Box-Muller on the block's words (w0,w1) and (w2,w3)
struct PhiloxLayout {
  static constexpr int64_t uniform_f32 = 4;
  static constexpr int64_t uniform_f64 = 2;
  static constexpr int64_t normal = 2;
};

HH_HOST_DEVICE inline float philox_uniform_at(uint64_t seed, uint64_t offset, int64_t i) {
  Philox4 r = philox4x32_10(offset + static_cast<uint64_t>(i / 4), 0, seed);
  return philox_uniform(r.v[i % 4]);
}
HH_HOST_DEVICE inline double philox_uniform64_at(uint64_t seed, uint64_t offset, int64_t i) {
  Philox4 r = philox4x32_10(offset + static_cast<uint64_t>(i / 2), 0, seed);
  int j = static_cast<int>(i % 2) * 2;
  return philox_uniform53(r.v[j], r.v[j + 1]);
}
HH_HOST_DEVICE inline uint32_t philox_word_at(uint64_t seed, uint64_t offset, int64_t i) {
  Philox4 r = philox4x32_10(offset + static_cast<uint64_t>(i / 4), 0, seed);
  return r.v[i % 4];
}
// Standard normal, computed in double so f32 and f64 tensors see the same value up to rounding.
HH_HOST_DEVICE inline double philox_normal_at(uint64_t seed, uint64_t offset, int64_t i) {
  Philox4 r = philox4x32_10(offset + static_cast<uint64_t>(i / 2), 0, seed);
  int j = static_cast<int>(i % 2) * 2;
  double u1 = philox_uniform53(r.v[j], 0x9E3779B9u ^ r.v[j + 1]);
  double u2 = philox_uniform(r.v[j + 1]);
  return ::sqrt(-2.0 * ::log(u1)) * ::cos(6.283185307179586 * u2);
}

}  // namespace hh
