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

// An uninitialized tensor of `shape` whose memory order follows `like`'s strides (dims by
// decreasing stride, ties by position). The output of a (B,H,L,D) head view of a (B,L,C)
// projection is then laid out as (B,L,H,D), and the caller's transpose + reshape back to (B,L,C)
// is a view, not a copy; the same holds for the gradients of q, k and v.
Tensor empty_in_layout_of(const Shape& shape, const Tensor& like, Options o) {
  const size_t n = shape.size();
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return like.stride(static_cast<int64_t>(a)) > like.stride(static_cast<int64_t>(b));
  });
  Shape mem(n);
  for (size_t i = 0; i < n; ++i) mem[i] = shape[order[i]];
  Tensor buf = empty(mem, o);
  Strides st(n);
  for (size_t i = 0; i < n; ++i) st[order[i]] = buf.strides()[i];
  return buf.as_strided(shape, st, buf.offset());
}

// Whether the kernels can read t (B,H,L,C) in place: unit stride along C, rows that do not overlap.
bool kernel_readable(const Tensor& t) {
  return t.numel() == 0 || (t.stride(3) == 1 && (t.size(2) <= 1 || t.stride(2) >= t.size(3)));
}

}  // namespace

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
  Backend& be = backend_of(q);
  // A backend that reads strided heads gets the (B,H,L,C) views as they are, and outputs laid out
  // like their inputs; the others get contiguous (B·H,L,C) tensors.
  const bool views = be.flash_attention_takes_views();
  auto prep = [&](const Tensor& t, int64_t L, int64_t last) {
    Tensor c = t.to(ct).detach();
    return views && kernel_readable(c) ? c : contiguous(c).reshape({B, H, L, last});
  };
  auto alloc = [=](const Shape& shape, const Tensor& like) {
    return views ? empty_in_layout_of(shape, like, {ct, like.device()}) : empty(shape, {ct, like.device()});
  };
  // The kernels' operands: 4-D (B,H,L,C) for a backend that takes views, else (B·H,L,C).
  auto kernel_operand = [=](const Tensor& t) {
    return views ? t : t.reshape({B * H, t.size(2), t.size(3)});
  };
  Tensor qq = prep(q, Lq, D), kk = prep(k, Lk, D), vv = prep(v, Lk, Dv);
  Tensor out = alloc({B, H, Lq, Dv}, qq);  // (B,H,Lq,Dv), in q's memory order
  Tensor lse = empty({B * H, Lq}, {ct, q.device()});
  if (out.numel() > 0)
    be.flash_attention(kernel_operand(qq), kernel_operand(kk), kernel_operand(vv), causal, s, kernel_operand(out), lse);
  Tensor y = ct != in ? out.to(in) : out;
  const Shape q_shape = q.shape(), k_shape = k.shape(), v_shape = v.shape();
  return record(op, y, {q, k, v}, {qq, kk, vv, out, lse}, [=](const Tensor& g, const NeedsGrad&) {
    // With no output elements (Dv == 0) nothing depends on the inputs: zero gradients.
    if (out.numel() == 0)
      return std::vector<Tensor>{zeros(q_shape, {in, g.device()}), zeros(k_shape, {in, g.device()}),
                                 zeros(v_shape, {in, g.device()})};
    Tensor gq = alloc(q_shape, qq), gk = alloc(k_shape, kk), gv = alloc(v_shape, vv);
    {
      Tensor go = g.to(ct);
      if (!(views && kernel_readable(go))) go = contiguous(go);
      Backend& gb = backend_of(go);
      gb.flash_attention_backward(kernel_operand(qq), kernel_operand(kk), kernel_operand(vv), kernel_operand(out), lse,
                                  kernel_operand(go), causal, s, kernel_operand(gq), kernel_operand(gk),
                                  kernel_operand(gv));
    }
    return std::vector<Tensor>{gq.to(in), gk.to(in), gv.to(in)};
  });
}

}  // namespace hh
