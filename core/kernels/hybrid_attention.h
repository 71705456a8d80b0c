// The hybrid (sliding window + linear) attention's kernels without gradient (autograd/ops/
// hybrid_attention.h): the prefill's linear part with the combination, and the decoding step of many
// sequences; declared once: their signatures and slots (core/kernel.h). CPU: core/cpu/cpu_attention.inc.
#pragma once
#include <cstdint>
#include <vector>

#include "core/kernel.h"
#include "core/tensor.h"

namespace hh::kernels {

// N sequences' states, each its own: row r's rings k[r] (H,cap_r,D), v[r] (H,cap_r,E),
// pk[r] (H,cap_r,F) (token t in slot t mod W, cap_r > tokens[r] mod W, and cap_r = W once
// tokens[r] >= W), the linear state S[r] (H,F,E) and z[r] (H,F) of the keys that left the window,
// and the tokens it has seen. All contiguous, the dtype of the step's operands, on its device.
struct HybridRows {
  std::vector<Tensor> k, v, pk, S, z;
  std::vector<int64_t> tokens;
};

// One token for each row, no gradient: q, k (N,H,D), v (N,H,E), pq, pk (N,H,F), wf, lf (H), all
// contiguous, one dtype (f32 or f64) -> y (N,H,E). For row r at t = tokens[r], each head: the key
// leaving the window (token t-W, slot t mod W, when t >= W) adds pk ⊗ v into S and pk into z, the
// token's k, v, pk take its slot, then over the n = min(t+1, W) filled slots j
//   e_j = exp(scale·q·k_j − max_j scale·q·k_j),  num = wf·Σ e_j v_j + lf·(pq S),
//   den = wf·Σ e_j + lf·(pq·z),  y = num / den (den 0 read as 1).
// The states are updated in place; tokens[] is the caller's to advance. Each (row, head) is
// computed on its own in a fixed order, so a row's bits do not depend on the other rows.
using HybridAttentionStepRows = void(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pq,
                                     const Tensor& pk, const Tensor& wf, const Tensor& lf, int64_t window,
                                     double scale, const HybridRows& rows, const Tensor& y);

// The chunked form's linear part and the combination, no gradient, for G = B·H groups (head
// g mod `heads`): pq, pk (G,L,F), v (G,L,E), the window part's num_w (G,L,E), den_w (G,L)
// (hybrid_window_attention), wf, lf (H), all contiguous, one dtype -> y (G,L,E):
//   num_l_i = Σ_{j <= i-W} (pq_i·pk_j) v_j,  den_l_i = Σ_{j <= i-W} pq_i·pk_j,
//   y_i = (wf·num_w_i + lf·num_l_i) / (wf·den_w_i + lf·den_l_i)   (a zero denominator read as 1)
// in blocks of `chunk` queries: the (chunk,chunk) product with the keys W rows back inside a block,
// the state S = Σ pk_j v_jᵀ, z = Σ pk_j of the keys before it.
using HybridLinearCombine = void(const Tensor& pq, const Tensor& pk, const Tensor& v, const Tensor& num_w,
                                 const Tensor& den_w, const Tensor& wf, const Tensor& lf, int64_t heads,
                                 int64_t window, int64_t chunk, const Tensor& y);

extern const Kernel<HybridAttentionStepRows> hybrid_attention_step_rows;
extern const Kernel<HybridLinearCombine> hybrid_linear_combine;

}  // namespace hh::kernels
