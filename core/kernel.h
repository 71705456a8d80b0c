// Kernels declared once, filled by each backend (the path for every new kernel; the Backend
// methods in core/backend.h are the older path). A Kernel<void(Args...)> is a named slot with
// the CPU entry points (the baseline and the AVX2 copy, core/cpu/cpu_kernels.h) and, once looked
// up, the CUDA one. An op calls it as `kernels::foo(device, args...)`.
//
// The CUDA module (cuda/, a dlopen'ed shared object with its own copy of the core) fills a slot
// by name: a static `CudaKernelFill` next to the launcher (cuda/cuda_kernel_fill.h) adds it to the
// table the module hands the core when it loads (cuda_module::Api::kernels); the first CUDA call
// of a slot finds its entry there by name, checks that the signatures are the same type, and keeps
// the pointer. So a new kernel changes neither the Backend interface nor the module's ABI.
// "How to add an op" in docs/ARCHITECTURE.md walks through one.
#pragma once
#include <atomic>
#include <typeinfo>

#include "core/device.h"
#include "core/cpu_isa.h"

namespace hh {

// Any function pointer, as the module's table carries it (cast back to the slot's own type only
// after the signatures matched).
using AnyKernelFn = void (*)();

// The CUDA module's entry for the kernel named `name` whose type is `signature` (typeid name);
// throws hh::Error naming the kernel when the module has none, or has it with another signature,
// or CUDA is not built (core/cuda_module.cpp, core/cuda_stub.cpp).
AnyKernelFn find_cuda_kernel(const char* name, const char* signature);

template <class Sig>
class Kernel;

template <class... Args>
class Kernel<void(Args...)> {
 public:
  using Fn = void (*)(Args...);
  constexpr Kernel(const char* name, Fn cpu_baseline, Fn cpu_avx2)
      : name_(name), baseline_(cpu_baseline), avx2_(cpu_avx2) {}

  const char* name() const { return name_; }
  static const char* signature() { return typeid(Fn).name(); }

  // Runs the kernel for `device` (the op has checked the arguments: they are all on it).
  void operator()(Device device, Args... args) const {
    if (device.is_cpu())
      (cpu_isa() >= CpuIsa::avx2 ? avx2_ : baseline_)(args...);
    else
      cuda()(args...);
  }

 private:
  Fn cuda() const {
    Fn f = cuda_.load(std::memory_order_acquire);
    if (!f) {
      f = reinterpret_cast<Fn>(find_cuda_kernel(name_, signature()));
      cuda_.store(f, std::memory_order_release);
    }
    return f;
  }

  const char* name_;
  Fn baseline_, avx2_;
  mutable std::atomic<Fn> cuda_{nullptr};
};

}  // namespace hh
