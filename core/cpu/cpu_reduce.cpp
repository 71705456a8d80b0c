// PLACEHOLDER (to be replaced by the real kernels)
#include "core/cpu/cpu_backend.h"

namespace hh {
#define HH_TODO(sig) void CpuBackend::sig { fail("cpu: kernel not implemented yet"); }
HH_TODO(reduce(ReduceOp, const Tensor&, const Tensor&, const Tensor&))
HH_TODO(cumsum(const Tensor&, const Tensor&))
#undef HH_TODO
}  // namespace hh
