// Op-table rows and focused tests for the fused nn ops (softmax, log_softmax, layer_norm,
// rms_norm, cross_entropy, mse_loss, dropout) and the CPU AdamW kernel. References are plain
// loops over host values in f64.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/backend.h"
#include "tests/op_table.h"

namespace hh::test {
namespace {

// ---- host references ----

// softmax / log_softmax of x along dim (a 0-d x is one row of one element).
Host softmax_ref(const Host& x, int64_t dim, bool log) {
  Shape s = x.shape.empty() ? Shape{1} : x.shape;
  const int64_t nd = static_cast<int64_t>(s.size());
  if (dim < 0) dim += nd;
  int64_t outer = 1, inner = 1;
  const int64_t len = s[static_cast<size_t>(dim)];
  for (int64_t i = 0; i < dim; ++i) outer *= s[static_cast<size_t>(i)];
  for (int64_t i = dim + 1; i < nd; ++i) inner *= s[static_cast<size_t>(i)];
  Host out{x.shape, x.v};
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t j) { return static_cast<size_t>((o * len + j) * inner + in); };
      double m = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j < len; ++j) m = std::max(m, x.v[at(j)]);
      for (int64_t j = 0; j < len; ++j) sum += std::exp(x.v[at(j)] - m);
      for (int64_t j = 0; j < len; ++j)
        out.v[at(j)] = log ? x.v[at(j)] - m - std::log(sum) : std::exp(x.v[at(j)] - m) / sum;
    }
  return out;
}

// layer_norm (rms = false) or rms_norm (rms = true) over the last dim; w/b may be empty.
Host norm_ref(const Host& x, const Host* w, const Host* b, double eps, bool rms) {
  const int64_t c = x.shape.back(), n = x.numel() / c;
  Host out{x.shape, x.v};
  for (int64_t i = 0; i < n; ++i) {
    const double* xi = x.v.data() + i * c;
    double mu = 0.0, var = 0.0;
    if (!rms) {
      for (int64_t j = 0; j < c; ++j) mu += xi[j];
      mu /= static_cast<double>(c);
    }
    for (int64_t j = 0; j < c; ++j) var += (xi[j] - mu) * (xi[j] - mu);
    const double rstd = 1.0 / std::sqrt(var / static_cast<double>(c) + eps);
    for (int64_t j = 0; j < c; ++j) {
      double y = (xi[j] - mu) * rstd;
      if (w) y *= w->v[static_cast<size_t>(j)];
      if (b) y += b->v[static_cast<size_t>(j)];
      out.v[static_cast<size_t>(i * c + j)] = y;
    }
  }
  return out;
}

// cross-entropy of logits (..., V) and target (...) with torch's label smoothing.
Host ce_ref(const Host& x, const Host& t, int64_t ignore, double eps, Reduction red) {
  const int64_t v = x.shape.back(), n = x.numel() / v;
  Host rows{t.shape, std::vector<double>(static_cast<size_t>(n), 0.0)};
  double total = 0.0, count = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t ti = static_cast<int64_t>(t.v[static_cast<size_t>(i)]);
    if (ti == ignore) continue;
    const double* xi = x.v.data() + i * v;
    double m = -INFINITY, s = 0.0, mean = 0.0;
    for (int64_t j = 0; j < v; ++j) m = std::max(m, xi[j]);
    for (int64_t j = 0; j < v; ++j) {
      s += std::exp(xi[j] - m);
      mean += xi[j] / static_cast<double>(v);
    }
    const double lse = m + std::log(s);
    const double l = (1.0 - eps) * (lse - xi[ti]) + eps * (lse - mean);
    rows.v[static_cast<size_t>(i)] = l;
    total += l;
    count += 1.0;
  }
  if (red == Reduction::none) return rows;
  return Host{{}, {red == Reduction::sum ? total : total / count}};
}

Host reduce_ref(const Host& x, Reduction red) {
  if (red == Reduction::none) return x;
  double s = 0.0;
  for (double e : x.v) s += e;
  return Host{{}, {red == Reduction::sum ? s : s / static_cast<double>(x.numel())}};
}

const char* red_name(Reduction r) { return r == Reduction::mean ? "mean" : r == Reduction::sum ? "sum" : "none"; }

OpSpec spec(const std::string& op, const std::string& variant, std::vector<Shape> shapes, OpFn fn, RefFn ref,
            std::function<void()> errors) {
  OpSpec s;
  s.op = op;
  s.variant = variant;
  s.shapes = std::move(shapes);
  s.fn = std::move(fn);
  s.reference = std::move(ref);
  s.errors = std::move(errors);
  return s;
}

Tensor f64(const std::vector<double>& v, const Shape& s) { return from_vector(v, s, {DType::f64}); }
Tensor ids(const std::vector<int64_t>& v, const Shape& s) { return from_vector(v, s); }

// ---- error checks ----

void softmax_errors(const char* op, bool log) {
  auto f = [log](const Tensor& x, int64_t d) { return log ? log_softmax(x, d) : softmax(x, d); };
  check_throws([&] { f(zeros({2, 3}), 2); }, {op, "dim 2", "2 dims"});
  check_throws([&] { f(zeros({2, 3}, DType::i64), -1); }, {op, "floating", "i64", "(2, 3)"});
}

void layer_norm_errors() {
  Tensor x = zeros({2, 3});
  check_throws([&] { layer_norm(x, zeros({4}), Tensor()); }, {"layer_norm", "weight", "(3,)", "(2, 3)", "(4,)"});
  check_throws([&] { layer_norm(x, Tensor(), zeros({3, 1})); }, {"layer_norm", "bias", "(3, 1)"});
  check_throws([&] { layer_norm(x, zeros({3}, DType::f64), Tensor()); }, {"layer_norm", "weight", "f64", "f32"});
  check_throws([&] { layer_norm(zeros({}), Tensor(), Tensor()); }, {"layer_norm", "at least 1 dim", "()"});
  check_throws([&] { layer_norm(zeros({2, 3}, DType::i32), Tensor(), Tensor()); }, {"layer_norm", "i32"});
  check_throws([&] { layer_norm(x, Tensor(), Tensor(), -1.0); }, {"layer_norm", "eps"});
}

void rms_norm_errors() {
  check_throws([&] { rms_norm(zeros({2, 3}), zeros({2})); }, {"rms_norm", "weight", "(3,)", "(2,)"});
  check_throws([&] { rms_norm(zeros({}), Tensor()); }, {"rms_norm", "at least 1 dim"});
  check_throws([&] { rms_norm(zeros({2}, DType::u8), Tensor()); }, {"rms_norm", "u8"});
}

void cross_entropy_errors() {
  Tensor x = zeros({3, 5});
  check_throws([&] { cross_entropy(x, ids({0, 7, 1}, {3})); }, {"cross_entropy", "target 7", "5 classes"});
  check_throws([&] { cross_entropy(x, ids({0, -1, 1}, {3})); }, {"cross_entropy", "target -1", "5 classes"});
  check_throws([&] { cross_entropy(x, ids({0, 1}, {2})); }, {"cross_entropy", "(2,)", "(3, 5)"});
  check_throws([&] { cross_entropy(x, zeros({3})); }, {"cross_entropy", "target", "f32"});
  check_throws([&] { cross_entropy(x, ids({0, 1, 2}, {3}), -100, 1.5); }, {"cross_entropy", "label_smoothing", "1.5"});
  check_throws([&] { cross_entropy(zeros({3, 0}), ids({0, 1, 2}, {3})); }, {"cross_entropy", "V = 0"});
  check_throws([&] { cross_entropy(zeros({3}, DType::i64), ids({0}, {})); }, {"cross_entropy", "logits", "i64"});
}

void mse_errors() {
  check_throws([&] { mse_loss(zeros({2, 3}), zeros({3, 2})); }, {"mse_loss", "(2, 3)", "(3, 2)"});
  check_throws([&] { mse_loss(zeros({2}), zeros({2}, DType::f64)); }, {"mse_loss", "f32", "f64"});
  check_throws([&] { mse_loss(zeros({2}, DType::i64), zeros({2}, DType::i64)); }, {"mse_loss", "i64"});
}

void dropout_errors() {
  Generator g(1);
  check_throws([&] { dropout(zeros({4}), 1.5, true, g); }, {"dropout", "[0, 1]", "1.5"});
  check_throws([&] { dropout(zeros({4}), -0.1, true, g); }, {"dropout", "-0.1"});
  check_throws([&] { dropout(zeros({4}), std::nan(""), false, g); }, {"dropout", "nan"});
  check_throws([&] { dropout(zeros({4}, DType::i64), 0.5, true, g); }, {"dropout", "i64"});
}

// ---- spec rows ----

std::vector<OpSpec> softmax_specs() {
  std::vector<OpSpec> v;
  struct Case {
    Shape shape;
    int64_t dim;
  };
  for (bool log : {false, true}) {
    const char* op = log ? "log_softmax" : "softmax";
    for (const Case& c : {Case{{3, 5}, -1}, Case{{3, 5}, 0}, Case{{2, 3, 4}, 1}, Case{{2, 3, 4}, -1},
                          Case{{7}, 0}, Case{{}, 0}}) {
      const int64_t dim = c.dim;
      OpSpec s = spec(
          op, "shape " + shape_str(c.shape) + " dim " + std::to_string(dim), {c.shape},
          [log, dim](const std::vector<Tensor>& x) { return log ? log_softmax(x[0], dim) : softmax(x[0], dim); },
          [log, dim](const std::vector<Host>& h) { return softmax_ref(h[0], dim, log); },
          [op, log] { softmax_errors(op, log); });
      v.push_back(s);
    }
    // wide range: the max subtraction keeps exp finite
    OpSpec s = spec(
        op, "range +-40", {{4, 6}}, [log](const std::vector<Tensor>& x) { return log ? log_softmax(x[0], -1) : softmax(x[0], -1); },
        [log](const std::vector<Host>& h) { return softmax_ref(h[0], -1, log); }, [op, log] { softmax_errors(op, log); });
    s.lo = -40;
    s.hi = 40;
    v.push_back(s);
  }
  return v;
}

std::vector<OpSpec> norm_specs() {
  std::vector<OpSpec> v;
  // layer_norm: (x, weight, bias) presence patterns and ranks
  struct LnCase {
    std::string name;
    Shape x;
    bool w, b;
    double eps;
  };
  for (const LnCase& c : {LnCase{"weight+bias", {4, 5}, true, true, 1e-5}, LnCase{"no affine", {4, 5}, false, false, 1e-5},
                          LnCase{"weight only", {3, 6}, true, false, 1e-5}, LnCase{"bias only", {3, 6}, false, true, 1e-5},
                          LnCase{"3-d weight+bias", {2, 3, 4}, true, true, 1e-5},
                          LnCase{"1-d eps 0.1", {8}, true, true, 0.1}}) {
    std::vector<Shape> shapes{c.x};
    const Shape p{c.x.back()};
    if (c.w) shapes.push_back(p);
    if (c.b) shapes.push_back(p);
    const bool hw = c.w, hb = c.b;
    const double eps = c.eps;
    auto pick = [hw, hb](const auto& xs, int which) {
      using E = std::decay_t<decltype(xs[0])>;
      if (which == 0) return hw ? xs[1] : E{};
      return hb ? xs[hw ? 2 : 1] : E{};
    };
    v.push_back(spec(
        "layer_norm", c.name + " " + shape_str(c.x), shapes,
        [pick, eps](const std::vector<Tensor>& x) { return layer_norm(x[0], pick(x, 0), pick(x, 1), eps); },
        [pick, eps, hw, hb](const std::vector<Host>& h) {
          Host w = pick(h, 0), b = pick(h, 1);
          return norm_ref(h[0], hw ? &w : nullptr, hb ? &b : nullptr, eps, false);
        },
        layer_norm_errors));
  }
  struct RmsCase {
    std::string name;
    Shape x;
    bool w;
  };
  for (const RmsCase& c : {RmsCase{"weight", {4, 5}, true}, RmsCase{"no weight", {4, 5}, false},
                           RmsCase{"3-d weight", {2, 3, 4}, true}, RmsCase{"1-d weight", {6}, true}}) {
    std::vector<Shape> shapes{c.x};
    if (c.w) shapes.push_back({c.x.back()});
    const bool hw = c.w;
    v.push_back(spec(
        "rms_norm", c.name + " " + shape_str(c.x), shapes,
        [hw](const std::vector<Tensor>& x) { return rms_norm(x[0], hw ? x[1] : Tensor(), 1e-6); },
        [hw](const std::vector<Host>& h) { return norm_ref(h[0], hw ? &h[1] : nullptr, nullptr, 1e-6, true); },
        rms_norm_errors));
  }
  return v;
}

std::vector<OpSpec> loss_specs() {
  std::vector<OpSpec> v;
  struct CeCase {
    std::string name;
    Shape logits;
    std::vector<int64_t> target;
    int64_t ignore;
    double smoothing;
    Reduction red;
  };
  const std::vector<int64_t> t4{1, 0, 4, -100};
  for (const CeCase& c : {CeCase{"", {4, 5}, t4, -100, 0.0, Reduction::mean},
                          CeCase{"", {4, 5}, t4, -100, 0.0, Reduction::sum},
                          CeCase{"", {4, 5}, t4, -100, 0.0, Reduction::none},
                          CeCase{"smoothing 0.1", {4, 5}, t4, -100, 0.1, Reduction::mean},
                          CeCase{"smoothing 0.2", {4, 5}, t4, -100, 0.2, Reduction::none},
                          CeCase{"ignore_index 2", {5, 4}, {2, 3, 0, 2, 1}, 2, 0.0, Reduction::mean},
                          CeCase{"3-d logits", {2, 3, 4}, {0, 3, 1, 2, -100, 3}, -100, 0.05, Reduction::sum},
                          CeCase{"3-d logits", {2, 3, 4}, {0, 3, 1, 2, -100, 3}, -100, 0.0, Reduction::none},
                          CeCase{"1-d logits", {6}, {4}, -100, 0.0, Reduction::mean}}) {
    const Shape tshape(c.logits.begin(), c.logits.end() - 1);
    const Shape ls = c.logits;
    const std::vector<int64_t> target = c.target;
    const int64_t ignore = c.ignore;
    const double eps = c.smoothing;
    const Reduction red = c.red;
    OpSpec s = spec(
        "cross_entropy", std::string(red_name(red)) + (c.name.empty() ? "" : " " + c.name) + " " + shape_str(ls), {},
        [ignore, eps, red](const std::vector<Tensor>& x) { return cross_entropy(x[0], x[1], ignore, eps, red); },
        [ignore, eps, red](const std::vector<Host>& h) { return ce_ref(h[0], h[1], ignore, eps, red); },
        cross_entropy_errors);
    s.inputs = [ls, target, tshape](Generator& g, DType t) {
      return std::vector<Tensor>{rand_input(ls, -2.0, 2.0, g, t), ids(target, tshape)};
    };
    v.push_back(s);
  }
  for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none})
    v.push_back(spec(
        "mse_loss", red_name(red), {{3, 4}, {3, 4}},
        [red](const std::vector<Tensor>& x) { return mse_loss(x[0], x[1], red); },
        [red](const std::vector<Host>& h) {
          return reduce_ref(binary_ref(h[0], h[1], [](double a, double b) { return (a - b) * (a - b); }), red);
        },
        mse_errors));
  return v;
}

// Dropout's forward reference rebuilds the mask from a fresh Generator with the op's seed; the
// op under test also makes its own Generator per call so gradcheck sees a fixed mask.
std::vector<OpSpec> dropout_specs() {
  std::vector<OpSpec> v;
  struct DCase {
    std::string name;
    Shape shape;
    double p;
    bool training;
  };
  for (const DCase& c : {DCase{"train p=0.3", {5, 6}, 0.3, true}, DCase{"train p=0.5", {2, 3, 4}, 0.5, true},
                         DCase{"train p=0", {4, 5}, 0.0, true}, DCase{"train p=1", {4, 5}, 1.0, true},
                         DCase{"eval p=0.5", {4, 5}, 0.5, false}}) {
    const double p = c.p;
    const bool training = c.training;
    v.push_back(spec(
        "dropout", c.name + " " + shape_str(c.shape), {c.shape},
        [p, training](const std::vector<Tensor>& x) {
          Generator g(42, 3);
          return dropout(x[0], p, training, g);
        },
        [p, training](const std::vector<Host>& h) {
          Host out = h[0];
          if (!training || p == 0.0) return out;
          Generator g(42, 3);
          std::vector<double> keep =
              p == 1.0 ? std::vector<double>(out.v.size(), 0.0) : to_vector<double>(bernoulli(out.shape, 1.0 - p, g));
          for (size_t i = 0; i < out.v.size(); ++i) out.v[i] = keep[i] != 0.0 ? out.v[i] / (1.0 - p) : 0.0;
          return out;
        },
        dropout_errors));
  }
  return v;
}

const bool registered = add_specs(softmax_specs()) && add_specs(norm_specs()) && add_specs(loss_specs()) &&
                        add_specs(dropout_specs());

}  // namespace

// ---- focused tests ----

TEST_CASE("nn: softmax is stable for huge and -inf logits") {
  Tensor x = f64({1000.0, 1001.0, 1002.0, -INFINITY, 0.0, -INFINITY}, {2, 3});
  auto y = to_vector<double>(softmax(x, -1));
  const double e1 = std::exp(-1.0), e2 = std::exp(-2.0), z = 1.0 + e1 + e2;
  CHECK(y[0] == doctest::Approx(e2 / z).epsilon(1e-12));
  CHECK(y[2] == doctest::Approx(1.0 / z).epsilon(1e-12));
  CHECK(y[3] == 0.0);
  CHECK(y[4] == 1.0);
  CHECK(y[5] == 0.0);
  auto ly = to_vector<double>(log_softmax(x, -1));
  CHECK(ly[2] == doctest::Approx(-std::log(z)).epsilon(1e-12));
  CHECK(std::isinf(ly[3]));
  CHECK(ly[4] == 0.0);
  // a fully masked row gives NaN like torch (exp(-inf - -inf))
  auto all = to_vector<double>(softmax(f64({-INFINITY, -INFINITY}, {2}), 0));
  CHECK(std::isnan(all[0]));
}

TEST_CASE("nn: half inputs compute in f32 and keep their dtype") {
  Generator g(5);
  Tensor x = uniform({3, 8}, -2, 2, g);
  Tensor w = uniform({8}, 0.5, 1.5, g), b = uniform({8}, -0.5, 0.5, g);
  for (DType h : {DType::bf16, DType::f16}) {
    Tensor xh = x.to(h), wh = w.to(h), bh = b.to(h);
    const double tol = h == DType::bf16 ? 2e-2 : 2e-3;
    Tensor s = softmax(xh, -1);
    CHECK(s.dtype() == h);
    CHECK(max_abs_diff(s.to(DType::f32), softmax(xh.to(DType::f32), -1)) < tol);
    Tensor ln = layer_norm(xh, wh, bh);
    CHECK(ln.dtype() == h);
    CHECK(max_abs_diff(ln.to(DType::f32), layer_norm(xh.to(DType::f32), wh.to(DType::f32), bh.to(DType::f32))) <
          4 * tol);
    Tensor rn = rms_norm(xh, wh);
    CHECK(max_abs_diff(rn.to(DType::f32), rms_norm(xh.to(DType::f32), wh.to(DType::f32))) < 4 * tol);
    Tensor t = ids({1, 7, 0}, {3});
    Tensor ce = cross_entropy(xh, t);
    CHECK(ce.dtype() == h);
    CHECK(std::fabs(ce.item<double>() - cross_entropy(xh.to(DType::f32), t).item<double>()) < 4 * tol);
    // the gradient flows back through the casts in the input's dtype
    Tensor xl = xh.detach().requires_grad_(true);
    cross_entropy(xl, t).backward();
    CHECK(xl.grad().dtype() == h);
  }
}

// Sizes above kParallelGrain take the multi-threaded path, including the per-thread partial sums
// of the weight/bias gradients; compare with serial host loops.
TEST_CASE("nn: layer_norm and rms_norm parameter gradients on the parallel path") {
  const int64_t n = 300, c = 257;  // n*c > kParallelGrain
  Generator g(9);
  Tensor x = uniform({n, c}, -2, 2, g, {DType::f64}), gy = uniform({n, c}, -1, 1, g, {DType::f64});
  Tensor w = uniform({c}, 0.5, 1.5, g, {DType::f64}), b = uniform({c}, -1, 1, g, {DType::f64});
  auto hx = to_vector<double>(x), hg = to_vector<double>(gy);
  for (bool rms : {false, true}) {
    INFO((rms ? "rms_norm" : "layer_norm"));
    Tensor wl = w.detach().requires_grad_(true), bl = b.detach().requires_grad_(true);
    Tensor xl = x.detach().requires_grad_(true);
    Tensor y = rms ? rms_norm(xl, wl, 1e-6) : layer_norm(xl, wl, bl, 1e-5);
    y.backward(gy);
    std::vector<double> gw(static_cast<size_t>(c), 0.0), gb(static_cast<size_t>(c), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      double mu = 0, var = 0;
      for (int64_t j = 0; j < c; ++j) mu += rms ? 0.0 : hx[static_cast<size_t>(i * c + j)] / c;
      for (int64_t j = 0; j < c; ++j) var += std::pow(hx[static_cast<size_t>(i * c + j)] - mu, 2) / c;
      const double rstd = 1.0 / std::sqrt(var + (rms ? 1e-6 : 1e-5));
      for (int64_t j = 0; j < c; ++j) {
        const size_t k = static_cast<size_t>(i * c + j);
        gw[static_cast<size_t>(j)] += hg[k] * (hx[k] - mu) * rstd;
        gb[static_cast<size_t>(j)] += hg[k];
      }
    }
    CHECK(max_abs_diff(wl.grad(), from_vector(gw, {c}, {DType::f64})) < 1e-9);
    if (!rms) CHECK(max_abs_diff(bl.grad(), from_vector(gb, {c}, {DType::f64})) < 1e-9);
    // the input gradient of a normalization sums to ~0 per row for layer_norm with w = 1
    Tensor y2 = layer_norm(xl, Tensor(), Tensor());
    xl.zero_grad();
    y2.backward(gy);
    auto gx = to_vector<double>(xl.grad());
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int64_t j = 0; j < c; ++j) s += gx[static_cast<size_t>(i * c + j)];
      worst = std::max(worst, std::fabs(s));
    }
    CHECK(worst < 1e-9);
  }
}

TEST_CASE("nn: cross_entropy ignore rows, all-ignored mean and large parallel rows") {
  Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_(true);
  Tensor all_ignored = ids({-100, -100}, {2});
  Tensor loss = cross_entropy(x, all_ignored);
  CHECK(std::isnan(loss.item<double>()));  // 0 / 0 like torch
  loss.backward();
  for (double gv : to_vector<double>(x.grad())) CHECK(gv == 0.0);
  CHECK(cross_entropy(x, all_ignored, -100, 0.0, Reduction::sum).item<double>() == 0.0);
  // ignored rows get no gradient even with label smoothing
  x.zero_grad();
  cross_entropy(x, ids({2, -100}, {2}), -100, 0.3, Reduction::sum).backward();
  auto gx = to_vector<double>(x.grad());
  CHECK(gx[3] == 0.0);
  CHECK(gx[4] == 0.0);
  CHECK(gx[5] == 0.0);
  CHECK(std::fabs(gx[0] + gx[1] + gx[2]) < 1e-12);  // each row's gradient sums to 0
  // parallel path: N*V above the grain; the mean gradient of every kept row sums to 0
  const int64_t n = 64, v = 1000;
  Generator g(3);
  Tensor big = uniform({n, v}, -3, 3, g, {DType::f32}).requires_grad_(true);
  Tensor t = randint(0, v, {n}, g);
  Tensor l = cross_entropy(big, t, -100, 0.1);
  Host want = ce_ref(to_host(big), to_host(t), -100, 0.1, Reduction::mean);
  CHECK(l.item<double>() == doctest::Approx(want.v[0]).epsilon(1e-5));
  l.backward();
  Tensor rowsum = sum(big.grad(), {1});
  CHECK(max_abs_diff(rowsum, zeros({n})) < 1e-6);
}

TEST_CASE("nn: dropout statistics, mask consistency and generator advance") {
  const int64_t n = 200000;
  const double p = 0.3;
  Generator g(17);
  Tensor x = ones({n}).requires_grad_(true);
  Tensor y = dropout(x, p, true, g);
  auto yv = to_vector<double>(y);
  int64_t zeros_n = 0;
  double total = 0;
  for (double e : yv) {
    if (e == 0.0)
      ++zeros_n;
    else
      CHECK_MESSAGE(std::fabs(e - 1.0 / (1.0 - p)) < 1e-6, "kept value ", e);
    total += e;
  }
  // binomial std of the drop fraction is sqrt(p(1-p)/n) ~ 0.001
  CHECK(std::fabs(static_cast<double>(zeros_n) / n - p) < 0.006);
  CHECK(std::fabs(total / n - 1.0) < 0.01);  // inverted dropout keeps the mean
  // the gradient uses the same mask as the forward
  y.backward(ones({n}));
  CHECK(max_abs_diff(x.grad(), y.detach()) == 0.0);
  // the generator advanced: the next call draws a different mask
  Tensor y2 = dropout(x, p, true, g);
  CHECK(max_abs_diff(y2, y) > 0.0);
  // same seed and offset reproduce the mask
  Generator a(99, 7), b(99, 7);
  CHECK(max_abs_diff(dropout(x, 0.5, true, a), dropout(x, 0.5, true, b)) == 0.0);
  // eval returns the input itself, p == 1 zeros everything
  CHECK(dropout(x, 0.5, false, g).impl_ptr() == x.impl_ptr());
  CHECK(max_abs_diff(dropout(x, 1.0, true, g), zeros({n})) == 0.0);
}

// ---- AdamW kernel ----

TEST_CASE("adamw_step matches a plain torch.optim.AdamW loop over several steps") {
  for (DType t : {DType::f64, DType::f32}) {
    INFO(dtype_name(t));
    AdamWParams p;
    p.lr = 1e-2;
    p.beta1 = 0.9;
    p.beta2 = 0.99;
    p.eps = 1e-8;
    p.weight_decay = 0.1;
    Generator g(21);
    const Shape s{5, 7};
    Tensor param = uniform(s, -1, 1, g, {t}), m = zeros(s, {t}), v = zeros(s, {t});
    std::vector<double> hp = to_vector<double>(param), hm(hp.size(), 0.0), hv(hp.size(), 0.0);
    for (int64_t step = 1; step <= 6; ++step) {
      Tensor grad = uniform(s, -1, 1, g, {t});
      auto hg = to_vector<double>(grad);
      p.step = step;
      backend_of(param).adamw_step(param, grad, m, v, p);
      const double bc1 = 1 - std::pow(p.beta1, step), bc2 = 1 - std::pow(p.beta2, step);
      for (size_t i = 0; i < hp.size(); ++i) {
        hp[i] *= 1 - p.lr * p.weight_decay;
        hm[i] = p.beta1 * hm[i] + (1 - p.beta1) * hg[i];
        hv[i] = p.beta2 * hv[i] + (1 - p.beta2) * hg[i] * hg[i];
        hp[i] -= p.lr * (hm[i] / bc1) / (std::sqrt(hv[i] / bc2) + p.eps);
      }
      const double tol = t == DType::f64 ? 1e-12 : 2e-6;
      CHECK(max_abs_diff(param, from_vector(hp, s, {DType::f64})) < tol);
      CHECK(max_abs_diff(m, from_vector(hm, s, {DType::f64})) < tol);
      CHECK(max_abs_diff(v, from_vector(hv, s, {DType::f64})) < tol);
    }
  }
  // a parallel-sized tensor takes the OpenMP path: same update as a single element
  const int64_t n = 100000;
  AdamWParams p;
  p.weight_decay = 0.01;
  p.step = 3;
  Tensor param = full({n}, 0.5), grad = full({n}, -0.25), m = full({n}, 0.1), v = full({n}, 0.2);
  backend_of(param).adamw_step(param, grad, m, v, p);
  const double mm = 0.9 * 0.1 + 0.1 * -0.25, vv = 0.999 * 0.2 + 0.001 * 0.0625;
  const double want = 0.5 * (1 - 1e-3 * 0.01) -
                      1e-3 * (mm / (1 - std::pow(0.9, 3))) / (std::sqrt(vv / (1 - std::pow(0.999, 3))) + 1e-8);
  auto pv = to_vector<double>(param);
  CHECK(*std::min_element(pv.begin(), pv.end()) == doctest::Approx(want).epsilon(1e-6));
  CHECK(*std::max_element(pv.begin(), pv.end()) == doctest::Approx(want).epsilon(1e-6));
  check_throws([&] { backend_of(param).adamw_step(param, zeros({3}), m, v, p); }, {"adamw_step", "(100000,)", "(3,)"});
  check_throws([&] { backend_of(param).adamw_step(param, grad.to(DType::f64), m, v, p); }, {"adamw_step", "f64"});
}

}  // namespace hh::test
