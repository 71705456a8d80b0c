// The CUDA backend's stand-in for CPU-only builds: every entry point says CUDA was not built.
#include "core/backend.h"

namespace hh {

Backend& cuda_backend(int index) {
  fail(str("cuda:", index, ": hedgehog was built without CUDA (nvcc was not found at configure time)"));
}
bool cuda_available() { return false; }
int cuda_device_count() { return 0; }

}  // namespace hh
