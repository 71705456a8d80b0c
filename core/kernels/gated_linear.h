// The gated linear attention kernels (autograd/ops/gated_attention.h), declared once: their
// signatures and slots (core/kernel.h). CPU: core/cpu/cpu_gated.inc; CUDA: cuda/cuda_gated.cu.
//
// One (batch, head) per group g of G; no normalizer (the op appends a column of ones to v for it),
// padded tokens already zeroed by the op. q, k (G,L,F), v (G,L,E), log_a (G,L,A) with A = F (a
// gate per key channel) or A = 1 (one decay per head), every entry <= 0:
//   S_t = diag(exp(log_a_t)) S_{t-1} + k_t v_tᵀ   (F,E),   y_t = S_tᵀ q_t   (E)
// All tensors contiguous, one dtype (f32 or f64), on one device.
#pragma once
#include <cstdint>

#include "core/kernel.h"
#include "core/tensor.h"

namespace hh::kernels {

// -> y (G,L,E). `chunk` is the op's chunk length: the CPU kernel scans blocks of `chunk` tokens
// for a per-head decay and of gcd(chunk, 16) for a per-channel gate; the result does not depend
// on it beyond rounding.
using GatedLinearForward = void(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& log_a, int64_t chunk,
                                const Tensor& y);
// The gradients of y: gy (G,L,E) -> gq, gk (G,L,F), gv (G,L,E), glog_a (G,L,A), all overwritten.
using GatedLinearBackward = void(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& log_a, int64_t chunk,
                                 const Tensor& gy, const Tensor& gq, const Tensor& gk, const Tensor& gv,
                                 const Tensor& glog_a);
// One decoding step, no gradient: q, k (G,F), v (G,E), log_a (G,A), the state S (G,F,E) ->
// S_next (G,F,E) (a new buffer: S may still be read by a graph), y (G,E).
using GatedLinearStep = void(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& log_a, const Tensor& S,
                             const Tensor& S_next, const Tensor& y);

extern const Kernel<GatedLinearForward> gated_linear_forward;
extern const Kernel<GatedLinearBackward> gated_linear_backward;
extern const Kernel<GatedLinearStep> gated_linear_step;

}  // namespace hh::kernels
