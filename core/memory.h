// Memory accounting per device: bytes held by live tensor storage now, and the peak since start
// or the last reset_peak_memory. CPU counts come from CpuBackend::allocate (64-byte rounded block
// sizes); CUDA devices report their caching allocator's numbers (core/cuda_memory.h).
#pragma once
#include <cstddef>

#include "core/cuda_memory.h"  // struct MemoryStats {current, peak, reserved} (shared with CUDA)
#include "core/device.h"

namespace hh {

// CPU: current/peak as counted by CpuBackend::allocate; reserved adds the block cache
// (core/cpu/cpu_allocator.h).
// CUDA: the caching allocator's statistics; throws when built without CUDA.
MemoryStats memory_stats(Device d);
// Sets the device's peak to its current usage.
void reset_peak_memory(Device d);
// Gives the device's cached free blocks back to the system (torch.cuda.empty_cache).
void empty_cache(Device d);

namespace detail {
// Called by the CPU allocator for every block it hands out / takes back (thread-safe).
void cpu_memory_allocated(size_t nbytes);
void cpu_memory_freed(size_t nbytes);
}  // namespace detail

}  // namespace hh
