// Fused ops for transformer blocks (issue 13): residual add + LayerNorm / RMSNorm, bias + GELU,
// rotary position embedding. Each is one op with a hand-written backward; each equals a
// composition of primitive ops (tests/test_fused_vs_composed.cpp holds them side by side).
#pragma once
#include <string>

#include "core/tensor.h"

namespace hh {

// The two outputs of a fused residual + norm: h, the new residual stream, and y = norm(h).
struct AddNormOut {
  Tensor h;
  Tensor y;
};

// h = x + residual; y = layer_norm(h, weight, bias, eps). x and residual (..., C) of one shape
// and dtype; weight/bias (C) optional. One pass over the rows computes both. Gradients flow
// into both outputs (the graph has h's node, an add, and y's node, a layer_norm of h: the
// backward is layer_norm's kernel plus the sum of the two gradients that reach h).
AddNormOut add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                          double eps = 1e-5);
// h = x + residual; y = rms_norm(h, weight, eps). As add_layer_norm.
AddNormOut add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps = 1e-6);

// gelu(x + bias) with bias (C) over the last dim of x (..., C); approximate "none" (erf) or
// "tanh" as torch.nn.functional.gelu. The backward recomputes x + bias: only x and bias are kept.
Tensor bias_gelu(const Tensor& x, const Tensor& bias, const std::string& approximate = "none");

// Rotary embedding, half-split as HF Llama / GPT-NeoX: x (..., L, D) with D even, cos and sin
// (L, D/2) holding cos/sin of the angle of position l and frequency j. For j < D/2:
//   y_j = x_j cos_lj - x_{j+D/2} sin_lj,  y_{j+D/2} = x_{j+D/2} cos_lj + x_j sin_lj.
// The backward rotates the gradient by the opposite angle; cos and sin get gradients too.
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin);

// Hedgehog's feature-map nonlinearity: z (..., F) -> (..., 2F) = [softmax(z), softmax(-z)] over
// the last dim, the composition cat({softmax(z, -1), softmax(neg(z), -1)}, -1) in one op (one
// pass forward and one backward instead of five kernels and their buffers). On autocast's f32
// list, as softmax; bf16/f16 inputs compute in f32 and keep their dtype.
Tensor hedgehog_features(const Tensor& z);

}  // namespace hh
