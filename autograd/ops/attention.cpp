// Fused attention ops: checks, the forward kernel call and the backward through the fused
// backward kernel (core/backend.h), with saved tensors held by the backward closure.
#include "autograd/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

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

namespace {

// An uninitialized tensor of `shape` laid out like `like` (core's empty_in_layout). The output of a
// (B,H,L,D) head view of a (B,L,C) projection is then laid out as (B,L,H,D), and the caller's
// transpose + reshape back to (B,L,C) is a view, not a copy; the same holds for the gradients of
// q, k and v.
// C stays innermost whatever like's stride along C: a C of size 1 may carry any stride (a
// transposed (B,H,L,1) buffer), which would otherwise put an output's C outermost (Dv > 1
// columns the kernels cannot write: their rows need unit stride).
Tensor empty_in_layout_of(const Shape& shape, const Tensor& like, Options o) {
  Strides order = like.strides();
  order[3] = 0;
  return empty_in_layout(shape, order, o);
}

// Whether the kernels can read t (B,H,L,C) in place: unit stride along C (any stride when C = 1),
// rows that do not overlap.
bool kernel_readable(const Tensor& t) {
  return t.numel() == 0 || ((t.stride(3) == 1 || t.size(3) == 1) && (t.size(2) <= 1 || t.stride(2) >= t.size(3)));
}

// Softmax attention on q, k, v (B,H,L,C) (after autocast), recorded as one node. q, k and v may
// be views of one packed projection (GPT-2's unbind of c_attn's output): the kernels read them in
// place, and their gradients come out laid out like them.
Tensor attention_node(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask_in,
                      bool causal, double scale) {
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
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3), Dv = v.size(3);
  HH_CHECK(D > 0, op, ": head dim must be positive, got q ", q.shape());
  HH_CHECK(scale == -1 || (std::isfinite(scale) && scale > 0), op, ": scale must be positive and finite (or -1 for ",
           "1/sqrt(D)), got ", scale);
  const double s = scale == -1 ? 1.0 / std::sqrt(static_cast<double>(D)) : scale;
  const DType in = q.dtype();
  const DType ct = in == DType::f64 ? DType::f64 : DType::f32;
  Backend& be = backend_of(q);
  // A backend that reads strided heads gets the (B,H,L,C) views as they are, and outputs laid out
  // like their inputs; the others get contiguous (B·H,L,C) tensors.
  const bool views = be.flash_attention_takes_views();
  // The key mask as the kernels read it: (B,Lk) bool, contiguous (no gradient flows into it).
  Tensor key_mask;
  if (key_mask_in.defined()) {
    HH_CHECK(key_mask_in.dim() == 2 && key_mask_in.size(0) == B && key_mask_in.size(1) == k.size(2), op, ": key mask ",
             key_mask_in.shape(), " does not match (B,Lk) = (", B, ", ", k.size(2), ")");
    HH_CHECK(be.flash_attention_takes_key_mask() && views, op, ": the ", q.device(),
             " backend's fused kernel takes no key mask (softmax_attention falls back to the materialized weights)");
    key_mask = contiguous(key_mask_in.dtype() == DType::boolean ? key_mask_in.detach() : ne(key_mask_in.detach(), 0.0));
  }
  auto alloc = [=](const Shape& shape, const Tensor& like) {
    return views ? empty_in_layout_of(shape, like, {ct, like.device()}) : empty(shape, {ct, like.device()});
  };
  // The kernels' operands: 4-D (B,H,L,C) for a backend that takes views, else (B·H,L,C).
  auto kernel_operand = [=](const Tensor& t) { return views ? t : t.reshape({B * H, t.size(2), t.size(3)}); };
  auto readable = [=](const Tensor& t) { return views && kernel_readable(t); };
  auto prep = [&](const Tensor& t) {  // the kernels' inputs in ct
    Tensor c = t.to(ct).detach();
    return readable(c) ? c : contiguous(c);
  };
  const Tensor qq = prep(q), kk = prep(k), vv = prep(v);
  Tensor out = alloc({B, H, Lq, Dv}, qq);  // (B,H,Lq,Dv), in q's memory order
  Tensor lse = empty({B * H, Lq}, {ct, q.device()});
  if (out.numel() > 0)
    be.flash_attention(kernel_operand(qq), kernel_operand(kk), kernel_operand(vv), key_mask, causal, s,
                       kernel_operand(out), lse);
  Tensor y = ct != in ? out.to(in) : out;
  const Shape q_shape = q.shape(), k_shape = k.shape(), v_shape = v.shape();
  return record(op, y, {q, k, v}, {qq, kk, vv, out, lse}, [=](const Tensor& g, const NeedsGrad&) {
    Tensor gq = alloc(q_shape, qq), gk = alloc(k_shape, kk), gv = alloc(v_shape, vv);
    if (out.numel() == 0) {  // no output elements (Dv == 0): nothing depends on the inputs, zero gradients
      for (const Tensor& t : {gq, gk, gv})
        if (t.numel() > 0) backend_of(t).fill(t, 0.0);
    } else {
      Tensor go = g.to(ct);
      if (!readable(go)) go = contiguous(go);
      backend_of(go).flash_attention_backward(kernel_operand(qq), kernel_operand(kk), kernel_operand(vv), key_mask,
                                              kernel_operand(out), lse, kernel_operand(go), causal, s,
                                              kernel_operand(gq), kernel_operand(gk), kernel_operand(gv));
    }
    return std::vector<Tensor>{gq.to(in), gk.to(in), gv.to(in)};
  });
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                                    const Tensor& key_mask) {
  // Autocast's lower-precision list: bf16 inputs, f32 softmax statistics, output rounded to bf16.
  return attention_node("scaled_dot_product_attention", autocast_lower(q), autocast_lower(k), autocast_lower(v),
                        key_mask, causal, scale);
}

}  // namespace hh
