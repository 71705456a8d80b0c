// The CUDA module's fills of the core's kernel slots (core/kernel.h). A launcher fills its slot
// with one static object next to it:
//   static const CudaKernelFill fill(kernels::gated_linear_forward, &gated_linear_forward_cuda);
// The compiler checks that the launcher has the slot's signature; the module hands every fill to
// the core in its table (cuda_module::Api::kernels), where the slot finds it by name.
#pragma once
#include <vector>

#include "core/cuda_module.h"
#include "core/kernel.h"

namespace hh::cuda {

// Every fill of this module, in static-initialization order.
std::vector<cuda_module::KernelEntry>& kernel_fills();

struct CudaKernelFill {
  template <class... Args>
  CudaKernelFill(const Kernel<void(Args...)>& slot, void (*fn)(Args...)) {
    kernel_fills().push_back({slot.name(), Kernel<void(Args...)>::signature(), reinterpret_cast<AnyKernelFn>(fn)});
  }
};

}  // namespace hh::cuda
