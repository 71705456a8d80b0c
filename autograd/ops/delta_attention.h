// The gated delta rule (Gated DeltaNet, Yang, Kautz & Hatamizadeh 2025; with α ≡ 1 it is DeltaNet,
// Schlag et al. 2021 / Yang et al. 2024), causal, in three forms: the recurrent reference (one
// token at a time, differentiable), the chunked form (training and prefill) and the decoding
// step (O(1) state). No quadratic form exists: the recurrent form is the reference.
//
// Semantics, per (b, h), with the state S (Dk,Dv) as in fla (`h` of fla/ops/*/naive.py):
//   S_t = α_t (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ,     o_t = S_tᵀ (s · q_t)
// i.e. u_t = β_t (v_t − α_t S_{t-1}ᵀ k_t), S_t = α_t S_{t-1} + k_t u_tᵀ. Inputs: q, k (B,H,L,Dk),
// v (B,H,L,Dv), beta (B,H,L) with β_t in (0,1), log_alpha (B,H,L) = log α_t <= 0 (α_t in (0,1];
// all zeros is DeltaNet), scale s (-1 means 1/sqrt(Dk), fla's default). q and k arrive as the
// caller made them (feature map, normalization): DeltaNet and Gated DeltaNet L2-normalize q and k
// per head first, and the rule is a contraction only when β_t ‖k_t‖² <= 2 (‖k_t‖ = 1 and β_t < 1
// keep every state bounded); nothing here normalizes or checks the values. key_mask (B,L) (true
// or nonzero = a real token), optional: a padded step leaves the state unchanged (its β and
// log α count as 0) and its output is that state read by its query. initial_state (B,H,Dk,Dv),
// optional (zeros); with `final_state`, *final_state receives S_L (B,H,Dk,Dv), differentiable.
// bf16/f16 inputs are cast to f32; the op runs with autocast off (the state never in bf16) and
// returns f32 or f64.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hh {

// The reference: one state update per token, composed of existing ops (autograd gives the
// backward; the graph holds O(L) nodes and every per-token state, O(L·Dk·Dv) per head).
Tensor delta_attention_recurrent(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                                 const Tensor& log_alpha, double scale = -1, const Tensor& key_mask = Tensor(),
                                 const Tensor& initial_state = Tensor(), Tensor* final_state = nullptr);

// The same function for training and prefill, one kernel each way (core/kernels/delta_rule.h):
// per (batch, head) the recurrence token by token (the reference's arithmetic, stable at any
// length in f32; O(L·Dk·Dv)) keeping the state at every chunk start, and a hand-derived backward
// that recomputes each chunk's states from it (memory O((L/C + C)·Dk·Dv) per head). The result
// does not depend on `chunk`; L need not be a multiple of it.
Tensor delta_attention_chunked(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                               const Tensor& log_alpha, double scale = -1, const Tensor& key_mask = Tensor(),
                               const Tensor& initial_state = Tensor(), Tensor* final_state = nullptr,
                               int64_t chunk = 64);

// Decoding state, per (B,H): S (B,H,Dk,Dv); undefined = zeros until the first step. A prefill by
// delta_attention_chunked hands over its final state: `DeltaDecodeState st; st.S = final;`.
struct DeltaDecodeState {
  Tensor S;
  int64_t tokens = 0;  // tokens seen
};

// One token: q_t, k_t (B,H,1,Dk), v_t (B,H,1,Dv), beta_t, log_alpha_t (B,H,1) -> o_t (B,H,1,Dv),
// updating state.S. key_mask_t (B,1), optional. No gradient (runs under NoGradGuard); memory is
// constant per token.
Tensor delta_attention_step(DeltaDecodeState& state, const Tensor& q_t, const Tensor& k_t, const Tensor& v_t,
                            const Tensor& beta_t, const Tensor& log_alpha_t, double scale = -1,
                            const Tensor& key_mask_t = Tensor());

}  // namespace hh
