// The gated delta rule (semantics in delta_attention.h): the recurrent reference, the chunked WY
// form and the decoding step, all composed from existing ops (autograd differentiates the first
// two; the step runs without gradient). The one new piece, the unit lower-triangular inverse T of
// the WY form, is linalg.h's unit_lower_inverse.
#include "autograd/ops/delta_attention.h"

#include <cmath>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

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

// x (B,H,L,C) with `after` zero rows behind along L.
Tensor pad_rows(const Tensor& x, int64_t after) {
  if (after == 0) return x;
  return cat({x, zeros({x.size(0), x.size(1), after, x.size(3)}, {x.dtype(), x.device()})}, 2);
}

}  // namespace

Tensor delta_attention_recurrent(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                                 const Tensor& log_alpha, double scale, const Tensor& key_mask,
                                 const Tensor& initial_state, Tensor* final_state) {
  AutocastGuard no_autocast(DType::bf16, false);
  Prepared p = prepare("delta_attention_recurrent", q, k, v, beta, log_alpha, scale, key_mask, initial_state);
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2);
  // Per token (B,H,1,C): unbind over a (B,H,L,1,C) view, one node per input.
  auto tokens = [&](const Tensor& x) { return unbind(reshape(x, {B, H, L, 1, x.size(3)}), 2); };
  const std::vector<Tensor> qs = tokens(p.q), ks = tokens(p.k), vs = tokens(p.v), bs = tokens(p.beta),
                            las = tokens(p.log_alpha);
  Tensor S = p.start();
  std::vector<Tensor> os;
  os.reserve(static_cast<size_t>(L));
  for (size_t t = 0; t < static_cast<size_t>(L); ++t) os.push_back(delta_update(S, qs[t], ks[t], vs[t], bs[t], las[t]));
  if (final_state) *final_state = S;
  if (L == 0) return zeros({B, H, 0, v.size(3)}, {p.q.dtype(), q.device()});
  return cat(os, 2);  // (B,H,L,Dv)
}

Tensor delta_attention_chunked(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                               const Tensor& log_alpha, double scale, const Tensor& key_mask,
                               const Tensor& initial_state, Tensor* final_state, int64_t chunk) {
  const char* op = "delta_attention_chunked";
  AutocastGuard no_autocast(DType::bf16, false);
  Prepared p = prepare(op, q, k, v, beta, log_alpha, scale, key_mask, initial_state);
  HH_CHECK(chunk > 0, op, ": chunk size must be positive, got ", chunk);
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), Dv = v.size(3);
  const DType dt = p.q.dtype();
  const Device dev = q.device();
  if (L == 0) {
    if (final_state) *final_state = p.start();
    return zeros({B, H, 0, Dv}, {dt, dev});
  }
  // Rows padded to nb·C: a pad step has β = 0 and log α = 0, so the state passes it unchanged;
  // its outputs are cut off at the end.
  const int64_t C = chunk, nb = (L + C - 1) / C, P = nb * C;
  auto blocks = [&](const Tensor& x) {  // (B,H,L,X) -> (B,H,nb,C,X)
    return reshape(pad_rows(x, P - L), {B, H, nb, C, x.size(3)});
  };
  Tensor qb = blocks(p.q), kb = blocks(p.k), vb = blocks(p.v), bb = blocks(p.beta), lab = blocks(p.log_alpha);
  Tensor g = cumsum(lab, 3);  // γ_r (B,H,nb,C,1), <= 0, relative to the chunk start
  // Log decays between two steps of a chunk, seg_rj = Σ_{j<s<=r} log α_s (0 for j >= r), as a
  // cumsum down the rows of the gates placed below the diagonal (Mamba-2's segsum): each entry is
  // a sum of the gates between j and r, never γ_r − γ_j, whose cancellation in f32 leaves an
  // absolute error of |γ|·2^-24 (2.4e-5 relative at 64K tokens with log α down to -30).
  Tensor below = tril(ones({C, C}, {dt, dev}), -1);                              // (C,C) 1 below the diagonal
  Tensor seg = cumsum(mul(expand(lab, {B, H, nb, C, C}), below), 3);            // (B,H,nb,C,C), <= 0
  Tensor decay = mul(exp(seg), tril(ones({C, C}, {dt, dev})));                  // Γ_rj for j <= r, 0 above
  // The WY form: T = (I + strict lower of diag(β)(K Kᵀ ⊙ Γ))⁻¹, W = T diag(β e^γ) K, U = T diag(β) V.
  Tensor kt = transpose(kb, -1, -2);
  Tensor T = unit_lower_inverse(mul(mul(matmul(kb, kt), decay), bb));  // (B,H,nb,C,C)
  Tensor eg = exp(g);                                                   // (B,H,nb,C,1)
  Tensor W = matmul(T, mul(kb, mul(bb, eg)));                           // (B,H,nb,C,Dk)
  Tensor U = matmul(T, mul(vb, bb));                                    // (B,H,nb,C,Dv)
  Tensor g_last = slice(g, 3, C - 1, C);                                // (B,H,nb,1,1)
  Tensor kd = mul(transpose(kb, -1, -2), slice(decay, 3, C - 1, C));    // (B,H,nb,Dk,C): k_j e^{γ_last − γ_j}
  // The state recurrence over chunks: S before chunk c, and the chunk's new values U' = U − W S.
  const std::vector<Tensor> Ws = unbind(W, 2), Us = unbind(U, 2), Kds = unbind(kd, 2), Es = unbind(exp(g_last), 2);
  Tensor S = p.start();  // (B,H,Dk,Dv)
  std::vector<Tensor> states, news;
  states.reserve(static_cast<size_t>(nb));
  news.reserve(static_cast<size_t>(nb));
  for (size_t c = 0; c < static_cast<size_t>(nb); ++c) {
    states.push_back(S);
    Tensor un = sub(Us[c], matmul(Ws[c], S));  // (B,H,C,Dv)
    news.push_back(un);
    S = add(mul(S, Es[c]), matmul(Kds[c], un));
  }
  if (final_state) *final_state = S;
  // Outputs of every chunk at once: the state's part and the chunk's own (causal, decayed).
  Tensor aqk = mul(matmul(qb, kt), decay);  // (B,H,nb,C,C)
  Tensor o = add(matmul(mul(qb, eg), stack(states, 2)), matmul(aqk, stack(news, 2)));  // (B,H,nb,C,Dv)
  return slice(reshape(o, {B, H, P, Dv}), 2, 0, L);
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
  Tensor o = delta_update(st.S, p.q, p.k, p.v, p.beta, p.log_alpha);
  ++st.tokens;
  return o;
}

}  // namespace hh
