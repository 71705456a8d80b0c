// CUDA-graph capture and replay of work issued on one thread's current stream (a fixed-shape
// training step, say), wired to the caching allocator's capture pools:
//
//   step();                    // warm-up, eager: creates the cuBLAS handle, fills the caches
//   cuda::CudaGraph g(device);
//   g.begin();                 // waits for the stream, then captures it
//   step();                    // recorded, not run; allocations come from g's private pool
//   g.end();                   // instantiates the graph
//   g.replay();                // runs it on the current stream, as often as wanted
//
// Every address the captured kernels use stays reserved for the graph (the pool) until it is
// destroyed, so each replay reads and writes the same memory: the step's inputs must be copied
// into the tensors the capture read, and its outputs read from the tensors it wrote (kept alive
// by the caller). During a capture nothing may synchronize the stream (no copy to the host, no
// item()) and nothing may free device memory (the allocator does not, while a capture is open).
// Destroying the graph waits for its last replay and hands the pool's blocks back to the cache.
#pragma once
#include <cuda_runtime.h>

#include "cuda/cuda_allocator.h"

namespace hh::cuda {

class CudaGraph {
 public:
  explicit CudaGraph(int device);
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Starts capturing the calling thread's current stream of the device (after waiting for it).
  // `share`: the pool of another live graph of the same stream to allocate from (see
  // CachingAllocator::begin_capture). Throws when this graph was captured already.
  void begin(PoolId share = 0);
  // Ends the capture (on the thread and stream that began it) and instantiates the graph.
  void end();
  // Launches the graph on the calling thread's current stream of the device.
  void replay();
  // The capture's pool (0 before begin).
  PoolId pool() const { return pool_; }
  bool captured() const { return exec_ != nullptr; }

 private:
  int device_;
  cudaStream_t capture_stream_ = nullptr;  // while capturing
  cudaStream_t last_stream_ = nullptr;     // of the last replay: waited for on destruction
  PoolId pool_ = 0;
  bool capturing_ = false;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace hh::cuda
