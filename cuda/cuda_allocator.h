// Caching allocator for one CUDA device: freed blocks go to size-bucketed free lists and are
// reused by later allocations of the same bucket, so steady-state training does no cudaMalloc.
// Blocks are only used on the owning device's one stream, so a block freed by the host while a
// kernel still reads it is safe to hand out again: the next user is ordered after that kernel.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cuda/cuda_memory.h"

namespace hh::cuda {

class CachingAllocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least nbytes (the caller has made device_ current). The deleter returns the
  // block to the cache; it makes no CUDA call, so it is safe at any time, even at exit.
  std::shared_ptr<void> allocate(size_t nbytes);

  MemoryStats stats() const;
  void reset_peak();
  // cudaFree's every cached block (the caller has made device_ current).
  void empty_cache();

  // Bucket size for a request: 512-byte steps below 1 MiB, then quarter-power-of-two steps
  // (at most 25% waste).
  static size_t bucket_size(size_t nbytes);

 private:
  void release(void* p, size_t size);
  void free_cached_locked();

  int device_;
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // bucket size -> cached blocks
  size_t current_ = 0, peak_ = 0, reserved_ = 0;
};

}  // namespace hh::cuda
