#include "autograd/ops/attention.h"

#include "autograd/ops.h"
#include "core/backend.h"

namespace hh {

static const OpName reg_linear_attention_causal("linear_attention_causal");

Tensor linear_attention_causal(const Tensor& phi_q, const Tensor& phi_k, const Tensor& v, int64_t chunk, double eps) {
  const char* op = "linear_attention_causal";
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
  return record(op, out, {phi_q, phi_k, v}, [=](const Tensor& g, const NeedsGrad&) {
    Tensor gy = contiguous(g.to(ct)).reshape({B * H, L, D});
    Tensor gq = empty({B * H, L, F}, {ct, g.device()}), gk = empty({B * H, L, F}, {ct, g.device()});
    Tensor gv = empty({B * H, L, D}, {ct, g.device()});
    if (gy.numel() > 0) backend_of(gy).linear_attention_causal_backward(q, k, vv, y, den, gy, chunk, gq, gk, gv);
    return std::vector<Tensor>{gq.reshape(qs).to(in), gk.reshape(qs).to(in), gv.reshape(vs).to(in)};
  });
}

}  // namespace hh
