// Reductions: op-table rows for sum, mean, var, logsumexp, norm, amax/amin, max/min (values and
// indices), argmax/argmin and cumsum over several dim sets (all, one, two non-adjacent, negative,
// keepdim on/off), plus kernel tests the table cannot reach: large row/column/chunked layouts,
// prod, first-index ties, NaN propagation, integer and bf16 inputs, empty dims, and the
// gradients at ties and at zero.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/backend.h"
#include "core/cpu_isa.h"
#include "tests/isa_scope.h"
#include "tests/op_table.h"

namespace hh::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using GroupFn = std::function<double(const std::vector<double>&)>;

// Reference reduction: groups x's elements by output position (each group in row-major order
// of the reduced dims, so a group position is the index along a single reduced dim).
Host reduce_ref(const Host& x, const Dims& dims, bool keepdim, const GroupFn& f) {
  const size_t n = x.shape.size();
  std::vector<bool> red(n, dims.empty());
  for (int64_t d : dims) red[static_cast<size_t>(d < 0 ? d + static_cast<int64_t>(n) : d)] = true;
  Shape keep, out_shape;
  for (size_t d = 0; d < n; ++d) {
    keep.push_back(red[d] ? 1 : x.shape[d]);
    if (!red[d] || keepdim) out_shape.push_back(keep.back());
  }
  std::vector<std::vector<double>> groups(static_cast<size_t>(numel_of(keep)));
  Strides xs = contiguous_strides(x.shape), ks = contiguous_strides(keep);
  for (int64_t f = 0; f < x.numel(); ++f) {
    int64_t rem = f, at = 0;
    for (size_t d = 0; d < n; ++d) {
      int64_t c = rem / xs[d];
      rem %= xs[d];
      if (!red[d]) at += c * ks[d];
    }
    groups[static_cast<size_t>(at)].push_back(x.v[static_cast<size_t>(f)]);
  }
  Host out{out_shape, {}};
  for (auto& g : groups) out.v.push_back(f(g));
  return out;
}

double g_sum(const std::vector<double>& g) {
  double s = 0;
  for (double v : g) s += v;
  return s;
}
double g_mean(const std::vector<double>& g) { return g_sum(g) / static_cast<double>(g.size()); }
GroupFn g_var(int64_t correction) {
  return [correction](const std::vector<double>& g) {
    double m = g_mean(g), s = 0;
    for (double v : g) s += (v - m) * (v - m);
    return s / static_cast<double>(static_cast<int64_t>(g.size()) - correction);
  };
}
double g_lse(const std::vector<double>& g) {
  double m = *std::max_element(g.begin(), g.end()), s = 0;
  for (double v : g) s += std::exp(v - m);
  return m + std::log(s);
}
GroupFn g_norm(double p) {
  return [p](const std::vector<double>& g) {
    double s = 0;
    for (double v : g) s = std::isinf(p) ? std::max(s, std::fabs(v)) : s + std::pow(std::fabs(v), p);
    return std::isinf(p) ? s : std::pow(s, 1.0 / p);
  };
}
double g_max(const std::vector<double>& g) { return *std::max_element(g.begin(), g.end()); }
double g_min(const std::vector<double>& g) { return *std::min_element(g.begin(), g.end()); }
// First index of the extremum (std::max_element returns the first of equal largest elements).
double g_argmax(const std::vector<double>& g) {
  return static_cast<double>(std::max_element(g.begin(), g.end()) - g.begin());
}
double g_argmin(const std::vector<double>& g) {
  return static_cast<double>(std::min_element(g.begin(), g.end()) - g.begin());
}

Host cumsum_ref(const Host& x, int64_t dim) {
  const int64_t n = static_cast<int64_t>(x.shape.size());
  if (dim < 0) dim += n;
  int64_t O = 1, R = n ? x.shape[static_cast<size_t>(dim)] : 1, I = 1;
  for (int64_t d = 0; d < n; ++d) {
    if (d < dim) O *= x.shape[static_cast<size_t>(d)];
    if (d > dim) I *= x.shape[static_cast<size_t>(d)];
  }
  Host out = x;
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i) {
      double s = 0;
      for (int64_t r = 0; r < R; ++r) {
        size_t at = static_cast<size_t>((o * R + r) * I + i);
        s += x.v[at];
        out.v[at] = s;
      }
    }
  return out;
}

struct DimCase {
  std::string name;
  Shape shape;
  Dims dims;
  bool keepdim;
};
const std::vector<DimCase>& dim_cases() {
  static const std::vector<DimCase> cases = {
      {"all dims of (3,4)", {3, 4}, {}, false},
      {"dim 1 of (3,4) keepdim", {3, 4}, {1}, true},
      {"dims {0,2} of (2,3,4)", {2, 3, 4}, {0, 2}, false},
      {"dims {0,2} of (2,3,4) keepdim", {2, 3, 4}, {0, 2}, true},
      {"dim -1 of (2,3,4)", {2, 3, 4}, {-1}, false},
      {"dims {0,1} of (2,3,4) keepdim", {2, 3, 4}, {0, 1}, true},
      {"dim 0 of (5,)", {5}, {0}, false},
  };
  return cases;
}

// Shared error rows: a dim out of range and a repeated dim must name the op and the shape.
using DimsOp = std::function<Tensor(const Tensor&, const Dims&)>;
std::function<void()> dims_errors(const std::string& op, DimsOp f, bool float_only) {
  return [op, f, float_only] {
    check_throws([&] { f(zeros({2, 3}), {2}); }, {op + ": dim 2 out of range", "(2, 3)"});
    check_throws([&] { f(zeros({2, 3}), {-3}); }, {op + ":", "(2, 3)"});
    check_throws([&] { f(zeros({2, 3}), {1, -1}); }, {op + ": dim 1 appears more than once", "(2, 3)"});
    if (float_only) check_throws([&] { f(zeros({2, 3}, DType::i64), {0}); }, {op + ":", "floating", "i64"});
  };
}

// Rows of `op` over every dim case: fn(x, dims, keepdim) against reduce_ref with `g`.
std::vector<OpSpec> dim_rows(const std::string& op, const std::string& tag,
                             std::function<Tensor(const Tensor&, const Dims&, bool)> fn, GroupFn g,
                             bool float_only, double lo = -1.0, double hi = 1.0) {
  std::vector<OpSpec> rows;
  for (const DimCase& c : dim_cases()) {
    OpSpec s;
    s.op = op;
    s.variant = tag + (tag.empty() ? "" : ", ") + c.name;
    s.shapes = {c.shape};
    s.lo = lo;
    s.hi = hi;
    Dims dims = c.dims;
    bool keep = c.keepdim;
    s.fn = [fn, dims, keep](const std::vector<Tensor>& x) { return fn(x[0], dims, keep); };
    s.reference = [g, dims, keep](const std::vector<Host>& x) { return reduce_ref(x[0], dims, keep, g); };
    s.errors = dims_errors(op, [fn](const Tensor& x, const Dims& d) { return fn(x, d, false); }, float_only);
    rows.push_back(s);
  }
  return rows;
}

std::vector<OpSpec> all_rows() {
  std::vector<OpSpec> rows;
  auto append = [&rows](std::vector<OpSpec> more) {
    for (auto& r : more) rows.push_back(std::move(r));
  };
  append(dim_rows("sum", "", [](const Tensor& x, const Dims& d, bool k) { return sum(x, d, k); }, g_sum, false));
  append(dim_rows("mean", "", [](const Tensor& x, const Dims& d, bool k) { return mean(x, d, k); }, g_mean, true));
  append(dim_rows("var", "correction 1",
                  [](const Tensor& x, const Dims& d, bool k) { return var(x, d, 1, k); }, g_var(1), true));
  append(dim_rows("var", "correction 0",
                  [](const Tensor& x, const Dims& d, bool k) { return var(x, d, 0, k); }, g_var(0), true));
  append(dim_rows("logsumexp", "",
                  [](const Tensor& x, const Dims& d, bool k) { return logsumexp(x, d, k); }, g_lse, true, -3, 3));
  for (double p : {2.0, 1.0, 3.0, kInf}) {
    append(dim_rows("norm", std::isinf(p) ? std::string("p=inf") : hh::str("p=", p),
                    [p](const Tensor& x, const Dims& d, bool k) { return norm(x, p, d, k); }, g_norm(p), true));
  }
  append(dim_rows("amax", "", [](const Tensor& x, const Dims& d, bool k) { return amax(x, d, k); }, g_max, false));
  append(dim_rows("amin", "", [](const Tensor& x, const Dims& d, bool k) { return amin(x, d, k); }, g_min, false));

  // norm's own argument check.
  for (auto& r : rows)
    if (r.op == "norm") {
      auto base = r.errors;
      r.errors = [base] {
        base();
        check_throws([] { norm(zeros({2, 3}), -1.0); }, {"norm: p must be positive", "(2, 3)"});
      };
    }
  for (auto& r : rows)
    if (r.op == "amax" || r.op == "amin") {
      auto base = r.errors;
      std::string op = r.op;
      r.errors = [base, op] {
        base();
        check_throws([&] { op == "amax" ? amax(zeros({2, 0}), {1}) : amin(zeros({2, 0}), {1}); },
                     {op + ": cannot reduce over a zero-size dim", "(2, 0)"});
      };
    }

  // max/min/argmax/argmin along one dim.
  struct OneDim {
    std::string name;
    Shape shape;
    int64_t dim;
    bool keepdim;
  };
  const std::vector<OneDim> one = {{"dim 1 of (3,4)", {3, 4}, 1, false},
                                   {"dim -2 of (2,3,4) keepdim", {2, 3, 4}, -2, true},
                                   {"dim 0 of (2,3,4)", {2, 3, 4}, 0, false},
                                   {"dim 0 of (6,)", {6}, 0, false}};
  for (const std::string op : {"max", "min", "argmax", "argmin"}) {
    const bool is_max = op == "max" || op == "argmax", is_arg = op[0] == 'a';
    for (const OneDim& c : one)
      for (bool want_indices : {false, true}) {
        if (is_arg && !want_indices) continue;
        OpSpec s;
        s.op = op;
        s.variant = (want_indices && !is_arg ? "indices, " : "") + c.name;
        s.shapes = {c.shape};
        int64_t dim = c.dim;
        bool keep = c.keepdim;
        s.fn = [is_max, is_arg, want_indices, dim, keep](const std::vector<Tensor>& x) {
          if (is_arg) return is_max ? argmax(x[0], dim, keep) : argmin(x[0], dim, keep);
          ValuesIndices r = is_max ? max(x[0], dim, keep) : min(x[0], dim, keep);
          return want_indices ? r.indices : r.values;
        };
        s.reference = [is_max, want_indices, dim, keep](const std::vector<Host>& x) {
          GroupFn g = want_indices ? (is_max ? GroupFn(g_argmax) : GroupFn(g_argmin))
                                   : (is_max ? GroupFn(g_max) : GroupFn(g_min));
          return reduce_ref(x[0], {dim}, keep, g);
        };
        if (want_indices) {
          s.differentiable = false;
          s.no_grad_reason = "indices are integers";
        }
        s.errors = [op, is_max, is_arg] {
          auto call = [&](const Tensor& x, int64_t d) {
            if (is_arg) return is_max ? argmax(x, d) : argmin(x, d);
            return is_max ? max(x, d).values : min(x, d).values;
          };
          check_throws([&] { call(zeros({2, 3}), 2); }, {op + ": dim 2 out of range", "(2, 3)"});
          check_throws([&] { call(zeros({2, 0}), 1); }, {op + ": cannot reduce over a zero-size dim", "(2, 0)"});
          check_throws([&] { call(zeros({2, 3}), -3); }, {op + ": dim -3 out of range", "(2, 3)"});
        };
        rows.push_back(s);
      }
  }

  // cumsum
  const std::vector<std::pair<Shape, int64_t>> cum = {{{3, 4}, 1}, {{3, 4}, 0}, {{2, 3, 4}, 1}, {{2, 3, 4}, -1},
                                                      {{6}, 0}};
  for (const auto& [shape, dim] : cum) {
    OpSpec s;
    s.op = "cumsum";
    s.variant = "dim " + std::to_string(dim) + " of " + shape_str(shape);
    s.shapes = {shape};
    int64_t d = dim;
    s.fn = [d](const std::vector<Tensor>& x) { return cumsum(x[0], d); };
    s.reference = [d](const std::vector<Host>& x) { return cumsum_ref(x[0], d); };
    s.errors = [] {
      check_throws([] { cumsum(zeros({2, 3}), 2); }, {"cumsum: dim 2 out of range", "(2, 3)"});
      check_throws([] { cumsum(zeros({4}), -2); }, {"cumsum: dim -2 out of range", "(4,)"});
    };
    rows.push_back(s);
  }
  return rows;
}

const bool registered = add_specs(all_rows());

// Double-precision reference over the middle axis of an (O,R,I) host buffer.
std::vector<double> ori_ref(const std::vector<double>& x, int64_t O, int64_t R, int64_t I, ReduceOp op) {
  std::vector<double> out(static_cast<size_t>(O * I));
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i) {
      double acc = op == ReduceOp::prod ? 1.0 : op == ReduceOp::max ? -kInf : op == ReduceOp::min ? kInf : 0.0;
      for (int64_t r = 0; r < R; ++r) {
        double v = x[static_cast<size_t>((o * R + r) * I + i)];
        if (op == ReduceOp::sum || op == ReduceOp::mean) acc += v;
        if (op == ReduceOp::prod) acc *= v;
        if (op == ReduceOp::max) acc = std::max(acc, v);
        if (op == ReduceOp::min) acc = std::min(acc, v);
      }
      out[static_cast<size_t>(o * I + i)] = op == ReduceOp::mean ? acc / static_cast<double>(R) : acc;
    }
  return out;
}

}  // namespace

TEST_CASE("reduce kernel: row, column and split-R layouts match double loops") {
  Backend& cpu = backend_for(Device::cpu());
  // (O,R,I): single long row (R split across tasks), many short rows, columns with two I blocks
  // and a split R, a long column pair, and R == 1.
  const std::vector<Shape> shapes = {{1, 200001, 1}, {1000, 37, 1}, {2, 600, 300}, {1, 70000, 2}, {4, 1, 5}};
  Generator gen(99);
  for (const Shape& s : shapes)
    for (DType t : {DType::f32, DType::f64})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min, ReduceOp::prod}) {
        INFO("shape " << shape_str(s) << " " << dtype_name(t) << " op " << static_cast<int>(op));
        // prod: values near 1 keep the product finite and sensitive to every factor.
        Tensor x = op == ReduceOp::prod ? uniform(s, 0.999, 1.001, gen, {t}) : uniform(s, -1.0, 1.0, gen, {t});
        Tensor v = empty({s[0], s[2]}, {t});
        Tensor idx = op == ReduceOp::max || op == ReduceOp::min ? empty({s[0], s[2]}, {DType::i64}) : Tensor();
        cpu.reduce(op, x, v, idx);
        auto xs = to_vector<double>(x);
        auto want = ori_ref(xs, s[0], s[1], s[2], op);
        auto got = to_vector<double>(v);
        // f32 results are accumulated in double: only the final rounding (and prod's) remains.
        double tol = t == DType::f64 ? 1e-12 : 1e-6;
        for (size_t k = 0; k < want.size(); ++k) {
          REQUIRE_MESSAGE(std::fabs(got[k] - want[k]) <= tol * std::max(1.0, std::fabs(want[k])),
                          "element ", k, " got ", got[k], " want ", want[k]);
        }
        if (idx.defined()) {
          auto ix = to_vector<int64_t>(idx);
          for (int64_t k = 0; k < s[0] * s[2]; ++k) {
            int64_t o = k / s[2], i = k % s[2], r = ix[static_cast<size_t>(k)];
            REQUIRE(r >= 0);
            REQUIRE(r < s[1]);
            CHECK(xs[static_cast<size_t>((o * s[1] + r) * s[2] + i)] == want[static_cast<size_t>(k)]);
          }
        }
      }
}

TEST_CASE("reduce kernel: integer sums, max and min") {
  Backend& cpu = backend_for(Device::cpu());
  for (DType t : {DType::i32, DType::i64}) {
    Generator gen(5);
    Tensor x = randint(-1000, 1000, {3, 40000, 2}, gen, {t});
    auto xs = to_vector<double>(x);
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
      Tensor v = empty({3, 2}, {t});
      cpu.reduce(op, x, v, Tensor());
      CHECK(to_vector<double>(v) == ori_ref(xs, 3, 40000, 2, op));
    }
  }
  Tensor xi = from_vector(std::vector<int64_t>{1, 2, 3, 4}, {2, 2});
  check_throws([&] { cpu.reduce(ReduceOp::mean, xi.reshape({1, 4, 1}), empty({1, 1}, {DType::i64}), Tensor()); },
               {"reduce: mean needs a floating tensor", "i64"});
}

TEST_CASE("max/min: ties pick the first index and NaN propagates") {
  Tensor x = from_vector(std::vector<double>{1, 3, 3, 2, kNaN, 1, kNaN, 5, 4, 4, 0, 4}, {3, 4});
  for (bool transposed : {false, true}) {
    INFO("transposed " << transposed);
    // The transposed copy reduces over dim 0: the column (I > 1) path of the kernel.
    Tensor xt = transposed ? x.t().contiguous() : x;
    int64_t dim = transposed ? 0 : 1;
    ValuesIndices mx = max(xt, dim), mn = min(xt, dim);
    auto mv = to_vector<double>(mx.values), nv = to_vector<double>(mn.values);
    CHECK(mv[0] == 3);
    CHECK(std::isnan(mv[1]));
    CHECK(mv[2] == 4);
    CHECK(to_vector<int64_t>(mx.indices) == std::vector<int64_t>{1, 0, 0});
    CHECK(nv[0] == 1);
    CHECK(std::isnan(nv[1]));
    CHECK(nv[2] == 0);
    CHECK(to_vector<int64_t>(mn.indices) == std::vector<int64_t>{0, 0, 2});
    CHECK(to_vector<int64_t>(argmax(xt, dim)) == std::vector<int64_t>{1, 0, 0});
    auto am = to_vector<double>(amax(xt, {dim}));
    CHECK(std::isnan(am[1]));
    CHECK(am[2] == 4);
  }
  // Long rows split across tasks: the first of two equal maxima in different chunks, a NaN late in the row.
  std::vector<double> v(200000, 0.0);
  v[150000] = 7;
  v[60000] = 7;
  v[199999] = -3;
  for (DType t : {DType::f32, DType::f64}) {
    Tensor big = from_vector(v, {200000}, {t});
    ValuesIndices r = max(big, 0);
    CHECK(r.values.item<double>() == 7);
    CHECK(r.indices.item<int64_t>() == 60000);
    CHECK(argmin(big, 0).item<int64_t>() == 199999);
    CHECK(amax(big).item<double>() == 7);
    auto w = v;
    w[180000] = kNaN;
    Tensor nan_big = from_vector(w, {200000}, {t});
    CHECK(max(nan_big, 0).indices.item<int64_t>() == 180000);
    CHECK(std::isnan(amax(nan_big).item<double>()));
    CHECK(std::isnan(amin(nan_big).item<double>()));
    CHECK(std::isnan(sum(nan_big).item<double>()));
  }
}

TEST_CASE("amax splits the gradient among ties; max(dim) sends it to the chosen index") {
  Tensor x = from_vector(std::vector<double>{1, 3, 3, 2, 5, 5, 5, 0}, {2, 4}).requires_grad_();
  amax(x, {1}).sum().backward();
  auto g = to_vector<double>(x.grad());
  std::vector<double> want = {0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0};
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(want[i]));
  x.zero_grad();
  max(x, 1).values.sum().backward();
  CHECK(to_vector<double>(x.grad()) == std::vector<double>{0, 1, 0, 0, 1, 0, 0, 0});
  x.zero_grad();
  min(x, 0, true).values.sum().backward();  // column minima: 1, 3, 3, 0
  CHECK(to_vector<double>(x.grad()) == std::vector<double>{1, 1, 1, 0, 0, 0, 0, 1});
}

TEST_CASE("reductions: dtypes, shapes and empty inputs") {
  Tensor xi = from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor s = sum(xi, {1});
  CHECK(s.dtype() == DType::i64);
  CHECK(to_vector<int64_t>(s) == std::vector<int64_t>{6, 15});
  CHECK(!s.requires_grad());
  CHECK(to_vector<int64_t>(sum(xi.to(DType::i32))) == std::vector<int64_t>{21});
  CHECK(amax(xi.to(DType::i32)).dtype() == DType::i32);
  CHECK(amax(xi.to(DType::i32)).item<int64_t>() == 6);
  CHECK(to_vector<int64_t>(cumsum(xi, 1)) == std::vector<int64_t>{1, 3, 6, 4, 9, 15});
  CHECK(sum(gt(xi, 2.0)).item<int64_t>() == 4);  // bool counts

  // bf16 accumulates in f32: 1000 ones sum to 1000 (a bf16 accumulator would stall at 256).
  Tensor b = ones({1000}, DType::bf16);
  CHECK(sum(b).dtype() == DType::bf16);
  CHECK(sum(b).item<double>() == 1000);
  CHECK(mean(b).item<double>() == 1);

  Tensor x = zeros({2, 3, 4});
  CHECK(sum(x, {0, 2}, true).shape() == Shape{1, 3, 1});
  CHECK(sum(x, {0, 2}).shape() == Shape{3});
  CHECK(sum(x).shape() == Shape{});
  CHECK(amax(x, {-1}, true).shape() == Shape{2, 3, 1});
  CHECK(max(x, 1).indices.shape() == Shape{2, 4});
  CHECK(sum(scalar_tensor(3.5)).item<double>() == 3.5);
  CHECK(sum(scalar_tensor(3.5), {0}).shape() == Shape{});

  Tensor e = zeros({0, 3});
  CHECK(to_vector<double>(sum(e, {0})) == std::vector<double>{0, 0, 0});
  auto m = to_vector<double>(mean(e, {0}));
  REQUIRE(m.size() == 3);
  CHECK(std::isnan(m[0]));
  CHECK(sum(e, {1}).shape() == Shape{0});
  CHECK(amax(e, {1}).shape() == Shape{0});
  check_throws([&] { amax(e, {0}); }, {"amax: cannot reduce over a zero-size dim", "(0, 3)"});
}

TEST_CASE("norm, logsumexp, var: gradient at zero, stability, known values") {
  Tensor z = zeros({3}, DType::f64).requires_grad_();
  norm(z).backward();
  CHECK(to_vector<double>(z.grad()) == std::vector<double>{0, 0, 0});
  Tensor z2 = zeros({2, 2}, DType::f64).requires_grad_();
  norm(z2, 3.0, {1}).sum().backward();
  CHECK(to_vector<double>(z2.grad()) == std::vector<double>{0, 0, 0, 0});
  CHECK(norm(from_vector(std::vector<double>{3, -4}, {2})).item<double>() == doctest::Approx(5.0));

  Tensor big = from_vector(std::vector<double>{1000, 1000, -kInf, -kInf}, {2, 2});
  auto l = to_vector<double>(logsumexp(big, {1}));
  CHECK(l[0] == doctest::Approx(1000 + std::log(2.0)));
  CHECK(l[1] == -kInf);
  CHECK(to_vector<double>(logsumexp(zeros({2, 0}), {1})) == std::vector<double>{-kInf, -kInf});

  Tensor v = from_vector(std::vector<double>{1, 2, 3, 4}, {4});
  CHECK(var(v).item<double>() == doctest::Approx(5.0 / 3));
  CHECK(var(v, {}, 0).item<double>() == doctest::Approx(1.25));
  // Large offset: the two-pass variance keeps full precision (a one-pass E[x^2]-E[x]^2 would not).
  Tensor off = from_vector(std::vector<double>{1e9 + 1, 1e9 + 2, 1e9 + 3, 1e9 + 4}, {4}, DType::f64);
  CHECK(var(off).item<double>() == doctest::Approx(5.0 / 3).epsilon(1e-9));
}

TEST_CASE("cumsum: long rows and columns against double prefix sums") {
  Generator gen(3);
  for (Shape s : {Shape{2, 100000}, Shape{50000, 3}, Shape{4, 300, 600}}) {
    Tensor x = uniform(s, -1, 1, gen, {DType::f32});
    int64_t dim = s.size() == 3 ? 1 : (s[0] > s[1] ? 0 : 1);
    auto got = to_vector<double>(cumsum(x, dim));
    Host want = cumsum_ref(to_host(x), dim);
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want.v[i]));
    INFO("shape " << shape_str(s));
    CHECK(worst < 1e-4);  // double accumulation: only the final f32 rounding of values up to ~300
  }
}


// Issue 41: with O x I-blocks >= 64 tasks R is not split, and each task must still cover every row
// (it stopped at the first 128 rows when I >= 256, the split's chunk).
TEST_CASE("reduce: a middle dim longer than the split chunk, with many outer rows, covers every row") {
  for (int64_t O : {63, 64, 65}) {
    INFO("O = " << O);
    Tensor x = ones({O, 200, 256});
    auto s = to_vector<double>(sum(x, {1}));
    CHECK(*std::min_element(s.begin(), s.end()) == 200.0);
    CHECK(*std::max_element(s.begin(), s.end()) == 200.0);
    auto m = to_vector<double>(mean(x, {1}));
    CHECK(*std::min_element(m.begin(), m.end()) == doctest::Approx(1.0));
    Tensor y = zeros({O, 200, 256});
    copy_(y.select(1, 150), full({O, 256}, 5.0));
    auto mx = to_vector<double>(amax(y, {1}));
    CHECK(*std::min_element(mx.begin(), mx.end()) == 5.0);
    auto ix = to_vector<double>(argmax(y, 1));
    CHECK(*std::min_element(ix.begin(), ix.end()) == 150.0);
    CHECK(*std::max_element(ix.begin(), ix.end()) == 150.0);
    copy_(y.select(1, 170), full({O, 256}, -5.0));
    auto mn = to_vector<double>(amin(y, {1}));
    CHECK(*std::max_element(mn.begin(), mn.end()) == -5.0);
  }
  // The I == 1 path: rows of 32,768 + 1 elements, 64 of them.
  Tensor r = ones({64, 32769, 1});
  auto s1 = to_vector<double>(sum(r, {1}));
  CHECK(*std::min_element(s1.begin(), s1.end()) == 32769.0);
}

TEST_CASE("f32 row sum: one fixed order in double, the same bits on every ISA path") {
  if (!hh::test::test_device().is_cpu()) return;
  hh::test::IsaScope scope;
  Generator g(31);
  for (int64_t n : {1, 5, 31, 32, 33, 100, 2048, 4099}) {
    CAPTURE(n);
    // Large values that cancel, so a different order of the double sums shows in the f32 result.
    Tensor x = mul(randn({3, n}, g), 1e6);
    if (n > 40) {
      NoGradGuard ng;
      copy_(slice(x, 1, 7, 8), full({3, 1}, 3e13));
      copy_(slice(x, 1, 39, 40), full({3, 1}, -3e13));
    }
    const auto xv = to_vector<float>(x);
    std::vector<float> want(3);
    std::vector<double> exact(3);
    for (int64_t r = 0; r < 3; ++r) {  // the order rowsum.h defines
      double lane[32] = {};
      for (int64_t i = 0; i < n; ++i) lane[i % 32] += static_cast<double>(xv[static_cast<size_t>(r * n + i)]);
      double s = 0;
      for (double l : lane) s += l;
      want[static_cast<size_t>(r)] = static_cast<float>(s);
      exact[static_cast<size_t>(r)] = s;
    }
    for (CpuIsa isa : hh::test::supported_isas()) {
      set_cpu_isa(isa);
      INFO("isa ", std::string(cpu_isa_name(isa)));
      CHECK(to_vector<float>(sum(x, {-1})) == want);
      const auto m = to_vector<float>(mean(x, {-1}));
      for (int64_t r = 0; r < 3; ++r)
        CHECK(m[static_cast<size_t>(r)] == static_cast<float>(exact[static_cast<size_t>(r)] / static_cast<double>(n)));
    }
  }
}

}  // namespace hh::test
