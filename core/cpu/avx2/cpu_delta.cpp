// The AVX2+FMA copy of the kernels in core/cpu/cpu_delta.inc (see core/cpu/cpu_kernels.h).
#include "core/cpu/cpu_kernels.h"

namespace hh {
namespace {
using Kernels = CpuKernelsAvx2;
}  // namespace
}  // namespace hh

#include "core/cpu/cpu_delta.inc"
