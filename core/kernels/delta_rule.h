// The gated delta rule kernels (autograd/ops/delta_attention.h), declared once: their signatures
// and slots (core/kernel.h). CPU: core/cpu/cpu_delta.inc; CUDA: cuda/cuda_delta.cu.
//
// One (batch, head) per group g of G; the op has scaled q and applied the key mask (a padded
// token has β = 0 and log α = 0). q, k (G,L,F), v (G,L,E), beta, log_alpha (G,L), the state S
// (F,E) per group:
//   S_t = α_t (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ,   y_t = S_tᵀ q_t   (E)
// All tensors contiguous, one dtype (f32 or f64), on one device.
#pragma once
#include <cstdint>

#include "core/kernel.h"
#include "core/tensor.h"

namespace hh::kernels {

// S0 (G,F,E) -> y (G,L,E), S_last = S_L (G,F,E), and checkpoints (G,N,F,E), N = ceil(L / chunk):
// the state before each chunk of `chunk` tokens (checkpoints[:, 0] = S0), which the backward
// recomputes from. The recurrence runs token by token: the result does not depend on `chunk`.
using DeltaRuleForward = void(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                              const Tensor& log_alpha, const Tensor& S0, int64_t chunk, const Tensor& y,
                              const Tensor& S_last, const Tensor& checkpoints);
// The gradients of y and S_L: gy (G,L,E), gS_last (G,F,E) -> gq, gk (G,L,F), gv (G,L,E), gbeta,
// glog_alpha (G,L), gS0 (G,F,E), all overwritten. checkpoints and chunk as the forward made them.
using DeltaRuleBackward = void(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                               const Tensor& log_alpha, const Tensor& checkpoints, int64_t chunk, const Tensor& gy,
                               const Tensor& gS_last, const Tensor& gq, const Tensor& gk, const Tensor& gv,
                               const Tensor& gbeta, const Tensor& glog_alpha, const Tensor& gS0);
// One decoding step, no gradient: q, k (G,F), v (G,E), beta, log_alpha (G), the state S (G,F,E)
// -> S_next (G,F,E) (a new buffer: S may still be read by a graph), y (G,E).
using DeltaRuleStep = void(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                           const Tensor& log_alpha, const Tensor& S, const Tensor& S_next, const Tensor& y);

extern const Kernel<DeltaRuleForward> delta_rule_forward;
extern const Kernel<DeltaRuleBackward> delta_rule_backward;
extern const Kernel<DeltaRuleStep> delta_rule_step;

}  // namespace hh::kernels
