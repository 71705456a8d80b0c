// Streams and graphs of one CUDA device, as the core sees them: the core's interface, implemented
// by the CUDA module (through core/cuda_module.cpp) or core/cuda_stub.cpp. Plain header (no CUDA
// include); the CUDA backend's side is in cuda/cuda_backend.h (StreamGuard, thread_stream) and
// cuda/cuda_graph.h (CudaGraph).
#pragma once
#include <functional>
#include <memory>

namespace hh {

// Gives the calling thread a new stream of its own on CUDA device `index`: until the returned
// guard is destroyed, every kernel, copy and allocation this thread issues on that device goes to
// that stream, and other threads are not affected. Destroying the guard (on the same thread)
// waits for the stream, restores the thread's previous stream and destroys the new one. Tensors
// made on one stream must not be used on another before it is synchronized. Throws when the device
// does not exist or CUDA was not built.
std::shared_ptr<void> cuda_use_own_stream(int index);

// A captured CUDA graph: replay() runs the captured work again, on the calling thread's current
// stream of its device, on the same memory (see cuda/cuda_graph.h). Destroying it waits for the
// last replay and gives its memory pool back to the cache.
class CudaGraphReplay {
 public:
  virtual ~CudaGraphReplay() = default;
  virtual void replay() = 0;
};

// Captures `work` on the calling thread's current stream of CUDA device `index`: its kernels are
// recorded, not run, and its allocations come from the graph's own pool. Run the work once
// before (warm-up), make its inputs before, and keep the tensors it reads and writes alive for
// as long as the graph is replayed; work must not synchronize (no copy to the host). Throws when
// the capture fails (the graph is then discarded) or CUDA was not built.
std::shared_ptr<CudaGraphReplay> cuda_capture_graph(int index, const std::function<void()>& work);

}  // namespace hh
