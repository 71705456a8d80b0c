// The gated delta rule: op-table rows for the recurrent, chunked and decoding forms (and the
// unit lower-triangular inverse of the WY form) against plain loops; the chunked form's values
// and gradients against the recurrent reference in f64 over chunk sizes, key masks, initial
// states and decays from none (DeltaNet) to strong; a chunked prefill continued by decoding
// steps; the decoding kernel against the composed step; 64K tokens in f32 with strong decays;
// the f32 gradients at 16K tokens against f64; and fla's naive references (tests/fixtures/delta/,
// written by tools/make_delta_fixtures.py).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "tests/op_table.h"

namespace hh::test {
namespace {

// Which optional inputs a spec passes after q, k, v, beta, log_alpha: a key mask (B,L), then an
// initial state (B,H,Dk,Dv).
struct Extras {
  bool mask = false, state = false;
};

// Plain loops. Returns o (B,H,L,Dv), or the final state (B,H,Dk,Dv) when `final`.
Host delta_ref(const std::vector<Host>& in, Extras ex, double scale, bool final) {
  const Host &q = in[0], &k = in[1], &v = in[2], &beta = in[3], &la = in[4];
  const Host* mask = ex.mask ? &in[5] : nullptr;
  const Host* s0 = ex.state ? &in[ex.mask ? 6 : 5] : nullptr;
  const int64_t B = q.shape[0], H = q.shape[1], L = q.shape[2], Dk = q.shape[3], Dv = v.shape[3];
  const double s = scale < 0 ? 1.0 / std::sqrt(static_cast<double>(Dk)) : scale;
  Host out{final ? Shape{B, H, Dk, Dv} : v.shape, std::vector<double>(static_cast<size_t>(final ? B * H * Dk * Dv : v.numel()), 0.0)};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> S(static_cast<size_t>(Dk * Dv), 0.0), u(static_cast<size_t>(Dv));
      if (s0)
        for (int64_t i = 0; i < Dk * Dv; ++i) S[static_cast<size_t>(i)] = s0->at({b, h, i / Dv, i % Dv});
      for (int64_t t = 0; t < L; ++t) {
        const bool real = !mask || mask->at({b, t}) != 0.0;
        const double a = real ? std::exp(la.at({b, h, t})) : 1.0, bt = real ? beta.at({b, h, t}) : 0.0;
        for (double& x : S) x *= a;
        for (int64_t j = 0; j < Dv; ++j) {
          double pred = 0;
          for (int64_t i = 0; i < Dk; ++i) pred += k.at({b, h, t, i}) * S[static_cast<size_t>(i * Dv + j)];
          u[static_cast<size_t>(j)] = bt * (v.at({b, h, t, j}) - pred);
        }
        for (int64_t i = 0; i < Dk; ++i)
          for (int64_t j = 0; j < Dv; ++j) S[static_cast<size_t>(i * Dv + j)] += k.at({b, h, t, i}) * u[static_cast<size_t>(j)];
        if (final) continue;
        for (int64_t j = 0; j < Dv; ++j) {
          double o = 0;
          for (int64_t i = 0; i < Dk; ++i) o += q.at({b, h, t, i}) * S[static_cast<size_t>(i * Dv + j)];
          out.v[static_cast<size_t>(((b * H + h) * L + t) * Dv + j)] = s * o;
        }
      }
      if (final)
        std::copy(S.begin(), S.end(), out.v.begin() + static_cast<std::ptrdiff_t>((b * H + h) * Dk * Dv));
    }
  return out;
}

// q, k, v, beta in (0.1, 0.9), log_alpha in [la_lo, la_hi]. k in (-0.6, 0.6) keeps β‖k‖² < 2
// for Dk <= 5 (the rule is then a contraction, as with L2-normalized keys).
std::vector<Tensor> delta_inputs(Generator& g, DType t, Shape dims, double la_lo, double la_hi) {
  const int64_t B = dims[0], H = dims[1], L = dims[2], Dk = dims[3], Dv = dims[4];
  return {uniform({B, H, L, Dk}, -1, 1, g, {t}), uniform({B, H, L, Dk}, -0.6, 0.6, g, {t}),
          uniform({B, H, L, Dv}, -1, 1, g, {t}), uniform({B, H, L}, 0.1, 0.9, g, {t}),
          la_lo == la_hi ? full({B, H, L}, la_lo, {t}) : uniform({B, H, L}, la_lo, la_hi, g, {t})};
}

// (B,L) bool: batch 0 has scattered holes and a padded tail, batch 1 padded steps in front.
Tensor test_mask(int64_t B, int64_t L) {
  std::vector<double> m(static_cast<size_t>(B * L), 1.0);
  for (int64_t l = 0; l < L; ++l) {
    m[static_cast<size_t>(l)] = (l % 4 == 2 || l >= L - 3) ? 0.0 : 1.0;
    if (B > 1) m[static_cast<size_t>(L + l)] = l < 3 ? 0.0 : 1.0;
  }
  return from_vector(m, {B, L}, {DType::boolean});
}

struct Args {  // the inputs of a spec, unpacked
  Tensor q, k, v, beta, la, mask, state;
};
Args unpack(const std::vector<Tensor>& x, Extras ex) {
  return {x[0], x[1], x[2], x[3], x[4], ex.mask ? x[5] : Tensor(), ex.state ? x[ex.mask ? 6 : 5] : Tensor()};
}

// Error cases every form shares; `call(q, k, v, beta, log_alpha)`.
using DeltaCall = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&)>;
void delta_errors(const std::string& op, int64_t L, const DeltaCall& call) {
  Generator g(3);
  const std::vector<Tensor> x = delta_inputs(g, DType::f32, {1, 2, L, 3, 2}, -1, 0);
  check_throws([&] { call(x[0], ones({1, 2, L, 4}), x[2], x[3], x[4]); }, {op, "(1, 2, " + std::to_string(L) + ", 4)"});
  check_throws([&] { call(x[0], x[1], ones({1, 3, L, 2}), x[3], x[4]); }, {op, "v", "(1, 3, "});
  check_throws([&] { call(x[0], x[1], x[2], ones({1, 2, L, 1}), x[4]); }, {op, "beta", "(B,H,L)"});
  check_throws([&] { call(x[0], x[1], x[2], x[3], ones({2, L})); }, {op, "log_alpha", "(B,H,L)"});
  check_throws([&] { call(ones({2, L, 3}), x[1], x[2], x[3], x[4]); }, {op, "(2, " + std::to_string(L) + ", 3)"});
  check_throws([&] { call(x[0], x[1], x[2], ones({1, 2, L}, DType::f64), x[4]); }, {op, "f32", "f64"});
}

OpSpec base_spec(const char* op, const std::string& variant, Shape dims, double la_lo, double la_hi, Extras ex,
                 double scale, bool final) {
  OpSpec s;
  s.op = op;
  s.variant = variant;
  s.inputs = [=](Generator& g, DType t) {
    std::vector<Tensor> x = delta_inputs(g, t, dims, la_lo, la_hi);
    if (ex.mask) x.push_back(test_mask(dims[0], dims[2]));
    if (ex.state) x.push_back(uniform({dims[0], dims[1], dims[3], dims[4]}, -1, 1, g, {t}));
    return x;
  };
  s.reference = [=](const std::vector<Host>& in) { return delta_ref(in, ex, scale, final); };
  if (final) {  // the final state does not depend on q
    s.grad_inputs = {1, 2, 3, 4};
    if (ex.state) s.grad_inputs.push_back(ex.mask ? 6 : 5);
  }
  return s;
}

OpSpec recurrent_spec(const std::string& variant, Shape dims, double la_lo, double la_hi, Extras ex = {},
                      double scale = -1, bool final = false) {
  OpSpec s = base_spec("delta_attention_recurrent", variant, dims, la_lo, la_hi, ex, scale, final);
  s.fn = [=](const std::vector<Tensor>& x) {
    const Args a = unpack(x, ex);
    Tensor fs;
    Tensor o = delta_attention_recurrent(a.q, a.k, a.v, a.beta, a.la, scale, a.mask, a.state, &fs);
    return final ? fs : o;
  };
  s.errors = [] {
    const char* op = "delta_attention_recurrent";
    delta_errors(op, 4, [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& b, const Tensor& la) {
      return delta_attention_recurrent(q, k, v, b, la);
    });
    Generator g(4);
    const std::vector<Tensor> x = delta_inputs(g, DType::f32, {1, 2, 4, 3, 2}, -1, 0);
    check_throws([&] { delta_attention_recurrent(x[0], x[1], x[2], x[3], x[4], -1, ones({1, 5})); },
                 {op, "key mask", "(1, 5)"});
    check_throws([&] { delta_attention_recurrent(x[0], x[1], x[2], x[3], x[4], -1, Tensor(), ones({1, 2, 2, 3})); },
                 {op, "initial state", "(1, 2, 2, 3)", "(1, 2, 3, 2)"});
    check_throws([&] { delta_attention_recurrent(x[0], x[1], x[2], x[3], x[4], 0.0); }, {op, "scale"});
  };
  return s;
}

OpSpec chunked_spec(const std::string& variant, Shape dims, int64_t chunk, double la_lo, double la_hi,
                    Extras ex = {}, bool final = false) {
  OpSpec s = base_spec("delta_attention_chunked", variant, dims, la_lo, la_hi, ex, -1, final);
  s.fn = [=](const std::vector<Tensor>& x) {
    const Args a = unpack(x, ex);
    Tensor fs;
    Tensor o = delta_attention_chunked(a.q, a.k, a.v, a.beta, a.la, -1, a.mask, a.state, &fs, chunk);
    return final ? fs : o;
  };
  s.errors = [] {
    const char* op = "delta_attention_chunked";
    delta_errors(op, 5, [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& b, const Tensor& la) {
      return delta_attention_chunked(q, k, v, b, la);
    });
    Generator g(4);
    const std::vector<Tensor> x = delta_inputs(g, DType::f32, {1, 2, 4, 3, 2}, -1, 0);
    check_throws([&] { delta_attention_chunked(x[0], x[1], x[2], x[3], x[4], -1, Tensor(), Tensor(), nullptr, 0); },
                 {op, "chunk", "0"});
    check_throws([&] { delta_attention_chunked(x[0], x[1], x[2], x[3], x[4], -1, ones({2, 4})); },
                 {op, "key mask", "(2, 4)"});
    check_throws(
        [&] { delta_attention_chunked(x[0], x[1], x[2], x[3], x[4], -1, Tensor(), ones({1, 2, 3, 2}, DType::f64)); },
        {op, "f32", "f64"});
  };
  return s;
}

// The decoding form over a whole sequence: one step per token (the initial state, when given,
// preset in the decode state), outputs concatenated along L.
Tensor run_steps(const Args& a, double scale = -1) {
  DeltaDecodeState st;
  if (a.state.defined()) st.S = a.state;
  std::vector<Tensor> os;
  const int64_t L = a.q.size(2);
  for (int64_t t = 0; t < L; ++t) {
    auto tok = [&](const Tensor& x) { return slice(x, 2, t, t + 1); };
    os.push_back(delta_attention_step(st, tok(a.q), tok(a.k), tok(a.v), tok(a.beta), tok(a.la), scale,
                                      a.mask.defined() ? slice(a.mask, 1, t, t + 1) : Tensor()));
  }
  REQUIRE(st.tokens == L);
  return cat(os, 2);
}

OpSpec step_spec(const std::string& variant, Shape dims, double la_lo, double la_hi, Extras ex = {}) {
  OpSpec s = base_spec("delta_attention_step", variant, dims, la_lo, la_hi, ex, -1, false);
  s.fn = [=](const std::vector<Tensor>& x) { return run_steps(unpack(x, ex)); };
  s.differentiable = false;
  s.no_grad_reason = "decoding: runs under NoGradGuard (the chunked and recurrent forms train)";
  s.errors = [] {
    const char* op = "delta_attention_step";
    delta_errors(op, 1, [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& b, const Tensor& la) {
      DeltaDecodeState st;
      return delta_attention_step(st, q, k, v, b, la);
    });
    Generator g(4);
    const std::vector<Tensor> x = delta_inputs(g, DType::f32, {1, 2, 1, 3, 2}, -1, 0);
    DeltaDecodeState st;
    delta_attention_step(st, x[0], x[1], x[2], x[3], x[4]);
    const std::vector<Tensor> y = delta_inputs(g, DType::f32, {1, 2, 1, 4, 2}, -1, 0);
    check_throws([&] { delta_attention_step(st, y[0], y[1], y[2], y[3], y[4]); }, {op, "(1, 2, 1, 4)", "state"});
    const std::vector<Tensor> two = delta_inputs(g, DType::f32, {1, 2, 2, 3, 2}, -1, 0);
    DeltaDecodeState st2;
    check_throws([&] { delta_attention_step(st2, two[0], two[1], two[2], two[3], two[4]); },
                 {op, "one token", "(1, 2, 2, 3)"});
  };
  return s;
}

// (I + tril(a, -1))⁻¹ by forward substitution, per matrix.
Host unit_lower_inverse_ref(const Host& a) {
  const int64_t n = a.shape.back(), G = n == 0 ? 0 : a.numel() / (n * n);
  Host t{a.shape, std::vector<double>(a.v.size(), 0.0)};
  for (int64_t g = 0; g < G; ++g) {
    auto A = [&](int64_t i, int64_t j) { return a.v[static_cast<size_t>((g * n + i) * n + j)]; };
    auto T = [&](int64_t i, int64_t j) -> double& { return t.v[static_cast<size_t>((g * n + i) * n + j)]; };
    for (int64_t j = 0; j < n; ++j) {  // column j: T(i,j) = δ_ij − Σ_{j<=m<i} A(i,m) T(m,j)
      T(j, j) = 1.0;
      for (int64_t i = j + 1; i < n; ++i) {
        double acc = 0;
        for (int64_t m = j; m < i; ++m) acc += A(i, m) * T(m, j);
        T(i, j) = -acc;
      }
    }
  }
  return t;
}

OpSpec inverse_spec(const std::string& variant, Shape shape) {
  OpSpec s;
  s.op = "unit_lower_inverse";
  s.variant = variant;
  s.shapes = {shape};
  s.lo = -0.7;
  s.hi = 0.7;
  s.fn = [](const std::vector<Tensor>& x) { return unit_lower_inverse(x[0]); };
  s.reference = [](const std::vector<Host>& in) { return unit_lower_inverse_ref(in[0]); };
  s.errors = [] {
    check_throws([] { unit_lower_inverse(ones({3, 4})); }, {"unit_lower_inverse", "(3, 4)"});
    check_throws([] { unit_lower_inverse(ones({3})); }, {"unit_lower_inverse", "(3,)"});
    check_throws([] { unit_lower_inverse(ones({2, 2}, DType::i64)); }, {"unit_lower_inverse", "i64"});
  };
  return s;
}

// dims: B, H, L, Dk, Dv
const bool reg = add_specs({
    recurrent_spec("L = 7", {2, 2, 7, 3, 2}, -1.5, 0),
    recurrent_spec("alpha = 1 (DeltaNet), explicit scale", {1, 2, 6, 2, 3}, 0, 0, {}, 0.7),
    recurrent_spec("key mask, initial state", {2, 1, 8, 3, 2}, -2, 0, {true, true}),
    recurrent_spec("final state", {2, 1, 6, 3, 2}, -1, 0, {true, true}, -1, true),
    chunked_spec("chunk 3 (L = 7 not a multiple)", {2, 2, 7, 3, 2}, 3, -1.5, 0),
    chunked_spec("chunk 4, alpha = 1 (DeltaNet)", {1, 2, 9, 2, 3}, 4, 0, 0),
    chunked_spec("chunk 4, L = 10, key mask, initial state", {2, 1, 10, 3, 2}, 4, -2, 0, {true, true}),
    chunked_spec("chunk 1", {1, 1, 6, 2, 2}, 1, -1, 0),
    chunked_spec("one chunk past L, strong decay", {2, 2, 6, 2, 2}, 64, -6, -2, {true, false}),
    chunked_spec("final state, chunk 3", {2, 1, 8, 3, 2}, 3, -1, 0, {true, true}, true),
    step_spec("L = 8", {2, 2, 8, 3, 2}, -1.5, 0),
    step_spec("key mask, initial state", {2, 1, 7, 2, 3}, -2, 0, {true, true}),
    inverse_spec("(2,3,5,5): n not a power of two", {2, 3, 5, 5}),
    inverse_spec("(8,8)", {8, 8}),
    inverse_spec("(3,1,1)", {3, 1, 1}),
    inverse_spec("(2,0,0)", {2, 0, 0}),
});

// k with unit rows, as DeltaNet feeds the rule.
Tensor l2_rows(const Tensor& k) { return div(k, norm(k, 2.0, {-1}, true)); }

}  // namespace

TEST_CASE("delta attention: chunked equals the recurrent reference (f64, values and gradients)") {
  // L = 37 is a multiple of no chunk but 1; L = 32 of 1, 2, 8, 16. Decays: none (DeltaNet),
  // moderate, and strong (α down to e^-12, products over a chunk far below f64's range).
  const int64_t B = 2, H = 2, Dk = 4, Dv = 3;
  struct Decay {
    const char* name;
    double lo, hi;
  };
  const std::vector<Decay> decays{{"alpha = 1", 0, 0}, {"moderate", -0.7, 0}, {"strong", -12, -1}};
  double worst_value = 0, worst_state = 0;
  std::vector<double> worst_grad(6, 0.0);  // q, k, v, beta, log_alpha, initial state
  for (int64_t L : {int64_t{37}, int64_t{32}})
    for (const Decay& dec : decays)
      for (bool masked : {false, true}) {
        Generator g(static_cast<uint64_t>(100 * L) + (masked ? 1 : 0));
        std::vector<Tensor> base = delta_inputs(g, DType::f64, {B, H, L, Dk, Dv}, dec.lo, dec.hi);
        base[1] = l2_rows(base[1]);
        base.push_back(uniform({B, H, Dk, Dv}, -1, 1, g, {DType::f64}));
        const Tensor wo = uniform({B, H, L, Dv}, -1, 1, g, {DType::f64}), ws = uniform({B, H, Dk, Dv}, -1, 1, g, {DType::f64});
        const Tensor mask = masked ? test_mask(B, L) : Tensor();
        std::vector<Tensor> xr = grad_leaves(base);
        Tensor sr;
        Tensor yr = delta_attention_recurrent(xr[0], xr[1], xr[2], xr[3], xr[4], -1, mask, xr[5], &sr);
        add(sum(mul(yr, wo)), sum(mul(sr, ws))).backward();
        for (int64_t chunk : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{5}, int64_t{8}, int64_t{16}, int64_t{64}}) {
          INFO("L = " << L << ", " << dec.name << ", chunk = " << chunk << std::string(masked ? ", key mask" : ""));
          std::vector<Tensor> xc = grad_leaves(base);
          Tensor sc;
          Tensor yc = delta_attention_chunked(xc[0], xc[1], xc[2], xc[3], xc[4], -1, mask, xc[5], &sc, chunk);
          const double e = rel_err(yc, yr), es = rel_err(sc, sr);
          CHECK(e <= 1e-10);
          CHECK(es <= 1e-10);
          worst_value = std::max(worst_value, e);
          worst_state = std::max(worst_state, es);
          add(sum(mul(yc, wo)), sum(mul(sc, ws))).backward();
          for (size_t i = 0; i < 6; ++i) {
            INFO("gradient of input " << i);
            REQUIRE(xc[i].grad().defined());
            const double eg = rel_err(xc[i].grad(), xr[i].grad());
            CHECK(eg <= 1e-10);
            worst_grad[i] = std::max(worst_grad[i], eg);
          }
        }
      }
  MESSAGE("worst relative error of chunked against recurrent: outputs ", worst_value, ", final states ", worst_state,
          ", gradients of q, k, v, beta, log_alpha, initial state ", worst_grad[0], " ", worst_grad[1], " ",
          worst_grad[2], " ", worst_grad[3], " ", worst_grad[4], " ", worst_grad[5]);
}

TEST_CASE("delta attention: a padded step leaves the state unchanged") {
  // Masking steps equals deleting them from the sequence (their outputs aside).
  const int64_t B = 1, H = 2, L = 9, Dk = 3, Dv = 2;
  Generator g(51);
  const std::vector<Tensor> x = delta_inputs(g, DType::f64, {B, H, L, Dk, Dv}, -1, 0);
  const std::vector<int64_t> kept{0, 1, 3, 4, 5, 7};  // steps 2, 6 and 8 padded
  std::vector<double> m(static_cast<size_t>(L), 0.0);
  for (int64_t t : kept) m[static_cast<size_t>(t)] = 1.0;
  const Tensor mask = from_vector(m, {B, L}, {DType::boolean});
  const Tensor idx = from_vector(kept, {static_cast<int64_t>(kept.size())}, {DType::i64});
  std::vector<Tensor> xs;
  for (const Tensor& t : x) xs.push_back(index_select(t, 2, idx));
  Tensor s_masked, s_short;
  const Tensor y = delta_attention_chunked(x[0], x[1], x[2], x[3], x[4], -1, mask, Tensor(), &s_masked, 4);
  const Tensor y_short = delta_attention_recurrent(xs[0], xs[1], xs[2], xs[3], xs[4], -1, Tensor(), Tensor(), &s_short);
  CHECK(rel_err(s_masked, s_short) <= 1e-12);
  CHECK(rel_err(index_select(y, 2, idx), y_short) <= 1e-12);
}

TEST_CASE("delta attention: a chunked prefill continued by decoding steps is the recurrent form") {
  const int64_t B = 2, H = 2, L = 23, P = 13, Dk = 4, Dv = 3;
  Generator g(53);
  std::vector<Tensor> x = delta_inputs(g, DType::f64, {B, H, L, Dk, Dv}, -3, 0);
  x[1] = l2_rows(x[1]);
  const Tensor want = delta_attention_recurrent(x[0], x[1], x[2], x[3], x[4]);
  auto part = [&](const Tensor& t, int64_t a, int64_t b) { return slice(t, 2, a, b); };
  DeltaDecodeState st;
  const Tensor pre = delta_attention_chunked(part(x[0], 0, P), part(x[1], 0, P), part(x[2], 0, P), part(x[3], 0, P),
                                             part(x[4], 0, P), -1, Tensor(), Tensor(), &st.S, 8);
  std::vector<Tensor> ys{pre};
  for (int64_t t = P; t < L; ++t)
    ys.push_back(delta_attention_step(st, part(x[0], t, t + 1), part(x[1], t, t + 1), part(x[2], t, t + 1),
                                      part(x[3], t, t + 1), part(x[4], t, t + 1)));
  CHECK(rel_err(cat(ys, 2), want) <= 1e-12);
}

TEST_CASE("delta attention: the decoding kernel (no gradient) equals the composed step") {
  // delta_attention_step runs kernels::delta_rule_step; the recurrent reference composes the same
  // update of ops (with a graph here). Both over 11 tokens, f32 and f64, with a key mask and an
  // initial state.
  for (DType dt : {DType::f64, DType::f32}) {
    INFO(dt);
    const int64_t B = 2, H = 3, L = 11, Dk = 5, Dv = 4;
    Generator g(dt == DType::f64 ? 61 : 62);
    std::vector<Tensor> x = delta_inputs(g, dt, {B, H, L, Dk, Dv}, -2, 0);
    x[1] = l2_rows(x[1]);
    const Tensor s0 = uniform({B, H, Dk, Dv}, -1, 1, g, {dt}), mask = test_mask(B, L);
    const std::vector<Tensor> xr = grad_leaves(x);
    const Tensor with_graph = delta_attention_recurrent(xr[0], xr[1], xr[2], xr[3], xr[4], -1, mask, s0);
    REQUIRE(with_graph.requires_grad());
    const Tensor kernel = run_steps({x[0], x[1], x[2], x[3], x[4], mask, s0});
    CHECK(kernel.dtype() == dt);
    CHECK(rel_err(kernel, detach(with_graph)) <= (dt == DType::f64 ? 1e-14 : 1e-6));
  }
}

TEST_CASE("delta attention: bf16 inputs run in f32") {
  Generator g(55);
  const std::vector<Tensor> x = delta_inputs(g, DType::f32, {1, 2, 10, 4, 3}, -2, 0);
  std::vector<Tensor> r, h;  // the bf16 values, and those values in f32
  for (const Tensor& t : x) {
    h.push_back(to_dtype(t, DType::bf16));
    r.push_back(to_dtype(h.back(), DType::f32));
  }
  const Tensor y = delta_attention_chunked(h[0], h[1], h[2], h[3], h[4], -1, Tensor(), Tensor(), nullptr, 4);
  CHECK(y.dtype() == DType::f32);
  CHECK(rel_err(y, delta_attention_recurrent(r[0], r[1], r[2], r[3], r[4])) <= 1e-5);
}

TEST_CASE("delta attention: unit_lower_inverse of a 64x64 WY block (f64)") {
  // A as the chunked form builds it (unit keys, β in (0,1), decays): T (I + A) = I.
  const int64_t n = 64;
  Generator g(57);
  const Tensor k = l2_rows(randn({3, n, 16}, g, {DType::f64}));
  const Tensor a = mul(matmul(k, transpose(k, -1, -2)), uniform({3, n, 1}, 0.05, 0.95, g, {DType::f64}));
  const Tensor t = unit_lower_inverse(a);
  const Tensor eye = tril(triu(ones({n, n}, {DType::f64})));
  CHECK(rel_err(matmul(t, add(tril(a, -1), eye)), expand(eye, {3, n, n})) <= 1e-12);
}

TEST_CASE("delta attention: 64K tokens in f32 with strong decays, chunked equals recurrent") {
  // Decays down to α = e^-30 per token: the cumulative gate over the sequence reaches ~ -10^6,
  // far past exp's range, so only gates relative to the chunk start keep the chunked form finite,
  // and only gates summed between two steps (not differences of cumulative sums) keep it exact.
  // The recurrent reference is the plain loop in f64 (the op's recurrent form takes ~3 s here);
  // the op's recurrent form in f32 is itself 1.4e-7 from it, so 1e-6 is f32 rounding.
  const int64_t L = 65536, Dk = 8, Dv = 8;
  Generator g(59);
  std::vector<Tensor> x = delta_inputs(g, DType::f32, {1, 1, L, Dk, Dv}, -30, -0.01);
  x[1] = l2_rows(x[1]);
  std::vector<Tensor> xc = grad_leaves(x);
  Tensor y = delta_attention_chunked(xc[0], xc[1], xc[2], xc[3], xc[4]);
  sum(y).backward();
  const std::vector<double> yv = to_vector<double>(y);
  REQUIRE(std::all_of(yv.begin(), yv.end(), [](double a) { return std::isfinite(a); }));
  for (size_t i = 0; i < 5; ++i) {
    const std::vector<double> gv = to_vector<double>(xc[i].grad());
    CHECK_MESSAGE(std::all_of(gv.begin(), gv.end(), [](double a) { return std::isfinite(a); }), "gradient ", i);
  }
  std::vector<Host> hs;
  for (const Tensor& t : x) hs.push_back(to_host(t));
  const Host want = delta_ref(hs, {}, -1, false);
  const double e = rel_err(y, from_vector(want.v, want.shape, {DType::f64}));
  MESSAGE("L = ", L, ": chunked (f32) vs the recurrence in f64, max relative error ", e);
  CHECK(e <= 1e-6);
}

TEST_CASE("delta attention: 16K tokens, the f32 gradients of the chunked form are its f64 gradients") {
  // The kernel's backward runs R = ∂ℓ/∂S back over every token, recomputing each chunk's states
  // from its checkpoint; the f64 run is the reference (it equals the recurrent reference's
  // gradients, test above). Weights on the outputs and the final state, an initial state, decays
  // from weak to strong, and a key mask with holes.
  const int64_t B = 2, H = 1, L = 16384, Dk = 8, Dv = 8;
  Generator g(63);
  std::vector<Tensor> x = delta_inputs(g, DType::f64, {B, H, L, Dk, Dv}, -8, -0.001);
  x[1] = l2_rows(x[1]);
  x.push_back(uniform({B, H, Dk, Dv}, -1, 1, g, {DType::f64}));
  const Tensor wo = uniform({B, H, L, Dv}, -1, 1, g, {DType::f64});
  const Tensor ws = uniform({B, H, Dk, Dv}, -1, 1, g, {DType::f64});
  const Tensor mask = test_mask(B, L);
  std::vector<std::vector<Tensor>> grads;
  for (DType dt : {DType::f64, DType::f32}) {
    std::vector<Tensor> xs;
    for (const Tensor& t : x) xs.push_back(to_dtype(t, dt).clone().requires_grad_(true));
    Tensor S;
    const Tensor y = delta_attention_chunked(xs[0], xs[1], xs[2], xs[3], xs[4], -1, mask, xs[5], &S, 64);
    add(sum(mul(y, to_dtype(wo, dt))), sum(mul(S, to_dtype(ws, dt)))).backward();
    grads.emplace_back();
    for (const Tensor& t : xs) grads.back().push_back(to_dtype(t.grad(), DType::f64));
  }
  // f32 rounding: measured at most 1.9e-7 (relative to each gradient's largest entry, both ISAs); 1e-6
  // leaves room for another summation order, and an error that grew with L would exceed it.
  for (size_t i = 0; i < 6; ++i) {
    const double e = rel_err(grads[1][i], grads[0][i]);
    MESSAGE("L = ", L, ": gradient of input ", i, ", f32 vs f64, max relative error ", e);
    CHECK(e <= 1e-6);
  }
}

}  // namespace hh::test

namespace hh::test {
namespace {

// fla's naive references (tools/make_delta_fixtures.py): inputs, loss weights, outputs and
// gradients, read as f64 (the inputs are f32 values, so exactly fla's).
struct Fixture {
  SafeTensors file;
  explicit Fixture(const std::string& name)
      : file(load_safetensors(std::string(HH_SOURCE_DIR) + "/tests/fixtures/delta/" + name)) {}
  Tensor operator[](const std::string& n) const {
    const auto it = file.tensors.find(n);
    REQUIRE_MESSAGE(it != file.tensors.end(), "fixture lacks ", n);
    return to_dtype(it->second, DType::f64);
  }
};

// fla's gated layout (B,T,H,D) / (B,T,H) -> the op's (B,H,L,D) / (B,H,L), and back (the same swap).
Tensor swap_th(const Tensor& t) { return contiguous(transpose(t, 1, 2)); }

// Runs `form` on leaves of `in` (q, k, v, beta, log_alpha, initial state; undefined = none) with
// loss sum(o * w_o) + sum(S * w_s) (no S term without w_s); returns o, S and the leaves' grads.
struct Run {
  Tensor o, S;
  std::vector<Tensor> grads;
};
using Form = std::function<Tensor(const std::vector<Tensor>&, Tensor*)>;
Run run_form(const Form& form, const std::vector<Tensor>& in, const Tensor& w_o, const Tensor& w_s) {
  std::vector<Tensor> x;
  for (const Tensor& t : in) x.push_back(t.defined() ? t.clone().requires_grad_(true) : t);
  Run r;
  r.o = form(x, &r.S);
  Tensor loss = sum(mul(r.o, w_o));
  if (w_s.defined()) loss = add(loss, sum(mul(r.S, w_s)));
  loss.backward();
  for (const Tensor& t : x) r.grads.push_back(t.defined() ? t.grad() : Tensor());
  return r;
}

Form recurrent_form() {
  return [](const std::vector<Tensor>& x, Tensor* S) {
    return delta_attention_recurrent(x[0], x[1], x[2], x[3], x[4], -1, Tensor(), x[5], S);
  };
}
Form chunked_form(int64_t chunk) {
  return [chunk](const std::vector<Tensor>& x, Tensor* S) {
    return delta_attention_chunked(x[0], x[1], x[2], x[3], x[4], -1, Tensor(), x[5], S, chunk);
  };
}

}  // namespace

// fla computes its naive references in f32 (they cast their inputs); the engine runs the same f32
// input values in f64. The script measured fla's f32 results within 2.0e-7 (relative to the
// largest magnitude) of the same naive code run in f64, so 2e-6 is ten times that rounding; the
// f64 run of fla's recurrent code is checked to 1e-10.
constexpr double kFlaF32 = 2e-6;

TEST_CASE("delta attention: fla's naive gated delta rule (tests/fixtures/delta/gated_delta_rule.safetensors)") {
  const Fixture f("gated_delta_rule.safetensors");
  const std::vector<std::string> names{"q", "k", "v", "beta", "g", "initial_state"};
  std::vector<Tensor> in;
  for (const std::string& n : names) in.push_back(n == "initial_state" ? f[n] : swap_th(f[n]));
  const Tensor w_o = swap_th(f["w_o"]), w_s = f["w_s"];
  auto check_run = [&](const Run& r, const std::string& ref, double tol) {
    // ref: "" (fla's f32 recurrent), "_f64" (its f64 run) or "_chunk" (fla's naive chunk form)
    INFO("against fla's " << (ref.empty() ? "_f32" : ref));
    CHECK(rel_err(r.o, swap_th(f["o" + ref])) <= tol);
    CHECK(rel_err(r.S, f["final_state" + ref]) <= tol);
    for (size_t i = 0; i < names.size(); ++i) {
      INFO("gradient of " << names[i]);
      const Tensor want = f[(ref.empty() ? "grad" : "grad" + ref) + "." + names[i]];
      CHECK(rel_err(r.grads[i], names[i] == "initial_state" ? want : swap_th(want)) <= tol);
    }
  };
  const Run rec = run_form(recurrent_form(), in, w_o, w_s);
  check_run(rec, "_f64", 1e-10);
  check_run(rec, "", kFlaF32);
  for (int64_t chunk : {int64_t{8}, int64_t{5}, int64_t{64}}) {
    INFO("chunked, chunk " << chunk);
    const Run ch = run_form(chunked_form(chunk), in, w_o, w_s);
    check_run(ch, "_f64", 1e-10);
    check_run(ch, "", kFlaF32);
    check_run(ch, "_chunk", kFlaF32);
  }
  MESSAGE("fla gated delta rule: recurrent vs fla f32 output ", rel_err(rec.o, swap_th(f["o"])), ", vs fla f64 ",
          rel_err(rec.o, swap_th(f["o_f64"])), "; gradient of g vs fla f32 ", rel_err(rec.grads[4], swap_th(f["grad.g"])));
}

TEST_CASE("delta attention: fla's naive delta rule, alpha = 1 (tests/fixtures/delta/delta_rule.safetensors)") {
  const Fixture f("delta_rule.safetensors");  // already (B,H,T,D)
  const std::vector<std::string> names{"q", "k", "v", "beta", "initial_state"};
  const Tensor zero_gate = zeros(f["beta"].shape(), {DType::f64});
  const std::vector<Tensor> in{f["q"], f["k"], f["v"], f["beta"], zero_gate, f["initial_state"]};
  const std::vector<Tensor> in0{f["q"], f["k"], f["v"], f["beta"], zero_gate, Tensor()};  // no initial state
  for (int64_t chunk : {int64_t{0}, int64_t{8}, int64_t{7}}) {
    const std::string form_name = chunk == 0 ? std::string("recurrent") : "chunked, chunk " + std::to_string(chunk);
    INFO(form_name);
    const Form form = chunk == 0 ? recurrent_form() : chunked_form(chunk);
    // delta_rule_recurrence, with an initial state and the final state in the loss.
    const Run r = run_form(form, in, f["w_o"], f["w_s"]);
    CHECK(rel_err(r.o, f["o"]) <= kFlaF32);
    CHECK(rel_err(r.S, f["final_state"]) <= kFlaF32);
    for (size_t i = 0; i < names.size(); ++i) {
      INFO("gradient of " << names[i]);
      CHECK(rel_err(r.grads[i == 4 ? 5 : i], f["grad." + names[i]]) <= kFlaF32);
    }
    // delta_rule_chunkwise: no initial state, loss sum(o * w_o).
    const Run c = run_form(form, in0, f["w_o"], Tensor());
    CHECK(rel_err(c.o, f["o_chunk"]) <= kFlaF32);
    CHECK(rel_err(c.S, f["final_state_chunk"]) <= kFlaF32);
    for (size_t i = 0; i < 4; ++i) {
      INFO("chunkwise gradient of " << names[i]);
      CHECK(rel_err(c.grads[i], f["grad_chunk." + names[i]]) <= kFlaF32);
    }
  }
}

}  // namespace hh::test
