// Fused attention ops with their own backward kernels: chunked causal linear attention and
// softmax (scaled dot-product) attention.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hh {

// Causal linear attention, chunked: phi_q, phi_k (B,H,L,F), v (B,H,L,D) -> (B,H,L,D).
// y_i = φq_iᵀ Σ_{j<=i} φk_j v_jᵀ / (φq_i·Σ_{j<=i} φk_j + eps). Memory O(L·F + F·D) per head;
// the backward recomputes per chunk instead of storing per-token states. Computed in f32/f64
// (bf16/f16 inputs are cast to f32).
Tensor linear_attention_causal(const Tensor& phi_q, const Tensor& phi_k, const Tensor& v, int64_t chunk = 64,
                               double eps = 1e-6);

// Softmax attention, fused (FlashAttention-2 style): q (B,H,Lq,D), k (B,H,Lk,D), v (B,H,Lk,Dv) ->
// (B,H,Lq,Dv) = softmax(scale·q kᵀ) v, with query i seeing keys j <= i when causal (Lq == Lk
// required). scale = -1 means 1/sqrt(D). Never materializes the (Lq,Lk) weights; the backward
// recomputes them per tile from the saved log-sum-exp. Computed in f32/f64 (bf16/f16 inputs are
// cast to f32). key_mask (B,Lk) bool (true = a real token), optional: padding keys are never
// attended and a row with no real key gets 0, as softmax_attention's composed path; only
// backends with flash_attention_takes_key_mask() (the CPU) take it.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                    double scale = -1, const Tensor& key_mask = Tensor());

}  // namespace hh
