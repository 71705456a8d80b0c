// The CUDA backend's stand-in for CPU-only builds (core/cuda_module.cpp is compiled instead in
// CUDA builds): every CUDA entry point of the core says CUDA was not built.
#include "core/backend.h"
#include "core/cuda_config.h"
#include "core/cuda_memory.h"
#include "core/cuda_stream.h"
#include "core/kernel.h"

namespace hh {

Backend& cuda_backend(int index) {
  fail(str("cuda:", index, ": hedgehog was built without CUDA (nvcc was not found at configure time)"));
}
bool cuda_available() { return false; }
AnyKernelFn find_cuda_kernel(const char* name, const char* /*signature*/) {
  fail(str("kernel ", name, ": hedgehog was built without CUDA (nvcc was not found at configure time)"));
}
int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() {
  return "hedgehog was built without CUDA (nvcc was not found at configure time)";
}

MemoryStats cuda_memory_stats(int index) {
  fail(str("cuda_memory_stats(", index, "): hedgehog was built without CUDA"));
}
void cuda_reset_peak(int index) { fail(str("cuda_reset_peak(", index, "): hedgehog was built without CUDA")); }
void cuda_empty_cache(int index) { fail(str("cuda_empty_cache(", index, "): hedgehog was built without CUDA")); }
void set_allow_tf32(bool on) {
  if (on) fail("set_allow_tf32: TF32 is a mode of CUDA GEMMs and hedgehog was built without CUDA");
}
bool allow_tf32() { return false; }
std::shared_ptr<void> cuda_use_own_stream(int index) {
  fail(str("cuda_use_own_stream(", index, "): hedgehog was built without CUDA"));
}
std::shared_ptr<CudaGraphReplay> cuda_capture_graph(int index, const std::function<void()>& /*work*/) {
  fail(str("cuda_capture_graph(", index, "): hedgehog was built without CUDA"));
}

}  // namespace hh
