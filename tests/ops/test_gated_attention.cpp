// Gated linear attention (autograd/ops/gated_attention): op-table rows for the quadratic, chunked
// and recurrent forms against plain loops over the recurrence; the chunked and quadratic forms'
// values and gradients against the recurrent form in f64 (per-channel and per-head gates, with and
// without the normalizer, key masks, chunk sizes that divide L and that do not); 64K tokens of
// strong decays in f32; and fla's naive references (tests/fixtures/gated/, made by
// tools/make_gated_fixtures.py).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "core/safetensors.h"
#include "tests/op_table.h"

namespace hh::test {
namespace {

constexpr double kEps = 1e-6;

// Plain loops over the recurrence: inputs pq, pk, v, log_a[, key mask (B,L)].
Host gated_ref(const std::vector<Host>& in, bool normalize) {
  const Host &pq = in[0], &pk = in[1], &v = in[2], &la = in[3];
  const bool masked = in.size() > 4 && !in[4].v.empty();
  const int64_t B = pq.shape[0], H = pq.shape[1], L = pq.shape[2], F = pq.shape[3], Dv = v.shape[3];
  const bool per_channel = la.shape[3] == F;
  Host out{v.shape, std::vector<double>(v.v.size(), 0.0)};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> S(static_cast<size_t>(F * Dv), 0.0), z(static_cast<size_t>(F), 0.0);
      for (int64_t t = 0; t < L; ++t) {
        const bool real = !masked || in[4].at({b, t}) != 0.0;
        for (int64_t f = 0; f < F; ++f) {
          const double a = real ? std::exp(la.at({b, h, t, per_channel ? f : 0})) : 1.0;
          const double k = real ? pk.at({b, h, t, f}) : 0.0;
          z[static_cast<size_t>(f)] = a * z[static_cast<size_t>(f)] + k;
          for (int64_t c = 0; c < Dv; ++c) {
            double& s = S[static_cast<size_t>(f * Dv + c)];
            s = a * s + k * v.at({b, h, t, c});
          }
        }
        double den = 0;
        for (int64_t f = 0; f < F; ++f) den += pq.at({b, h, t, f}) * z[static_cast<size_t>(f)];
        for (int64_t c = 0; c < Dv; ++c) {
          double num = 0;
          for (int64_t f = 0; f < F; ++f) num += pq.at({b, h, t, f}) * S[static_cast<size_t>(f * Dv + c)];
          out.v[static_cast<size_t>(((b * H + h) * L + t) * Dv + c)] = normalize ? num / (den + kEps) : num;
        }
      }
    }
  return out;
}

// pq, pk (positive features when normalizing, any sign otherwise: GLA's identity map), v and log_a
// in [lo, -0.01] ((B,H,L,F) per channel, (B,H,L,1) per head).
std::vector<Tensor> gated_inputs(Generator& g, DType t, Shape dims, bool per_channel, bool normalize,
                                 double lo = -1.5) {
  const int64_t B = dims[0], H = dims[1], L = dims[2], F = dims[3], Dv = dims[4];
  const double flo = normalize ? 0.05 : -1.0;
  return {uniform({B, H, L, F}, flo, 1, g, {t}), uniform({B, H, L, F}, flo, 1, g, {t}),
          uniform({B, H, L, Dv}, -1, 1, g, {t}), uniform({B, H, L, per_channel ? F : 1}, lo, -0.01, g, {t})};
}

Tensor mask_of(const std::vector<Tensor>& x) { return x.size() > 4 ? x[4] : Tensor(); }

void gated_errors(const std::string& op, const std::function<Tensor(const std::vector<Tensor>&)>& call) {
  Generator g(3);
  const std::vector<Tensor> x = gated_inputs(g, DType::f32, {1, 2, 4, 3, 2}, true, false);
  auto with = [&](size_t i, const Tensor& t) {
    std::vector<Tensor> y = x;
    y[i] = t;
    return y;
  };
  check_throws([&] { call(with(1, ones({1, 2, 4, 2}))); }, {op, "(1, 2, 4, 2)", "(1, 2, 4, 3)"});
  check_throws([&] { call(with(2, ones({1, 2, 5, 2}))); }, {op, "v", "(1, 2, 5, 2)"});
  check_throws([&] { call(with(3, zeros({1, 2, 4, 2}))); }, {op, "log gate", "(1, 2, 4, 2)"});
  check_throws([&] { call(with(3, full({1, 2, 4, 3}, 0.25))); }, {op, "<= 0", "0.25"});
  check_throws([&] { call(with(0, ones({2, 4, 3}))); }, {op, "(2, 4, 3)"});
  check_throws([&] { call(with(2, ones({1, 2, 4, 2}, DType::f64))); }, {op, "f32", "f64"});
}

// dims: B, H, L, F, Dv.
OpSpec base_spec(const char* op, const std::string& variant, Shape dims, bool per_channel, bool normalize,
                 bool masked) {
  OpSpec s;
  s.op = op;
  s.variant = variant;
  s.inputs = [=](Generator& g, DType t) {
    std::vector<Tensor> x = gated_inputs(g, t, dims, per_channel, normalize);
    if (masked) x.push_back(padding_test_mask(dims[0], dims[2]));
    return x;
  };
  s.reference = [=](const std::vector<Host>& in) { return gated_ref(in, normalize); };
  return s;
}

OpSpec quadratic_spec(const std::string& variant, Shape dims, bool per_channel, bool normalize, bool masked) {
  OpSpec s = base_spec("gated_attention_quadratic", variant, dims, per_channel, normalize, masked);
  s.fn = [=](const std::vector<Tensor>& x) {
    return gated_attention_quadratic(x[0], x[1], x[2], x[3], normalize, kEps, mask_of(x));
  };
  s.errors = [] {
    const char* op = "gated_attention_quadratic";
    gated_errors(op, [](const std::vector<Tensor>& x) { return gated_attention_quadratic(x[0], x[1], x[2], x[3]); });
    Generator g(4);
    std::vector<Tensor> x = gated_inputs(g, DType::f32, {1, 2, 4, 3, 2}, true, false);
    check_throws([&] { gated_attention_quadratic(x[0], x[1], x[2], x[3], false, kEps, ones({1, 5})); },
                 {op, "key mask", "(1, 5)"});
    check_throws([&] { gated_attention_quadratic(x[0], x[1], x[2], x[3], true, -1.0); }, {op, "eps"});
  };
  return s;
}

OpSpec chunked_spec(const std::string& variant, Shape dims, bool per_channel, bool normalize, bool masked,
                    int64_t chunk) {
  OpSpec s = base_spec("gated_attention_chunked", variant, dims, per_channel, normalize, masked);
  s.fn = [=](const std::vector<Tensor>& x) {
    return gated_attention_chunked(x[0], x[1], x[2], x[3], normalize, kEps, mask_of(x), chunk);
  };
  s.errors = [] {
    const char* op = "gated_attention_chunked";
    gated_errors(op, [](const std::vector<Tensor>& x) { return gated_attention_chunked(x[0], x[1], x[2], x[3]); });
    Generator g(4);
    std::vector<Tensor> x = gated_inputs(g, DType::f32, {1, 2, 4, 3, 2}, true, false);
    check_throws([&] { gated_attention_chunked(x[0], x[1], x[2], x[3], false, kEps, Tensor(), 0); },
                 {op, "chunk", "0"});
    check_throws([&] { gated_attention_chunked(x[0], x[1], x[2], x[3], false, kEps, ones({2, 4})); },
                 {op, "key mask", "(2, 4)"});
  };
  return s;
}

OpSpec step_spec(const std::string& variant, Shape dims, bool per_channel, bool normalize) {
  OpSpec s = base_spec("gated_attention_step", variant, dims, per_channel, normalize, false);
  s.fn = [=](const std::vector<Tensor>& x) { return gated_attention_recurrent(x[0], x[1], x[2], x[3], normalize); };
  s.errors = [] {
    const char* op = "gated_attention_step";
    gated_errors(op, [](const std::vector<Tensor>& x) {
      GatedDecodeState st;
      return gated_attention_step(st, x[0], x[1], x[2], x[3]);
    });
    Generator g(4);
    std::vector<Tensor> x = gated_inputs(g, DType::f32, {1, 2, 1, 3, 2}, true, false);
    GatedDecodeState st;
    gated_attention_step(st, x[0], x[1], x[2], x[3]);
    std::vector<Tensor> y = gated_inputs(g, DType::f32, {1, 2, 1, 4, 2}, true, false);
    check_throws([&] { gated_attention_step(st, y[0], y[1], y[2], y[3]); }, {op, "(1, 2, 1, 4)", "state"});
    check_throws([&] { gated_attention_step(st, x[0], x[1], x[2], x[3], true); }, {op, "not normalized"});
    std::vector<Tensor> two = gated_inputs(g, DType::f32, {1, 2, 2, 3, 2}, true, false);
    GatedDecodeState st2;
    check_throws([&] { gated_attention_step(st2, two[0], two[1], two[2], two[3]); }, {op, "one token", "(1, 2, 2, 3)"});
  };
  return s;
}

// dims: B, H, L, F, Dv
const bool reg = add_specs({
    quadratic_spec("per channel", {2, 2, 7, 3, 2}, true, false, false),
    quadratic_spec("per head", {1, 2, 6, 3, 3}, false, false, false),
    quadratic_spec("per channel, normalized, key mask", {2, 1, 8, 2, 2}, true, true, true),
    quadratic_spec("per head, key mask", {2, 2, 7, 2, 2}, false, false, true),
    chunked_spec("per channel, chunk 3 (does not divide L = 7)", {2, 2, 7, 3, 2}, true, false, false, 3),
    chunked_spec("per head, chunk 4, L = 10, normalized", {1, 2, 10, 2, 3}, false, true, false, 4),
    chunked_spec("per channel, chunk 4, key mask", {2, 1, 10, 2, 2}, true, false, true, 4),
    chunked_spec("per channel, chunk 32 (two sub-blocks of 16), L = 40", {1, 1, 40, 2, 2}, true, true, false, 32),
    chunked_spec("per channel, chunk 1", {1, 1, 6, 2, 2}, true, false, false, 1),
    chunked_spec("per head, one chunk past L, key mask", {2, 2, 6, 2, 2}, false, true, true, 64),
    step_spec("per channel", {2, 2, 8, 3, 2}, true, false),
    step_spec("per head, normalized", {1, 2, 5, 2, 3}, false, true),
});

}  // namespace

TEST_CASE("gated attention: chunked and quadratic equal the recurrent form (f64, values and gradients)") {
  // L = 37 is a multiple of no chunk but 1; L = 32 of 1, 16 and 32; chunk 32 and 64 use sub-blocks
  // of 16 for per-channel gates, chunk 3 and 5 sub-blocks of 1.
  const int64_t B = 2, H = 2, F = 4, Dv = 3;
  double worst_value = 0, worst_grad = 0;
  for (int64_t L : {int64_t{37}, int64_t{32}})
    for (bool per_channel : {true, false})
      for (bool normalize : {false, true})
        for (bool masked : {false, true}) {
          Generator g(static_cast<uint64_t>(1000 * L + 100 * per_channel + 10 * normalize + masked));
          const std::vector<Tensor> base = gated_inputs(g, DType::f64, {B, H, L, F, Dv}, per_channel, normalize);
          const Tensor wy = uniform({B, H, L, Dv}, -1, 1, g, {DType::f64});
          const Tensor mask = masked ? padding_test_mask(B, L) : Tensor();
          std::vector<Tensor> xr = grad_leaves(base);
          Tensor yr = gated_attention_recurrent(xr[0], xr[1], xr[2], xr[3], normalize, kEps, mask);
          sum(mul(yr, wy)).backward();
          auto agree = [&](const std::string& form, const std::function<Tensor(const std::vector<Tensor>&)>& run) {
            INFO(form << ", L = " << L << (per_channel ? ", per channel" : ", per head")
                      << (normalize ? ", normalized" : "") << (masked ? ", key mask" : ""));
            std::vector<Tensor> x = grad_leaves(base);
            Tensor y = run(x);
            const double e = rel_err(y, yr);
            CHECK(e <= 1e-11);
            worst_value = std::max(worst_value, e);
            sum(mul(y, wy)).backward();
            for (size_t i = 0; i < 4; ++i) {
              INFO("gradient of input " << i);
              REQUIRE(x[i].grad().defined());
              const double eg = rel_err(x[i].grad(), xr[i].grad());
              CHECK(eg <= 1e-11);
              worst_grad = std::max(worst_grad, eg);
            }
          };
          agree("quadratic", [&](const std::vector<Tensor>& x) {
            return gated_attention_quadratic(x[0], x[1], x[2], x[3], normalize, kEps, mask);
          });
          for (int64_t chunk : {int64_t{1}, int64_t{3}, int64_t{5}, int64_t{16}, int64_t{32}, int64_t{64}})
            agree("chunk " + std::to_string(chunk), [&](const std::vector<Tensor>& x) {
              return gated_attention_chunked(x[0], x[1], x[2], x[3], normalize, kEps, mask, chunk);
            });
        }
  MESSAGE("worst relative error against the recurrent form: values ", worst_value, ", gradients ", worst_grad);
}

TEST_CASE("gated attention: the decoding kernel (no gradient) equals the composed step") {
  // Without gradients gated_attention_step runs kernels::gated_linear_step (one per state); with
  // them it is composed of ops. Both over 11 tokens, f32 and f64, per channel and per head.
  for (DType dt : {DType::f64, DType::f32})
    for (bool per_channel : {true, false})
      for (bool normalize : {false, true}) {
        INFO(dt << (per_channel ? ", per channel" : ", per head") << (normalize ? ", normalized" : ""));
        Generator g(static_cast<uint64_t>(70 + 4 * per_channel + 2 * normalize + (dt == DType::f32)));
        const std::vector<Tensor> x = gated_inputs(g, dt, {2, 3, 11, 5, 4}, per_channel, normalize);
        Tensor with_graph = gated_attention_recurrent(grad_leaves(x)[0], x[1], x[2], x[3], normalize, kEps);
        REQUIRE(with_graph.requires_grad());
        Tensor kernel;
        {
          NoGradGuard ng;
          kernel = gated_attention_recurrent(x[0], x[1], x[2], x[3], normalize, kEps);
        }
        CHECK(rel_err(kernel, detach(with_graph)) <= (dt == DType::f64 ? 1e-14 : 1e-6));
      }
}

TEST_CASE("gated attention: under bf16 autocast every form computes in its inputs' dtype") {
  // As the delta ops: an f32 mixer under --precision bf16 gets the f32 result (the matmuls inside
  // the quadratic and recurrent forms would otherwise mix bf16 and f32 operands).
  Generator g(91);
  const std::vector<Tensor> x = gated_inputs(g, DType::f32, {1, 2, 9, 3, 2}, true, true);
  const Tensor want = gated_attention_recurrent(x[0], x[1], x[2], x[3], true, kEps);
  AutocastGuard bf16(DType::bf16, true);
  std::vector<Tensor> got{gated_attention_quadratic(x[0], x[1], x[2], x[3], true, kEps),
                          gated_attention_chunked(x[0], x[1], x[2], x[3], true, kEps),
                          gated_attention_recurrent(grad_leaves(x)[0], x[1], x[2], x[3], true, kEps)};
  for (const Tensor& y : got) {
    CHECK(y.dtype() == DType::f32);
    CHECK(rel_err(y, want) <= 1e-5);
  }
}

TEST_CASE("gated attention: the quadratic weights, and log gates of zero are ungated linear attention") {
  const int64_t B = 2, H = 2, L = 9, F = 3;
  Generator g(43);
  std::vector<Tensor> x = gated_inputs(g, DType::f64, {B, H, L, F, 2}, true, true);
  const Tensor mask = padding_test_mask(B, L);
  Tensor w;
  Tensor y = gated_attention_quadratic(x[0], x[1], x[2], x[3], true, kEps, mask, &w);
  REQUIRE(w.shape() == Shape{B, H, L, L});
  CHECK(rel_err(matmul(w, x[2]), y) <= 1e-14);
  const std::vector<double> wv = to_vector<double>(w), mv = to_vector<double>(mask);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < L; ++j)
          if (j > i || mv[static_cast<size_t>(b * L + j)] == 0.0)
            CHECK_MESSAGE(wv[static_cast<size_t>(((b * H + h) * L + i) * L + j)] == 0.0, "b ", b, " h ", h,
                          " query ", i, " sees key ", j);
  // α = 1: the engine's causal linear attention (same eps).
  const Tensor none = zeros({B, H, L, 1}, {DType::f64});
  const Tensor want = linear_attention_causal(x[0], x[1], x[2], 4, kEps);
  CHECK(rel_err(gated_attention_chunked(x[0], x[1], x[2], none, true, kEps, Tensor(), 4), want) <= 1e-12);
  CHECK(rel_err(gated_attention_quadratic(x[0], x[1], x[2], none, true, kEps), want) <= 1e-12);
}

TEST_CASE("gated attention: 64K tokens of strong decays in f32 stay finite and equal the recurrent form") {
  // Channel 0 decays by about e^-5 per token, channel 1 barely (log α in [-0.02, 0]): a global
  // cumsum reaches -3e5, and exp of its differences would overflow or lose every digit in f32;
  // the chunked form only exponentiates differences <= 0 inside a chunk.
  const int64_t L = 65536, F = 2, Dv = 2;
  Generator g(53);
  Tensor pq = uniform({1, 1, L, F}, -1, 1, g, {DType::f32}), pk = uniform({1, 1, L, F}, -1, 1, g, {DType::f32});
  Tensor v = uniform({1, 1, L, Dv}, -1, 1, g, {DType::f32});
  Tensor la = cat({uniform({1, 1, L, 1}, -5.5, -4.5, g, {DType::f32}),
                   uniform({1, 1, L, 1}, -0.02, 0, g, {DType::f32})},
                  3);
  NoGradGuard ng;
  for (bool normalize : {false, true}) {
    INFO((normalize ? "normalized" : "not normalized"));
    Tensor a = normalize ? abs(pq) : pq, b = normalize ? abs(pk) : pk;
    Tensor yc = gated_attention_chunked(a, b, v, la, normalize, kEps, Tensor(), 64);
    Tensor yr = gated_attention_recurrent(a, b, v, la, normalize, kEps);
    for (double y : to_vector<double>(yc)) REQUIRE(std::isfinite(y));
    const double e = rel_err(yc, yr);
    MESSAGE("L = ", L, std::string(normalize ? ", normalized" : ""), ": chunked vs recurrent, f32, max relative error ",
            e);
    CHECK(e <= 2e-5);
  }
}

namespace {

SafeTensors fixture(const std::string& name) {
  return load_safetensors(std::string(HH_SOURCE_DIR) + "/tests/fixtures/gated/" + name + ".safetensors");
}

// Every form on (q·scale, k, v, log_a) in `dt`, its output and the gradients of q, k, v (and
// log_a when `gate_grad`) against the fixture's.
void check_against_fla(const SafeTensors& f, const std::string& prefix, const Tensor& log_a_f32, bool gate_grad,
                       DType dt, double tol, double& worst) {
  auto get = [&](const std::string& n) { return f.tensors.at(prefix + n).to(dt); };
  const Tensor q0 = get("q"), k0 = get("k"), v0 = get("v"), o = get("o"), dout = get("do");
  const double scale = 1.0 / std::sqrt(static_cast<double>(q0.size(3)));
  const std::vector<std::string> forms{"recurrent", "quadratic", "chunk 4", "chunk 16", "chunk 64"};
  for (const std::string& form : forms) {
    INFO(prefix << " " << form << (dt == DType::f32 ? " in f32" : " in f64"));
    Tensor q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true),
           v = v0.clone().requires_grad_(true), la = log_a_f32.to(dt).clone().requires_grad_(true);
    Tensor pq = mul(q, scale);
    Tensor y = form == "recurrent"   ? gated_attention_recurrent(pq, k, v, la)
               : form == "quadratic" ? gated_attention_quadratic(pq, k, v, la)
                                     : gated_attention_chunked(pq, k, v, la, false, kEps, Tensor(),
                                                               std::stoll(form.substr(6)));
    sum(mul(y, dout)).backward();
    std::vector<std::pair<std::string, double>> errs{{"o", rel_err(y, o)},
                                                     {"dq", rel_err(q.grad(), get("dq"))},
                                                     {"dk", rel_err(k.grad(), get("dk"))},
                                                     {"dv", rel_err(v.grad(), get("dv"))}};
    if (gate_grad) errs.emplace_back("dgk", rel_err(sum_to(la.grad(), log_a_f32.shape()), get("dgk")));
    for (const auto& e : errs) {
      INFO(e.first);
      CHECK(e.second <= tol);
      worst = std::max(worst, e.second);
    }
  }
}

}  // namespace

TEST_CASE("gated attention: fla's naive GLA and RetNet references (tests/fixtures/gated)") {
  // fla computes in f32 (its naive functions cast to float), so the f64 run is held to the
  // fixture's own rounding (f32 sums over 23 tokens: a few 1e-7), the f32 run to 1e-5.
  const SafeTensors gla = fixture("gla");
  const SafeTensors ret = fixture("retention");
  const Tensor rq = ret.tensors.at("q");
  const int64_t H = rq.size(1);
  std::vector<double> decay(static_cast<size_t>(H));
  for (int64_t h = 0; h < H; ++h) decay[static_cast<size_t>(h)] = std::log(1.0 - std::pow(2.0, -5.0 - double(h)));
  const Tensor ret_la =
      contiguous(expand(from_vector(decay, {1, H, 1, 1}, {DType::f32}), {rq.size(0), H, rq.size(2), 1}));
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f32 ? 1e-5 : 2e-6;
    double worst = 0;
    for (const char* tag : {"tau16.", "tau1."})
      check_against_fla(gla, tag, gla.tensors.at(std::string(tag) + "gk"), true, dt, tol, worst);
    check_against_fla(ret, "", ret_la, false, dt, tol, worst);
    MESSAGE("fla naive references (GLA tau 16, tau 1, RetNet), ", std::string(dt == DType::f32 ? "f32" : "f64"),
            ": worst relative error ", worst);
  }
}


// Issue 41: the quadratic form's gradients reduce (B,H,L,L,F) products over a middle axis longer
// than the reduction's split chunk; they were wrong for k and log α at every L >= 129.
TEST_CASE("gated attention: the quadratic form's gradients past 128 tokens equal the chunked form's") {
  for (int64_t L : {129, 200}) {
    INFO("L = " << L);
    Generator g(41);
    const int64_t B = 2, H = 4, F = 16, Dv = 8;  // B·H = 8 outer rows of L·F columns: 8 x 9 column blocks
    std::vector<Tensor> base = {uniform({B, H, L, F}, 0.1, 1.0, g, {DType::f64}),
                                uniform({B, H, L, F}, 0.1, 1.0, g, {DType::f64}),
                                uniform({B, H, L, Dv}, -1.0, 1.0, g, {DType::f64}),
                                uniform({B, H, L, F}, -0.2, 0.0, g, {DType::f64})};
    Tensor w = uniform({B, H, L, Dv}, -1.0, 1.0, g, {DType::f64});
    auto a = grad_leaves(base), b = grad_leaves(base);
    sum(mul(gated_attention_quadratic(a[0], a[1], a[2], a[3]), w)).backward();
    sum(mul(gated_attention_chunked(b[0], b[1], b[2], b[3]), w)).backward();
    for (size_t i = 0; i < 4; ++i) {
      INFO("input " << i);
      CHECK(rel_err(a[i].grad(), b[i].grad()) < 1e-10);
    }
  }
}

}  // namespace hh::test
