// Op-table rows for the elementwise ops (unary, binary with broadcasting and scalar variants,
// comparisons, where, masked_fill, sign), plus direct tests: bf16/f16 round trips, integer
// arithmetic and comparisons, tie-splitting gradients, numerically stable forms, and tensors
// large enough to take the threaded kernel paths.
#include <cmath>
#include <functional>

#include "core/backend.h"
#include "tests/op_table.h"

namespace hh::test {
namespace {

using UnaryFn = std::function<Tensor(const Tensor&)>;
using BinaryFn = std::function<Tensor(const Tensor&, const Tensor&)>;

// torch-style reference formulas in f64.
double gelu_erf_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double softplus_ref(double x, double beta, double threshold) {
  return beta * x > threshold ? x : std::log1p(std::exp(beta * x)) / beta;
}
double sign_ref(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }

// Reference for ops that broadcast any number of inputs: f gets one value per input.
Host broadcast_ref(const std::vector<Host>& xs, const std::function<double(const std::vector<double>&)>& f) {
  Shape s;
  for (const Host& x : xs) s = broadcast_shapes(s, x.shape, "broadcast_ref");
  Host out{s, std::vector<double>(static_cast<size_t>(numel_of(s)))};
  Strides os = contiguous_strides(s);
  std::vector<double> vals(xs.size());
  for (int64_t i = 0; i < out.numel(); ++i) {
    for (size_t k = 0; k < xs.size(); ++k) {
      const Shape& xsh = xs[k].shape;
      Strides xst = contiguous_strides(xsh);
      int64_t flat = 0, rem = i;
      for (size_t d = 0; d < s.size(); ++d) {
        int64_t c = rem / os[d];
        rem %= os[d];
        int64_t xd = static_cast<int64_t>(d) - static_cast<int64_t>(s.size() - xsh.size());
        if (xd >= 0 && xsh[static_cast<size_t>(xd)] != 1) flat += c * xst[static_cast<size_t>(xd)];
      }
      vals[k] = xs[k].v[static_cast<size_t>(flat)];
    }
    out.v[static_cast<size_t>(i)] = f(vals);
  }
  return out;
}

// Integer-valued float tensor with entries in [0, 3): comparisons then see ties.
Tensor small_ints(const Shape& s, Generator& g, DType t) {
  std::vector<double> v(static_cast<size_t>(numel_of(s)));
  for (double& e : v) e = static_cast<double>(g.next_int(0, 3));
  return from_vector(v, s, {t});
}

void unary_errors(const std::string& op, const UnaryFn& f) {
  check_throws([&] { f(arange(3, DType::i64)); }, {op, "i64"});
}

OpSpec unary(const std::string& op, const std::string& variant, UnaryFn f, std::function<double(double)> ref,
             double lo = -2.0, double hi = 2.0, Shape shape = {3, 4}) {
  OpSpec s;
  s.op = op;
  s.variant = variant;
  s.shapes = {shape};
  s.lo = lo;
  s.hi = hi;
  s.fn = [f](const std::vector<Tensor>& x) { return f(x[0]); };
  s.reference = [ref](const std::vector<Host>& h) { return unary_ref(h[0], ref); };
  s.errors = [op, f] { unary_errors(op, f); };
  return s;
}

// Shape and dtype mismatches must name the op and both shapes / dtypes.
void binary_errors(const std::string& op, const BinaryFn& f) {
  check_throws([&] { f(ones({2, 3}), ones({4})); }, {op, "(2, 3)", "(4,)"});
  check_throws([&] { f(ones({2}, DType::f32), ones({2}, DType::f64)); }, {op, "f32", "f64"});
}

// The tensor-tensor form of a binary op or comparison, by name.
BinaryFn tensor_fn(const std::string& op) {
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  static const std::vector<std::pair<std::string, Fn>> fns = {
      {"add", add}, {"sub", sub}, {"mul", mul}, {"div", div}, {"pow", pow}, {"maximum", maximum},
      {"minimum", minimum}, {"eq", eq}, {"ne", ne}, {"lt", lt}, {"le", le}, {"gt", gt}, {"ge", ge}};
  for (const auto& [name, fn] : fns)
    if (name == op) return fn;
  fail("tensor_fn: unknown op " + op);
}

OpSpec binary(const std::string& op, const std::string& variant, Shape sa, Shape sb, BinaryFn f,
              std::function<double(double, double)> ref, double lo = -1.0, double hi = 1.0) {
  OpSpec s;
  s.op = op;
  s.variant = variant;
  s.shapes = {sa, sb};
  s.lo = lo;
  s.hi = hi;
  s.fn = [f](const std::vector<Tensor>& x) { return f(x[0], x[1]); };
  s.reference = [ref](const std::vector<Host>& h) { return binary_ref(h[0], h[1], ref); };
  s.errors = [op, f] { binary_errors(op, f); };
  return s;
}

// Binary spec whose inputs come from their own ranges: a in [alo, ahi], b in [blo, bhi].
OpSpec binary_ranges(const std::string& op, const std::string& variant, Shape sa, Shape sb, BinaryFn f,
                     std::function<double(double, double)> ref, double alo, double ahi, double blo, double bhi) {
  OpSpec s = binary(op, variant, sa, sb, std::move(f), std::move(ref));
  s.inputs = [sa, sb, alo, ahi, blo, bhi](Generator& g, DType t) {
    return std::vector<Tensor>{rand_input(sa, alo, ahi, g, t), rand_input(sb, blo, bhi, g, t)};
  };
  return s;
}

OpSpec comparison(const std::string& op, const std::string& variant, Shape sa, Shape sb, BinaryFn f,
                  std::function<bool(double, double)> ref) {
  OpSpec s = binary(op, variant, sa, sb, f, [ref](double a, double b) { return ref(a, b) ? 1.0 : 0.0; });
  s.inputs = [sa, sb](Generator& g, DType t) { return std::vector<Tensor>{small_ints(sa, g, t), small_ints(sb, g, t)}; };
  s.differentiable = false;
  s.no_grad_reason = "comparisons return bool";
  return s;
}

// Comparison with a Python-style scalar.
OpSpec comparison_scalar(const std::string& op, double v, std::function<Tensor(const Tensor&, double)> f,
                         std::function<bool(double, double)> ref) {
  OpSpec s;
  s.op = op;
  s.variant = "scalar " + std::to_string(v);
  s.inputs = [](Generator& g, DType t) { return std::vector<Tensor>{small_ints({3, 4}, g, t)}; };
  s.fn = [f, v](const std::vector<Tensor>& x) { return f(x[0], v); };
  s.reference = [ref, v](const std::vector<Host>& h) {
    return unary_ref(h[0], [&](double a) { return ref(a, v) ? 1.0 : 0.0; });
  };
  s.errors = [op] { binary_errors(op, tensor_fn(op)); };
  s.differentiable = false;
  s.no_grad_reason = "comparisons return bool";
  return s;
}

std::vector<OpSpec> unary_specs() {
  std::vector<OpSpec> v = {
      unary("exp", "", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }),
      unary("log", "positive", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 0.1, 3.0),
      unary("log1p", "", [](const Tensor& x) { return log1p(x); }, [](double x) { return std::log1p(x); }, -0.5, 2.0),
      unary("sqrt", "positive", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0.1,
            3.0),
      unary("rsqrt", "positive", [](const Tensor& x) { return rsqrt(x); },
            [](double x) { return 1.0 / std::sqrt(x); }, 0.2, 3.0),
      unary("square", "", [](const Tensor& x) { return square(x); }, [](double x) { return x * x; }),
      unary("sin", "", [](const Tensor& x) { return sin(x); }, [](double x) { return std::sin(x); }, -3.0, 3.0),
      unary("cos", "", [](const Tensor& x) { return cos(x); }, [](double x) { return std::cos(x); }, -3.0, 3.0),
      unary("tanh", "", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }),
      unary("sigmoid", "", [](const Tensor& x) { return sigmoid(x); }, sigmoid_ref, -6.0, 6.0),
      unary("relu", "", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0.0; }),
      unary("elu", "alpha 1", [](const Tensor& x) { return elu(x); },
            [](double x) { return x > 0 ? x : std::expm1(x); }),
      unary("elu", "alpha 0.5", [](const Tensor& x) { return elu(x, 0.5); },
            [](double x) { return x > 0 ? x : 0.5 * std::expm1(x); }),
      unary("gelu", "erf", [](const Tensor& x) { return gelu(x); }, gelu_erf_ref, -3.0, 3.0),
      unary("gelu", "tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, gelu_tanh_ref, -3.0, 3.0),
      unary("silu", "", [](const Tensor& x) { return silu(x); }, [](double x) { return x * sigmoid_ref(x); }, -4.0,
            4.0),
      unary("softplus", "default", [](const Tensor& x) { return softplus(x); },
            [](double x) { return softplus_ref(x, 1.0, 20.0); }, -4.0, 4.0),
      unary("softplus", "beta 2 threshold 1", [](const Tensor& x) { return softplus(x, 2.0, 1.0); },
            [](double x) { return softplus_ref(x, 2.0, 1.0); }),
      unary("clamp", "[-0.5, 0.3]", [](const Tensor& x) { return clamp(x, -0.5, 0.3); },
            [](double x) { return std::min(std::max(x, -0.5), 0.3); }),
      unary("abs", "", [](const Tensor& x) { return abs(x); }, [](double x) { return std::fabs(x); }),
      unary("neg", "", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }),
      unary("neg", "operator-", [](const Tensor& x) { return -x; }, [](double x) { return -x; }, -1.0, 1.0, {5}),
      unary("pow", "scalar exponent 2.5", [](const Tensor& x) { return pow(x, 2.5); },
            [](double x) { return std::pow(x, 2.5); }, 0.2, 2.0),
      unary("pow", "scalar exponent 3 (negative base)", [](const Tensor& x) { return pow(x, 3.0); },
            [](double x) { return x * x * x; }),
      unary("pow", "scalar exponent 0", [](const Tensor& x) { return pow(x, 0.0); }, [](double) { return 1.0; }),
      unary("pow", "scalar base 2", [](const Tensor& x) { return pow(2.0, x); },
            [](double x) { return std::pow(2.0, x); }),
      unary("pow", "scalar base 0.5", [](const Tensor& x) { return pow(0.5, x); },
            [](double x) { return std::pow(0.5, x); }, -1.0, 1.0, {2, 3, 2}),
      unary("add", "scalar", [](const Tensor& x) { return add(x, 0.75); }, [](double x) { return x + 0.75; }),
      unary("add", "scalar on the left (operator)", [](const Tensor& x) { return 0.75 + x; },
            [](double x) { return x + 0.75; }),
      unary("sub", "scalar", [](const Tensor& x) { return sub(x, 0.75); }, [](double x) { return x - 0.75; }),
      unary("sub", "scalar on the left", [](const Tensor& x) { return sub(0.75, x); },
            [](double x) { return 0.75 - x; }),
      unary("mul", "scalar", [](const Tensor& x) { return mul(x, -1.5); }, [](double x) { return x * -1.5; }),
      unary("mul", "scalar on the left (operator)", [](const Tensor& x) { return 2.0 * x; },
            [](double x) { return 2.0 * x; }),
      unary("div", "scalar", [](const Tensor& x) { return div(x, 3.0); }, [](double x) { return x / 3.0; }),
      unary("div", "scalar numerator", [](const Tensor& x) { return div(2.0, x); }, [](double x) { return 2.0 / x; },
            0.5, 2.0),
      unary("maximum", "scalar", [](const Tensor& x) { return maximum(x, 0.2); },
            [](double x) { return std::max(x, 0.2); }),
      unary("minimum", "scalar", [](const Tensor& x) { return minimum(x, 0.2); },
            [](double x) { return std::min(x, 0.2); }),
      unary("exp", "0-d", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, -1.0, 1.0,
            {}),
      unary("tanh", "3-d", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -2.0, 2.0,
            {2, 3, 4}),
  };
  // Errors beyond "integer input" for ops with parameters or no integer restriction.
  for (OpSpec& s : v) {
    if (s.op == "gelu")
      s.errors = [] {
        unary_errors("gelu", [](const Tensor& x) { return gelu(x); });
        check_throws([] { gelu(ones({2}), "fast"); }, {"gelu", "fast"});
      };
    if (s.op == "softplus")
      s.errors = [] { check_throws([] { softplus(ones({2}), 0.0); }, {"softplus", "beta"}); };
    if (s.op == "clamp")
      s.errors = [] {
        check_throws([] { clamp(ones({2}), 1.0, -1.0); }, {"clamp", "1", "-1"});
        unary_errors("clamp", [](const Tensor& x) { return clamp(x, 0, 1); });
      };
    if (s.op == "neg")  // integers negate fine; bool has no arithmetic
      s.errors = [] { check_throws([] { neg(ones({2}, DType::boolean)); }, {"neg", "bool"}); };
    if (s.op == "pow")
      s.errors = [] { binary_errors("pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }); };
    if (s.op == "add" || s.op == "sub" || s.op == "mul" || s.op == "div" || s.op == "maximum" || s.op == "minimum") {
      BinaryFn f = tensor_fn(s.op);
      std::string op = s.op;
      s.errors = [op, f] {
        binary_errors(op, f);
        if (op != "div")  // div promotes integers and bool to f32 (true division)
          check_throws([&] { f(ones({3}, DType::boolean), ones({3}, DType::boolean)); }, {op, "bool"});
      };
    }
  }
  return v;
}

std::vector<OpSpec> binary_specs() {
  auto add_f = [](const Tensor& a, const Tensor& b) { return add(a, b); };
  auto sub_f = [](const Tensor& a, const Tensor& b) { return sub(a, b); };
  auto mul_f = [](const Tensor& a, const Tensor& b) { return mul(a, b); };
  auto div_f = [](const Tensor& a, const Tensor& b) { return div(a, b); };
  auto pow_f = [](const Tensor& a, const Tensor& b) { return pow(a, b); };
  auto max_f = [](const Tensor& a, const Tensor& b) { return maximum(a, b); };
  auto min_f = [](const Tensor& a, const Tensor& b) { return minimum(a, b); };
  auto plus = [](double a, double b) { return a + b; };
  auto minus = [](double a, double b) { return a - b; };
  auto times = [](double a, double b) { return a * b; };
  auto over = [](double a, double b) { return a / b; };
  auto power = [](double a, double b) { return std::pow(a, b); };
  auto larger = [](double a, double b) { return std::max(a, b); };
  auto smaller = [](double a, double b) { return std::min(a, b); };
  return {
      binary("add", "same shape", {3, 4}, {3, 4}, add_f, plus),
      binary("add", "broadcast (3,1)x(4)", {3, 1}, {4}, add_f, plus),
      binary("add", "broadcast (2,3,4)x(4)", {2, 3, 4}, {4}, add_f, plus),
      binary("add", "scalar tensor x (2,3)", {}, {2, 3}, add_f, plus),
      binary("add", "operator+", {2, 3}, {2, 3}, [](const Tensor& a, const Tensor& b) { return a + b; }, plus),
      binary("sub", "same shape", {3, 4}, {3, 4}, sub_f, minus),
      binary("sub", "broadcast (3,1)x(4)", {3, 1}, {4}, sub_f, minus),
      binary("sub", "broadcast (4)x(2,3,4)", {4}, {2, 3, 4}, sub_f, minus),
      binary("sub", "operator-", {2, 3}, {}, [](const Tensor& a, const Tensor& b) { return a - b; }, minus),
      binary("mul", "same shape", {3, 4}, {3, 4}, mul_f, times),
      binary("mul", "broadcast (3,1)x(1,4)", {3, 1}, {1, 4}, mul_f, times),
      binary("mul", "broadcast (2,3,4)x(4)", {2, 3, 4}, {4}, mul_f, times),
      binary("mul", "(2,3) x scalar tensor", {2, 3}, {}, mul_f, times),
      binary("mul", "operator*", {2, 3}, {2, 3}, [](const Tensor& a, const Tensor& b) { return a * b; }, times),
      binary_ranges("div", "same shape", {3, 4}, {3, 4}, div_f, over, -1.0, 1.0, 0.5, 2.0),
      binary_ranges("div", "broadcast (3,1)x(4)", {3, 1}, {4}, div_f, over, -1.0, 1.0, 0.5, 2.0),
      binary_ranges("div", "broadcast (2,3,4)x(4)", {2, 3, 4}, {4}, div_f, over, -1.0, 1.0, -2.0, -0.5),
      binary_ranges("div", "operator/ scalar tensor numerator", {}, {2, 3},
                    [](const Tensor& a, const Tensor& b) { return a / b; }, over, -1.0, 1.0, 0.5, 2.0),
      binary_ranges("pow", "same shape", {3, 4}, {3, 4}, pow_f, power, 0.5, 2.0, -1.5, 1.5),
      binary_ranges("pow", "broadcast (3,1)x(4)", {3, 1}, {4}, pow_f, power, 0.5, 2.0, -1.5, 1.5),
      binary_ranges("pow", "scalar tensor exponent", {2, 3}, {}, pow_f, power, 0.5, 2.0, -1.5, 1.5),
      binary("maximum", "same shape", {3, 4}, {3, 4}, max_f, larger),
      binary("maximum", "broadcast (2,3,4)x(4)", {2, 3, 4}, {4}, max_f, larger),
      binary("maximum", "broadcast (3,1)x(4)", {3, 1}, {4}, max_f, larger),
      binary("minimum", "same shape", {3, 4}, {3, 4}, min_f, smaller),
      binary("minimum", "scalar tensor x (2,3)", {}, {2, 3}, min_f, smaller),
      binary("minimum", "broadcast (3,1)x(4)", {3, 1}, {4}, min_f, smaller),
  };
}

std::vector<OpSpec> comparison_specs() {
  using CmpT = Tensor (*)(const Tensor&, const Tensor&);
  using CmpS = Tensor (*)(const Tensor&, double);
  struct Cmp {
    const char* name;
    CmpT tt;
    CmpS ts;
    std::function<bool(double, double)> ref;
  };
  std::vector<Cmp> cmps = {
      {"eq", eq, eq, [](double a, double b) { return a == b; }},
      {"ne", ne, ne, [](double a, double b) { return a != b; }},
      {"lt", lt, lt, [](double a, double b) { return a < b; }},
      {"le", le, le, [](double a, double b) { return a <= b; }},
      {"gt", gt, gt, [](double a, double b) { return a > b; }},
      {"ge", ge, ge, [](double a, double b) { return a >= b; }},
  };
  std::vector<OpSpec> v;
  for (const Cmp& c : cmps) {
    CmpT tt = c.tt;
    CmpS ts = c.ts;
    BinaryFn f = [tt](const Tensor& a, const Tensor& b) { return tt(a, b); };
    v.push_back(comparison(c.name, "same shape", {3, 4}, {3, 4}, f, c.ref));
    v.push_back(comparison(c.name, "broadcast (3,1)x(4)", {3, 1}, {4}, f, c.ref));
    v.push_back(comparison_scalar(c.name, 1.0, [ts](const Tensor& a, double b) { return ts(a, b); }, c.ref));
    v.push_back(comparison_scalar(c.name, 1.5, [ts](const Tensor& a, double b) { return ts(a, b); }, c.ref));
  }
  return v;
}

// cond drawn bool with probability 0.5, values U(-1, 1).
OpSpec where_spec(const std::string& variant, Shape sc, Shape sa, Shape sb) {
  OpSpec s;
  s.op = "where";
  s.variant = variant;
  s.inputs = [sc, sa, sb](Generator& g, DType t) {
    return std::vector<Tensor>{bernoulli(sc, 0.5, g, {DType::boolean}), rand_input(sa, -1, 1, g, t),
                               rand_input(sb, -1, 1, g, t)};
  };
  s.fn = [](const std::vector<Tensor>& x) { return where(x[0], x[1], x[2]); };
  s.reference = [](const std::vector<Host>& h) {
    return broadcast_ref(h, [](const std::vector<double>& v) { return v[0] != 0.0 ? v[1] : v[2]; });
  };
  s.errors = [] {
    check_throws([] { where(ones({3}), ones({3}), ones({3})); }, {"where", "bool", "f32"});
    check_throws([] { where(ones({3}, DType::boolean), ones({3}, DType::f32), ones({3}, DType::f64)); },
                 {"where", "f32", "f64"});
    check_throws([] { where(ones({2}, DType::boolean), ones({3}), ones({3})); }, {"where", "(2,)", "(3,)"});
  };
  s.grad_inputs = {1, 2};
  return s;
}

OpSpec masked_fill_spec(const std::string& variant, Shape sx, Shape sm, double value) {
  OpSpec s;
  s.op = "masked_fill";
  s.variant = variant;
  s.inputs = [sx, sm](Generator& g, DType t) {
    return std::vector<Tensor>{rand_input(sx, -1, 1, g, t), bernoulli(sm, 0.4, g, {DType::boolean})};
  };
  s.fn = [value](const std::vector<Tensor>& x) { return masked_fill(x[0], x[1], value); };
  s.reference = [value](const std::vector<Host>& h) {
    return broadcast_ref(h, [value](const std::vector<double>& v) { return v[1] != 0.0 ? value : v[0]; });
  };
  s.errors = [] {
    check_throws([] { masked_fill(ones({3}), ones({3}), 0.0); }, {"masked_fill", "f32"});
    check_throws([] { masked_fill(ones({3}), ones({2, 3}, DType::boolean), 0.0); },
                 {"masked_fill", "(2, 3)", "(3,)"});
  };
  s.grad_inputs = {0};
  return s;
}

std::vector<OpSpec> other_specs() {
  OpSpec sg = unary("sign", "", [](const Tensor& x) { return sign(x); }, sign_ref);
  sg.differentiable = false;
  sg.no_grad_reason = "sign is piecewise constant: its gradient is zero (the output is cut from the graph)";
  return {
      where_spec("same shape", {3, 4}, {3, 4}, {3, 4}),
      where_spec("broadcast cond (3,1) a (4) b (3,4)", {3, 1}, {4}, {3, 4}),
      where_spec("scalar b", {2, 3}, {2, 3}, {}),
      masked_fill_spec("same shape", {3, 4}, {3, 4}, -5.0),
      masked_fill_spec("broadcast mask (4)", {3, 4}, {4}, 2.5),
      sg,
  };
}

const bool reg = add_specs(unary_specs()) && add_specs(binary_specs()) && add_specs(comparison_specs()) &&
                 add_specs(other_specs());

}  // namespace

TEST_CASE("elementwise: bf16/f16 round trip through ops") {
  for (DType t : {DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(t));
    std::vector<double> xv = {-1.5, -0.25, 0.5, 2.0};  // exact in both 16-bit formats
    Tensor x = from_vector(xv, {4}, {t});
    Tensor y = exp(x);
    CHECK(y.dtype() == t);
    auto yv = to_vector<double>(y);
    for (size_t i = 0; i < xv.size(); ++i) CHECK(yv[i] == doctest::Approx(std::exp(xv[i])).epsilon(1e-2));

    Tensor s = add(x, x);
    CHECK(s.dtype() == t);
    CHECK(to_vector<double>(s) == std::vector<double>{-3.0, -0.5, 1.0, 4.0});
    CHECK(to_vector<double>(lt(x, 0.0)) == std::vector<double>{1, 1, 0, 0});
    CHECK(lt(x, x).dtype() == DType::boolean);
    CHECK(to_vector<double>(div(x, 2.0)) == std::vector<double>{-0.75, -0.125, 0.25, 1.0});
    CHECK(where(gt(x, 0.0), x, neg(x)).dtype() == t);

    // Gradient through the f32 compute path comes back in the input's dtype: d(x*x + sigmoid(x)).
    Tensor leaf = from_vector(xv, {4}, {t}).requires_grad_();
    Tensor out = add(mul(leaf, leaf), sigmoid(leaf));
    CHECK(out.dtype() == t);
    out.backward(ones({4}, {t}));
    REQUIRE(leaf.grad().defined());
    CHECK(leaf.grad().dtype() == t);
    auto gv = to_vector<double>(leaf.grad());
    for (size_t i = 0; i < xv.size(); ++i) {
      double sgm = sigmoid_ref(xv[i]);
      CHECK(gv[i] == doctest::Approx(2 * xv[i] + sgm * (1 - sgm)).epsilon(2e-2));
    }
  }
}

TEST_CASE("elementwise: integer arithmetic and comparisons") {
  Tensor a = from_vector(std::vector<int64_t>{1, 2, 3}, {3});
  Tensor b = from_vector(std::vector<int64_t>{10, -20, 30}, {3});
  Tensor s = add(a, b);
  CHECK(s.dtype() == DType::i64);
  CHECK(to_vector<int64_t>(s) == std::vector<int64_t>{11, -18, 33});
  CHECK(to_vector<int64_t>(sub(a, b)) == std::vector<int64_t>{-9, 22, -27});
  CHECK(to_vector<int64_t>(mul(a, b)) == std::vector<int64_t>{10, -40, 90});
  CHECK(to_vector<int64_t>(maximum(a, 2.0)) == std::vector<int64_t>{2, 2, 3});
  CHECK(to_vector<int64_t>(neg(a)) == std::vector<int64_t>{-1, -2, -3});
  CHECK(to_vector<int64_t>(pow(a, 3.0)) == std::vector<int64_t>{1, 8, 27});
  CHECK(add(a, 1.0).dtype() == DType::i64);
  Tensor half = add(a, 0.5);  // a fractional scalar promotes like torch
  CHECK(half.dtype() == DType::f32);
  CHECK(to_vector<double>(half) == std::vector<double>{1.5, 2.5, 3.5});
  Tensor q = div(b, a);  // true division
  CHECK(q.dtype() == DType::f32);
  CHECK(to_vector<double>(q) == std::vector<double>{10.0, -10.0, 10.0});

  Tensor c = from_vector(std::vector<int64_t>{5, 6, 7}, {3}, {DType::i32});
  Tensor d = from_vector(std::vector<int64_t>{5, 9, 1}, {3}, {DType::i32});
  CHECK(to_vector<int32_t>(mul(c, d)) == std::vector<int32_t>{25, 54, 7});
  CHECK(to_vector<uint8_t>(eq(c, d)) == std::vector<uint8_t>{1, 0, 0});
  CHECK(to_vector<uint8_t>(lt(c, d)) == std::vector<uint8_t>{0, 1, 0});
  CHECK(to_vector<uint8_t>(ge(c, d)) == std::vector<uint8_t>{1, 0, 1});
  // Scalars compare exactly with integers, fractional or out of range.
  CHECK(to_vector<uint8_t>(lt(a, 2.5)) == std::vector<uint8_t>{1, 1, 0});
  CHECK(to_vector<uint8_t>(le(a, 2.5)) == std::vector<uint8_t>{1, 1, 0});
  CHECK(to_vector<uint8_t>(gt(a, 2.5)) == std::vector<uint8_t>{0, 0, 1});
  CHECK(to_vector<uint8_t>(ge(a, 2.5)) == std::vector<uint8_t>{0, 0, 1});
  CHECK(to_vector<uint8_t>(eq(a, 2.5)) == std::vector<uint8_t>{0, 0, 0});
  CHECK(to_vector<uint8_t>(ne(a, 2.5)) == std::vector<uint8_t>{1, 1, 1});
  CHECK(to_vector<uint8_t>(eq(a, 2.0)) == std::vector<uint8_t>{0, 1, 0});
  CHECK(to_vector<uint8_t>(lt(c, 1e12)) == std::vector<uint8_t>{1, 1, 1});
  CHECK(to_vector<uint8_t>(gt(c, -1e30)) == std::vector<uint8_t>{1, 1, 1});
  CHECK(to_vector<uint8_t>(lt(c, -1e30)) == std::vector<uint8_t>{0, 0, 0});
  // Bool tensors compare.
  Tensor m = gt(c, 5.0);
  CHECK(to_vector<uint8_t>(eq(m, ge(d, 5.0))) == std::vector<uint8_t>{0, 1, 0});
  CHECK(to_vector<uint8_t>(eq(m, 1.0)) == std::vector<uint8_t>{0, 1, 1});
  check_throws([&] { add(a, c); }, {"add", "i64", "i32"});

  // The kernel's integer division truncates, and a zero divisor gives 0 instead of trapping.
  Tensor x = from_vector(std::vector<int64_t>{7, -7, 5, 3}, {4});
  Tensor y = from_vector(std::vector<int64_t>{2, 2, 0, -1}, {4});
  Tensor out = empty({4}, {DType::i64});
  backend_for(Device::cpu()).binary(BinaryOp::div, x, y, out);
  CHECK(to_vector<int64_t>(out) == std::vector<int64_t>{3, -3, 0, -3});
  backend_for(Device::cpu()).binary(BinaryOp::pow, y, from_vector(std::vector<int64_t>{10, 3, 0, -3}, {4}), out);
  CHECK(to_vector<int64_t>(out) == std::vector<int64_t>{1024, 8, 1, -1});
}

TEST_CASE("elementwise: maximum/minimum split the gradient on ties") {
  Tensor a = from_vector(std::vector<double>{1, 2, 3}, {3}, {DType::f64}).requires_grad_();
  Tensor b = from_vector(std::vector<double>{1, 5, 0}, {3}, {DType::f64}).requires_grad_();
  maximum(a, b).backward(ones({3}, {DType::f64}));
  CHECK(to_vector<double>(a.grad()) == std::vector<double>{0.5, 0, 1});
  CHECK(to_vector<double>(b.grad()) == std::vector<double>{0.5, 1, 0});
  a.zero_grad();
  b.zero_grad();
  minimum(a, b).backward(ones({3}, {DType::f64}));
  CHECK(to_vector<double>(a.grad()) == std::vector<double>{0.5, 1, 0});
  CHECK(to_vector<double>(b.grad()) == std::vector<double>{0.5, 0, 1});
}

TEST_CASE("elementwise: pow gradients at zero base and zero exponent are 0, not NaN") {
  Tensor a = from_vector(std::vector<double>{0.0, 2.0, 0.0}, {3}, {DType::f64}).requires_grad_();
  Tensor b = from_vector(std::vector<double>{2.0, 0.0, 0.0}, {3}, {DType::f64}).requires_grad_();
  Tensor y = pow(a, b);
  CHECK(to_vector<double>(y) == std::vector<double>{0.0, 1.0, 1.0});
  y.backward(ones({3}, {DType::f64}));
  CHECK(to_vector<double>(a.grad()) == std::vector<double>{0.0, 0.0, 0.0});
  auto gb = to_vector<double>(b.grad());
  CHECK(gb[0] == 0.0);
  CHECK(gb[1] == doctest::Approx(std::log(2.0)));
  CHECK(gb[2] == 0.0);
}

TEST_CASE("elementwise: stable forms at extreme inputs") {
  for (DType t : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(t));
    Tensor x = from_vector(std::vector<double>{-1000.0, -100.0, 0.0, 100.0, 1000.0}, {5}, {t});
    auto sg = to_vector<double>(sigmoid(x));
    CHECK(sg[0] == 0.0);
    CHECK(sg[1] >= 0.0);
    CHECK(sg[1] < 1e-40);
    CHECK(sg[2] == 0.5);
    CHECK(sg[3] == 1.0);
    CHECK(sg[4] == 1.0);
    auto sp = to_vector<double>(softplus(x, 1.0, 1e9));  // threshold never reached: the log1p form alone
    CHECK(sp[0] == 0.0);
    CHECK(sp[2] == doctest::Approx(std::log(2.0)));
    CHECK(sp[3] == doctest::Approx(100.0));
    CHECK(sp[4] == doctest::Approx(1000.0));
    auto si = to_vector<double>(silu(x));
    for (double v : si) CHECK(std::isfinite(v));
    CHECK(si[4] == doctest::Approx(1000.0));
    Tensor tiny = from_vector(std::vector<double>{1e-10}, {1}, {t});
    CHECK(to_vector<double>(log1p(tiny))[0] == doctest::Approx(1e-10).epsilon(1e-6));
    // Derivatives stay finite too.
    Tensor leaf = x.detach().requires_grad_();
    add(sigmoid(leaf), softplus(leaf, 1.0, 1e9)).backward(ones({5}, {t}));
    for (double v : to_vector<double>(leaf.grad())) CHECK(std::isfinite(v));
  }
  // NaN propagates through maximum and clamp like torch.
  Tensor n = from_vector(std::vector<double>{NAN, 1.0}, {2}, {DType::f64});
  Tensor z = zeros({2}, {DType::f64});
  CHECK(std::isnan(to_vector<double>(maximum(n, z))[0]));
  CHECK(std::isnan(to_vector<double>(minimum(z, n))[0]));
  CHECK(std::isnan(to_vector<double>(clamp(n, -1, 1))[0]));
}

TEST_CASE("elementwise: vectorized f32 exp, gelu and softmax match f64 over a wide range and at special values") {
  // f32 exp/gelu/softmax go through Eigen's vectorized exp/erf; check them element by element
  // against f64 libm on a dense grid that crosses every polynomial range boundary.
  std::vector<double> xs;
  for (double x = -110.0; x <= 95.0; x += 0.0173) xs.push_back(x);
  const int64_t n = static_cast<int64_t>(xs.size());
  Tensor x = from_vector(xs, {n}, {DType::f32});
  auto xf = to_vector<double>(x);  // the f32-rounded inputs
  auto ex = to_vector<double>(exp(x));
  auto ge = to_vector<double>(gelu(x));
  Tensor leaf = x.detach().requires_grad_();
  gelu(leaf).backward(ones({n}, {DType::f32}));
  auto gg = to_vector<double>(leaf.grad());
  int64_t bad_exp = 0, bad_gelu = 0, bad_grad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = xf[static_cast<size_t>(i)];
    const double e = std::exp(v);
    // f32 range: below FLT_MIN a flush to zero is allowed, above FLT_MAX inf.
    if (e > 3.4028234e38) bad_exp += !std::isinf(ex[static_cast<size_t>(i)]);
    else if (e < 1.1754944e-38) bad_exp += !(ex[static_cast<size_t>(i)] >= 0 && ex[static_cast<size_t>(i)] < 1.2e-38);
    else bad_exp += std::fabs(ex[static_cast<size_t>(i)] - e) > 4e-7 * e;
    const double g = gelu_erf_ref(v);
    bad_gelu += std::fabs(ge[static_cast<size_t>(i)] - g) > 1e-6 * (1 + std::fabs(g));
    const double d = 0.5 * (1 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
    bad_grad += std::fabs(gg[static_cast<size_t>(i)] - d) > 1e-6 * (1 + std::fabs(d));
  }
  CHECK(bad_exp == 0);
  CHECK(bad_gelu == 0);
  CHECK(bad_grad == 0);
  // Special values follow libm.
  Tensor sp = from_vector(std::vector<double>{-INFINITY, INFINITY, NAN, 0.0}, {4}, {DType::f32});
  auto es = to_vector<double>(exp(sp));
  CHECK(es[0] == 0.0);
  CHECK(std::isinf(es[1]));
  CHECK(std::isnan(es[2]));
  CHECK(es[3] == 1.0);
  auto gs = to_vector<double>(gelu(sp));
  CHECK(std::isinf(gs[1]));
  CHECK(std::isnan(gs[2]));
  CHECK(gs[3] == 0.0);
  // Softmax rows of every width around the vector length, with large spreads.
  Generator g(3);
  for (int64_t r : {1, 7, 8, 9, 31, 64, 1000}) {
    CAPTURE(r);
    Tensor a = mul(randn({5, r}, g, {DType::f64}), 30.0);
    auto want = to_vector<double>(softmax(a, -1));
    auto got = to_vector<double>(softmax(to_dtype(a, DType::f32), -1));
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
    CHECK(worst < 2e-6);
  }
}

TEST_CASE("elementwise: large tensors take the threaded paths and match plain loops") {
  Generator g(42);
  for (DType t : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(t));
    Tensor a = uniform({301, 317}, -2, 2, g, {t});
    Tensor row = uniform({317}, 0.5, 2, g, {t});
    Tensor sc = uniform({}, -1, 1, g, {t});
    auto av = to_vector<double>(a), rv = to_vector<double>(row);
    double s = sc.item<double>();
    double tol = t == DType::f32 ? 1e-5 : 1e-12;

    auto check_all = [&](const Tensor& got, const std::function<double(int64_t, int64_t)>& want) {
      REQUIRE(got.shape() == Shape{301, 317});
      auto gv = to_vector<double>(got);
      int64_t bad = 0;
      for (int64_t i = 0; i < 301; ++i)
        for (int64_t j = 0; j < 317; ++j) {
          double w = want(i, j);
          if (std::fabs(gv[static_cast<size_t>(i * 317 + j)] - w) > tol * (1 + std::fabs(w))) ++bad;
        }
      CHECK(bad == 0);
    };
    auto A = [&](int64_t i, int64_t j) { return av[static_cast<size_t>(i * 317 + j)]; };
    check_all(div(a, row), [&](int64_t i, int64_t j) { return A(i, j) / rv[static_cast<size_t>(j)]; });
    check_all(mul(sc, a), [&](int64_t i, int64_t j) { return s * A(i, j); });
    check_all(sub(a, a), [&](int64_t, int64_t) { return 0.0; });
    check_all(add(a.t().contiguous().t(), row), [&](int64_t i, int64_t j) { return A(i, j) + rv[static_cast<size_t>(j)]; });
    check_all(tanh(a), [&](int64_t i, int64_t j) { return std::tanh(A(i, j)); });
    check_all(where(gt(a, 0.0), a, row.expand({301, 317})),
              [&](int64_t i, int64_t j) { return A(i, j) > 0 ? A(i, j) : rv[static_cast<size_t>(j)]; });
    Tensor cmp = to_dtype(lt(a, row), t);
    check_all(cmp, [&](int64_t i, int64_t j) { return A(i, j) < rv[static_cast<size_t>(j)] ? 1.0 : 0.0; });
    // Fused unary backward on a large input: d gelu.
    Tensor leaf = a.detach().requires_grad_();
    gelu(leaf).backward(ones({301, 317}, {t}));
    check_all(leaf.grad(), [&](int64_t i, int64_t j) {
      double x = A(i, j);
      return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    });
  }
}

}  // namespace hh::test
