// The baseline copy of the kernels in core/cpu/cpu_gated.inc (see core/cpu/cpu_kernels.h), and
// the gated kernels' slots (core/kernels/gated_linear.h) with their two CPU copies.
#include "core/cpu/cpu_kernels.h"

namespace hh {
namespace {
using Kernels = CpuKernelsBaseline;
}  // namespace

namespace kernels {
const Kernel<GatedLinearForward> gated_linear_forward{"gated_linear_forward", &CpuKernelsBaseline::gated_linear_forward,
                                                      &CpuKernelsAvx2::gated_linear_forward};
const Kernel<GatedLinearBackward> gated_linear_backward{
    "gated_linear_backward", &CpuKernelsBaseline::gated_linear_backward, &CpuKernelsAvx2::gated_linear_backward};
const Kernel<GatedLinearStep> gated_linear_step{"gated_linear_step", &CpuKernelsBaseline::gated_linear_step,
                                                &CpuKernelsAvx2::gated_linear_step};
}  // namespace kernels
}  // namespace hh

#include "core/cpu/cpu_gated.inc"
