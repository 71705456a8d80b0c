// CPU memory counters (atomics updated by CpuBackend::allocate and its deleter) and the
// device-generic memory_stats / reset_peak_memory entry points.
#include "core/memory.h"

#include <atomic>

#include "core/cpu/cpu_allocator.h"

namespace hh {

namespace {
std::atomic<size_t> g_cpu_current{0};
std::atomic<size_t> g_cpu_peak{0};

// Raises the peak to at least v (lock-free max).
void raise_peak(size_t v) {
  size_t p = g_cpu_peak.load(std::memory_order_relaxed);
  while (v > p && !g_cpu_peak.compare_exchange_weak(p, v, std::memory_order_relaxed)) {
  }
}
}  // namespace

namespace detail {
void cpu_memory_allocated(size_t nbytes) {
  size_t now = g_cpu_current.fetch_add(nbytes, std::memory_order_relaxed) + nbytes;
  raise_peak(now);
}
void cpu_memory_freed(size_t nbytes) { g_cpu_current.fetch_sub(nbytes, std::memory_order_relaxed); }
}  // namespace detail

MemoryStats memory_stats(Device d) {
  if (d.is_cuda()) return cuda_memory_stats(d.index);
  MemoryStats s;
  s.current = g_cpu_current.load(std::memory_order_relaxed);
  s.peak = g_cpu_peak.load(std::memory_order_relaxed);
  if (s.peak < s.current) s.peak = s.current;  // a concurrent allocation between the two loads
  s.reserved = s.current + cpu_alloc::cached_bytes();
  return s;
}

void empty_cache(Device d) {
  if (d.is_cuda()) {
    cuda_empty_cache(d.index);
    return;
  }
  cpu_alloc::empty_cache();
}

void reset_peak_memory(Device d) {
  if (d.is_cuda()) {
    cuda_reset_peak(d.index);
    return;
  }
  g_cpu_peak.store(g_cpu_current.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace hh
