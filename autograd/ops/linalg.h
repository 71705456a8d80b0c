// Matrix products through the backend GEMM (Eigen on CPU, cuBLAS on CUDA), and the inverse of a
// unit lower-triangular matrix composed of them.
#pragma once
#include <functional>

#include "core/prepacked.h"
#include "core/tensor.h"

namespace hh {

// torch.matmul semantics: 1-D operands are promoted and squeezed back; batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
// x (..., in) · weight (out, in)ᵀ + bias (out): the Linear layer's op.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// The same with the weight prepared once and kept in `cache` (core/prepacked.h: f32 panels of the
// packed GEMM, or int8) where that applies: no gradient recorded (grad mode off, or nothing that
// requires grad), no autocast, x, weight and bias f32 on the CPU; for f32 only at the sizes the
// packed GEMM takes (the bits are then linear's). Anywhere else linear(x, weight, bias) runs, in
// f32 whatever `format` says (an int8 model trains, or runs on CUDA, in f32).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, WeightCache& cache, WeightFormat format);
// (I + tril(a, -1))⁻¹ for a (..., n, n): the inverse of the unit lower-triangular matrix whose
// strictly lower part is a's (a's diagonal and upper part are not read; their gradient is 0).
// Forward by 2×2 block inversion, [[N11, 0], [N21, N22]]⁻¹ = [[X1, 0], [−X2 N21 X1, X2]] with
// X1 = N11⁻¹, X2 = N22⁻¹, recursively over log2 n levels (n padded to a power of two), each level
// one batched product over every block: no division, as fla's solve_tril. Backward:
// dA = tril(−Tᵀ G Tᵀ, −1). The delta rule's chunked WY form (delta_attention.h) uses it.
Tensor unit_lower_inverse(const Tensor& a);

// The product behind matmul and its backward, without autograd: x (xb..., M, K) · y (yb..., K, N)
// -> (out_batch..., M, N), batch dims right-aligned and broadcast; a batch dim that out_batch has
// as 1 but x and y both have is summed over. Makes exactly one call gemm(a, b, c) of
// Backend::gemm's form (c = a·b, c fresh and contiguous; none for an empty result); matmul passes
// the backend's gemm, tests a counting one. The result may be a strided view (see linalg.cpp).
using GemmCall = std::function<void(const Tensor& a, const Tensor& b, const Tensor& c)>;
Tensor gemm_product(const Tensor& x, const Tensor& y, const Shape& out_batch, const GemmCall& gemm);

}  // namespace hh
