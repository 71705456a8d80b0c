// The hybrid sliding-window + linear attention of LoLCATs (HazyResearch/lolcats,
// `hybrid_attention_quadratic`), causal, in three forms: the quadratic reference (materialized
// (L,L) weights), the chunked form (band tiles + a prefix state, never an (L,L) tensor) and the
// recurrent decoding step (a W-token ring + the linear state of the keys that left the window);
// and the window part alone as one kernel (hybrid_window_attention), which the chunked form uses.
//
// Semantics. q, k (B,H,L,D), v (B,H,L,Dv), pq = φ(q), pk = φ(k) (B,H,L,F), per-head factors
// wf, lf (H) (LoLCATs passes sigmoid(p) and 1 or 1 - sigmoid(p)), window W >= 1, scale s
// (-1 means 1/sqrt(D)). For query i:
//   window keys  i-W < j <= i:  a_ij = wf_h · exp(s·q_i·k_j - m_i),  m_i = max over the window keys
//   linear keys  j <= i-W:      a_ij = lf_h · (pq_i · pk_j)
//   y_i = Σ_j a_ij v_j / Σ_j a_ij   (one shared normalizer, no eps)
// The max m_i is not cancelled by the normalizer (the linear part carries no exp(-m_i)): the
// window part is exp(s - max) exactly as LoLCATs computes it, and the gradient flows through
// m_i. W >= L leaves no linear key: plain causal softmax attention. key_mask (B,L) (true or
// nonzero = a real token), optional: padded keys contribute to neither part and are left out
// of the max. A query that sees no key at all (every key up to it padded) gets zeros.
// Computed in the inputs' dtype (all alike, floating); no autocast of its own.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace hh {

// The reference: (B,H,L,L) weights from existing ops; autograd gives the backward. With
// `weights`, *weights receives the normalized weights a_ij / Σ_j a_ij (B,H,L,L) (distillation).
Tensor hybrid_attention_quadratic(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pq,
                                  const Tensor& pk, const Tensor& wf, const Tensor& lf, int64_t window,
                                  double scale = -1, const Tensor& key_mask = Tensor(), Tensor* weights = nullptr);

// The same function, efficient: the window part is hybrid_window_attention (one kernel, O(L·W·(D+Dv))
// time, O(L·Dv) memory); the linear part (keys j <= i-W) is an inclusive chunked causal scan over
// the keys and values shifted down by W rows: blocks of `chunk` queries, the masked (chunk,chunk)
// product inside a block, the exclusive prefix state S = Σ pk_j v_jᵀ, z = Σ pk_j of the blocks
// before it (a cumsum over per-block states); both parts meet in the shared normalizer. All blocks
// are batched, so the graph has a fixed number of nodes. Linear cost O(L·chunk·(F+Dv) +
// (L/chunk)·F·Dv), no (L,L) tensor (W is clamped to L); exact for any W and chunk.
// initial (optional; a started sequence, e.g. a prefill after earlier tokens): the decoding state
// the steps left (HybridDecodeState below, its window = `window`); the L queries are then tokens
// initial->tokens.. and see its ring's keys (window or linear part, by distance) and, in the
// linear part, its S, z. No key mask with an initial state.
struct HybridDecodeState;
Tensor hybrid_attention_chunked(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pq,
                                const Tensor& pk, const Tensor& wf, const Tensor& lf, int64_t window,
                                double scale = -1, const Tensor& key_mask = Tensor(), int64_t chunk = 64,
                                const HybridDecodeState* initial = nullptr);

// The window part alone, unnormalized: q, k (B,H,L,D), v (B,H,L,Dv) -> {num (B,H,L,Dv),
// den (B,H,L,1)} with, for query i over the real keys j, i-W < j <= i: e_ij = exp(s·q_i·k_j - m_i),
// m_i = max_j s·q_i·k_j, num_i = Σ_j e_ij v_j, den_i = Σ_j e_ij (0 and 0 for a query without
// such a key). The gradient flows through m_i as through amax (split among ties). One backend
// kernel each way (Backend::hybrid_window_attention), no (L,L) or band buffer; key_mask (B,L) as
// above; computed in f32 (f64 for f64 inputs).
std::vector<Tensor> hybrid_window_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window,
                                            double scale = -1, const Tensor& key_mask = Tensor());

// Recurrent decoding state, per (B,H): the last min(W, tokens) keys, values and features in a
// ring (token t in slot t mod W; the ring grows by doubling up to W slots, so a W far beyond the
// sequence costs only what is used), and the linear state S (F,Dv), z (F) of the keys that left
// the window. Create with the window; the first step allocates.
struct HybridDecodeState {
  explicit HybridDecodeState(int64_t window = 1) : window(window) {}
  int64_t window;
  int64_t tokens = 0;     // tokens seen
  Tensor k, v, pk;        // rings: (B,H,cap,D), (B,H,cap,Dv), (B,H,cap,F)
  Tensor S, z;            // (B,H,F,Dv), (B,H,F,1)
};

// One token for each of N sequences, each with its own state (B = 1): q_t, k_t (N,H,1,D), v_t
// (N,H,1,Dv), pq_t, pk_t (N,H,1,F) -> (N,H,1,Dv); row r is what hybrid_attention_step on
// *states[r] and row r's operands gives, up to rounding, and every state advances one token. On
// the CPU one kernel (kernels::hybrid_attention_step_rows) does every row and head, each on its own
// in a fixed order: a row's bits do not depend on the others (hh_serve's batched decoding); on other
// devices and in other dtypes (bf16) each row's step in turn. The states' windows must agree. No gradient.
Tensor hybrid_attention_step_rows(const std::vector<HybridDecodeState*>& states, const Tensor& q_t, const Tensor& k_t,
                                  const Tensor& v_t, const Tensor& pq_t, const Tensor& pk_t, const Tensor& wf,
                                  const Tensor& lf, double scale = -1);

// The state that steps over k, v (B,H,L,D/Dv), pk (B,H,L,F) from a fresh HybridDecodeState(window)
// leave (a prefill): the ring of the last min(W, L) tokens, each in its slot and at the capacity
// the steps grow it to, and S, z of the keys before them (one matmul). No gradient.
// initial (optional): the state before these tokens (a started sequence); the result is then the
// state the steps from it leave.
HybridDecodeState hybrid_decode_state(const Tensor& k, const Tensor& v, const Tensor& pk, int64_t window,
                                      const HybridDecodeState* initial = nullptr);

// One token: q_t, k_t (B,H,1,D), v_t (B,H,1,Dv), pq_t, pk_t (B,H,1,F) -> y_t (B,H,1,Dv), the
// output of query `state.tokens` over every token given so far. The key that leaves the window
// moves its pk (kept in the ring) and v into S, z. No gradient (runs under NoGradGuard); memory
// per token is constant.
Tensor hybrid_attention_step(HybridDecodeState& state, const Tensor& q_t, const Tensor& k_t, const Tensor& v_t,
                             const Tensor& pq_t, const Tensor& pk_t, const Tensor& wf, const Tensor& lf,
                             double scale = -1);

}  // namespace hh
