// CUDA-graph capture and replay (see cuda_graph.h).
#include "cuda/cuda_graph.h"

#include "core/cuda_stream.h"
#include "core/error.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_check.h"

namespace hh::cuda {

CudaGraph::CudaGraph(int device) : device_(device) { backend(device); /* checks the device exists */ }

CudaGraph::~CudaGraph() {
  try {
    DeviceGuard guard(device_);
    if (capturing_) {  // a capture that failed half-way: end it and throw the graph away
      cudaGraph_t g = nullptr;
      (void)cudaStreamEndCapture(capture_stream_, &g);
      if (g) (void)cudaGraphDestroy(g);
      (void)cudaGetLastError();
    }
    if (last_stream_) (void)cudaStreamSynchronize(last_stream_);  // the last replay still uses the pool
    if (exec_) (void)cudaGraphExecDestroy(exec_);
    if (graph_) (void)cudaGraphDestroy(graph_);
    if (pool_ != 0) backend(device_).allocator().release_pool(pool_);  // also closes a capture left open
  } catch (...) {  // a destructor cannot throw: the pool then stays reserved (a leak, not a fault)
  }
}

void CudaGraph::begin(PoolId share) {
  HH_CHECK(!capturing_ && pool_ == 0, "cuda graph: begin called twice (a graph is captured once; make a new one)");
  CudaBackend& b = backend(device_);
  DeviceGuard guard(device_);
  const cudaStream_t s = b.stream();
  // Blocks cached for this stream may move into the capture's pool: nothing may still use them.
  HH_CUDA_CHECK(cudaStreamSynchronize(s), "cuda graph begin");
  pool_ = b.allocator().begin_capture(stream_id(s), share);
  // Thread-local mode: other threads (concurrent runs) may keep allocating and launching; only
  // this thread is barred from calls that would break the capture.
  const cudaError_t err = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    b.allocator().end_capture(stream_id(s));
    if (share == 0) b.allocator().release_pool(pool_);
    pool_ = 0;
    fail(str("cuda graph begin: cudaStreamBeginCapture failed: ", cudaGetErrorString(err)));
  }
  capture_stream_ = s;
  capturing_ = true;
}

void CudaGraph::end() {
  HH_CHECK(capturing_, "cuda graph: end without begin");
  CudaBackend& b = backend(device_);
  DeviceGuard guard(device_);
  HH_CHECK(b.stream() == capture_stream_, "cuda graph end: the calling thread's current stream is not the one the "
                                          "capture began on (end it on the same thread and stream)");
  cudaGraph_t g = nullptr;
  const cudaError_t err = cudaStreamEndCapture(capture_stream_, &g);
  capturing_ = false;
  b.allocator().end_capture(stream_id(capture_stream_));
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (g) (void)cudaGraphDestroy(g);
    fail(str("cuda graph end: the capture failed (", cudaGetErrorString(err),
             "); a call that synchronizes or frees during a capture invalidates it"));
  }
  graph_ = g;
  HH_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0), "cuda graph instantiate");
}

void CudaGraph::replay() {
  HH_CHECK(exec_ != nullptr, "cuda graph: replay before a finished capture (call begin, the work, then end)");
  CudaBackend& b = backend(device_);
  DeviceGuard guard(device_);
  const cudaStream_t s = b.stream();
  // Replays on two streams would run at once on the same memory: keep them in order.
  if (last_stream_ && last_stream_ != s) HH_CUDA_CHECK(cudaStreamSynchronize(last_stream_), "cuda graph replay");
  HH_CUDA_CHECK(cudaGraphLaunch(exec_, s), "cuda graph replay");
  last_stream_ = s;
}

}  // namespace hh::cuda

namespace hh {

std::shared_ptr<CudaGraphReplay> cuda_capture_graph(int index, const std::function<void()>& work) {
  struct Captured final : CudaGraphReplay {
    explicit Captured(int device) : graph(device) {}
    void replay() override { graph.replay(); }
    cuda::CudaGraph graph;
  };
  auto c = std::make_shared<Captured>(index);
  c->graph.begin();
  work();  // if it throws, c's destructor ends the capture and releases the pool
  c->graph.end();
  return c;
}

}  // namespace hh
