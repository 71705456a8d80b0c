// PLACEHOLDER (to be replaced by the real kernels)
#include "core/cpu/cpu_backend.h"

namespace hh {
#define HH_TODO(sig) void CpuBackend::sig { fail("cpu: kernel not implemented yet"); }
HH_TODO(softmax(const Tensor&, const Tensor&, bool))
HH_TODO(softmax_backward(const Tensor&, const Tensor&, const Tensor&, bool))
HH_TODO(layer_norm(const Tensor&, const Tensor&, const Tensor&, double, const Tensor&, const Tensor&, const Tensor&))
HH_TODO(layer_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&))
HH_TODO(rms_norm(const Tensor&, const Tensor&, double, const Tensor&, const Tensor&))
HH_TODO(rms_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&))
HH_TODO(cross_entropy(const Tensor&, const Tensor&, const CrossEntropyParams&, const Tensor&, const Tensor&))
HH_TODO(cross_entropy_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const CrossEntropyParams&, const Tensor&))
#undef HH_TODO
}  // namespace hh
