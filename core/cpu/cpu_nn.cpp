// The baseline copy of the kernels in core/cpu/cpu_nn.inc (see core/cpu/cpu_kernels.h), and the
// feature-map kernels' slots (core/kernels/feature_maps.h) with their two CPU copies.
#include "core/cpu/cpu_kernels.h"

namespace hh {
namespace {
using Kernels = CpuKernelsBaseline;
}  // namespace

namespace kernels {
const Kernel<HedgehogFeatures> hedgehog_features{"hedgehog_features", &CpuKernelsBaseline::hedgehog_features,
                                                 &CpuKernelsAvx2::hedgehog_features};
const Kernel<HedgehogFeaturesBackward> hedgehog_features_backward{"hedgehog_features_backward",
                                                                  &CpuKernelsBaseline::hedgehog_features_backward,
                                                                  &CpuKernelsAvx2::hedgehog_features_backward};
}  // namespace kernels
}  // namespace hh

#include "core/cpu/cpu_nn.inc"
