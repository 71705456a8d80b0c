// Streams for concurrent work on one CUDA device, as the core sees them. Plain header (no CUDA
// include); the CUDA backend's side is in cuda/cuda_backend.h (StreamGuard, current_stream).
#pragma once
#include <memory>

namespace hh {

// Gives the calling thread a new stream of its own on CUDA device `index`: until the returned
// guard is destroyed, every kernel, copy and allocation this thread issues on that device goes to
// that stream, and other threads are not affected. Destroying the guard (on the same thread)
// waits for the stream, restores the thread's previous stream and destroys the new one. Tensors
// made on one stream must not be used on another before it is synchronized. Throws when the device
// does not exist or CUDA was not built.
std::shared_ptr<void> cuda_use_own_stream(int index);

}  // namespace hh
