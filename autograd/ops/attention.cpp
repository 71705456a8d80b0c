// Fused attention ops: checks, the forward kernel call and the backward through the fused
// backward kernel (core/backend.h), with saved tensors held by the backward closure.
#include "autograd/ops/attention.h"

#include <cmath>

#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "core/backend.h"

namespace hh {

static const OpName reg_linear_attention_causal("linear_attention_causal");

Tensor linear_attention_causal(const Tensor& phi_q_in, const Tensor& phi_k_in, const Tensor& v_in, int64_t chunk,
                               double eps) {
  const char* op = "linear_attention_causal";
  // Autocast's lower-precision list (autograd/autocast.h): bf16 inputs, f32 state and output rounded to bf16.
  const Tensor phi_q = autocast_lower(phi_q_in), phi_k = autocast_lower(phi_k_in), v = autocast_lower(v_in);
  HH_CHECK(phi_q.dim() == 4 && phi_k.dim() == 4 && v.dim() == 4, op, ": expected phi_q, phi_k (B,H,L,F) and v (B,H,L,D), got ",
           phi_q.shape(), ", ", phi_k.shape(), ", ", v.shape());
  HH_CHECK(phi_q.shape() == phi_k.shape(), op, ": phi_q ", phi_q.shape(), " and phi_k ", phi_k.shape(), " differ");
  HH_CHECK(v.size(0) == phi_q.size(0) && v.size(1) == phi_q.size(1) && v.size(2) == phi_q.size(2), op, ": v ", v.shape(),
           " does not match phi_q ", phi_q.shape(), " in (B,H,L)");
  HH_CHECK(phi_q.dtype() == phi_k.dtype() && phi_q.dtype() == v.dtype(), op, ": dtypes ", phi_q.dtype(), ", ",
           phi_k.dtype(), ", ", v.dtype(), " differ");
  HH_CHECK(phi_q.device() == v.device() && phi_k.device() == v.device(), op, ": inputs on different devices");
  HH_CHECK(chunk > 0, op, ": chunk size must be positive, got ", chunk);
  HH_CHECK(eps >= 0, op, ": eps must be non-negative, got ", eps);
  HH_CHECK(is_floating(v.dtype()), op, ": expected floating inputs, got ", v.dtype());
  DType in = v.dtype();
  DType ct = in == DType::f64 ? DType::f64 : DType::f32;
  const int64_t B = v.size(0), H = v.size(1), L = v.size(2), F = phi_q.size(3), D = v.size(3);
  auto prep = [&](const Tensor& t, int64_t last) { return contiguous(t.to(ct).detach()).reshape({B * H, L, last}); };
  Tensor q = prep(phi_q, F), k = prep(phi_k, F), vv = prep(v, D);
  Tensor y = empty({B * H, L, D}, {ct, v.device()});
  Tensor den = empty({B * H, L}, {ct, v.device()});
  if (y.numel() > 0) backend_of(y).linear_attention_causal(q, k, vv, chunk, eps, y, den);
  Tensor out = y.reshape({B, H, L, D});
  if (ct != in) out = out.to(in);
  Shape qs = phi_q.shape(), vs = v.shape();
  return record(op, out, {phi_q, phi_k, v}, {q, k, vv, y, den}, [=](const Tensor& g, const NeedsGrad&) {
    Tensor gy = contiguous(g.to(ct)).reshape({B * H, L, D});
    Tensor gq = empty({B * H, L, F}, {ct, g.device()}), gk = empty({B * H, L, F}, {ct, g.device()});
    Tensor gv = empty({B * H, L, D}, {ct, g.device()});
    if (gy.numel() > 0) backend_of(gy).linear_attention_causal_backward(q, k, vv, y, den, gy, chunk, gq, gk, gv);
    return std::vector<Tensor>{gq.reshape(qs).to(in), gk.reshape(qs).to(in), gv.reshape(vs).to(in)};
  });
}

static const OpName reg_scaled_dot_product_attention("scaled_dot_product_attention");

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal,
                                    double scale) {
  const char* op = "scaled_dot_product_attention";
  // Autocast's lower-precision list: bf16 inputs, f32 softmax statistics, output rounded to bf16.
  const Tensor q = autocast_lower(q_in), k = autocast_lower(k_in), v = autocast_lower(v_in);
  HH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op,
           ": expected q (B,H,Lq,D), k (B,H,Lk,D), v (B,H,Lk,Dv), got ", q.shape(), ", ", k.shape(), ", ", v.shape());
  HH_CHECK(k.size(0) == q.size(0) && k.size(1) == q.size(1) && k.size(3) == q.size(3), op, ": k ", k.shape(),
           " does not match q ", q.shape(), " in (B,H,_,D)");
  HH_CHECK(v.size(0) == k.size(0) && v.size(1) == k.size(1) && v.size(2) == k.size(2), op, ": v ", v.shape(),
           " does not match k ", k.shape(), " in (B,H,Lk)");
  HH_CHECK(!causal || q.size(2) == k.size(2), op, ": causal attention needs as many queries as keys, got q ", q.shape(),
           " and k ", k.shape());
  HH_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), op, ": dtypes ", q.dtype(), ", ", k.dtype(), ", ",
           v.dtype(), " differ");
  HH_CHECK(is_floating(q.dtype()), op, ": expected floating inputs, got ", q.dtype());
  HH_CHECK(q.device() == k.device() && q.device() == v.device(), op, ": inputs on different devices (", q.device(),
           ", ", k.device(), ", ", v.device(), ")");
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), Lk = k.size(2), D = q.size(3), Dv = v.size(3);
  HH_CHECK(D > 0, op, ": head dim must be positive, got q ", q.shape());
  HH_CHECK(scale == -1 || (std::isfinite(scale) && scale > 0), op, ": scale must be positive and finite (or -1 for ",
           "1/sqrt(D)), got ", scale);
  const double s = scale == -1 ? 1.0 / std::sqrt(static_cast<double>(D)) : scale;
  DType in = q.dtype();
  DType ct = in == DType::f64 ? DType::f64 : DType::f32;
  auto prep = [&](const Tensor& t, int64_t L, int64_t last) {
    return contiguous(t.to(ct).detach()).reshape({B * H, L, last});
  };
  Tensor qq = prep(q, Lq, D), kk = prep(k, Lk, D), vv = prep(v, Lk, Dv);
  Tensor out = empty({B * H, Lq, Dv}, {ct, q.device()});
  Tensor lse = empty({B * H, Lq}, {ct, q.device()});
  if (out.numel() > 0) backend_of(out).flash_attention(qq, kk, vv, causal, s, out, lse);
  Tensor y = out.reshape({B, H, Lq, Dv});
  if (ct != in) y = y.to(in);
  Shape qs = q.shape(), ks = k.shape(), vs = v.shape();
  return record(op, y, {q, k, v}, {qq, kk, vv, out, lse}, [=](const Tensor& g, const NeedsGrad&) {
    // With no output elements (Dv == 0) nothing depends on the inputs: zero gradients.
    auto alloc = out.numel() > 0 ? empty : zeros;
    Tensor gq = alloc({B * H, Lq, D}, {ct, g.device()}), gk = alloc({B * H, Lk, D}, {ct, g.device()});
    Tensor gv = alloc({B * H, Lk, Dv}, {ct, g.device()});
    if (out.numel() > 0) {
      Tensor go = contiguous(g.to(ct)).reshape({B * H, Lq, Dv});
      backend_of(go).flash_attention_backward(qq, kk, vv, out, lse, go, causal, s, gq, gk, gv);
    }
    return std::vector<Tensor>{gq.reshape(qs).to(in), gk.reshape(ks).to(in), gv.reshape(vs).to(in)};
  });
}

}  // namespace hh
