// CUDA memory statistics and cache control for one device: the core's interface, implemented by
// the CUDA module (cuda/cuda_backend.cpp, reached through core/cuda_module.cpp) or by
// core/cuda_stub.cpp in CPU-only builds. Plain header (no CUDA include), so apps and tests can
// query the caching allocator of a CUDA build. Throws hh::Error when the device does not exist.
#pragma once
#include <cstddef>

namespace hh {

struct MemoryStats {
  size_t current = 0;   // bytes held by live tensors (block sizes, rounded up)
  size_t peak = 0;      // highest `current` since start or the last cuda_reset_peak
  size_t reserved = 0;  // bytes obtained from cudaMalloc: live blocks plus the cache
};

MemoryStats cuda_memory_stats(int index);
void cuda_reset_peak(int index);
// Gives the cached free blocks back to the driver (after the device's stream is done).
void cuda_empty_cache(int index);

}  // namespace hh
