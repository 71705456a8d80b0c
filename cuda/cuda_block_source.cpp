// The device's BlockSource for the caching allocator: cudaMalloc / cudaFree (see cuda_allocator.h).
// Kept apart from the allocator's bookkeeping so that the bookkeeping builds without CUDA.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "cuda/cuda_allocator.h"

namespace hh::cuda {

namespace {

// cudaFree during process shutdown, after the runtime or the context is gone, fails with one of
// these; the driver reclaims the memory with the context, so there is nothing to report.
bool is_shutdown_error(cudaError_t err) {
  return err == cudaErrorCudartUnloading || err == cudaErrorContextIsDestroyed || err == cudaErrorDeviceUninitialized;
}

BlockSource::Status cuda_alloc(int /*device*/, size_t nbytes, void** p, std::string* why) {
  // The caller (CudaBackend::allocate) has made the device current.
  const cudaError_t err = cudaMalloc(p, nbytes);
  if (err == cudaSuccess) return BlockSource::Status::ok;
  (void)cudaGetLastError();  // clear the error state before the caller retries
  *why = cudaGetErrorString(err);
  return err == cudaErrorMemoryAllocation ? BlockSource::Status::out_of_memory : BlockSource::Status::failed;
}

void cuda_free(int device, void* p) {
  // Deleters and the exit hook run with any device current: switch for the call (cudaFree takes
  // any device's pointer under unified addressing, but the switch keeps the call unambiguous).
  int prev = -1;
  const bool switched = cudaGetDevice(&prev) == cudaSuccess && prev != device && cudaSetDevice(device) == cudaSuccess;
  const cudaError_t err = cudaFree(p);
  if (switched) (void)cudaSetDevice(prev);
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();
  if (!is_shutdown_error(err))  // a deleter cannot throw: say it instead
    std::fprintf(stderr, "hedgehog: cuda:%d cudaFree(%p) failed: %s\n", device, p, cudaGetErrorString(err));
}

}  // namespace

BlockSource cuda_blocks() {
  const char* env = std::getenv("HH_CUDA_CACHE");
  const std::string v = env ? env : "1";
  HH_CHECK(v == "0" || v == "1", "HH_CUDA_CACHE must be 0 (no caching allocator) or 1 (the default), got '", v, "'");
  return {cuda_alloc, cuda_free, true, v == "1"};
}

}  // namespace hh::cuda
