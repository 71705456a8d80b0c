// The gated delta rule (semantics in delta_attention.h): the recurrent reference, composed from
// existing ops (autograd differentiates it); the chunked form and the decoding step are kernels
// (core/kernels/delta_rule.h), the first with a hand-derived backward (core/cpu/cpu_delta.inc).
#include "autograd/ops/delta_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/kernels/delta_rule.h"

namespace hh {

static const OpName reg_delta_attention_recurrent("delta_attention_recurrent");
static const OpName reg_delta_attention_chunked("delta_attention_chunked");
static const OpName reg_delta_attention_step("delta_attention_step");

namespace {

// The inputs as the forms use them: q scaled, β and log α masked (a padded step: β = 0,
// log α = 0) and shaped (B,H,L,1), everything in f32 or f64; the initial state (B,H,Dk,Dv), zeros
// if none.
struct Prepared {
  Tensor q, k, v, beta, log_alpha, state;
  Tensor start() const {  // the state before the first token
    return state.defined() ? state
                           : zeros({q.size(0), q.size(1), q.size(3), v.size(3)}, {q.dtype(), q.device()});
  }
};

bool is_half(DType t) { return t == DType::bf16 || t == DType::f16; }
Tensor compute_dtype(const Tensor& x) { return x.defined() && is_half(x.dtype()) ? to_dtype(x, DType::f32) : x; }

// Checks the inputs (messages name `op` and the shapes) and prepares them.
Prepared prepare(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                 const Tensor& log_alpha, double scale, const Tensor& key_mask, const Tensor& initial_state) {
  HH_CHECK(q.defined() && k.defined() && v.defined() && beta.defined() && log_alpha.defined(), op,
           ": undefined input");
  HH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op, ": expected q, k (B,H,L,Dk), v (B,H,L,Dv), got ",
           q.shape(), ", ", k.shape(), ", ", v.shape());
  HH_CHECK(k.shape() == q.shape(), op, ": k ", k.shape(), " does not match q ", q.shape());
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), Dk = q.size(3), Dv = v.size(3);
  HH_CHECK(v.size(0) == B && v.size(1) == H && v.size(2) == L, op, ": v ", v.shape(), " does not match q ",
           q.shape(), " in (B,H,L)");
  HH_CHECK(beta.shape() == Shape({B, H, L}), op, ": beta ", beta.shape(), " is not (B,H,L) = (", B, ", ", H, ", ",
           L, ")");
  HH_CHECK(log_alpha.shape() == Shape({B, H, L}), op, ": log_alpha ", log_alpha.shape(), " is not (B,H,L) = (",
           B, ", ", H, ", ", L, ")");
  HH_CHECK(is_floating(q.dtype()), op, ": expected floating inputs, got ", q.dtype());
  for (const Tensor* t : {&k, &v, &beta, &log_alpha, &initial_state})
    if (t->defined())
      HH_CHECK(t->dtype() == q.dtype(), op, ": dtypes differ: q is ", q.dtype(), ", got ", t->dtype(),
               " of shape ", t->shape());
  for (const Tensor* t : {&k, &v, &beta, &log_alpha, &initial_state, &key_mask})
    if (t->defined())
      HH_CHECK(t->device() == q.device(), op, ": inputs on different devices (", q.device(), ", ", t->device(),
               ")");
  HH_CHECK(Dk > 0, op, ": key dim must be positive, got q ", q.shape());
  HH_CHECK(scale == -1 || (std::isfinite(scale) && scale > 0), op,
           ": scale must be positive and finite (or -1 for 1/sqrt(Dk)), got ", scale);
  if (key_mask.defined())
    HH_CHECK(key_mask.dim() == 2 && key_mask.size(0) == B && key_mask.size(1) == L, op, ": key mask ",
             key_mask.shape(), " does not match (B,L) = (", B, ", ", L, ")");
  if (initial_state.defined())
    HH_CHECK(initial_state.shape() == Shape({B, H, Dk, Dv}), op, ": initial state ", initial_state.shape(),
             " is not (B,H,Dk,Dv) = (", B, ", ", H, ", ", Dk, ", ", Dv, ")");
  const double s = scale == -1 ? 1.0 / std::sqrt(static_cast<double>(Dk)) : scale;
  Prepared p;
  p.q = mul(compute_dtype(q), s);
  p.k = compute_dtype(k);
  p.v = compute_dtype(v);
  p.beta = reshape(compute_dtype(beta), {B, H, L, 1});
  p.log_alpha = reshape(compute_dtype(log_alpha), {B, H, L, 1});
  const DType dt = p.q.dtype();
  if (key_mask.defined()) {
    Tensor m = detach(key_mask);
    if (m.dtype() != DType::boolean) m = ne(m, 0.0);
    Tensor keep = reshape(to_dtype(m, dt), {B, 1, L, 1});  // 1 = a real token
    p.beta = mul(p.beta, keep);
    p.log_alpha = mul(p.log_alpha, keep);
  }
  p.state = initial_state.defined() ? compute_dtype(initial_state) : Tensor();
  return p;
}

// One token of the rule: S (B,H,Dk,Dv), q_t (scaled), k_t (B,H,1,Dk), v_t (B,H,1,Dv), b_t, la_t
// (B,H,1,1) -> o_t = S_tᵀ q_t (B,H,1,Dv); S becomes S_t.
Tensor delta_update(Tensor& S, const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& b_t,
                    const Tensor& la_t) {
  S = mul(S, exp(la_t));                          // α_t S_{t-1}
  Tensor u = mul(sub(v_t, matmul(k_t, S)), b_t);  // u_t = β_t (v_t − α_t S_{t-1}ᵀ k_t)
  S = add(S, matmul(transpose(k_t, -1, -2), u));  // + k_t u_tᵀ
  return matmul(q_t, S);
}

}  // namespace

Tensor delta_attention_recurrent(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                                 const Tensor& log_alpha, double scale, const Tensor& key_mask,
                                 const Tensor& initial_state, Tensor* final_state) {
  AutocastGuard no_autocast(DType::bf16, false);
  Prepared p = prepare("delta_attention_recurrent", q, k, v, beta, log_alpha, scale, key_mask, initial_state);
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2);
  // No token: S_L is the initial state. Before the unbind below, which throws on an empty L (it
  // records no output; the check after the loop came too late, so L = 0 threw).
  if (L == 0) {
    if (final_state) *final_state = p.start();
    return zeros({B, H, 0, v.size(3)}, {p.q.dtype(), q.device()});
  }
  // Per token (B,H,1,C): unbind over a (B,H,L,1,C) view, one node per input.
  auto tokens = [&](const Tensor& x) { return unbind(reshape(x, {B, H, L, 1, x.size(3)}), 2); };
  const std::vector<Tensor> qs = tokens(p.q), ks = tokens(p.k), vs = tokens(p.v), bs = tokens(p.beta),
                            las = tokens(p.log_alpha);
  Tensor S = p.start();
  std::vector<Tensor> os;
  os.reserve(static_cast<size_t>(L));
  for (size_t t = 0; t < static_cast<size_t>(L); ++t) os.push_back(delta_update(S, qs[t], ks[t], vs[t], bs[t], las[t]));
  if (final_state) *final_state = S;
  return cat(os, 2);  // (B,H,L,Dv)
}

Tensor delta_attention_chunked(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                               const Tensor& log_alpha, double scale, const Tensor& key_mask,
                               const Tensor& initial_state, Tensor* final_state, int64_t chunk) {
  const char* op = "delta_attention_chunked";
  AutocastGuard no_autocast(DType::bf16, false);
  Prepared p = prepare(op, q, k, v, beta, log_alpha, scale, key_mask, initial_state);
  HH_CHECK(chunk > 0, op, ": chunk size must be positive, got ", chunk);
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), F = q.size(3), E = v.size(3), G = B * H;
  const DType dt = p.q.dtype();
  const Device dev = q.device();
  if (L == 0) {
    if (final_state) *final_state = p.start();
    return zeros({B, H, 0, E}, {dt, dev});
  }
  // The kernel: the recurrence per (batch, head), the state before every chunk kept for the backward.
  auto prep = [&](const Tensor& t, Shape shape) { return contiguous(t.detach()).reshape(shape); };
  Tensor qc = prep(p.q, {G, L, F}), kc = prep(p.k, {G, L, F}), vc = prep(p.v, {G, L, E});
  Tensor bc = prep(p.beta, {G, L}), ac = prep(p.log_alpha, {G, L}), s0 = prep(p.start(), {G, F, E});
  const int64_t C = std::min(chunk, L), N = (L + C - 1) / C;
  Tensor y = empty({G, L, E}, {dt, dev}), s_last = empty({G, F, E}, {dt, dev}), ckpt = empty({G, N, F, E}, {dt, dev});
  kernels::delta_rule_forward(dev, qc, kc, vc, bc, ac, s0, C, y, s_last, ckpt);
  const Shape qs = p.q.shape(), vs = p.v.shape(), bs = p.beta.shape(), ss{B, H, F, E};
  const bool has_state = p.state.defined();
  std::vector<Tensor> outs = record_outputs(
      op, {y.reshape({B, H, L, E}), s_last.reshape(ss)}, {p.q, p.k, p.v, p.beta, p.log_alpha, p.state},
      {qc, kc, vc, bc, ac, ckpt}, [=](const std::vector<Tensor>& g, const NeedsGrad&) {
        auto grad = [&](size_t i, const Shape& shape) {
          return g[i].defined() ? contiguous(g[i]).reshape(shape) : zeros(shape, {dt, dev});
        };
        Tensor gy = grad(0, {G, L, E}), gs = grad(1, {G, F, E});
        Tensor gq = empty({G, L, F}, {dt, dev}), gk = empty({G, L, F}, {dt, dev}), gv = empty({G, L, E}, {dt, dev});
        Tensor gb = empty({G, L}, {dt, dev}), ga = empty({G, L}, {dt, dev}), gs0 = empty({G, F, E}, {dt, dev});
        kernels::delta_rule_backward(dev, qc, kc, vc, bc, ac, ckpt, C, gy, gs, gq, gk, gv, gb, ga, gs0);
        return std::vector<Tensor>{gq.reshape(qs), gk.reshape(qs), gv.reshape(vs), gb.reshape(bs), ga.reshape(bs),
                                   has_state ? gs0.reshape(ss) : Tensor()};
      });
  if (final_state) *final_state = outs[1];
  return outs[0];
}

Tensor delta_attention_step(DeltaDecodeState& st, const Tensor& q_t, const Tensor& k_t, const Tensor& v_t,
                            const Tensor& beta_t, const Tensor& log_alpha_t, double scale,
                            const Tensor& key_mask_t) {
  const char* op = "delta_attention_step";
  NoGradGuard no_grad;
  AutocastGuard no_autocast(DType::bf16, false);
  Prepared p = prepare(op, q_t, k_t, v_t, beta_t, log_alpha_t, scale, key_mask_t, Tensor());
  HH_CHECK(q_t.size(2) == 1, op, ": expected one token, q_t (B,H,1,Dk), got ", q_t.shape());
  if (!st.S.defined()) {
    st.S = p.start();
    st.tokens = 0;
  }
  const Shape want{q_t.size(0), q_t.size(1), q_t.size(3), v_t.size(3)};
  HH_CHECK(st.S.shape() == want && st.S.dtype() == p.q.dtype() && st.S.device() == p.q.device(), op, ": token shapes q_t ", q_t.shape(), ", v_t ", v_t.shape(), " (", p.q.dtype(),
           ") do not match the state ", st.S.shape(), " (", st.S.dtype(), ")");
  // One kernel, a new state buffer (the old one may still be read by a graph).
  const int64_t G = want[0] * want[1], F = want[2], E = want[3];
  auto rows = [&](const Tensor& t, Shape shape) { return contiguous(t).reshape(shape); };
  const Options opts{st.S.dtype(), st.S.device()};
  Tensor next = empty(want, opts), o = empty({want[0], want[1], 1, E}, opts);
  kernels::delta_rule_step(st.S.device(), rows(p.q, {G, F}), rows(p.k, {G, F}), rows(p.v, {G, E}), rows(p.beta, {G}),
                           rows(p.log_alpha, {G}), contiguous(st.S), next, o);
  st.S = next;
  ++st.tokens;
  return o;
}

}  // namespace hh
