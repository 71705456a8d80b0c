// PLACEHOLDER (to be replaced by the real kernels)
#include "core/cpu/cpu_backend.h"

namespace hh {
#define HH_TODO(sig) void CpuBackend::sig { fail("cpu: kernel not implemented yet"); }
HH_TODO(index_select(const Tensor&, const Tensor&, const Tensor&))
HH_TODO(index_add(const Tensor&, const Tensor&, const Tensor&))
HH_TODO(gather(const Tensor&, const Tensor&, const Tensor&))
HH_TODO(scatter_add(const Tensor&, const Tensor&, const Tensor&))
HH_TODO(triangle(const Tensor&, const Tensor&, int64_t, bool))
#undef HH_TODO
}  // namespace hh
