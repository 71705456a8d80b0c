// LoLCATs' hybrid sliding-window + linear attention: op-table rows for the quadratic, chunked and
// recurrent forms and the window kernel (hybrid_window_attention) against plain loops over (i, j),
// the chunked form's values and gradients and the
// recurrent step's values against the quadratic reference over windows, chunk sizes and key
// masks, the rows kernel (hybrid_attention_step_rows) against the step and itself alone, W >= L
// as plain causal softmax attention, and the chunked form's memory at long L.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/memory.h"
#include "tests/op_table.h"

namespace hh::test {
namespace {

// Plain loops: inputs q, k, v, pq, pk, wf, lf[, key mask (B,L)].
Host hybrid_ref(const std::vector<Host>& in, int64_t W, double scale) {
  const Host &q = in[0], &k = in[1], &v = in[2], &pq = in[3], &pk = in[4], &wf = in[5], &lf = in[6];
  const bool masked = in.size() > 7 && !in[7].v.empty();
  const int64_t B = q.shape[0], H = q.shape[1], L = q.shape[2], D = q.shape[3], Dv = v.shape[3], F = pq.shape[3];
  const double s = scale < 0 ? 1.0 / std::sqrt(static_cast<double>(D)) : scale;
  Host out{v.shape, std::vector<double>(v.v.size(), 0.0)};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        auto real = [&](int64_t j) { return !masked || in[7].at({b, j}) != 0.0; };
        auto score = [&](int64_t j) {
          double a = 0;
          for (int64_t d = 0; d < D; ++d) a += q.at({b, h, i, d}) * k.at({b, h, j, d});
          return s * a;
        };
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = std::max<int64_t>(0, i - W + 1); j <= i; ++j)
          if (real(j)) m = std::max(m, score(j));
        double den = 0;
        std::vector<double> num(static_cast<size_t>(Dv), 0.0);
        for (int64_t j = 0; j <= i; ++j) {
          if (!real(j)) continue;
          double a;
          if (j > i - W) {
            a = wf.v[static_cast<size_t>(h)] * std::exp(score(j) - m);
          } else {
            double f = 0;
            for (int64_t c = 0; c < F; ++c) f += pq.at({b, h, i, c}) * pk.at({b, h, j, c});
            a = lf.v[static_cast<size_t>(h)] * f;
          }
          den += a;
          for (int64_t c = 0; c < Dv; ++c) num[static_cast<size_t>(c)] += a * v.at({b, h, j, c});
        }
        for (int64_t c = 0; c < Dv; ++c)
          out.v[static_cast<size_t>(((b * H + h) * L + i) * Dv + c)] = den == 0 ? 0.0 : num[static_cast<size_t>(c)] / den;
      }
  return out;
}

// The window part alone, plain loops: inputs q, k, v[, key mask (B,L)] -> [num, den] (B,H,L,Dv+1).
Host window_ref(const std::vector<Host>& in, int64_t W, double scale) {
  const Host &q = in[0], &k = in[1], &v = in[2];
  const bool masked = in.size() > 3;
  const int64_t B = q.shape[0], H = q.shape[1], L = q.shape[2], D = q.shape[3], Dv = v.shape[3];
  const double s = scale < 0 ? 1.0 / std::sqrt(static_cast<double>(D)) : scale;
  Host out{{B, H, L, Dv + 1}, std::vector<double>(static_cast<size_t>(B * H * L * (Dv + 1)), 0.0)};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        auto real = [&](int64_t j) { return !masked || in[3].at({b, j}) != 0.0; };
        auto score = [&](int64_t j) {
          double a = 0;
          for (int64_t d = 0; d < D; ++d) a += q.at({b, h, i, d}) * k.at({b, h, j, d});
          return s * a;
        };
        const int64_t j0 = std::max<int64_t>(0, i - W + 1);
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = j0; j <= i; ++j)
          if (real(j)) m = std::max(m, score(j));
        double* row = &out.v[static_cast<size_t>(((b * H + h) * L + i) * (Dv + 1))];
        for (int64_t j = j0; j <= i; ++j) {
          if (!real(j)) continue;
          const double e = std::exp(score(j) - m);
          for (int64_t c = 0; c < Dv; ++c) row[c] += e * v.at({b, h, j, c});
          row[Dv] += e;
        }
      }
  return out;
}

// q, k, v, pq, pk, wf, lf as the callers pass them: features positive, factors in (0,1).
std::vector<Tensor> hybrid_inputs(Generator& g, DType t, int64_t B, int64_t H, int64_t L, int64_t D, int64_t Dv,
                                  int64_t F) {
  return {uniform({B, H, L, D}, -1.5, 1.5, g, {t}), uniform({B, H, L, D}, -1.5, 1.5, g, {t}),
          uniform({B, H, L, Dv}, -1, 1, g, {t}),    uniform({B, H, L, F}, 0.05, 1, g, {t}),
          uniform({B, H, L, F}, 0.05, 1, g, {t}),   uniform({H}, 0.2, 0.9, g, {t}),
          uniform({H}, 0.2, 0.9, g, {t})};
}

void hybrid_errors(const std::string& op, const std::function<Tensor(const std::vector<Tensor>&, int64_t)>& call) {
  Generator g(3);
  const std::vector<Tensor> x = hybrid_inputs(g, DType::f32, 1, 2, 4, 3, 2, 5);
  auto with = [&](size_t i, const Tensor& t) {
    std::vector<Tensor> y = x;
    y[i] = t;
    return y;
  };
  check_throws([&] { call(with(1, ones({1, 2, 4, 2})), 2); }, {op, "(1, 2, 4, 2)", "(1, 2, 4, 3)"});
  check_throws([&] { call(with(2, ones({1, 2, 5, 2})), 2); }, {op, "v", "(1, 2, 5, 2)"});
  check_throws([&] { call(with(4, ones({1, 2, 4, 6})), 2); }, {op, "(1, 2, 4, 5)", "(1, 2, 4, 6)"});
  check_throws([&] { call(with(5, ones({3})), 2); }, {op, "window factor", "(3,)"});
  check_throws([&] { call(with(6, ones({2, 1})), 2); }, {op, "linear factor", "(2, 1)"});
  check_throws([&] { call(with(0, ones({2, 4, 3})), 2); }, {op, "(2, 4, 3)"});
  check_throws([&] { call(with(2, ones({1, 2, 4, 2}, DType::f64)), 2); }, {op, "f32", "f64"});
  check_throws([&] { call(x, 0); }, {op, "window", "0"});
}

// The parts every hybrid spec shares: op and variant, the inputs (a padding mask appended when
// `masked`) and the plain-loop reference.
OpSpec base_spec(const char* op, const std::string& variant, Shape dims, int64_t W, bool masked, double scale) {
  OpSpec s;
  s.op = op;
  s.variant = variant;
  const int64_t B = dims[0], H = dims[1], L = dims[2], D = dims[3], Dv = dims[4], F = dims[5];
  s.inputs = [=](Generator& g, DType t) {
    std::vector<Tensor> x = hybrid_inputs(g, t, B, H, L, D, Dv, F);
    if (masked) x.push_back(padding_test_mask(B, L));
    return x;
  };
  s.reference = [=](const std::vector<Host>& in) { return hybrid_ref(in, W, scale); };
  return s;
}

OpSpec quadratic_spec(const std::string& variant, Shape dims, int64_t W, bool masked, double scale = -1) {
  OpSpec s = base_spec("hybrid_attention_quadratic", variant, dims, W, masked, scale);
  s.fn = [=](const std::vector<Tensor>& x) {
    return hybrid_attention_quadratic(x[0], x[1], x[2], x[3], x[4], x[5], x[6], W, scale,
                                      x.size() > 7 ? x[7] : Tensor());
  };
  s.errors = [] {
    const char* op = "hybrid_attention_quadratic";
    hybrid_errors(op, [](const std::vector<Tensor>& x, int64_t W) {
      return hybrid_attention_quadratic(x[0], x[1], x[2], x[3], x[4], x[5], x[6], W);
    });
    Generator g(4);
    std::vector<Tensor> x = hybrid_inputs(g, DType::f32, 1, 2, 4, 3, 2, 5);
    check_throws([&] { hybrid_attention_quadratic(x[0], x[1], x[2], x[3], x[4], x[5], x[6], 2, -1, ones({1, 5})); },
                 {op, "key mask", "(1, 5)"});
    check_throws([&] { hybrid_attention_quadratic(x[0], x[1], x[2], x[3], x[4], x[5], x[6], 2, 0.0); },
                 {op, "scale"});
  };
  return s;
}

OpSpec chunked_spec(const std::string& variant, Shape dims, int64_t W, int64_t chunk, bool masked) {
  OpSpec s = base_spec("hybrid_attention_chunked", variant, dims, W, masked, -1);
  s.fn = [=](const std::vector<Tensor>& x) {
    return hybrid_attention_chunked(x[0], x[1], x[2], x[3], x[4], x[5], x[6], W, -1, x.size() > 7 ? x[7] : Tensor(),
                                    chunk);
  };
  s.errors = [] {
    const char* op = "hybrid_attention_chunked";
    hybrid_errors(op, [](const std::vector<Tensor>& x, int64_t W) {
      return hybrid_attention_chunked(x[0], x[1], x[2], x[3], x[4], x[5], x[6], W);
    });
    Generator g(4);
    std::vector<Tensor> x = hybrid_inputs(g, DType::f32, 1, 2, 4, 3, 2, 5);
    check_throws([&] { hybrid_attention_chunked(x[0], x[1], x[2], x[3], x[4], x[5], x[6], 2, -1, Tensor(), 0); },
                 {op, "chunk", "0"});
    check_throws([&] { hybrid_attention_chunked(x[0], x[1], x[2], x[3], x[4], x[5], x[6], 2, -1, ones({2, 4})); },
                 {op, "key mask", "(2, 4)"});
  };
  return s;
}

// The recurrent form over a whole sequence: one step per token, outputs concatenated along L.
Tensor run_steps(const std::vector<Tensor>& x, int64_t W, double scale = -1) {
  HybridDecodeState st(W);
  std::vector<Tensor> ys;
  for (int64_t t = 0; t < x[0].size(2); ++t) {
    auto tok = [&](const Tensor& a) { return slice(a, 2, t, t + 1); };
    ys.push_back(hybrid_attention_step(st, tok(x[0]), tok(x[1]), tok(x[2]), tok(x[3]), tok(x[4]), x[5], x[6], scale));
  }
  return cat(ys, 2);
}

OpSpec step_spec(const std::string& variant, Shape dims, int64_t W) {
  OpSpec s = base_spec("hybrid_attention_step", variant, dims, W, false, -1);
  s.fn = [=](const std::vector<Tensor>& x) { return run_steps(x, W); };
  s.differentiable = false;
  s.no_grad_reason = "decoding: runs under NoGradGuard (the chunked and quadratic forms train)";
  s.errors = [] {
    const char* op = "hybrid_attention_step";
    hybrid_errors(op, [](const std::vector<Tensor>& x, int64_t W) {
      HybridDecodeState st(W);
      return hybrid_attention_step(st, x[0], x[1], x[2], x[3], x[4], x[5], x[6]);
    });
    Generator g(4);
    std::vector<Tensor> x = hybrid_inputs(g, DType::f32, 1, 2, 1, 3, 2, 5);
    HybridDecodeState st(2);
    hybrid_attention_step(st, x[0], x[1], x[2], x[3], x[4], x[5], x[6]);
    std::vector<Tensor> y = hybrid_inputs(g, DType::f32, 1, 2, 1, 4, 2, 5);
    check_throws([&] { hybrid_attention_step(st, y[0], y[1], y[2], y[3], y[4], y[5], y[6]); },
                 {op, "(1, 2, 1, 4)", "ring"});
    std::vector<Tensor> two = hybrid_inputs(g, DType::f32, 1, 2, 2, 3, 2, 5);
    HybridDecodeState st2(2);
    check_throws([&] { hybrid_attention_step(st2, two[0], two[1], two[2], two[3], two[4], two[5], two[6]); },
                 {op, "one token", "(1, 2, 2, 3)"});
  };
  return s;
}

// The rows kernel over a whole sequence: each batch row a sequence with its own state (B = 1),
// all rows stepped together by hybrid_attention_step_rows, one token at a time.
Tensor run_step_rows(const std::vector<Tensor>& x, int64_t W) {
  const int64_t B = x[0].size(0);
  std::vector<HybridDecodeState> st(static_cast<size_t>(B), HybridDecodeState(W));
  std::vector<HybridDecodeState*> rows;
  for (auto& s : st) rows.push_back(&s);
  std::vector<Tensor> ys;
  for (int64_t t = 0; t < x[0].size(2); ++t) {
    auto tok = [&](const Tensor& a) { return slice(a, 2, t, t + 1); };
    ys.push_back(hybrid_attention_step_rows(rows, tok(x[0]), tok(x[1]), tok(x[2]), tok(x[3]), tok(x[4]), x[5], x[6]));
  }
  return cat(ys, 2);
}

OpSpec step_rows_spec(const std::string& variant, Shape dims, int64_t W) {
  OpSpec s = base_spec("hybrid_attention_step_rows", variant, dims, W, false, -1);
  s.fn = [=](const std::vector<Tensor>& x) { return run_step_rows(x, W); };
  s.differentiable = false;
  s.no_grad_reason = "decoding: runs under NoGradGuard (the chunked and quadratic forms train)";
  s.errors = [] {
    const char* op = "hybrid_attention_step_rows";
    Generator g(4);
    std::vector<Tensor> x = hybrid_inputs(g, DType::f32, 2, 2, 1, 3, 2, 5);
    HybridDecodeState a(2), b(2), c(3);
    check_throws([&] { hybrid_attention_step_rows({&a}, x[0], x[1], x[2], x[3], x[4], x[5], x[6]); },
                 {op, "one token per state", "(2, 2, 1, 3)"});
    check_throws([&] { hybrid_attention_step_rows({&a, &c}, x[0], x[1], x[2], x[3], x[4], x[5], x[6]); },
                 {op, "windows differ"});
    check_throws([&] { hybrid_attention_step_rows({&a, nullptr}, x[0], x[1], x[2], x[3], x[4], x[5], x[6]); },
                 {op, "null state"});
    check_throws([&] { hybrid_attention_step_rows({&a, &b}, x[0], x[3], x[2], x[3], x[4], x[5], x[6]); },
                 {op, "does not match q"});
    HybridDecodeState two(2);  // a state of two sequences is not a row
    hybrid_attention_step(two, x[0], x[1], x[2], x[3], x[4], x[5], x[6]);
    check_throws([&] { hybrid_attention_step_rows({&two, &b}, x[0], x[1], x[2], x[3], x[4], x[5], x[6]); },
                 {op, "ring"});
  };
  return s;
}

OpSpec window_spec(const std::string& variant, Shape dims, int64_t W, bool masked, double scale = -1) {
  OpSpec s;
  s.op = "hybrid_window_attention";
  s.variant = variant;
  const int64_t B = dims[0], H = dims[1], L = dims[2], D = dims[3], Dv = dims[4];
  s.inputs = [=](Generator& g, DType t) {
    std::vector<Tensor> x = hybrid_inputs(g, t, B, H, L, D, Dv, 1);
    x.resize(3);  // q, k, v
    if (masked) x.push_back(padding_test_mask(B, L));
    return x;
  };
  s.reference = [=](const std::vector<Host>& in) { return window_ref(in, W, scale); };
  s.fn = [=](const std::vector<Tensor>& x) {
    std::vector<Tensor> parts = hybrid_window_attention(x[0], x[1], x[2], W, scale, x.size() > 3 ? x[3] : Tensor());
    return cat(parts, -1);  // (B,H,L,Dv+1): num, den
  };
  s.errors = [] {
    const char* op = "hybrid_window_attention";
    Generator g(4);
    std::vector<Tensor> x = hybrid_inputs(g, DType::f32, 1, 2, 4, 3, 2, 5);
    check_throws([&] { hybrid_window_attention(x[0], x[1], x[2], 0); }, {op, "window", "0"});
    check_throws([&] { hybrid_window_attention(x[0], x[3], x[2], 2); }, {op, "k", "does not match q"});
    check_throws([&] { hybrid_window_attention(x[0], x[1], slice(x[2], 2, 0, 3), 2); }, {op, "v", "(B,H,L)"});
    check_throws([&] { hybrid_window_attention(x[0], x[1], x[2], 2, -1, ones({1, 5})); }, {op, "key mask", "(1, 5)"});
    check_throws([&] { hybrid_window_attention(x[0], x[1], x[2], 2, 0.0); }, {op, "scale"});
    check_throws([&] { hybrid_window_attention(x[0], x[1], to_dtype(x[2], DType::f64), 2); }, {op, "dtypes"});
  };
  return s;
}

// dims: B, H, L, D, Dv, F
const bool reg = add_specs({
    window_spec("W = 3, L = 7", {2, 2, 7, 3, 2, 1}, 3, false),
    window_spec("W = 1 (the diagonal only), explicit scale", {1, 2, 6, 2, 3, 1}, 1, false, 0.7),
    window_spec("W >= L: causal softmax parts", {1, 1, 5, 3, 2, 1}, 9, false),
    window_spec("W = 2, key mask (rows without a real key)", {2, 1, 8, 2, 2, 1}, 2, true),
    window_spec("W = 17, L = 40: bands of 16 rows", {1, 2, 40, 3, 2, 1}, 17, true),
    quadratic_spec("W = 3", {2, 2, 7, 3, 2, 4}, 3, false),
    quadratic_spec("W = 1 (the diagonal only), explicit scale", {1, 2, 6, 2, 3, 3}, 1, false, 0.7),
    quadratic_spec("W >= L: causal softmax", {1, 1, 5, 3, 2, 2}, 9, false),
    quadratic_spec("W = 2, key mask", {2, 1, 8, 2, 2, 3}, 2, true),
    chunked_spec("W = 3, chunk 2 (divides neither L = 7 nor W)", {2, 2, 7, 3, 2, 4}, 3, 2, false),
    chunked_spec("W = 1, chunk 4", {1, 2, 9, 2, 3, 3}, 1, 4, false),
    chunked_spec("W = 4, chunk 4, L = 10, key mask", {2, 1, 10, 2, 2, 3}, 4, 4, true),
    chunked_spec("W = 5, chunk 1", {1, 1, 6, 2, 2, 2}, 5, 1, false),
    chunked_spec("W >= L, chunk 3", {1, 1, 5, 3, 2, 2}, 16, 3, false),
    chunked_spec("W = 2, one chunk past L, key mask", {2, 2, 6, 2, 2, 2}, 2, 64, true),
    step_spec("W = 3, L = 8", {2, 2, 8, 3, 2, 4}, 3),
    step_spec("W = 1", {1, 2, 5, 2, 3, 3}, 1),
    step_spec("W = 20 > L: ring grows, no linear key", {1, 1, 19, 2, 2, 2}, 20),
    step_rows_spec("W = 3, L = 8, two rows", {2, 2, 8, 3, 2, 4}, 3),
    step_rows_spec("W = 1", {3, 2, 5, 2, 3, 3}, 1),
    step_rows_spec("W = 20 > L: rings grow, no linear key", {2, 1, 19, 2, 2, 2}, 20),
});

}  // namespace

TEST_CASE("hybrid attention: chunked and recurrent equal the quadratic reference (f64, values and gradients)") {
  // L = 37 is a multiple of no chunk but 1; L = 32 of 1, 2, 8, 16. W = L and W = 100 > L leave no
  // linear key.
  const int64_t B = 2, H = 2, D = 4, Dv = 3, F = 5;
  double worst_chunked = 0, worst_step = 0;
  std::vector<double> worst_grad(7, 0.0);  // per input: q, k, v, pq, pk, wf, lf
  const std::vector<std::pair<int64_t, int64_t>> cases{{37, 1}, {37, 3}, {37, 16}, {37, 37}, {37, 100},
                                                      {32, 1}, {32, 3}, {32, 16}, {32, 32}, {32, 100}};
  for (const auto& lw : cases)
    for (bool masked : {false, true}) {
      const int64_t L = lw.first, W = lw.second;
      Generator g(static_cast<uint64_t>(100 * L + W));
      const std::vector<Tensor> base = hybrid_inputs(g, DType::f64, B, H, L, D, Dv, F);
      const Tensor wy = uniform({B, H, L, Dv}, -1, 1, g, {DType::f64});
      const Tensor mask = masked ? padding_test_mask(B, L) : Tensor();
      std::vector<Tensor> xq = grad_leaves(base);
      Tensor yq = hybrid_attention_quadratic(xq[0], xq[1], xq[2], xq[3], xq[4], xq[5], xq[6], W, -1, mask);
      sum(mul(yq, wy)).backward();
      if (!masked) {
        NoGradGuard ng;
        const double e = rel_err(run_steps(base, W), yq);
        INFO("recurrent, L = " << L << ", W = " << W);
        CHECK(e <= 1e-10);
        worst_step = std::max(worst_step, e);
      }
      for (int64_t chunk : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{5}, int64_t{8}, int64_t{16}, int64_t{64}}) {
        INFO("L = " << L << ", W = " << W << ", chunk = " << chunk << std::string(masked ? ", key mask" : ""));
        std::vector<Tensor> xc = grad_leaves(base);
        Tensor yc = hybrid_attention_chunked(xc[0], xc[1], xc[2], xc[3], xc[4], xc[5], xc[6], W, -1, mask, chunk);
        const double e = rel_err(yc, yq);
        CHECK(e <= 1e-10);
        worst_chunked = std::max(worst_chunked, e);
        sum(mul(yc, wy)).backward();
        for (size_t i = 0; i < 7; ++i) {
          INFO("gradient of input " << i);
          REQUIRE(xc[i].grad().defined());
          const double eg = rel_err(xc[i].grad(), xq[i].grad());
          CHECK(eg <= 1e-10);
          worst_grad[i] = std::max(worst_grad[i], eg);
        }
      }
    }
  MESSAGE("worst relative error against the quadratic form: chunked values ", worst_chunked, ", recurrent values ",
          worst_step, ", chunked gradients of q, k, v, pq, pk, wf, lf ", worst_grad[0], " ", worst_grad[1], " ",
          worst_grad[2], " ", worst_grad[3], " ", worst_grad[4], " ", worst_grad[5], " ", worst_grad[6]);
}

TEST_CASE("hybrid attention: without gradient the chunked form is one kernel (a prefill), equal to the graph's") {
  // hybrid_attention_chunked under NoGradGuard on the CPU takes kernels::hybrid_linear_combine;
  // with gradient it composes ops. Both against the quadratic reference, f64 and f32, windows below,
  // at and past L, chunks that divide neither L nor W.
  const int64_t B = 2, H = 3, D = 4, Dv = 5, F = 6;
  double worst64 = 0, worst32 = 0;
  for (DType t : {DType::f64, DType::f32})
    for (int64_t L : {int64_t{1}, int64_t{37}, int64_t{64}})
      for (int64_t W : {int64_t{1}, int64_t{3}, int64_t{16}, int64_t{64}, int64_t{100}})
        for (int64_t chunk : {int64_t{1}, int64_t{5}, int64_t{16}, int64_t{64}}) {
          Generator g(static_cast<uint64_t>(7 * L + W + 1000 * chunk));
          const std::vector<Tensor> x = hybrid_inputs(g, t, B, H, L, D, Dv, F);
          const Tensor ref = hybrid_attention_quadratic(x[0], x[1], x[2], x[3], x[4], x[5], x[6], W);
          Tensor fast;
          {
            NoGradGuard ng;
            fast = hybrid_attention_chunked(x[0], x[1], x[2], x[3], x[4], x[5], x[6], W, -1, Tensor(), chunk);
          }
          INFO(dtype_name(t) << ", L = " << L << ", W = " << W << ", chunk = " << chunk);
          const double e = rel_err(fast, ref);
          CHECK(e <= (t == DType::f64 ? 1e-12 : 2e-6));
          (t == DType::f64 ? worst64 : worst32) = std::max(t == DType::f64 ? worst64 : worst32, e);
        }
  MESSAGE("worst relative error of the no-gradient kernel against the quadratic form: f64 ", worst64, ", f32 ",
          worst32);
}

TEST_CASE("hybrid attention: the rows kernel is each row's own step, at any position and among any rows") {
  // Rows join at different tokens (so they sit at different positions, rings of different
  // sizes, some past the window): each row's output is bit for bit the row stepped alone through
  // the rows kernel, and equals the composed step (hybrid_attention_step) to rounding.
  for (DType t : {DType::f64, DType::f32}) {
    const int64_t R = 5, H = 2, L = 40, D = 4, Dv = 3, F = 6, W = 17;
    Generator g(11);
    const std::vector<Tensor> x = hybrid_inputs(g, t, R, H, L, D, Dv, F);
    const std::vector<int64_t> start{0, 3, 16, 17, 30};  // row r's first token is token start[r] of the run
    std::vector<HybridDecodeState> together(R, HybridDecodeState(W)), alone(R, HybridDecodeState(W)),
        composed(R, HybridDecodeState(W));
    double worst = 0;
    for (int64_t step = 0; step < L; ++step) {
      std::vector<int64_t> live;
      for (int64_t r = 0; r < R; ++r)
        if (step >= start[static_cast<size_t>(r)]) live.push_back(r);
      // Row r's token: its own sequence's token (step - start[r]).
      auto tok = [&](size_t i, int64_t r) {
        const int64_t j = step - start[static_cast<size_t>(r)];
        return slice(slice(x[i], 0, r, r + 1), 2, j, j + 1);
      };
      std::vector<HybridDecodeState*> states;
      std::vector<Tensor> in[5];
      for (int64_t r : live) {
        states.push_back(&together[static_cast<size_t>(r)]);
        for (size_t i = 0; i < 5; ++i) in[i].push_back(tok(i, r));
      }
      const Tensor y = hybrid_attention_step_rows(states, cat(in[0], 0), cat(in[1], 0), cat(in[2], 0), cat(in[3], 0),
                                                  cat(in[4], 0), x[5], x[6]);
      for (size_t n = 0; n < live.size(); ++n) {
        const int64_t r = live[n];
        const Tensor y1 = hybrid_attention_step_rows({&alone[static_cast<size_t>(r)]}, tok(0, r), tok(1, r), tok(2, r),
                                                     tok(3, r), tok(4, r), x[5], x[6]);
        const Tensor yc = hybrid_attention_step(composed[static_cast<size_t>(r)], tok(0, r), tok(1, r), tok(2, r),
                                                tok(3, r), tok(4, r), x[5], x[6]);
        const Tensor yr = slice(y, 0, static_cast<int64_t>(n), static_cast<int64_t>(n) + 1);
        INFO(dtype_name(t) << ", token " << step << ", row " << r);
        CHECK(to_vector<double>(yr) == to_vector<double>(y1));
        const double e = rel_err(yr, yc);
        CHECK(e <= (t == DType::f64 ? 1e-12 : 1e-5));
        worst = std::max(worst, e);
      }
    }
    MESSAGE(dtype_name(t), ": worst relative difference to the composed step ", worst);
  }
}

TEST_CASE("hybrid attention: W >= L is causal softmax attention, whatever wf and the features") {
  const int64_t B = 2, H = 3, L = 11, D = 4;
  Generator g(41);
  const std::vector<Tensor> x = hybrid_inputs(g, DType::f64, B, H, L, D, D, 3);
  const Tensor want = scaled_dot_product_attention(x[0], x[1], x[2], true);
  for (int64_t W : {L, L + 5}) {
    INFO("W = " << W);
    CHECK(rel_err(hybrid_attention_quadratic(x[0], x[1], x[2], x[3], x[4], x[5], x[6], W), want) <= 1e-12);
    for (int64_t chunk : {int64_t{4}, int64_t{64}})
      CHECK(rel_err(hybrid_attention_chunked(x[0], x[1], x[2], x[3], x[4], x[5], x[6], W, -1, Tensor(), chunk), want) <=
            1e-12);
    NoGradGuard ng;
    CHECK(rel_err(run_steps(x, W), want) <= 1e-12);
  }
}

TEST_CASE("hybrid attention: the quadratic form's weights") {
  // Normalized weights: rows sum to one over j <= i, nothing on the future or on padded keys,
  // and weights · v is the output.
  const int64_t B = 2, H = 2, L = 9;
  Generator g(43);
  const std::vector<Tensor> x = hybrid_inputs(g, DType::f64, B, H, L, 3, 2, 4);
  const Tensor mask = padding_test_mask(B, L);
  Tensor w;
  Tensor y = hybrid_attention_quadratic(x[0], x[1], x[2], x[3], x[4], x[5], x[6], 3, -1, mask, &w);
  REQUIRE(w.shape() == Shape{B, H, L, L});
  CHECK(rel_err(matmul(w, x[2]), y) <= 1e-14);
  const std::vector<double> wv = to_vector<double>(w), mv = to_vector<double>(mask);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        double row = 0;
        bool any = false;
        for (int64_t j = 0; j < L; ++j) {
          const double a = wv[static_cast<size_t>(((b * H + h) * L + i) * L + j)];
          const bool real = mv[static_cast<size_t>(b * L + j)] != 0.0;
          if (j > i || !real) CHECK_MESSAGE(a == 0.0, "b ", b, " h ", h, " query ", i, " sees key ", j);
          any = any || (j <= i && real);
          row += a;
        }
        CHECK(row == doctest::Approx(any ? 1.0 : 0.0));
      }
}

TEST_CASE("hybrid attention: the chunked form never builds (L,L) (L = 16384, with backward)") {
  const int64_t L = 16384;
  Generator g(47);
  std::vector<Tensor> x = grad_leaves(hybrid_inputs(g, DType::f32, 1, 1, L, 8, 8, 8));
  reset_peak_memory(Device::cpu());
  const size_t before = memory_stats(Device::cpu()).current;
  Tensor y = hybrid_attention_chunked(x[0], x[1], x[2], x[3], x[4], x[5], x[6], 64, -1, Tensor(), 64);
  sum(y).backward();
  const size_t peak = memory_stats(Device::cpu()).peak - before;
  const size_t square = static_cast<size_t>(L) * static_cast<size_t>(L) * sizeof(float);
  MESSAGE("chunked forward + backward at L = ", L, ": peak ", peak, " bytes; one (L,L) f32 is ", square);
  CHECK_MESSAGE(peak < square / 4, "peak ", peak, " bytes, one (L,L) f32 is ", square);
  for (double a : to_vector<double>(y)) REQUIRE(std::isfinite(a));
}

}  // namespace hh::test
