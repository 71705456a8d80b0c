// Gated causal linear attention (semantics in gated_attention.h): the quadratic reference, the
// chunked form and the recurrent step, all composed from existing ops, so autograd gives every
// backward.
#include "autograd/ops/gated_attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace hh {

static const OpName reg_gated_attention_quadratic("gated_attention_quadratic");
static const OpName reg_gated_attention_chunked("gated_attention_chunked");
static const OpName reg_gated_attention_step("gated_attention_step");

namespace {

// A blocked log decay: exp(-1e30) is exactly 0, and its gradient too.
constexpr double kBlocked = -1e30;

// Checks the inputs (log_a's last dim F or 1; entries <= 0).
void check_inputs(const char* op, const Tensor& pq, const Tensor& pk, const Tensor& v, const Tensor& log_a,
                  double eps, const Tensor& key_mask) {
  HH_CHECK(pq.dim() == 4 && pk.dim() == 4 && v.dim() == 4 && log_a.dim() == 4, op,
           ": expected pq, pk (B,H,L,F), v (B,H,L,Dv), log_a (B,H,L,F or 1), got ", pq.shape(), ", ", pk.shape(),
           ", ", v.shape(), ", ", log_a.shape());
  HH_CHECK(pk.shape() == pq.shape(), op, ": pk ", pk.shape(), " does not match pq ", pq.shape());
  HH_CHECK(v.size(0) == pq.size(0) && v.size(1) == pq.size(1) && v.size(2) == pq.size(2), op, ": v ", v.shape(),
           " does not match pq ", pq.shape(), " in (B,H,L)");
  HH_CHECK(log_a.size(0) == pq.size(0) && log_a.size(1) == pq.size(1) && log_a.size(2) == pq.size(2) &&
               (log_a.size(3) == pq.size(3) || log_a.size(3) == 1),
           op, ": log gate ", log_a.shape(), " is neither (B,H,L,F) nor (B,H,L,1) for pq ", pq.shape());
  for (const Tensor* t : {&pk, &v, &log_a})
    HH_CHECK(t->dtype() == pq.dtype(), op, ": dtypes differ: pq is ", pq.dtype(), ", got ", t->dtype(), " of shape ",
             t->shape());
  HH_CHECK(is_floating(pq.dtype()), op, ": expected floating inputs, got ", pq.dtype());
  for (const Tensor* t : {&pk, &v, &log_a})
    HH_CHECK(t->device() == pq.device(), op, ": inputs on different devices (", pq.device(), ", ", t->device(), ")");
  HH_CHECK(std::isfinite(eps) && eps >= 0, op, ": eps must be finite and >= 0, got ", eps);
  if (key_mask.defined()) {
    HH_CHECK(key_mask.dim() == 2 && key_mask.size(0) == pq.size(0) && key_mask.size(1) == pq.size(2), op,
             ": key mask ", key_mask.shape(), " does not match (B,L) = (", pq.size(0), ", ", pq.size(2), ")");
    HH_CHECK(key_mask.device() == pq.device(), op, ": key mask on ", key_mask.device(), ", inputs on ", pq.device());
  }
  if (log_a.numel() > 0) {
    NoGradGuard ng;
    const double top = amax(detach(log_a)).item<double>();
    HH_CHECK(top <= 0, op, ": the log gate must be <= 0 everywhere (a decay), got a maximum of ", top);
  }
}

// pk and log_a with padded tokens zeroed (no key, no decay); unchanged without a key mask.
void mask_tokens(const Tensor& key_mask, Tensor& pk, Tensor& log_a) {
  if (!key_mask.defined()) return;
  Tensor m = detach(key_mask);
  if (m.dtype() != DType::boolean) m = ne(m, 0.0);
  Tensor keep = reshape(to_dtype(m, pk.dtype()), {pk.size(0), 1, pk.size(2), 1});
  pk = mul(pk, keep);
  log_a = mul(log_a, keep);
}

// v with a column of ones appended when normalizing: the last output column is then pq·z.
Tensor with_ones(const Tensor& v, bool normalize) {
  if (!normalize) return v;
  return cat({v, ones({v.size(0), v.size(1), v.size(2), 1}, {v.dtype(), v.device()})}, 3);
}

// y (..., Dv+1) -> y[..., :Dv] / (y[..., Dv] + eps) when normalizing; y otherwise.
Tensor finish(const Tensor& y, bool normalize, double eps) {
  if (!normalize) return y;
  const int64_t E = y.size(-1);
  return div(slice(y, -1, 0, E - 1), add(slice(y, -1, E - 1, E), eps));
}

// (n,n) bool, true above the diagonal (key after query); reshaped to `shape` (n·n entries).
Tensor future(int64_t n, const Shape& shape, Device d) {
  std::vector<double> m(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) m[static_cast<size_t>(i * n + j)] = 1.0;
  return from_vector(m, shape, {DType::boolean, d});
}

// exp(b_i - b_j) for j <= i, 0 above: b (..., n, G) -> (..., n, n, G) (or (..., n, n) when
// `squeeze_last`, G = 1). The exponent is masked before exp, so it never exceeds 0.
Tensor decay_matrix(const Tensor& b, bool squeeze_last) {
  const int64_t r = b.dim(), n = b.size(-2);
  Tensor diff = sub(unsqueeze(b, r - 1), unsqueeze(b, r - 2));  // (..., n, n, G): [i, j] = b_i - b_j
  diff = masked_fill(diff, future(n, {n, n, 1}, b.device()), kBlocked);
  Tensor d = exp(diff);
  return squeeze_last ? squeeze(d, -1) : d;
}

// Σ_f p_if k_jf d_ijf: p (..., n, F), k (..., m, F), d (..., n, m, F) -> (..., n, m).
Tensor channel_scores(const Tensor& p, const Tensor& k, const Tensor& d) {
  const int64_t r = p.dim();
  return sum(mul(mul(unsqueeze(p, r - 1), unsqueeze(k, r - 2)), d), {-1});
}

// x (B,H,L,C) with `after` zero rows behind along L.
Tensor pad_tail(const Tensor& x, int64_t after) {
  if (after == 0) return x;
  return cat({x, zeros({x.size(0), x.size(1), after, x.size(3)}, {x.dtype(), x.device()})}, 2);
}

// The weights inside each chunk: qb, kb (B,H,N,C,F), gb and its chunk-local inclusive cumsum b
// (B,H,N,C,G) -> A (B,H,N,C,C), A_rs = Σ_f qb_rf kb_sf exp(b_rf - b_sf) for s <= r.
Tensor intra_chunk(const Tensor& qb, const Tensor& kb, const Tensor& gb, const Tensor& b) {
  const int64_t B = qb.size(0), H = qb.size(1), N = qb.size(2), C = qb.size(3), F = qb.size(4);
  if (b.size(4) == 1) return mul(matmul(qb, transpose(kb, -1, -2)), decay_matrix(b, true));  // per-head decay
  // Per-channel gate: sub-blocks of c tokens, reference point e_i = the cumsum before sub-block i.
  const int64_t c = std::gcd(C, int64_t{16}), ns = C / c;
  auto sub_blocks = [&](const Tensor& x) { return reshape(x, {B, H, N, ns, c, F}); };
  Tensor qs = sub_blocks(qb), ks = sub_blocks(kb), bs = sub_blocks(b), gs = sub_blocks(gb);
  Tensor e = sub(slice(bs, 4, 0, 1), slice(gs, 4, 0, 1));  // (B,H,N,ns,1,F), >= every b of sub-block i
  // Keys in earlier sub-blocks: q exp(b_r - e_i) · k exp(e_i - b_s), both exponents <= 0.
  Tensor qt = mul(qs, exp(sub(bs, e)));                    // (B,H,N,ns,c,F)
  Tensor ex = sub(e, unsqueeze(b, 3));                     // (B,H,N,ns,C,F): e_i - b_s
  std::vector<double> later(static_cast<size_t>(ns * C), 0.0);  // key s is not before sub-block i
  for (int64_t i = 0; i < ns; ++i)
    for (int64_t s = i * c; s < C; ++s) later[static_cast<size_t>(i * C + s)] = 1.0;
  ex = masked_fill(ex, from_vector(later, {ns, C, 1}, {DType::boolean, b.device()}), kBlocked);
  Tensor kt = mul(unsqueeze(kb, 3), exp(ex));                       // (B,H,N,ns,C,F)
  Tensor a_off = matmul(qt, transpose(kt, -1, -2));                 // (B,H,N,ns,c,C)
  // Pairs inside one sub-block: exp(b_r - b_s) one by one, placed in the sub-block's own columns.
  Tensor a_diag = channel_scores(qs, ks, decay_matrix(bs, false));  // (B,H,N,ns,c,c)
  std::vector<double> eye(static_cast<size_t>(ns * ns), 0.0);
  for (int64_t i = 0; i < ns; ++i) eye[static_cast<size_t>(i * ns + i)] = 1.0;
  Tensor placed = mul(unsqueeze(a_diag, 5), from_vector(eye, {ns, 1, ns, 1}, {b.dtype(), b.device()}));
  return reshape(add(a_off, reshape(placed, {B, H, N, ns, c, C})), {B, H, N, C, C});
}

}  // namespace

Tensor gated_attention_quadratic(const Tensor& pq, const Tensor& pk_in, const Tensor& v, const Tensor& log_a_in,
                                 bool normalize, double eps, const Tensor& key_mask, Tensor* weights) {
  check_inputs("gated_attention_quadratic", pq, pk_in, v, log_a_in, eps, key_mask);
  Tensor pk = pk_in, log_a = log_a_in;
  mask_tokens(key_mask, pk, log_a);
  const bool scalar = log_a.size(3) == 1;
  Tensor b = cumsum(log_a, 2);  // (B,H,L,G), inclusive
  Tensor a = scalar ? mul(matmul(pq, transpose(pk, -1, -2)), decay_matrix(b, true))
                    : channel_scores(pq, pk, decay_matrix(b, false));  // (B,H,L,L)
  if (normalize) a = div(a, add(sum(a, {-1}, true), eps));
  if (weights) *weights = a;
  return matmul(a, v);  // (B,H,L,Dv)
}

Tensor gated_attention_chunked(const Tensor& pq, const Tensor& pk_in, const Tensor& v, const Tensor& log_a_in,
                               bool normalize, double eps, const Tensor& key_mask, int64_t chunk) {
  const char* op = "gated_attention_chunked";
  check_inputs(op, pq, pk_in, v, log_a_in, eps, key_mask);
  HH_CHECK(chunk > 0, op, ": chunk size must be positive, got ", chunk);
  Tensor pk = pk_in, log_a = log_a_in;
  mask_tokens(key_mask, pk, log_a);
  const int64_t B = pq.size(0), H = pq.size(1), L = pq.size(2), F = pq.size(3), Dv = v.size(3);
  const Options o{pq.dtype(), pq.device()};
  if (L == 0) return zeros({B, H, 0, Dv}, o);
  const Tensor vv = with_ones(v, normalize);  // (B,H,L,E)
  // A chunk longer than the sequence computes the same as one of length L.
  const int64_t C = std::min(chunk, L), N = (L + C - 1) / C, P = N * C, E = vv.size(3);
  auto blocks = [&](const Tensor& x) { return reshape(pad_tail(x, P - L), {B, H, N, C, x.size(3)}); };
  // The padded tail: no key, no value, no decay; its outputs are cut off.
  Tensor qb = blocks(pq), kb = blocks(pk), vb = blocks(vv), gb = blocks(log_a);
  Tensor b = cumsum(gb, 3);  // (B,H,N,C,G): relative to the chunk start, <= 0
  Tensor y = matmul(intra_chunk(qb, kb, gb, b), vb);  // (B,H,N,C,E)
  // Across chunks: the state before chunk c, scanned one chunk at a time.
  Tensor b_last = slice(b, 3, C - 1, C);                           // (B,H,N,1,G)
  Tensor u = matmul(transpose(mul(kb, exp(sub(b_last, b))), -1, -2), vb);  // (B,H,N,F,E)
  std::vector<Tensor> us = unbind(u, 2), gammas = unbind(transpose(exp(b_last), -1, -2), 2);  // (B,H,G,1)
  std::vector<Tensor> states;
  Tensor S = zeros({B, H, F, E}, o);
  for (int64_t c = 0; c < N; ++c) {
    states.push_back(S);
    if (c + 1 < N) S = add(mul(S, gammas[static_cast<size_t>(c)]), us[static_cast<size_t>(c)]);
  }
  y = add(y, matmul(mul(qb, exp(b)), stack(states, 2)));  // (B,H,N,C,E)
  return finish(slice(reshape(y, {B, H, P, E}), 2, 0, L), normalize, eps);
}

Tensor gated_attention_step(GatedDecodeState& st, const Tensor& pq_t, const Tensor& pk_t, const Tensor& v_t,
                            const Tensor& log_a_t, bool normalize, double eps) {
  const char* op = "gated_attention_step";
  check_inputs(op, pq_t, pk_t, v_t, log_a_t, eps, Tensor());
  HH_CHECK(pq_t.size(2) == 1, op, ": expected one token, pq_t (B,H,1,F), got ", pq_t.shape());
  const int64_t B = pq_t.size(0), H = pq_t.size(1), F = pq_t.size(3), Dv = v_t.size(3);
  if (st.S.defined())
    HH_CHECK(st.S.size(0) == B && st.S.size(1) == H && st.S.size(2) == F && st.S.size(3) == Dv &&
                 st.S.dtype() == pq_t.dtype() && st.S.device() == pq_t.device() && st.z.defined() == normalize,
             op, ": token shapes pq_t ", pq_t.shape(), ", v_t ", v_t.shape(), " do not match the state S ",
             st.S.shape(), " (", st.S.dtype(), st.z.defined() ? ", normalized" : ", not normalized", ")");
  Tensor a = exp(transpose(log_a_t, -1, -2));  // (B,H,G,1)
  Tensor kt = transpose(pk_t, -1, -2);         // (B,H,F,1)
  Tensor kv = matmul(kt, v_t);                 // (B,H,F,Dv)
  st.S = st.S.defined() ? add(mul(st.S, a), kv) : kv;
  if (normalize) st.z = st.z.defined() ? add(mul(st.z, a), kt) : kt;
  ++st.tokens;
  Tensor y = matmul(pq_t, st.S);  // (B,H,1,Dv)
  if (normalize) y = div(y, add(matmul(pq_t, st.z), eps));
  {
    NoGradGuard ng;
    const double check = sum(detach(y)).item<double>();
    HH_CHECK(std::isfinite(check), op, ": the recurrent state became NaN/Inf at token ", st.tokens);
  }
  return y;
}

Tensor gated_attention_recurrent(const Tensor& pq, const Tensor& pk_in, const Tensor& v, const Tensor& log_a_in,
                                 bool normalize, double eps, const Tensor& key_mask) {
  check_inputs("gated_attention_recurrent", pq, pk_in, v, log_a_in, eps, key_mask);
  Tensor pk = pk_in, log_a = log_a_in;
  mask_tokens(key_mask, pk, log_a);
  if (pq.size(2) == 0) return zeros({pq.size(0), pq.size(1), 0, v.size(3)}, {pq.dtype(), pq.device()});
  GatedDecodeState st;
  std::vector<Tensor> ys;
  const std::vector<Tensor> qs = unbind(pq, 2), ks = unbind(pk, 2), vs = unbind(v, 2), gs = unbind(log_a, 2);
  for (size_t t = 0; t < qs.size(); ++t)
    ys.push_back(gated_attention_step(st, unsqueeze(qs[t], 2), unsqueeze(ks[t], 2), unsqueeze(vs[t], 2),
                                      unsqueeze(gs[t], 2), normalize, eps));
  return cat(ys, 2);
}

}  // namespace hh
