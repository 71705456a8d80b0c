// LoLCATs' hybrid sliding-window + linear attention (semantics in hybrid_attention.h): the
// quadratic reference, the chunked form and the recurrent step, composed from existing ops
// (autograd differentiates the first two; the step runs without gradient), and the window part as
// one kernel with its backward (hybrid_window_attention), the chunked form's window.
#include "autograd/ops/hybrid_attention.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"
#include "core/kernels/hybrid_attention.h"

namespace hh {

static const OpName reg_hybrid_attention_quadratic("hybrid_attention_quadratic");
static const OpName reg_hybrid_attention_chunked("hybrid_attention_chunked");
static const OpName reg_hybrid_attention_step("hybrid_attention_step");
static const OpName reg_hybrid_attention_step_rows("hybrid_attention_step_rows");
static const OpName reg_hybrid_window_attention("hybrid_window_attention");

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

// The ring's slots once `tokens` (>= 1) tokens are in: 16 (or W) at first, doubled as tokens
// arrive, at most W.
int64_t ring_capacity(int64_t W, int64_t tokens) {
  int64_t cap = std::min<int64_t>(W, 16);
  while (cap < tokens && cap < W) cap = std::min(2 * cap, W);
  return cap;
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

namespace {
// The chunked form's numerator and denominator (B,H,L,Dv), (B,H,L,1) before the division.
std::pair<Tensor, Tensor> chunked_parts(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pq,
                                        const Tensor& pk, const Tensor& wf, const Tensor& lf, int64_t window,
                                        double s, const Tensor& key_mask, int64_t chunk) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2);
  const DType dt = q.dtype();
  const Device dev = q.device();
  // A window of L or more is the whole causal prefix: every W >= L computes the same.
  const int64_t W = std::min(window, L);
  // Window part: one kernel, (B,H,L,Dv) and (B,H,L,1).
  std::vector<Tensor> win = hybrid_window_attention(q, k, v, W, s, key_mask);
  Tensor wf4 = per_head(wf, 4), lf4 = per_head(lf, 4);
  Tensor num = mul(win[0], wf4), den = mul(win[1], wf4);
  {
    // Linear part: query i reads keys j <= i-W, i.e. an inclusive causal scan over the keys and
    // values shifted down by W rows (row i holds key i-W; the first W rows are zero), in blocks
    // of T rows: the masked (T,T) product inside a block, the exclusive prefix state before it.
    // W = L leaves only zero rows, but pq, pk and lf stay in the graph (zero gradients).
    const int64_t T = chunk, nb = (L + T - 1) / T, P = nb * T;
    Tensor pkm = mul(pk, reshape(keep_of(key_mask, B, L, dt, dev), {B, 1, L, 1}));  // padded keys add nothing
    auto blocks = [&](const Tensor& x, int64_t shift) {  // (B,H,L,C) -> (B,H,nb,T,C), rows moved down by shift
      return reshape(pad_rows(slice(x, 2, 0, L - shift), shift, P - L), {B, H, nb, T, x.size(3)});
    };
    Tensor pqb = blocks(pq, 0), pkb = blocks(pkm, W), vb = blocks(v, W);
    std::vector<double> tri(static_cast<size_t>(T * T), 0.0);
    for (int64_t r = 0; r < T; ++r)
      for (int64_t u = 0; u <= r; ++u) tri[static_cast<size_t>(r * T + u)] = 1.0;
    Tensor a = mul(matmul(pqb, transpose(pkb, -1, -2)), from_vector(tri, {T, T}, {dt, dev}));  // (B,H,nb,T,T)
    Tensor U = matmul(transpose(pkb, -1, -2), vb);  // (B,H,nb,F,Dv)
    Tensor Z = sum(pkb, {3}, true);                 // (B,H,nb,1,F)
    auto exclusive = [&](const Tensor& x) {         // block c: Σ_{c' < c} x_c'
      Shape s0 = x.shape();
      s0[2] = 1;
      Tensor shifted = nb == 1 ? zeros(s0, {dt, dev}) : cat({zeros(s0, {dt, dev}), slice(x, 2, 0, nb - 1)}, 2);
      return cumsum(shifted, 2);
    };
    Tensor S = exclusive(U), z = exclusive(Z);  // (B,H,nb,F,Dv), (B,H,nb,1,F)
    Tensor num_l = add(matmul(a, vb), matmul(pqb, S));                                     // (B,H,nb,T,Dv)
    Tensor den_l = add(sum(a, {-1}, true), matmul(pqb, transpose(z, -1, -2)));             // (B,H,nb,T,1)
    auto rows = [&](const Tensor& x) { return slice(reshape(x, {B, H, P, x.size(4)}), 2, 0, L); };
    num = add(num, mul(rows(num_l), lf4));
    den = add(den, mul(rows(den_l), lf4));
  }
  return {num, den};
}


// Whether autograd would record a graph through any of `xs`.
bool needs_grad(const std::vector<Tensor>& xs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& x : xs)
    if (x.requires_grad()) return true;
  return false;
}

// The chunked form without gradient on the CPU (a prefill): the window kernel, then the linear
// part and the combination in one kernel (kernels::hybrid_linear_combine), no (B,H,L,.)
// temporaries beyond the window's num and den. Equals chunked_parts' result to rounding.
Tensor linear_combined(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pq, const Tensor& pk,
                       const Tensor& wf, const Tensor& lf, int64_t window, double s, int64_t chunk) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), Dv = v.size(3), F = pq.size(3), G = B * H;
  const int64_t W = std::min(window, L);
  std::vector<Tensor> win = hybrid_window_attention(q, k, v, W, s);
  const auto flat = [&](const Tensor& x, int64_t last) { return contiguous(x).reshape({G, L, last}); };
  Tensor y = empty({G, L, Dv}, {q.dtype(), q.device()});
  kernels::hybrid_linear_combine(q.device(), flat(pq, F), flat(pk, F), flat(v, Dv), flat(win[0], Dv),
                                 contiguous(win[1]).reshape({G, L}), contiguous(wf), contiguous(lf), H, W, chunk, y);
  return y.reshape({B, H, L, Dv});
}

// A started state's ring in token order (B,H,min(W,tokens),C): token t sits in slot t mod W.
Tensor ring_in_order(const Tensor& ring, int64_t tokens, int64_t W) {
  if (tokens <= W) return slice(ring, 2, 0, tokens);
  const int64_t r = tokens % W;  // the slot of the oldest token, tokens - W
  return r == 0 ? ring : cat({slice(ring, 2, r, W), slice(ring, 2, 0, r)}, 2);
}

void check_initial(const char* op, const HybridDecodeState& st, const Tensor& k, const Tensor& v, const Tensor& pk,
                   int64_t window) {
  HH_CHECK(st.window == window, op, ": the initial state's window ", st.window, " is not the window ", window);
  HH_CHECK(st.k.defined() && st.k.size(0) == k.size(0) && st.k.size(1) == k.size(1) && st.k.size(3) == k.size(3) &&
               st.v.size(3) == v.size(3) && st.pk.size(3) == pk.size(3) && st.k.dtype() == k.dtype() &&
               st.k.device() == k.device() && st.k.size(2) >= std::min(st.tokens, window),
           op, ": the initial state's ring k ", st.k.shape(), ", v ", st.v.shape(), ", pk ", st.pk.shape(),
           " does not match k ", k.shape(), ", v ", v.shape(), ", pk ", pk.shape());
}
}  // namespace

Tensor hybrid_attention_chunked(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pq,
                                const Tensor& pk, const Tensor& wf, const Tensor& lf, int64_t window, double scale,
                                const Tensor& key_mask, int64_t chunk, const HybridDecodeState* initial) {
  const char* op = "hybrid_attention_chunked";
  const double s = check_inputs(op, q, k, v, pq, pk, wf, lf, window, scale, key_mask);
  HH_CHECK(chunk > 0, op, ": chunk size must be positive, got ", chunk);
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), Dv = v.size(3);
  if (L == 0) return zeros({B, H, 0, Dv}, {q.dtype(), q.device()});
  if (!initial || initial->tokens == 0) {
    const bool kernel_dtype = q.dtype() == DType::f32 || q.dtype() == DType::f64;
    if (q.device().is_cpu() && kernel_dtype && !key_mask.defined() && !needs_grad({q, k, v, pq, pk, wf, lf}))
      return linear_combined(q, k, v, pq, pk, wf, lf, window, s, chunk);
    auto [num, den] = chunked_parts(q, k, v, pq, pk, wf, lf, window, s, key_mask, chunk);
    return div(num, safe_den(den));  // (B,H,L,Dv)
  }
  // A started sequence: the ring's R tokens go in front of the new ones (zero queries there, their
  // rows dropped), so each new query sees them in its window or its linear part by distance as
  // the steps would; the keys that left the ring are all linear keys of every new query: S, z.
  HH_CHECK(!key_mask.defined(), op, ": a key mask cannot be combined with an initial state");
  check_initial(op, *initial, k, v, pk, window);
  const int64_t T = initial->tokens, R = std::min(T, window);
  Tensor k2 = cat({ring_in_order(initial->k, T, window), k}, 2), v2 = cat({ring_in_order(initial->v, T, window), v}, 2);
  Tensor pk2 = cat({ring_in_order(initial->pk, T, window), pk}, 2);
  auto [num2, den2] = chunked_parts(pad_rows(q, R, 0), k2, v2, pad_rows(pq, R, 0), pk2, wf, lf, window, s, Tensor(), chunk);
  Tensor lf4 = per_head(lf, 4);
  Tensor num = add(slice(num2, 2, R, R + L), mul(matmul(pq, initial->S), lf4));  // (B,H,L,Dv)
  Tensor den = add(slice(den2, 2, R, R + L), mul(matmul(pq, initial->z), lf4));  // (B,H,L,1)
  return div(num, safe_den(den));
}

std::vector<Tensor> hybrid_window_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window,
                                            double scale, const Tensor& key_mask) {
  const char* op = "hybrid_window_attention";
  HH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op, ": expected q, k (B,H,L,D), v (B,H,L,Dv), got ",
           q.shape(), ", ", k.shape(), ", ", v.shape());
  HH_CHECK(k.shape() == q.shape(), op, ": k ", k.shape(), " does not match q ", q.shape());
  HH_CHECK(v.size(0) == q.size(0) && v.size(1) == q.size(1) && v.size(2) == q.size(2), op, ": v ", v.shape(),
           " does not match q ", q.shape(), " in (B,H,L)");
  HH_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), op, ": dtypes ", q.dtype(), ", ", k.dtype(), ", ",
           v.dtype(), " differ");
  HH_CHECK(is_floating(q.dtype()), op, ": expected floating inputs, got ", q.dtype());
  HH_CHECK(k.device() == q.device() && v.device() == q.device(), op, ": inputs on different devices (", q.device(),
           ", ", k.device(), ", ", v.device(), ")");
  HH_CHECK(window >= 1, op, ": window must be >= 1, got ", window);
  HH_CHECK(q.size(3) > 0, op, ": head dim must be positive, got q ", q.shape());
  HH_CHECK(scale == -1 || (std::isfinite(scale) && scale > 0), op, ": scale must be positive and finite (or -1 for ",
           "1/sqrt(D)), got ", scale);
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), D = q.size(3), Dv = v.size(3), G = B * H;
  const double s = scale == -1 ? 1.0 / std::sqrt(static_cast<double>(D)) : scale;
  Tensor mask;  // (B,L) bool, contiguous, or undefined
  if (key_mask.defined()) {
    HH_CHECK(key_mask.dim() == 2 && key_mask.size(0) == B && key_mask.size(1) == L, op, ": key mask ",
             key_mask.shape(), " does not match (B,L) = (", B, ", ", L, ")");
    HH_CHECK(key_mask.device() == q.device(), op, ": key mask on ", key_mask.device(), ", inputs on ", q.device());
    Tensor km = detach(key_mask);
    mask = contiguous(km.dtype() == DType::boolean ? km : ne(km, 0.0));
  }
  const DType in = q.dtype(), ct = in == DType::f64 ? DType::f64 : DType::f32;
  const Device dev = q.device();
  auto prep = [&](const Tensor& t, int64_t last) { return contiguous(t.to(ct).detach()).reshape({G, L, last}); };
  Tensor qc = prep(q, D), kc = prep(k, D), vc = prep(v, Dv);
  Tensor num = empty({G, L, Dv}, {ct, dev}), den = empty({G, L}, {ct, dev}), m = empty({G, L}, {ct, dev});
  if (G * L > 0) backend_of(num).hybrid_window_attention(qc, kc, vc, mask, H, window, s, num, den, m);
  std::vector<Tensor> outs{num.reshape({B, H, L, Dv}).to(in), den.reshape({B, H, L, 1}).to(in)};
  const Shape qs = q.shape(), vs = v.shape();
  return record_outputs(op, std::move(outs), {q, k, v}, {qc, kc, vc, m},
                        [=](const std::vector<Tensor>& g, const NeedsGrad&) {
                          auto grad = [&](size_t i, const Shape& shape) {
                            return g[i].defined() ? contiguous(g[i].to(ct)).reshape(shape) : zeros(shape, {ct, dev});
                          };
                          Tensor gnum = grad(0, {G, L, Dv}), gden = grad(1, {G, L});
                          Tensor gq = empty({G, L, D}, {ct, dev}), gk = empty({G, L, D}, {ct, dev});
                          Tensor gv = empty({G, L, Dv}, {ct, dev});
                          if (G * L > 0)
                            backend_of(gv).hybrid_window_attention_backward(qc, kc, vc, mask, H, window, s, m, gnum,
                                                                            gden, gq, gk, gv);
                          return std::vector<Tensor>{gq.reshape(qs).to(in), gk.reshape(qs).to(in),
                                                     gv.reshape(vs).to(in)};
                        });
}

namespace {
// Makes `st` ready for token st.tokens of q_t (B,H,1,D), v_t (B,H,1,Dv), pq_t (B,H,1,F): its
// buffers allocated at the first token, the ring grown when that token needs a slot it lacks
// (slots keep their tokens: nothing has wrapped yet). Checks the state matches the token.
void ready_for_token(const char* op, HybridDecodeState& st, const Tensor& q_t, const Tensor& v_t, const Tensor& pq_t) {
  const int64_t B = q_t.size(0), H = q_t.size(1), D = q_t.size(3), Dv = v_t.size(3), F = pq_t.size(3);
  const Options o{q_t.dtype(), q_t.device()};
  const int64_t W = st.window;
  if (!st.k.defined()) {
    const int64_t cap = ring_capacity(W, 1);
    st.k = zeros({B, H, cap, D}, o);
    st.v = zeros({B, H, cap, Dv}, o);
    st.pk = zeros({B, H, cap, F}, o);
    st.S = zeros({B, H, F, Dv}, o);
    st.z = zeros({B, H, F, 1}, o);
    st.tokens = 0;
  }
  HH_CHECK(st.k.size(0) == B && st.k.size(1) == H && st.k.size(3) == D && st.v.size(3) == Dv &&
               st.pk.size(3) == F && st.k.dtype() == q_t.dtype() && st.k.device() == q_t.device(),
           op, ": token shapes q_t ", q_t.shape(), ", v_t ", v_t.shape(), ", pq_t ", pq_t.shape(),
           " do not match the state's ring k ", st.k.shape(), ", v ", st.v.shape(), ", pk ", st.pk.shape(), " (",
           st.k.dtype(), ")");
  const int64_t t = st.tokens, cap = st.k.size(2);
  if (t >= cap && cap < W) {
    const int64_t grown = ring_capacity(W, t + 1);
    st.k = pad_rows(st.k, 0, grown - cap);
    st.v = pad_rows(st.v, 0, grown - cap);
    st.pk = pad_rows(st.pk, 0, grown - cap);
  }
}
}  // namespace

Tensor hybrid_attention_step(HybridDecodeState& st, const Tensor& q_t, const Tensor& k_t, const Tensor& v_t,
                             const Tensor& pq_t, const Tensor& pk_t, const Tensor& wf, const Tensor& lf, double scale) {
  const char* op = "hybrid_attention_step";
  const double s = check_inputs(op, q_t, k_t, v_t, pq_t, pk_t, wf, lf, st.window, scale, Tensor());
  HH_CHECK(q_t.size(2) == 1, op, ": expected one token, q_t (B,H,1,D), got ", q_t.shape());
  NoGradGuard no_grad;
  ready_for_token(op, st, q_t, v_t, pq_t);
  const int64_t W = st.window, t = st.tokens;
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

Tensor hybrid_attention_step_rows(const std::vector<HybridDecodeState*>& states, const Tensor& q_t, const Tensor& k_t,
                                  const Tensor& v_t, const Tensor& pq_t, const Tensor& pk_t, const Tensor& wf,
                                  const Tensor& lf, double scale) {
  const char* op = "hybrid_attention_step_rows";
  const int64_t N = q_t.dim() == 4 ? q_t.size(0) : -1;
  HH_CHECK(N == static_cast<int64_t>(states.size()) && q_t.size(2) == 1, op, ": expected one token per state, q_t (",
           states.size(), ",H,1,D), got ", q_t.shape());
  HH_CHECK(N > 0, op, ": no rows");
  for (const HybridDecodeState* st : states) HH_CHECK(st != nullptr, op, ": a null state");
  const int64_t W = states[0]->window;
  for (const HybridDecodeState* st : states)
    HH_CHECK(st->window == W, op, ": the states' windows differ (", W, " and ", st->window, ")");
  const double s = check_inputs(op, q_t, k_t, v_t, pq_t, pk_t, wf, lf, W, scale, Tensor());
  NoGradGuard no_grad;
  const auto row = [](const Tensor& x, int64_t r) { return slice(x, 0, r, r + 1); };
  // No kernel beyond the CPU's f32 and f64: each row's composed step.
  if (!q_t.device().is_cpu() || (q_t.dtype() != DType::f32 && q_t.dtype() != DType::f64)) {
    std::vector<Tensor> y;
    for (int64_t r = 0; r < N; ++r)
      y.push_back(hybrid_attention_step(*states[static_cast<size_t>(r)], row(q_t, r), row(k_t, r), row(v_t, r),
                                        row(pq_t, r), row(pk_t, r), wf, lf, s));
    return cat(y, 0);
  }
  const int64_t H = q_t.size(1), D = q_t.size(3), Dv = v_t.size(3), F = pq_t.size(3);
  kernels::HybridRows rows;
  for (int64_t r = 0; r < N; ++r) {
    HybridDecodeState& st = *states[static_cast<size_t>(r)];
    ready_for_token(op, st, row(q_t, r), row(v_t, r), row(pq_t, r));
    HH_CHECK(st.k.size(0) == 1, op, ": state ", r, " holds ", st.k.size(0), " sequences, not one");
    // The kernel writes the buffers in place: each a contiguous buffer of its own.
    for (Tensor* b : {&st.k, &st.v, &st.pk, &st.S, &st.z})
      if (!b->is_contiguous()) *b = contiguous(*b);
    const int64_t cap = st.k.size(2);
    rows.k.push_back(st.k.reshape({H, cap, D}));
    rows.v.push_back(st.v.reshape({H, cap, Dv}));
    rows.pk.push_back(st.pk.reshape({H, cap, F}));
    rows.S.push_back(st.S.reshape({H, F, Dv}));
    rows.z.push_back(st.z.reshape({H, F}));
    rows.tokens.push_back(st.tokens);
  }
  const auto flat = [](const Tensor& x) { return contiguous(x.reshape({x.size(0), x.size(1), x.size(3)})); };
  const Tensor wfc = contiguous(wf), lfc = contiguous(lf);
  Tensor y = empty({N, H, Dv}, {q_t.dtype(), q_t.device()});
  kernels::hybrid_attention_step_rows(q_t.device(), flat(q_t), flat(k_t), flat(v_t), flat(pq_t), flat(pk_t), wfc, lfc,
                                      W, s, rows, y);
  for (HybridDecodeState* st : states) ++st->tokens;
  return y.reshape({N, H, 1, Dv});
}

HybridDecodeState hybrid_decode_state(const Tensor& k_in, const Tensor& v_in, const Tensor& pk_in, int64_t window,
                                      const HybridDecodeState* initial) {
  const char* op = "hybrid_decode_state";
  HH_CHECK(window >= 1, op, ": window must be >= 1, got ", window);
  HH_CHECK(k_in.dim() == 4 && v_in.dim() == 4 && pk_in.dim() == 4 && k_in.size(2) >= 1 && v_in.size(2) == k_in.size(2) &&
               pk_in.size(2) == k_in.size(2),
           op, ": expected k (B,H,L,D), v (B,H,L,Dv), pk (B,H,L,F) with L >= 1, got ", k_in.shape(), ", ",
           v_in.shape(), ", ", pk_in.shape());
  NoGradGuard no_grad;
  const bool started = initial && initial->tokens > 0;
  if (started) check_initial(op, *initial, k_in, v_in, pk_in, window);
  const int64_t T = started ? initial->tokens : 0, W = window;
  // The tokens in play: a started state's ring (its last min(W, T) tokens) before the new ones.
  auto with_ring = [&](const Tensor& ring, const Tensor& x) {
    return started ? cat({ring_in_order(ring, T, W), x}, 2) : x;
  };
  const Tensor k = started ? with_ring(initial->k, k_in) : k_in;
  const Tensor v = started ? with_ring(initial->v, v_in) : v_in;
  const Tensor pk = started ? with_ring(initial->pk, pk_in) : pk_in;
  const int64_t L = k.size(2), total = T + k_in.size(2), n = std::min(total, W), cap = ring_capacity(W, total);
  HybridDecodeState st(W);
  st.tokens = total;
  // The last n tokens, token t in slot t mod W: when the window is full (total > W) the slice
  // starting at token total-W is rotated by total mod W; else tokens 0..total-1 fill slots
  // 0..total-1 and zeros the rest.
  auto ring = [&](const Tensor& x) {
    Tensor last = slice(x, 2, L - n, L);
    const int64_t r = total > W ? total % W : 0;
    if (r > 0) last = cat({slice(last, 2, W - r, W), slice(last, 2, 0, W - r)}, 2);
    return contiguous(pad_rows(last, 0, cap - n));
  };
  st.k = ring(k);
  st.v = ring(v);
  st.pk = ring(pk);
  // The keys that left the window: S = Σ pk_j v_jᵀ, z = Σ pk_j over j < total - W (zeros when
  // none), the started state's S, z included.
  Tensor pk_old = slice(pk, 2, 0, L - n), v_old = slice(v, 2, 0, L - n);
  const Options o{pk.dtype(), pk.device()};
  st.S = L > n ? matmul(transpose(pk_old, -1, -2), v_old) : zeros({k.size(0), k.size(1), pk.size(3), v.size(3)}, o);
  st.z = L > n ? transpose(sum(pk_old, {-2}, true), -1, -2) : zeros({k.size(0), k.size(1), pk.size(3), 1}, o);
  if (started) {
    st.S = add(initial->S, st.S);
    st.z = add(initial->z, st.z);
  }
  return st;
}

}  // namespace hh
