// The feature-map kernels (autograd/ops/fused.h), declared once: their signatures and slots
// (core/kernel.h). CPU: core/cpu/cpu_nn.inc; CUDA: cuda/cuda_feature_maps.cu.
#pragma once
#include "core/kernel.h"
#include "core/tensor.h"

namespace hh::kernels {

// Hedgehog's nonlinearity on rows: z (N,F) -> y (N,2F) = [softmax(z), softmax(-z)]. Contiguous,
// one float dtype (f32 or f64).
using HedgehogFeatures = void(const Tensor& z, const Tensor& y);
// Its backward: y (N,2F), gy (N,2F) -> gz (N,F) = softmax_backward of each half, the second
// subtracted.
using HedgehogFeaturesBackward = void(const Tensor& y, const Tensor& gy, const Tensor& gz);

extern const Kernel<HedgehogFeatures> hedgehog_features;
extern const Kernel<HedgehogFeaturesBackward> hedgehog_features_backward;

}  // namespace hh::kernels
