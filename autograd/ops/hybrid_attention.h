// The hybrid sliding-window + linear attention of LoLCATs (HazyResearch/lolcats,
// `hybrid_attention_quadratic`), causal, in three forms: the quadratic reference (materialized
// (L,L) weights), the chunked form (band tiles + a prefix state, never an (L,L) tensor) and the
// recurrent decoding step (a W-token ring + the linear state of the keys that left the window).
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

#include "core/tensor.h"

namespace hh {

// The reference: (B,H,L,L) weights from existing ops; autograd gives the backward. With
// `weights`, *weights receives the normalized weights a_ij / Σ_j a_ij (B,H,L,L) (distillation).
Tensor hybrid_attention_quadratic(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pq,
                                  const Tensor& pk, const Tensor& wf, const Tensor& lf, int64_t window,
                                  double scale = -1, const Tensor& key_mask = Tensor(), Tensor* weights = nullptr);

// The same function, chunked: query blocks of `chunk` rows; each block's window part is a
// (chunk, chunk+W-1) band tile against keys [start-W+1, start+chunk), its linear part the band's
// keys before the window plus the exclusive prefix state S = Σ_{j <= start-W} pk_j v_jᵀ,
// z = Σ pk_j (a cumsum over per-block states). All blocks are batched (one gather of the tiles),
// so the graph has a fixed number of nodes. Cost O(L·(chunk+W)·(D+Dv+F) + (L/chunk)·F·Dv) and
// memory of the same order (W is clamped to L); exact for any W and chunk.
Tensor hybrid_attention_chunked(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pq,
                                const Tensor& pk, const Tensor& wf, const Tensor& lf, int64_t window,
                                double scale = -1, const Tensor& key_mask = Tensor(), int64_t chunk = 64);

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

// One token: q_t, k_t (B,H,1,D), v_t (B,H,1,Dv), pq_t, pk_t (B,H,1,F) -> y_t (B,H,1,Dv), the
// output of query `state.tokens` over every token given so far. The key that leaves the window
// moves its pk (kept in the ring) and v into S, z. No gradient (runs under NoGradGuard); memory
// per token is constant.
Tensor hybrid_attention_step(HybridDecodeState& state, const Tensor& q_t, const Tensor& k_t, const Tensor& v_t,
                             const Tensor& pq_t, const Tensor& pk_t, const Tensor& wf, const Tensor& lf,
                             double scale = -1);

}  // namespace hh
