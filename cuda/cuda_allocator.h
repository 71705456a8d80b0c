// Caching allocator for one CUDA device: freed blocks go to size-bucketed free lists and are
// reused by later allocations of the same bucket, so steady-state training does no cudaMalloc.
// Blocks are only used on the owning device's one stream, so a block freed by the host while a
// kernel still reads it is safe to hand out again: the next user is ordered after that kernel.
//
// Release at exit: the backends (and so their allocators) are never destroyed, so that tensors
// freed during static destruction still find their allocator. Instead, the first successful
// cudaMalloc registers the allocator with a process-wide exit hook (a function-local static, so it
// is destroyed before the CUDA runtime, which was initialised earlier). At exit the hook gives
// every block back, cached ones and those of tensors still alive, so compute-sanitizer's leak
// check is clean. A tensor dying after that returns nothing: its block was already freed, and the
// allocation counter (an epoch) tells the deleter so, which rules out a double free.
//
// HH_CUDA_CACHE=0 in the environment turns the cache off: every tensor gets a cudaMalloc of its
// exact size, freed when it dies. Slow, but compute-sanitizer's memcheck then sees every
// out-of-bounds access (with the cache, one that stays inside a bucket's rounding, or hits a
// reused block, is invisible to it). scripts/cuda-sanitize uses it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "cuda/cuda_memory.h"

namespace hh::cuda {

// Where the allocator's raw blocks come from: cudaMalloc/cudaFree on the device (cuda_blocks()),
// or host memory in the tests of the bookkeeping, which need no GPU.
struct BlockSource {
  enum class Status { ok, out_of_memory, failed };
  // Allocates nbytes on `device` into *p; on failure *why says what went wrong.
  Status (*alloc)(int device, size_t nbytes, void** p, std::string* why);
  // Frees p. Must not throw: it runs in tensor deleters and at exit, where the CUDA runtime may
  // already be shutting down.
  void (*free)(int device, void* p);
  // Register with the exit hook on the first allocation (the CUDA source only).
  bool release_at_exit;
  // Cache freed blocks in buckets; when false, blocks have the exact size asked for and are
  // freed as soon as their tensor dies.
  bool cache;
};
// cudaMalloc/cudaFree, caching unless HH_CUDA_CACHE=0 (throws on another value).
BlockSource cuda_blocks();

class CachingAllocator {
 public:
  explicit CachingAllocator(int device, BlockSource source = cuda_blocks());
  // Gives every block back, like release_all().
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least nbytes (the caller has made the device current). The deleter returns the
  // block to the cache and makes no CUDA call, so it is safe at any time; after release_all it
  // frees the block instead, or does nothing when release_all already freed it.
  std::shared_ptr<void> allocate(size_t nbytes);

  MemoryStats stats() const;
  void reset_peak();
  // Frees every cached block (the caller has made the device current and synchronized it).
  void empty_cache();
  // Frees every block, cached or still held by a tensor, and stops caching: from then on blocks
  // have the exact size asked for and are freed as soon as their tensor dies. For the end of the
  // process (the exit hook calls it): the memory of tensors still alive must not be used
  // afterwards. Idempotent.
  void release_all();

  // Bucket size for a request: 512-byte steps below 1 MiB, then quarter-power-of-two steps
  // (at most 25% waste).
  static size_t bucket_size(size_t nbytes);

  struct State;  // shared with the deleters (cuda_allocator.cpp)

 private:
  std::shared_ptr<State> state_;
};

}  // namespace hh::cuda
