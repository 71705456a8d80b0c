// The baseline copy of the kernels in core/cpu/cpu_delta.inc (see core/cpu/cpu_kernels.h), and
// the gated delta rule kernels' slots (core/kernels/delta_rule.h) with their two CPU copies.
#include "core/cpu/cpu_kernels.h"

namespace hh {
namespace {
using Kernels = CpuKernelsBaseline;
}  // namespace

namespace kernels {
const Kernel<DeltaRuleForward> delta_rule_forward{"delta_rule_forward", &CpuKernelsBaseline::delta_rule_forward,
                                                  &CpuKernelsAvx2::delta_rule_forward};
const Kernel<DeltaRuleBackward> delta_rule_backward{"delta_rule_backward", &CpuKernelsBaseline::delta_rule_backward,
                                                    &CpuKernelsAvx2::delta_rule_backward};
const Kernel<DeltaRuleStep> delta_rule_step{"delta_rule_step", &CpuKernelsBaseline::delta_rule_step,
                                            &CpuKernelsAvx2::delta_rule_step};
}  // namespace kernels
}  // namespace hh

#include "core/cpu/cpu_delta.inc"
