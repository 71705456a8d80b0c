// CPU tensor storage: 64-byte aligned blocks, with large blocks cached for reuse.
//
// A fresh multi-megabyte buffer from the C library is fresh pages from the kernel, and the first
// touch of each 4 KiB page is a page fault (about 6 µs each on the development VM): a memory-bound
// op on a new 32 MiB output spent most of its time there. Blocks of at least kMinCachedBytes are
// therefore kept on free, in size classes of 1/8 octave, and handed out again for the next request
// of the same class, the way PyTorch's CUDA caching allocator works. Small blocks go straight to
// the C library, whose own free lists already reuse them. Thread-safe.
#pragma once
#include <cstddef>

namespace hh::cpu_alloc {

constexpr size_t kMinCachedBytes = size_t{1} << 20;

// The block size a request of `nbytes` gets (64-byte multiple; rounded to its size class when
// large). Never 0.
size_t block_size(size_t nbytes);
// A 64-byte aligned block of block_size(nbytes) bytes; throws hh::Error when out of memory.
void* allocate(size_t nbytes);
// Takes back a block from allocate(nbytes), by its block size.
void release(void* p, size_t block);
// Frees every cached block. Returns the bytes freed.
size_t empty_cache();
// Bytes held in the cache (not in use by any tensor).
size_t cached_bytes();
// Upper bound on cached bytes (default 2 GiB; 0 disables caching, as in sanitizer builds, where a
// reused block would hide a use-after-free). Shrinks the cache at once if it is over the new limit.
void set_cache_limit(size_t bytes);
size_t cache_limit();

// For tests of determinism: every block allocate() hands out from now on starts `bytes` past a
// 64-byte boundary (a multiple of 8 below 64, so every dtype stays aligned to its size; 0, the
// default, restores aligned blocks). Such blocks bypass the cache; release() frees them whatever
// the offset is by then. A kernel whose result depends on its operands' addresses (a vectorized
// loop that peels up to the first aligned element) gives different bits under a different offset.
void set_offset_for_testing(size_t bytes);
size_t offset_for_testing();

}  // namespace hh::cpu_alloc
