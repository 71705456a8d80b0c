// The baseline copy of the kernels in core/cpu/cpu_fused.inc (see core/cpu/cpu_kernels.h).
#include "core/cpu/cpu_kernels.h"

namespace hh {
namespace {
using Kernels = CpuKernelsBaseline;
}  // namespace
}  // namespace hh

#include "core/cpu/cpu_fused.inc"
