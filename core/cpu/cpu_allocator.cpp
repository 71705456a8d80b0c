#include "core/cpu/cpu_allocator.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>

#include "core/error.h"

namespace hh::cpu_alloc {

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kDefaultLimit = 0;
#else
constexpr size_t kDefaultLimit = size_t{2} << 30;
#endif

struct Cache {
  std::mutex mu;
  std::multimap<size_t, void*> free_blocks;  // block size -> block
  size_t bytes = 0;
  size_t limit = kDefaultLimit;

  // Frees cached blocks, largest first, until at most `target` bytes remain. Caller holds mu.
  size_t trim(size_t target) {
    size_t freed = 0;
    while (bytes > target && !free_blocks.empty()) {
      auto it = std::prev(free_blocks.end());
      std::free(it->second);
      bytes -= it->first;
      freed += it->first;
      free_blocks.erase(it);
    }
    return freed;
  }
};

std::atomic<size_t> g_offset{0};  // set_offset_for_testing

// Never destroyed: tensors with static storage may be freed after any static cache would be.
Cache& cache() {
  static Cache* c = new Cache;
  return *c;
}

}  // namespace

size_t block_size(size_t nbytes) {
  size_t n = (nbytes + 63) / 64 * 64;
  if (n == 0) return 64;
  if (n < kMinCachedBytes) return n;
  const int lg = 63 - __builtin_clzll(n);         // floor(log2 n) >= 20
  const size_t step = size_t{1} << (lg - 3);      // 8 classes per octave: at most 12.5% slack
  return (n + step - 1) / step * step;
}

void* allocate(size_t nbytes) {
  const size_t block = block_size(nbytes);
  if (const size_t offset = g_offset.load(std::memory_order_relaxed); offset != 0) {
    void* base = std::aligned_alloc(64, block + 64);
    HH_CHECK(base != nullptr, "cpu allocate: out of memory for ", nbytes, " bytes");
    return static_cast<char*>(base) + offset;
  }
  if (block >= kMinCachedBytes) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.free_blocks.find(block);
    if (it != c.free_blocks.end()) {
      void* p = it->second;
      c.free_blocks.erase(it);
      c.bytes -= block;
      return p;
    }
  }
  void* p = std::aligned_alloc(64, block);
  if (p == nullptr && block >= kMinCachedBytes && empty_cache() > 0) p = std::aligned_alloc(64, block);
  HH_CHECK(p != nullptr, "cpu allocate: out of memory for ", nbytes, " bytes");
  return p;
}

void release(void* p, size_t block) {
  if (p == nullptr) return;
  if (const size_t misaligned = reinterpret_cast<uintptr_t>(p) % 64; misaligned != 0) {  // an offset block
    std::free(static_cast<char*>(p) - misaligned);
    return;
  }
  if (block >= kMinCachedBytes) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.bytes + block <= c.limit) {
      c.free_blocks.emplace(block, p);
      c.bytes += block;
      return;
    }
  }
  std::free(p);
}

size_t empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.trim(0);
}

size_t cached_bytes() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.bytes;
}

void set_cache_limit(size_t bytes) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.limit = bytes;
  c.trim(bytes);
}

size_t cache_limit() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.limit;
}

void set_offset_for_testing(size_t bytes) {
  HH_CHECK(bytes < 64 && bytes % 8 == 0, "cpu_alloc::set_offset_for_testing: expected a multiple of 8 below 64, got ",
           bytes);
  g_offset.store(bytes, std::memory_order_relaxed);
}

size_t offset_for_testing() { return g_offset.load(std::memory_order_relaxed); }

}  // namespace hh::cpu_alloc
