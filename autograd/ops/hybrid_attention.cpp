// LoLCATs' hybrid sliding-window + linear attention (semantics in hybrid_attention.h): the
// quadratic reference, the chunked form and the recurrent step, all composed from existing ops
// (autograd differentiates the first two; the step runs without gradient).
#include "autograd/ops/hybrid_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace hh {

static const OpName reg_hybrid_attention_quadratic("hybrid_attention_quadratic");
static const OpName reg_hybrid_attention_chunked("hybrid_attention_chunked");
static const OpName reg_hybrid_attention_step("hybrid_attention_step");

namespace {

// A blocked window score: exp(-1e30 - m) is exactly 0 next to any real score, and a row with no
// window key at all gets exp(0) times a zero keep mask.
constexpr double kBlocked = -1e30;

// Checks the shared inputs; returns the scale (1/sqrt(D) for -1).
double check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pq,
                    const Tensor& pk, const Tensor& wf, const Tensor& lf, int64_t window, double scale,
                    const Tensor& key_mask) {
  HH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && pq.dim() == 4 && pk.dim() == 4, op,
           ": expected q, k (B,H,L,D), v (B,H,L,Dv), pq, pk (B,H,L,F), got ", q.shape(), ", ", k.shape(), ", ",
           v.shape(), ", ", pq.shape(), ", ", pk.shape());
  HH_CHECK(k.shape() == q.shape(), op, ": k ", k.shape(), " does not match q ", q.shape());
  HH_CHECK(v.size(0) == q.size(0) && v.size(1) == q.size(1) && v.size(2) == q.size(2), op, ": v ", v.shape(),
           " does not match q ", q.shape(), " in (B,H,L)");
  HH_CHECK(pq.shape() == pk.shape(), op, ": pq ", pq.shape(), " and pk ", pk.shape(), " differ");
  HH_CHECK(pq.size(0) == q.size(0) && pq.size(1) == q.size(1) && pq.size(2) == q.size(2), op, ": pq ", pq.shape(),
           " does not match q ", q.shape(), " in (B,H,L)");
  const int64_t H = q.size(1);
  HH_CHECK(wf.dim() == 1 && wf.size(0) == H, op, ": window factor wf ", wf.shape(), " is not (H) = (", H, ")");
  HH_CHECK(lf.dim() == 1 && lf.size(0) == H, op, ": linear factor lf ", lf.shape(), " is not (H) = (", H, ")");
  for (const Tensor* t : {&k, &v, &pq, &pk, &wf, &lf})
    HH_CHECK(t->dtype() == q.dtype(), op, ": dtypes differ: q is ", q.dtype(), ", got ", t->dtype(), " of shape ",
             t->shape());
  HH_CHECK(is_floating(q.dtype()), op, ": expected floating inputs, got ", q.dtype());
  for (const Tensor* t : {&k, &v, &pq, &pk, &wf, &lf})
    HH_CHECK(t->device() == q.device(), op, ": inputs on different devices (", q.device(), ", ", t->device(), ")");
  HH_CHECK(window >= 1, op, ": window must be >= 1, got ", window);
  HH_CHECK(q.size(3) > 0, op, ": head dim must be positive, got q ", q.shape());
  HH_CHECK(scale == -1 || (std::isfinite(scale) && scale > 0), op, ": scale must be positive and finite (or -1 for ",
           "1/sqrt(D)), got ", scale);
  if (key_mask.defined()) {
    HH_CHECK(key_mask.dim() == 2 && key_mask.size(0) == q.size(0) && key_mask.size(1) == q.size(2), op,
             ": key mask ", key_mask.shape(), " does not match (B,L) = (", q.size(0), ", ", q.size(2), ")");
    HH_CHECK(key_mask.device() == q.device(), op, ": key mask on ", key_mask.device(), ", inputs on ", q.device());
  }
  return scale == -1 ? 1.0 / std::sqrt(static_cast<double>(q.size(3))) : scale;
}

// key_mask (B,L) -> 1/0 in `dt` (B,L), no gradient; ones when undefined.
Tensor keep_of(const Tensor& key_mask, int64_t B, int64_t L, DType dt, Device d) {
  if (!key_mask.defined()) return ones({B, L}, {dt, d});
  Tensor m = detach(key_mask);
  if (m.dtype() != DType::boolean) m = ne(m, 0.0);
  return to_dtype(m, dt);
}

// A per-head factor (H) as (1,H,1,...,1) of rank `rank`.
Tensor per_head(const Tensor& f, int64_t rank) {
  Shape s(static_cast<size_t>(rank), 1);
  s[1] = f.size(0);
  return reshape(f, s);
}

// den with 1 where it is 0 (a query that sees no key: its numerator is 0 too, so it gets zeros).
Tensor safe_den(const Tensor& den) { return add(den, to_dtype(eq(detach(den), 0.0), den.dtype())); }

// x (B,H,L,C) with `before` zero rows in front and `after` behind along L.
Tensor pad_rows(const Tensor& x, int64_t before, int64_t after) {
  std::vector<Tensor> parts;
  const Options o{x.dtype(), x.device()};
  if (before > 0) parts.push_back(zeros({x.size(0), x.size(1), before, x.size(3)}, o));
  parts.push_back(x);
  if (after > 0) parts.push_back(zeros({x.size(0), x.size(1), after, x.size(3)}, o));
  return parts.size() == 1 ? x : cat(parts, 2);
}

}  // namespace

Tensor hybrid_attention_quadratic(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pq,
                                  const Tensor& pk, const Tensor& wf, const Tensor& lf, int64_t window, double scale,
                                  const Tensor& key_mask, Tensor* weights) {
  const char* op = "hybrid_attention_quadratic";
  const double s = check_inputs(op, q, k, v, pq, pk, wf, lf, window, scale, key_mask);
  const int64_t B = q.size(0), L = q.size(2);
  const DType dt = q.dtype();
  const Device dev = q.device();
  if (L == 0) {
    if (weights) *weights = zeros({B, q.size(1), 0, 0}, {dt, dev});
    return zeros({B, q.size(1), 0, v.size(3)}, {dt, dev});
  }
  // (L,L) 1/0: query i sees key j in its window (i-W < j <= i) or through the linear part (j <= i-W).
  std::vector<double> win(static_cast<size_t>(L * L), 0.0), lin(static_cast<size_t>(L * L), 0.0);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j <= i; ++j) (j > i - window ? win : lin)[static_cast<size_t>(i * L + j)] = 1.0;
  Tensor km = reshape(keep_of(key_mask, B, L, dt, dev), {B, 1, 1, L});
  Tensor wkeep = mul(from_vector(win, {L, L}, {dt, dev}), km);  // (B,1,L,L)
  Tensor lkeep = mul(from_vector(lin, {L, L}, {dt, dev}), km);  // (B,1,L,L)
  Tensor sc = mul(matmul(q, transpose(k, -1, -2)), s);          // (B,H,L,L)
  sc = masked_fill(sc, eq(wkeep, 0.0), kBlocked);
  Tensor m = amax(sc, {-1}, true);                               // (B,H,L,1), over the window keys
  Tensor aw = mul(mul(exp(sub(sc, m)), wkeep), per_head(wf, 4));
  Tensor al = mul(mul(matmul(pq, transpose(pk, -1, -2)), lkeep), per_head(lf, 4));
  Tensor a = add(aw, al);                                        // (B,H,L,L)
  Tensor w = div(a, safe_den(sum(a, {-1}, true)));
  if (weights) *weights = w;
  return matmul(w, v);                                           // (B,H,L,Dv)
}

Tensor hybrid_attention_chunked(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pq,
                                const Tensor& pk, const Tensor& wf, const Tensor& lf, int64_t window, double scale,
                                const Tensor& key_mask, int64_t chunk) {
  const char* op = "hybrid_attention_chunked";
  const double s = check_inputs(op, q, k, v, pq, pk, wf, lf, window, scale, key_mask);
  HH_CHECK(chunk > 0, op, ": chunk size must be positive, got ", chunk);
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), Dv = v.size(3), F = pq.size(3);
  const DType dt = q.dtype();
  const Device dev = q.device();
  if (L == 0) return zeros({B, H, 0, Dv}, {dt, dev});
  // A window of L or more is the whole causal prefix: every W >= L computes the same.
  const int64_t W = std::min(window, L);
  const int64_t T = chunk, nb = (L + T - 1) / T, P = nb * T, E = T + W - 1;  // E: band tile width
  // Keys padded with W-1 zero rows in front and P-L behind: block c's tile is rows [cT, cT+E) of
  // them (keys cT-W+1 .. cT+T-1), and the keys before the tile are the rows before cT.
  Tensor km = keep_of(key_mask, B, L, dt, dev);  // (B,L)
  Tensor pkm = mul(pk, reshape(km, {B, 1, L, 1}));  // padded keys: no linear contribution
  Tensor kp = pad_rows(k, W - 1, P - L), vp = pad_rows(v, W - 1, P - L), pkp = pad_rows(pkm, W - 1, P - L);
  Tensor valid = reshape(pad_rows(reshape(km, {B, 1, L, 1}), W - 1, P - L), {B, W - 1 + P});
  std::vector<int64_t> idx(static_cast<size_t>(nb * E));
  for (int64_t c = 0; c < nb; ++c)
    for (int64_t u = 0; u < E; ++u) idx[static_cast<size_t>(c * E + u)] = c * T + u;
  Tensor index = from_vector(idx, {nb * E}, {DType::i64, dev});
  auto tiles = [&](const Tensor& x) {  // (B,H,W-1+P,C) -> (B,H,nb,E,C)
    return reshape(index_select(x, 2, index), {B, H, nb, E, x.size(3)});
  };
  Tensor kt = tiles(kp), vt = tiles(vp), pkt = tiles(pkp);
  Tensor vmask = reshape(index_select(valid, 1, index), {B, 1, nb, 1, E});  // key j is real
  // Band masks (T,E): row r (query cT+r), column u (key cT-W+1+u): window r <= u <= r+W-1,
  // linear keys of the tile u < r (the keys before the tile are in the prefix state).
  std::vector<double> win(static_cast<size_t>(T * E), 0.0), lin(static_cast<size_t>(T * E), 0.0);
  for (int64_t r = 0; r < T; ++r)
    for (int64_t u = 0; u < E; ++u) {
      if (u >= r && u <= r + W - 1) win[static_cast<size_t>(r * E + u)] = 1.0;
      if (u < r) lin[static_cast<size_t>(r * E + u)] = 1.0;
    }
  Tensor wkeep = mul(from_vector(win, {T, E}, {dt, dev}), vmask);  // (B,1,nb,T,E)
  Tensor lkeep = from_vector(lin, {T, E}, {dt, dev});              // padded keys have pk = 0
  auto blocks = [&](const Tensor& x) {  // (B,H,L,C) -> (B,H,nb,T,C)
    return reshape(pad_rows(x, 0, P - L), {B, H, nb, T, x.size(3)});
  };
  Tensor qb = blocks(q), pqb = blocks(pq);
  // Window part of every block's band.
  Tensor sc = mul(matmul(qb, transpose(kt, -1, -2)), s);  // (B,H,nb,T,E)
  sc = masked_fill(sc, eq(wkeep, 0.0), kBlocked);
  Tensor m = amax(sc, {-1}, true);  // (B,H,nb,T,1)
  Tensor aw = mul(mul(exp(sub(sc, m)), wkeep), per_head(wf, 5));
  // Linear keys inside the band.
  Tensor al = mul(mul(matmul(pqb, transpose(pkt, -1, -2)), lkeep), per_head(lf, 5));
  Tensor a = add(aw, al);                                // (B,H,nb,T,E)
  Tensor num = matmul(a, vt);                            // (B,H,nb,T,Dv)
  Tensor den = sum(a, {-1}, true);                       // (B,H,nb,T,1)
  // Linear keys before the band: exclusive prefix over blocks of the padded rows [0, P).
  Tensor pk_blk = reshape(slice(pkp, 2, 0, P), {B, H, nb, T, F});
  Tensor v_blk = reshape(slice(vp, 2, 0, P), {B, H, nb, T, Dv});
  Tensor U = matmul(transpose(pk_blk, -1, -2), v_blk);  // (B,H,nb,F,Dv)
  Tensor Z = sum(pk_blk, {3}, true);                    // (B,H,nb,1,F)
  auto exclusive = [&](const Tensor& x) {               // block c: Σ_{c' < c} x_c'
    Shape s0 = x.shape();
    s0[2] = 1;
    Tensor shifted = nb == 1 ? zeros(s0, {dt, dev}) : cat({zeros(s0, {dt, dev}), slice(x, 2, 0, nb - 1)}, 2);
    return cumsum(shifted, 2);
  };
  Tensor S = exclusive(U), z = exclusive(Z);            // (B,H,nb,F,Dv), (B,H,nb,1,F)
  Tensor lf5 = per_head(lf, 5);
  num = add(num, mul(matmul(pqb, S), lf5));
  den = add(den, mul(matmul(pqb, transpose(z, -1, -2)), lf5));
  Tensor y = div(num, safe_den(den));                   // (B,H,nb,T,Dv)
  return slice(reshape(y, {B, H, P, Dv}), 2, 0, L);     // (B,H,L,Dv)
}

Tensor hybrid_attention_step(HybridDecodeState& st, const Tensor& q_t, const Tensor& k_t, const Tensor& v_t,
                             const Tensor& pq_t, const Tensor& pk_t, const Tensor& wf, const Tensor& lf, double scale) {
  const char* op = "hybrid_attention_step";
  const double s = check_inputs(op, q_t, k_t, v_t, pq_t, pk_t, wf, lf, st.window, scale, Tensor());
  HH_CHECK(q_t.size(2) == 1, op, ": expected one token, q_t (B,H,1,D), got ", q_t.shape());
  NoGradGuard no_grad;
  const int64_t B = q_t.size(0), H = q_t.size(1), D = q_t.size(3), Dv = v_t.size(3), F = pq_t.size(3);
  const DType dt = q_t.dtype();
  const Device dev = q_t.device();
  const Options o{dt, dev};
  const int64_t W = st.window;
  if (!st.k.defined()) {
    const int64_t cap = std::min<int64_t>(W, 16);
    st.k = zeros({B, H, cap, D}, o);
    st.v = zeros({B, H, cap, Dv}, o);
    st.pk = zeros({B, H, cap, F}, o);
    st.S = zeros({B, H, F, Dv}, o);
    st.z = zeros({B, H, F, 1}, o);
    st.tokens = 0;
  }
  HH_CHECK(st.k.size(0) == B && st.k.size(1) == H && st.k.size(3) == D && st.v.size(3) == Dv &&
               st.pk.size(3) == F && st.k.dtype() == dt && st.k.device() == dev,
           op, ": token shapes q_t ", q_t.shape(), ", v_t ", v_t.shape(), ", pq_t ", pq_t.shape(),
           " do not match the state's ring k ", st.k.shape(), ", v ", st.v.shape(), ", pk ", st.pk.shape(), " (",
           st.k.dtype(), ")");
  const int64_t t = st.tokens;
  int64_t cap = st.k.size(2);
  if (t >= cap && cap < W) {  // grow the ring (slots keep their tokens: nothing has wrapped yet)
    const int64_t grown = std::min(2 * cap, W);
    st.k = pad_rows(st.k, 0, grown - cap);
    st.v = pad_rows(st.v, 0, grown - cap);
    st.pk = pad_rows(st.pk, 0, grown - cap);
    cap = grown;
  }
  const int64_t slot = t % W;
  if (t >= W) {  // key t-W leaves the window: into the linear state
    Tensor pk_old = slice(st.pk, 2, slot, slot + 1), v_old = slice(st.v, 2, slot, slot + 1);  // (B,H,1,F), (B,H,1,Dv)
    st.S = add(st.S, matmul(transpose(pk_old, -1, -2), v_old));
    st.z = add(st.z, transpose(pk_old, -1, -2));
  }
  copy_(slice(st.k, 2, slot, slot + 1), k_t);
  copy_(slice(st.v, 2, slot, slot + 1), v_t);
  copy_(slice(st.pk, 2, slot, slot + 1), pk_t);
  st.tokens = t + 1;
  const int64_t n = std::min(t + 1, W);  // filled slots: 0 .. n-1
  Tensor kw = slice(st.k, 2, 0, n), vw = slice(st.v, 2, 0, n);
  Tensor sc = mul(matmul(q_t, transpose(kw, -1, -2)), s);  // (B,H,1,n)
  Tensor aw = mul(exp(sub(sc, amax(sc, {-1}, true))), per_head(wf, 4));
  Tensor lf4 = per_head(lf, 4);
  Tensor num = add(matmul(aw, vw), mul(matmul(pq_t, st.S), lf4));                     // (B,H,1,Dv)
  Tensor den = add(sum(aw, {-1}, true), mul(matmul(pq_t, st.z), lf4));               // (B,H,1,1)
  return div(num, safe_den(den));
}

}  // namespace hh
