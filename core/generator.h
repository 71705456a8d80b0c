// Generator: the explicit RNG handle (seed + offset in 128-bit Philox blocks). Passed to every
// random op; its state is two integers, so checkpoints store it exactly.
#pragma once
#include <cstdint>

namespace hh {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0, uint64_t offset = 0) : seed_(seed), offset_(offset) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) { seed_ = seed; offset_ = offset; }
  // Reserves `blocks` 128-bit blocks and returns the offset where they start.
  uint64_t advance(uint64_t blocks) {
    uint64_t o = offset_;
    offset_ += blocks;
    return o;
  }
  // Host-side draws (data order, shuffles): one block per call, deterministic.
  uint32_t next_u32();
  double next_uniform();                       // (0, 1]
  int64_t next_int(int64_t lo, int64_t hi);    // [lo, hi)

 private:
  uint64_t seed_;
  uint64_t offset_;
};

}  // namespace hh
