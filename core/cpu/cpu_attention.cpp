// The baseline copy of the kernels in core/cpu/cpu_attention.inc (see core/cpu/cpu_kernels.h), and
// the hybrid kernels' slots (core/kernels/hybrid_attention.h) with its two CPU copies.
#include "core/cpu/cpu_kernels.h"

namespace hh {
namespace {
using Kernels = CpuKernelsBaseline;
}  // namespace

namespace kernels {
const Kernel<HybridAttentionStepRows> hybrid_attention_step_rows{
    "hybrid_attention_step_rows", &CpuKernelsBaseline::hybrid_attention_step_rows,
    &CpuKernelsAvx2::hybrid_attention_step_rows};
const Kernel<HybridLinearCombine> hybrid_linear_combine{"hybrid_linear_combine", &CpuKernelsBaseline::hybrid_linear_combine,
                                                        &CpuKernelsAvx2::hybrid_linear_combine};
}  // namespace kernels
}  // namespace hh

#include "core/cpu/cpu_attention.inc"
