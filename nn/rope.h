// Rotary position embedding, half-split layout (HF Llama/GPT-NeoX): element j rotates with
// j + D/2 by angle pos·θ_j, θ_j = theta^(-2j/D).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hh::nn {

// x (B,H,L,D) at positions pos_offset .. pos_offset+L-1.
Tensor apply_rope(const Tensor& x, int64_t pos_offset = 0, double theta = 10000.0);

}  // namespace hh::nn
