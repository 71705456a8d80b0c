// Causal linear attention with a diagonal gate on the state (RetNet's fixed decay, GLA's
// data-dependent per-channel gate, Liger's gate from the key projection: the caller builds log α),
// in three forms: the quadratic reference (materialized decay), the chunked form (training and
// prefill) and the recurrent decoding step. The gated delta rule is another op family.
//
// Semantics. pq = φ(q), pk = φ(k) (B,H,L,F), v (B,H,L,Dv), log_a = log α (B,H,L,F) per key
// channel or (B,H,L,1) per head (a scalar decay), every entry <= 0 (a decay; checked):
//   S_t = diag(α_t) S_{t-1} + pk_t v_tᵀ        (F,Dv)
//   z_t = α_t ⊙ z_{t-1} + pk_t                   (F)
//   y_t = pq_tᵀ S_t                              normalize = false (GLA, RetNet, Liger)
//   y_t = pq_tᵀ S_t / (pq_tᵀ z_t + eps)          normalize = true (the engine's linear attention)
// Equivalently y_i = Σ_{j<=i} Σ_f pq_if pk_jf exp(b_if - b_jf) v_j with b the inclusive cumsum of
// log_a along L. No scale is applied (GLA's q·K^-1/2 is the caller's). key_mask (B,L) (true or
// nonzero = a real token), optional: a padded token adds nothing to the state and does not decay
// it (its key and its log gate count as zero), as if it were absent. A group norm of the output
// is the module's (nn/), not the op's. Computed in the inputs' dtype (all alike, floating), autocast
// or not.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hh {

// The reference: the (B,H,L,L) decay exp(b_i - b_j) (j <= i) materialized; per channel when
// log_a is per channel, in blocks of 32 query rows ((B,H,32,L,F) at a time; with gradients every
// block is kept for the backward: O(L²·F/2) memory). Differences of global cumsums lose
// precision at long L in f32: use it at short lengths. With `weights`, *weights receives the
// (B,H,L,L) weights that multiply v (normalized when `normalize`).
Tensor gated_attention_quadratic(const Tensor& pq, const Tensor& pk, const Tensor& v, const Tensor& log_a,
                                 bool normalize = false, double eps = 1e-6, const Tensor& key_mask = Tensor(),
                                 Tensor* weights = nullptr);

// The same function, chunked, as one kernel with a hand-derived backward
// (core/kernels/gated_linear.h): blocks of `chunk` tokens for a per-head decay, of gcd(chunk, 16)
// for a per-channel gate; cumulative log gates kept relative to the block start (b <= 0 inside a
// block). Inside a block the pairwise factors exp(b_r - b_s) (s <= r) are exponentiated one by
// one (per channel, as fla's sub-blocks do); across blocks
// the state is carried (S <- diag(exp(b_last)) S + Σ_s (pk_s ⊙ exp(b_last - b_s)) v_sᵀ) and read
// through pq ⊙ exp(b). Every exponent is <= 0, so nothing overflows at any length. Memory
// beyond inputs and output: O(F·Dv) per (batch, head), forward and backward (the backward
// recomputes the states). bf16/f16 inputs are computed in f32.
// initial (optional; a started sequence, e.g. a prefill after earlier tokens): the state S_0, z_0
// the scan starts from (z_0 when normalizing), as the steps left it; its contribution
// (pq_i ⊙ exp(b_i))ᵀ S_0 (and likewise to the normalizer) is added by composed ops, so the
// gradient flows through it too.
struct GatedDecodeState;
Tensor gated_attention_chunked(const Tensor& pq, const Tensor& pk, const Tensor& v, const Tensor& log_a,
                               bool normalize = false, double eps = 1e-6, const Tensor& key_mask = Tensor(),
                               int64_t chunk = 64, const GatedDecodeState* initial = nullptr);

// Recurrent decoding state, per (B,H): S (F,Dv) and, when normalizing, z (F,1). Undefined until
// the first step.
struct GatedDecodeState {
  Tensor S;  // (B,H,F,Dv)
  Tensor z;  // (B,H,F,1), normalize only
  int64_t tokens = 0;
};

// The state that steps over pk, v, log_a (as the chunked form takes them, no key mask) leave (a
// prefill): S_L = Σ_j diag(exp(b_L - b_j)) pk_j v_jᵀ and z_L likewise, one matmul per state, b the
// cumsum of log_a (in f64, so the difference of two long sums keeps its precision). No gradient.
// initial (optional): the state before these tokens, carried in decayed by exp(b_L) (the steps
// from a started state).
GatedDecodeState gated_decode_state(const Tensor& pk, const Tensor& v, const Tensor& log_a, bool normalize = false,
                                    const GatedDecodeState* initial = nullptr);

// One token: pq_t, pk_t (B,H,1,F), v_t (B,H,1,Dv), log_a_t (B,H,1,F or 1) -> y_t (B,H,1,Dv);
// the state moves one token on. Differentiable (the recurrent reference of the other forms is
// this step over a sequence, composed of ops); without gradients (decoding) it is one kernel per
// state. Memory per token is constant. A NaN/Inf state is an error.
Tensor gated_attention_step(GatedDecodeState& state, const Tensor& pq_t, const Tensor& pk_t, const Tensor& v_t,
                            const Tensor& log_a_t, bool normalize = false, double eps = 1e-6);

// The recurrent form over a whole sequence (one step per token, outputs concatenated along L):
// the reference the other forms are tested against, with the same inputs as they take.
Tensor gated_attention_recurrent(const Tensor& pq, const Tensor& pk, const Tensor& v, const Tensor& log_a,
                                 bool normalize = false, double eps = 1e-6, const Tensor& key_mask = Tensor());

}  // namespace hh
