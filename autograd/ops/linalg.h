// Matrix products through the backend GEMM (Eigen on CPU, cuBLAS on CUDA).
#pragma once
#include "core/tensor.h"

namespace hh {

// torch.matmul semantics: 1-D operands are promoted and squeezed back; batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
// x (..., in) · weight (out, in)ᵀ + bias (out): the Linear layer's op.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace hh
