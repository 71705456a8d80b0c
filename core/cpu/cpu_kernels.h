// The Eigen-backed CPU kernels, compiled once per instruction-set path. Their code is in
// core/cpu/*.inc; core/cpu/<name>.cpp compiles it for the baseline ISA (CpuKernelsBaseline) and
// core/cpu/avx2/<name>.cpp for AVX2+FMA (CpuKernelsAvx2): same source, so Eigen's packet math
// and the compiler's vectorizer use the wider registers in the second copy. The CpuBackend
// methods pick one per call on cpu_isa().
//
// Why no AVX2 instruction can run on a CPU without it: the AVX2 objects are partially linked into
// one (hh_cpu_avx2.o, see CMakeLists.txt) whose every symbol is made local except the
// CpuKernelsAvx2 members, so none of the inline functions and templates it instantiates (Eigen,
// std, ours) can be picked by the linker for another caller; it has no static initializers; and
// its entry points are called only when cpu_isa() >= avx2. core/cpu/check_isa_leaks.cmake (a
// CTest) checks the first two on the built library, and that no other object of it but the
// hand-written GEMM kernels (functions with a target attribute) uses a ymm or zmm register.
#pragma once
#include <cstdint>

#include "core/backend.h"
#include "core/cpu_isa.h"
#include "core/kernels/delta_rule.h"
#include "core/kernels/feature_maps.h"
#include "core/kernels/gated_linear.h"
#include "core/kernels/hybrid_attention.h"

namespace hh {

// The two copies, with the same members (declared once, in cpu_kernel_members.inc).
struct CpuKernelsBaseline {
#include "core/cpu/cpu_kernel_members.inc"
};
struct CpuKernelsAvx2 {
#include "core/cpu/cpu_kernel_members.inc"
};

// Calls f(CpuKernelsBaseline{}) or f(CpuKernelsAvx2{}), whichever the current cap (cpu_isa())
// allows. There is no AVX-512 copy: on such a machine the AVX2 one runs.
template <class F>
void with_cpu_kernels(F&& f) {
  if (cpu_isa() >= CpuIsa::avx2)
    f(CpuKernelsAvx2{});
  else
    f(CpuKernelsBaseline{});
}

}  // namespace hh
