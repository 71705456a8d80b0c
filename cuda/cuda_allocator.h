// Caching allocator for one CUDA device: freed blocks go to size-bucketed free lists and are
// reused by later allocations of the same bucket, so steady-state training does no cudaMalloc.
//
// Streams: every block belongs to the stream it was allocated on (an opaque StreamId), and a
// freed block is reused only by a later allocation on that same stream. A block freed by the
// host while a kernel of its stream still reads it is then safe to hand out again: its next user
// is queued behind that kernel. Concurrent runs on their own streams never get a block that
// another stream's kernels may still be using. (A tensor allocated on one stream and used on
// another must be kept alive, or that stream synchronized, until the other stream is done.)
//
// CUDA-graph capture: while a capture is open on a stream, allocations on it come from a private
// pool of that capture: the pool's free blocks first, then blocks cached for that same stream
// (the caller synchronized it before capturing, so nothing still uses them), then new device
// memory. Blocks freed during or after the capture go back to the pool, never to the general
// cache, so no other allocation can get an address the graph's kernels write on replay. The pool
// lives until release_pool (the graph is destroyed); its blocks then join the capturing stream's
// cache. No block is ever freed to the driver while a capture is open (cudaFree would break it).
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
// reused block, is invisible to it). scripts/cuda-sanitize uses it. Graph capture needs the cache.
//
// This file and cuda_allocator.cpp make no CUDA call (cuda_block_source.cpp has the device's
// BlockSource), so the bookkeeping is tested on host memory in every build.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/cuda_memory.h"

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
// cudaMalloc/cudaFree, caching unless HH_CUDA_CACHE=0 (throws on another value). Defined in
// cuda_block_source.cpp (the CUDA module only).
BlockSource cuda_blocks();

// Which stream an allocation is for: the cudaStream_t's value, as an opaque number.
using StreamId = std::uintptr_t;
// A capture's private pool; 0 is no pool.
using PoolId = uint64_t;

struct PoolStats {
  size_t blocks = 0;    // blocks the pool owns, free or held by tensors
  size_t reserved = 0;  // their bytes
  size_t in_use = 0;    // bytes of those held by tensors
};

class CachingAllocator {
 public:
  explicit CachingAllocator(int device, BlockSource source = cuda_blocks());
  // Gives every block back, like release_all().
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least nbytes for use on `stream` (the caller has made the device current). The
  // deleter returns the block to its stream's cache (or its capture pool) and makes no CUDA call,
  // so it is safe at any time; after release_all it frees the block instead, or does nothing when
  // release_all already freed it.
  std::shared_ptr<void> allocate(size_t nbytes, StreamId stream = 0);

  // ---- graph capture ----
  // Opens a capture on `stream`: until end_capture(stream), its allocations come from a private
  // pool, a new one or, when `share` names a live pool of the same stream, that one (a second
  // graph of the same step reuses the first one's blocks). The caller has synchronized `stream`.
  // Throws when a capture is already open on it, when caching is off (HH_CUDA_CACHE=0) or when
  // `share` is not a live pool of `stream`.
  PoolId begin_capture(StreamId stream, PoolId share = 0);
  // Closes the capture on `stream` (throws when none is open). The pool keeps its blocks.
  void end_capture(StreamId stream);
  // Gives the pool's blocks to its stream's cache (the graph is destroyed and its last replay has
  // finished); blocks still held by tensors follow when those die. Closes the capture first if it
  // is still open (a failed capture). Unknown or released ids are ignored.
  void release_pool(PoolId pool);
  // Throws when `pool` is not live.
  PoolStats pool_stats(PoolId pool) const;
  // Whether a capture is open on `stream` (any stream when stream is omitted).
  bool capturing(StreamId stream) const;
  bool capturing() const;

  MemoryStats stats() const;
  void reset_peak();
  // Stream `from` is being destroyed (the caller synchronized it): its cached blocks join the
  // cache of stream `to`. Blocks still held by tensors return to `from`'s cache when they die
  // (a new stream that gets the same id reuses them; empty_cache frees them).
  void retire_stream(StreamId from, StreamId to);
  // Bytes of free blocks cached for `stream` (not counting capture pools).
  size_t cached_bytes(StreamId stream) const;
  // Frees every cached block of every stream; capture pools keep theirs (the caller has made the
  // device current and synchronized it). Throws while a capture is open.
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
  // Adds the state to the process-wide exit hook (see the top of this file).
  static void register_release_at_exit(const std::shared_ptr<State>& state);

  std::shared_ptr<State> state_;
};

}  // namespace hh::cuda
