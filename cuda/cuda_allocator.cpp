// Caching allocator (see cuda_allocator.h).
#include "cuda/cuda_allocator.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "core/error.h"

namespace hh::cuda {

size_t CachingAllocator::bucket_size(size_t nbytes) {
  constexpr size_t kSmallStep = 512, kLarge = size_t(1) << 20;
  if (nbytes < kLarge) return std::max(kSmallStep, (nbytes + kSmallStep - 1) / kSmallStep * kSmallStep);
  size_t pow2 = kLarge;
  while (pow2 * 2 <= nbytes) pow2 *= 2;
  const size_t step = pow2 / 4;
  return (nbytes + step - 1) / step * step;
}

std::shared_ptr<void> CachingAllocator::allocate(size_t nbytes) {
  const size_t size = bucket_size(nbytes);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
    } else {
      cudaError_t err = cudaMalloc(&p, size);
      if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();  // clear the sticky-free error state before retrying
        free_cached_locked();
        err = cudaMalloc(&p, size);
      }
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        fail(str("cuda:", device_, " allocate: cudaMalloc of ", size, " bytes failed (", cudaGetErrorString(err),
                 "); in use by tensors ", current_, " bytes, reserved ", reserved_, " bytes"));
      }
      reserved_ += size;
    }
    current_ += size;
    peak_ = std::max(peak_, current_);
  }
  return std::shared_ptr<void>(p, [this, size](void* q) { release(q, size); });
}

void CachingAllocator::release(void* p, size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  free_[size].push_back(p);
  current_ -= size;
}

void CachingAllocator::free_cached_locked() {
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) {
      (void)cudaFree(p);  // synchronizes the device, so no queued kernel still reads the block
      reserved_ -= size;
    }
    blocks.clear();
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  free_cached_locked();
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  MemoryStats s;
  s.current = current_;
  s.peak = peak_;
  s.reserved = reserved_;
  return s;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = current_;
}

}  // namespace hh::cuda
