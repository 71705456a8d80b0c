// Gated causal linear attention (semantics in gated_attention.h): the quadratic reference and the
// recurrent step under autograd, composed from existing ops; the chunked form and the decoding
// step without gradients are kernels (core/kernels/gated_linear.h) with a hand-derived backward.
#include "autograd/ops/gated_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/kernels/gated_linear.h"

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

// The per-channel weights Σ_f pq_if pk_jf exp(b_if - b_jf) (j <= i, 0 above): pq, pk (B,H,L,F), b
// (B,H,L,F) -> (B,H,L,L), in blocks of kRows query rows, each against the keys up to its last row,
// so no (B,H,L,L,F) tensor is made: without gradients the peak is one block's (B,H,kRows,L,F).
// Each weight is the same expression as in one piece (tested against the recurrent form at L = 37:
// one full block and a partial one, values and gradients).
constexpr int64_t kRows = 32;
Tensor channel_weights(const Tensor& pq, const Tensor& pk, const Tensor& b) {
  const int64_t L = pq.size(2);
  if (L <= kRows) return channel_scores(pq, pk, decay_matrix(b, false));
  std::vector<Tensor> blocks;
  for (int64_t s = 0; s < L; s += kRows) {
    const int64_t e = std::min(L, s + kRows), n = e - s;
    std::vector<double> above(static_cast<size_t>(n * e), 0.0);  // key j after query s + r
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = s + r + 1; j < e; ++j) above[static_cast<size_t>(r * e + j)] = 1.0;
    const Tensor bq = slice(b, 2, s, e), bk = slice(b, 2, 0, e);
    Tensor diff = sub(unsqueeze(bq, 3), unsqueeze(bk, 2));  // (B,H,n,e,F): [r, j] = b_{s+r} - b_j
    diff = masked_fill(diff, from_vector(above, {n, e, 1}, {DType::boolean, b.device()}), kBlocked);
    Tensor blk = channel_scores(slice(pq, 2, s, e), slice(pk, 2, 0, e), exp(diff));  // (B,H,n,e)
    if (e < L) blk = cat({blk, zeros({blk.size(0), blk.size(1), n, L - e}, {blk.dtype(), blk.device()})}, 3);
    blocks.push_back(blk);
  }
  return cat(blocks, 2);
}

}  // namespace

Tensor gated_attention_quadratic(const Tensor& pq, const Tensor& pk_in, const Tensor& v, const Tensor& log_a_in,
                                 bool normalize, double eps, const Tensor& key_mask, Tensor* weights) {
  AutocastGuard no_autocast(DType::bf16, false);  // computed in the inputs' dtype
  check_inputs("gated_attention_quadratic", pq, pk_in, v, log_a_in, eps, key_mask);
  Tensor pk = pk_in, log_a = log_a_in;
  mask_tokens(key_mask, pk, log_a);
  const bool scalar = log_a.size(3) == 1;
  Tensor b = cumsum(log_a, 2);  // (B,H,L,G), inclusive
  Tensor a = scalar ? mul(matmul(pq, transpose(pk, -1, -2)), decay_matrix(b, true))
                    : channel_weights(pq, pk, b);  // (B,H,L,L)
  if (normalize) a = div(a, add(sum(a, {-1}, true), eps));
  if (weights) *weights = a;
  return matmul(a, v);  // (B,H,L,Dv)
}

namespace {
// A carried state must match the tokens: S (B,H,F,Dv), z (B,H,F,1) when normalizing, same dtype.
void check_initial(const char* op, const Tensor& pk, const Tensor& v, const GatedDecodeState& st, bool normalize) {
  const int64_t B = pk.size(0), H = pk.size(1), F = pk.size(3), Dv = v.size(3);
  HH_CHECK(st.S.dim() == 4 && st.S.size(0) == B && st.S.size(1) == H && st.S.size(2) == F && st.S.size(3) == Dv &&
               st.S.dtype() == pk.dtype() && st.S.device() == pk.device(),
           op, ": the initial state S ", st.S.shape(), " (", st.S.dtype(), ") does not match (B,H,F,Dv) = (", B, ",",
           H, ",", F, ",", Dv, ") in ", pk.dtype());
  HH_CHECK(!normalize || (st.z.defined() && st.z.shape() == Shape({B, H, F, 1}) && st.z.dtype() == pk.dtype()),
           op, ": normalizing needs the initial state's z (B,H,F,1) = (", B, ",", H, ",", F, ",1)");
}

// The carried state read by every query: (pq_i ⊙ exp(b_i))ᵀ [S_0 | z_0] (B,H,L,E), b the inclusive
// cumsum of log_a (in f64, as gated_decode_state), every exponent <= 0.
Tensor initial_state_part(const char* op, const Tensor& pq, const Tensor& v, const Tensor& log_a,
                          const GatedDecodeState& st, bool normalize) {
  check_initial(op, pq, v, st, normalize);
  Tensor b = cumsum(log_a.to(DType::f64), 2).to(pq.dtype());  // (B,H,L,F or 1)
  Tensor S0 = normalize ? cat({st.S, st.z}, 3) : st.S;        // (B,H,F,E)
  return matmul(mul(pq, exp(b)), S0);
}
}  // namespace

Tensor gated_attention_chunked(const Tensor& pq, const Tensor& pk_in, const Tensor& v, const Tensor& log_a_in,
                               bool normalize, double eps, const Tensor& key_mask, int64_t chunk,
                               const GatedDecodeState* initial) {
  AutocastGuard no_autocast(DType::bf16, false);  // computed in the inputs' dtype
  const char* op = "gated_attention_chunked";
  check_inputs(op, pq, pk_in, v, log_a_in, eps, key_mask);
  HH_CHECK(chunk > 0, op, ": chunk size must be positive, got ", chunk);
  Tensor pk = pk_in, log_a = log_a_in;
  mask_tokens(key_mask, pk, log_a);
  const Tensor vv = with_ones(v, normalize);  // (B,H,L,E)
  const int64_t B = pq.size(0), H = pq.size(1), L = pq.size(2), F = pq.size(3), E = vv.size(3), A = log_a.size(3);
  const int64_t G = B * H;
  const DType in = pq.dtype(), ct = in == DType::f64 ? DType::f64 : DType::f32;
  const Device dev = pq.device();
  auto prep = [&](const Tensor& t, int64_t last) { return contiguous(t.to(ct).detach()).reshape({G, L, last}); };
  Tensor qc = prep(pq, F), kc = prep(pk, F), vc = prep(vv, E), ac = prep(log_a, A);
  Tensor y = empty({G, L, E}, {ct, dev});
  if (G * L > 0) kernels::gated_linear_forward(dev, qc, kc, vc, ac, chunk, y);
  const Shape qs = pq.shape(), vs = vv.shape(), as = log_a.shape();
  Tensor out = record(op, y.reshape({B, H, L, E}).to(in), {pq, pk, vv, log_a}, {qc, kc, vc, ac},
                      [=](const Tensor& g, const NeedsGrad&) {
                        Tensor gy = contiguous(g.to(ct)).reshape({G, L, E});
                        Tensor gq = empty({G, L, F}, {ct, dev}), gk = empty({G, L, F}, {ct, dev});
                        Tensor gv = empty({G, L, E}, {ct, dev}), ga = empty({G, L, A}, {ct, dev});
                        if (G * L > 0) kernels::gated_linear_backward(dev, qc, kc, vc, ac, chunk, gy, gq, gk, gv, ga);
                        return std::vector<Tensor>{gq.reshape(qs).to(in), gk.reshape(qs).to(in),
                                                   gv.reshape(vs).to(in), ga.reshape(as).to(in)};
                      });
  if (initial && initial->S.defined()) out = add(out, initial_state_part(op, pq, v, log_a, *initial, normalize));
  return finish(out, normalize, eps);
}

Tensor gated_attention_step(GatedDecodeState& st, const Tensor& pq_t, const Tensor& pk_t, const Tensor& v_t,
                            const Tensor& log_a_t, bool normalize, double eps) {
  AutocastGuard no_autocast(DType::bf16, false);  // computed in the inputs' dtype
  const char* op = "gated_attention_step";
  check_inputs(op, pq_t, pk_t, v_t, log_a_t, eps, Tensor());
  HH_CHECK(pq_t.size(2) == 1, op, ": expected one token, pq_t (B,H,1,F), got ", pq_t.shape());
  const int64_t B = pq_t.size(0), H = pq_t.size(1), F = pq_t.size(3), Dv = v_t.size(3);
  if (st.S.defined())
    HH_CHECK(st.S.size(0) == B && st.S.size(1) == H && st.S.size(2) == F && st.S.size(3) == Dv &&
                 st.S.dtype() == pq_t.dtype() && st.S.device() == pq_t.device() && st.z.defined() == normalize,
             op, ": token shapes pq_t ", pq_t.shape(), ", v_t ", v_t.shape(), " do not match the state S ",
             st.S.shape(), " (", st.S.dtype(), st.z.defined() ? ", normalized" : ", not normalized", ")");
  if (!any_requires_grad({pq_t, pk_t, v_t, log_a_t, st.S, st.z}) &&
      (pq_t.dtype() == DType::f32 || pq_t.dtype() == DType::f64)) {
    // Decoding: one kernel per state, no graph. z is a state with a value of ones.
    const int64_t G = B * H, A = log_a_t.size(3);
    const Options o{pq_t.dtype(), pq_t.device()};
    auto row = [&](const Tensor& t, int64_t n) { return contiguous(t).reshape({G, n}); };
    Tensor q = row(pq_t, F), k = row(pk_t, F), a = row(log_a_t, A);
    auto advance = [&](Tensor& S, const Tensor& val, int64_t E) {
      if (!S.defined()) S = zeros({B, H, F, E}, o);
      Tensor next = empty({B, H, F, E}, o), out = empty({B, H, 1, E}, o);
      kernels::gated_linear_step(pq_t.device(), q, k, row(val, E), a, contiguous(S), next, out);
      S = next;
      return out;
    };
    Tensor y = advance(st.S, v_t, Dv);
    if (normalize) y = div(y, add(advance(st.z, ones({B, H, 1, 1}, o), 1), eps));
    ++st.tokens;
    return y;
  }
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

GatedDecodeState gated_decode_state(const Tensor& pk, const Tensor& v, const Tensor& log_a, bool normalize,
                                    const GatedDecodeState* initial) {
  check_inputs("gated_decode_state", pk, pk, v, log_a, 0.0, Tensor());
  NoGradGuard no_grad;
  const int64_t L = pk.size(2);
  // exp(b_L - b_j) (B,H,L,F or 1): the decay from token j to the last; every exponent <= 0.
  Tensor b = cumsum(log_a.to(DType::f64), 2);
  Tensor decay = exp(sub(slice(b, 2, L - 1, L), b)).to(pk.dtype());
  Tensor pk_decayed = mul(pk, decay);  // (B,H,L,F)
  GatedDecodeState st;
  st.S = matmul(transpose(pk_decayed, -1, -2), v);  // (B,H,F,Dv)
  if (normalize) st.z = transpose(sum(pk_decayed, {-2}, true), -1, -2);  // (B,H,F,1)
  st.tokens = L;
  if (initial && initial->S.defined()) {
    check_initial("gated_decode_state", pk, v, *initial, normalize);
    // exp(b_L) (B,H,F or 1,1): the decay of the carried state over all L tokens.
    Tensor carry = transpose(exp(slice(b, 2, L - 1, L)).to(pk.dtype()), -1, -2);
    st.S = add(st.S, mul(initial->S, carry));
    if (normalize) st.z = add(st.z, mul(initial->z, carry));
    st.tokens += initial->tokens;
  }
  return st;
}

Tensor gated_attention_recurrent(const Tensor& pq, const Tensor& pk_in, const Tensor& v, const Tensor& log_a_in,
                                 bool normalize, double eps, const Tensor& key_mask) {
  AutocastGuard no_autocast(DType::bf16, false);  // computed in the inputs' dtype
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
