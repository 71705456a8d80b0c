// The autograd nodes of layer_norm and rms_norm, for ops whose forward kernel computed y and the
// row statistics: layer_norm and rms_norm themselves (nn.cpp) and the residual norms, whose y is
// the norm of their h (fused.cpp). One backward for both: the norm kernels' backward.
#pragma once
#include "core/tensor.h"

namespace hh {

// y = layer_norm(xc) with weight wc / bias bc (either undefined), mean and rstd (N) from the
// forward kernel; xc (..., C) contiguous. Returns y recorded with layer_norm's backward.
Tensor record_layer_norm(const char* op, const Tensor& y, const Tensor& xc, const Tensor& wc, const Tensor& bc,
                         const Tensor& mean, const Tensor& rstd);
// y = rms_norm(xc) with weight wc (or undefined) and rstd (N) from the forward kernel.
Tensor record_rms_norm(const char* op, const Tensor& y, const Tensor& xc, const Tensor& wc, const Tensor& rstd);

}  // namespace hh
