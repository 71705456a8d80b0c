// Fused attention ops with their own backward kernels.
#pragma once
#include "core/tensor.h"

namespace hh {

// Causal linear attention, chunked: phi_q, phi_k (B,H,L,F), v (B,H,L,D) -> (B,H,L,D).
// y_i = φq_iᵀ Σ_{j<=i} φk_j v_jᵀ / (φq_i·Σ_{j<=i} φk_j + eps). Memory O(L·F + F·D) per head;
// the backward recomputes per chunk instead of storing per-token states. Computed in f32/f64
// (bf16/f16 inputs are cast to f32).
Tensor linear_attention_causal(const Tensor& phi_q, const Tensor& phi_k, const Tensor& v, int64_t chunk = 64,
                               double eps = 1e-6);

}  // namespace hh
