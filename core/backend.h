// Backend: one method per primitive kernel. The CPU backend (core/cpu/) and the CUDA backend
// (cuda/) implement all of it; the compiler reports a missing one. Ops (autograd/) check
// shapes and dtypes, allocate outputs and call these; kernels may assume the checks passed.
//
// Conventions: outputs are freshly allocated and contiguous unless said otherwise. "(N,R)"
// means a contiguous tensor viewed as N rows of R elements; "(O,R,I)" is outer, reduced, inner.
// Float kernels run in f32 or f64 (bf16/f16 are cast by the op first), except gemm, which also
// takes bf16/f16 operands and accumulates them in f32.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hh {

enum class UnaryOp : uint8_t {
  neg, abs, exp, log, log1p, sqrt, rsqrt, square, sin, cos, tanh, sigmoid, relu, elu,
  gelu_erf, gelu_tanh, silu, softplus, clamp, pow_scalar, add_scalar, mul_scalar, rdiv_scalar,
  sign,
};
// a, b: elu alpha; clamp lo/hi; pow exponent; softplus beta/threshold; scalar for *_scalar.
struct UnaryParams {
  double a = 0.0;
  double b = 0.0;
};

enum class BinaryOp : uint8_t { add, sub, mul, div, pow, maximum, minimum, eq, ne, lt, le, gt, ge };
inline bool is_comparison(BinaryOp op) { return op >= BinaryOp::eq; }

enum class ReduceOp : uint8_t { sum, mean, max, min, prod };

struct GemmParams {
  double alpha = 1.0;   // C = alpha * A·B + beta * C
  double beta = 0.0;
};

struct CrossEntropyParams {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};

struct AdamWParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  int64_t step = 1;  // 1-based step for bias correction
};

// One parameter of a multi-tensor AdamW step: param, grad, m, v as for adamw_step, and its group's
// lr and weight decay (these replace AdamWParams::lr / weight_decay; the rest is shared).
struct AdamWTensor {
  Tensor param, grad, m, v;
  double lr = 1e-3, weight_decay = 0.0;
};

enum class RandomKind : uint8_t { uniform, normal, randint };
struct RandomParams {
  RandomKind kind = RandomKind::uniform;
  double a = 0.0, b = 1.0;  // uniform [a,b); normal mean a, std b; randint [a,b)
  uint64_t seed = 0, offset = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;

  // ---- memory ----
  virtual std::shared_ptr<void> allocate(size_t nbytes) = 0;
  virtual void copy_from_host(void* dst, const void* src, size_t nbytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t nbytes) = 0;
  virtual void synchronize() = 0;

  // ---- fill, copy, random ----
  virtual void fill(const Tensor& out, double value) = 0;
  // dst <- src elementwise; same shape; any strides on both; any dtypes (casts).
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;
  // out (contiguous, f32/f64 for uniform/normal, i32/i64 for randint) filled from Philox
  // following PhiloxLayout (core/philox.h).
  virtual void random(const Tensor& out, const RandomParams& p) = 0;

  // ---- elementwise ----
  // y = f(x); x, y contiguous, same dtype.
  virtual void unary(UnaryOp op, const Tensor& x, const Tensor& y, const UnaryParams& p) = 0;
  // gx = gy * f'(x) (some ops use y = f(x) instead of x); all contiguous.
  virtual void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy,
                              const Tensor& gx, const UnaryParams& p) = 0;
  // out = a op b; a, b have out's shape with any strides (0 = broadcast); out contiguous.
  // Comparisons write bool.
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out = cond ? a : b; cond bool; all of out's shape, any strides; out contiguous.
  virtual void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) = 0;

  // ---- reductions ----
  // x (O,R,I) contiguous -> values (O,I); indices (O,I) i64 for max/min when defined.
  virtual void reduce(ReduceOp op, const Tensor& x, const Tensor& values, const Tensor& indices) = 0;
  // Inclusive cumulative sum over R of x (O,R,I) -> out (O,R,I).
  virtual void cumsum(const Tensor& x, const Tensor& out) = 0;

  // ---- linear algebra ----
  // c (Bt,M,N) contiguous = alpha a·b + beta c, a (Bt,M,K), b (Bt,K,N). a and b have unit stride
  // in one of their last two dims (row- or column-major), any batch stride (0 = broadcast).
  // One dtype for all three: f32, f64, or bf16/f16 with f32 accumulation and one rounding of c.
  virtual void gemm(const Tensor& a, const Tensor& b, const Tensor& c, const GemmParams& p) = 0;

  // ---- fused nn kernels (rows of the last dim) ----
  virtual void softmax(const Tensor& x, const Tensor& y, bool log) = 0;                  // (N,R)
  virtual void softmax_backward(const Tensor& y, const Tensor& gy, const Tensor& gx, bool log) = 0;
  // x (N,C); weight/bias (C) or undefined; mean/rstd (N) f32/f64 like x.
  virtual void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                          const Tensor& y, const Tensor& mean, const Tensor& rstd) = 0;
  // gweight/gbias undefined when not needed.
  virtual void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& gy, const Tensor& gx,
                                   const Tensor& gweight, const Tensor& gbias) = 0;
  virtual void rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                        const Tensor& rstd) = 0;
  virtual void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                 const Tensor& gy, const Tensor& gx, const Tensor& gweight) = 0;
  // logits (N,V), target (N) i64 -> loss (N) per row (0 where ignored), lse (N).
  virtual void cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyParams& p,
                             const Tensor& loss, const Tensor& lse) = 0;
  // glogits (N,V) = d(sum_i gloss_i * loss_i)/dlogits.
  virtual void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& lse,
                                      const Tensor& gloss, const CrossEntropyParams& p,
                                      const Tensor& glogits) = 0;

  // ---- indexing ----
  // out (O,K,I) = x (O,R,I) at index (K) along R (i64, range-checked: throws naming the index).
  virtual void index_select(const Tensor& x, const Tensor& index, const Tensor& out) = 0;
  // out (O,R,I) += src (O,K,I) at index (K) along R (duplicates accumulate).
  virtual void index_add(const Tensor& out, const Tensor& index, const Tensor& src) = 0;
  // out (O,K,I) = x (O,R,I)[o, index[o,k,i], i]; index (O,K,I) i64.
  virtual void gather(const Tensor& x, const Tensor& index, const Tensor& out) = 0;
  // out (O,R,I)[o, index[o,k,i], i] += src (O,K,I).
  virtual void scatter_add(const Tensor& out, const Tensor& index, const Tensor& src) = 0;
  // x (Bt,M,N) -> out keeps entries with j - i <= k (lower) or j - i >= k (upper), zero elsewhere.
  virtual void triangle(const Tensor& x, const Tensor& out, int64_t k, bool upper) = 0;

  // ---- attention ----
  // Causal linear attention in chunks of C (REFERENCE.md §1): phi_q, phi_k (G,L,F) and v (G,L,D)
  // contiguous, G = B·H. y (G,L,D): y_i = φq_iᵀ S_i / (φq_i·z_i + eps) with S_i = Σ_{j<=i} φk_j v_jᵀ,
  // z_i = Σ_{j<=i} φk_j; den (G,L) receives the denominators (eps included) for the backward.
  // Inside a chunk the masked quadratic form, across chunks a running (S, z) in the compute type.
  virtual void linear_attention_causal(const Tensor& q, const Tensor& k, const Tensor& v, int64_t chunk,
                                       double eps, const Tensor& y, const Tensor& den) = 0;
  // Gradients gq, gk (G,L,F), gv (G,L,D) of Σ gy·y. Walks the chunks forward for gq and in reverse
  // for gk, gv, recomputing per-chunk terms: no per-token state is stored.
  virtual void linear_attention_causal_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                const Tensor& y, const Tensor& den, const Tensor& gy,
                                                int64_t chunk, const Tensor& gq, const Tensor& gk,
                                                const Tensor& gv) = 0;
  // Fused softmax attention (FlashAttention-2 style): q (G,Lq,D), k (G,Lk,D), v (G,Lk,Dv), all
  // contiguous, one dtype (f32/f64 on the CPU, f32 on CUDA). out (G,Lq,Dv) = softmax(scale·q kᵀ) v
  // row by row; lse (G,Lq) = log Σ_j exp(scale·q_i·k_j) over the allowed keys. causal requires
  // Lq == Lk and lets query i see keys j <= i. No (Lq,Lk) buffer: query tiles × key tiles with an
  // online softmax (running max, running sum), fully masked key tiles skipped. A row with no keys
  // (Lk == 0) gets out 0 and lse -inf.
  virtual void flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, bool causal,
                               double scale, const Tensor& out, const Tensor& lse) = 0;
  // Gradients gq (G,Lq,D), gk (G,Lk,D), gv (G,Lk,Dv) of Σ gout·out, from the forward's out and lse
  // (all contiguous, q's dtype). Recomputes P = exp(scale·q kᵀ - lse) per tile; with
  // D_i = Σ_c gout_ic out_ic: gv = Pᵀ gout, dS = P ∘ (gout vᵀ - D), gq = scale·dS k, gk = scale·dSᵀ q.
  virtual void flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                        const Tensor& out, const Tensor& lse, const Tensor& gout, bool causal,
                                        double scale, const Tensor& gq, const Tensor& gk, const Tensor& gv) = 0;
  // True when the two methods above also take 4-D (B,H,L,C) tensors (G = B·H) with unit stride
  // along C and any other strides, for every tensor but lse: head views of a packed (B,L,3,H,D)
  // projection, outputs written in (B,L,H,D) order. The attention op then makes no copies.
  virtual bool flash_attention_takes_views() const { return false; }
  // True when the two methods take a defined key_mask: (B,Lk) bool, contiguous, with 4-D
  // (B,H,L,C) operands; a false key is never attended (a row with none gets 0, lse -inf). The
  // others get an undefined key_mask and refuse a defined one.
  virtual bool flash_attention_takes_key_mask() const { return false; }
  // The sliding-window softmax part of the hybrid attention (autograd/ops/hybrid_attention.h):
  // q, k (G,L,D), v (G,L,Dv) contiguous, G = B·heads; key_mask (B,L) bool contiguous or undefined
  // (every key real). For query i and the real keys j with i-W < j <= i: s_ij = scale·q_i·k_j,
  // m (G,L) = max_j s_ij, e_ij = exp(s_ij - m_i), num (G,L,Dv) = Σ_j e_ij v_j, den (G,L) = Σ_j e_ij.
  // A query without a real key in its window gets num 0, den 0, m 0. No (L,L) buffer.
  virtual void hybrid_window_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                       int64_t heads, int64_t window, double scale, const Tensor& num,
                                       const Tensor& den, const Tensor& m) = 0;
  // Gradients gq, gk (G,L,D), gv (G,L,Dv) of Σ gnum·num + gden·den, with m a function of the
  // scores (its gradient split evenly among the keys attaining the max, as amax); m from the forward.
  virtual void hybrid_window_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                const Tensor& key_mask, int64_t heads, int64_t window, double scale,
                                                const Tensor& m, const Tensor& gnum, const Tensor& gden,
                                                const Tensor& gq, const Tensor& gk, const Tensor& gv) = 0;

  // ---- fused residual/norm, bias+activation, rope ----
  // h = x + residual, then y = layer_norm(h) as layer_norm above, in one pass over each row:
  // x, residual, h, y (N,C); weight/bias (C) or undefined; mean/rstd (N). The backward is
  // layer_norm_backward on h.
  virtual void add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                              double eps, const Tensor& h, const Tensor& y, const Tensor& mean,
                              const Tensor& rstd) = 0;
  // h = x + residual, y = rms_norm(h); as add_layer_norm (backward: rms_norm_backward on h).
  virtual void add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps,
                            const Tensor& h, const Tensor& y, const Tensor& rstd) = 0;
  // y = gelu(x + bias): x, y (N,C), bias (C); tanh_form picks GELU's tanh approximation over erf.
  virtual void bias_gelu(const Tensor& x, const Tensor& bias, bool tanh_form, const Tensor& y) = 0;
  // gx (N,C) = gy * gelu'(x + bias), recomputing x + bias (the op sums gx over rows for the bias).
  virtual void bias_gelu_backward(const Tensor& x, const Tensor& bias, const Tensor& gy, bool tanh_form,
                                  const Tensor& gx) = 0;
  // Half-split rotary embedding of x (G,L,D) into y (G,L,D), cos/sin (L,D/2), all contiguous:
  // y_j = x_j c - x_{j+D/2} s, y_{j+D/2} = x_{j+D/2} c + x_j s. inverse negates s (rotation by
  // the opposite angle: the backward, gx from gy).
  virtual void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, bool inverse, const Tensor& y) = 0;

  // ---- optimizer ----
  // In place on param, m, v (contiguous, same shape, f32/f64): decoupled-decay AdamW.
  virtual void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                          const AdamWParams& p) = 0;
  // adamw_step on every entry at once, each with its own lr / weight decay and p's betas, eps and
  // step; all entries one dtype and this backend's device. Element for element the same arithmetic
  // as adamw_step (bit-identical results), but the work is split over all elements of all tensors:
  // one parallel loop on the CPU, one kernel launch per batch of tensors on CUDA.
  virtual void adamw_multi_step(const std::vector<AdamWTensor>& ts, const AdamWParams& p) = 0;
};

// The backend that owns `d`. The CPU backend always exists; CUDA ones come from cuda/ and throw
// "built without CUDA" in a CPU-only build.
Backend& backend_for(Device d);
inline Backend& backend_of(const Tensor& t) { return backend_for(t.device()); }

// CUDA builds: core/cuda_module.cpp, which loads the CUDA backend module (libhedgehog_cuda.so)
// on first use; CPU-only builds: core/cuda_stub.cpp. cuda_available() is false (never throws)
// when the module cannot be loaded or there is no device; cuda_backend() then throws the reason.
Backend& cuda_backend(int index);
bool cuda_available();
int cuda_device_count();
// Why CUDA cannot be used, for error messages: the module's load failure with every path tried,
// or the driver's reason; "" when a device is available.
std::string cuda_unavailable_reason();

}  // namespace hh
