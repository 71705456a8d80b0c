// The op-table harness (see op_table.h).
#include "tests/op_table.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>

namespace hh::test {

double Host::at(const std::vector<int64_t>& idx) const {
  Strides st = contiguous_strides(shape);
  int64_t flat = 0;
  for (size_t i = 0; i < idx.size(); ++i) flat += idx[i] * st[i];
  return v[static_cast<size_t>(flat)];
}

Host to_host(const Tensor& t) { return Host{t.shape(), to_vector<double>(t)}; }

static std::vector<OpSpec>& specs() {
  static std::vector<OpSpec> s;
  return s;
}
bool add_specs(std::vector<OpSpec> v) {
  for (auto& s : v) specs().push_back(std::move(s));
  return true;
}
const std::vector<OpSpec>& all_specs() { return specs(); }

Device test_device() {
  const char* d = std::getenv("HH_DEVICE");
  return d ? parse_device(d) : Device::cpu();
}
bool cuda_requested() { return test_device().is_cuda(); }

Host unary_ref(const Host& x, const std::function<double(double)>& f) {
  Host out{x.shape, x.v};
  for (double& e : out.v) e = f(e);
  return out;
}

Host binary_ref(const Host& a, const Host& b, const std::function<double(double, double)>& f) {
  Shape s = broadcast_shapes(a.shape, b.shape, "binary_ref");
  Host out{s, std::vector<double>(static_cast<size_t>(numel_of(s)))};
  Strides os = contiguous_strides(s), as = contiguous_strides(a.shape), bs = contiguous_strides(b.shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t ai = 0, bi = 0, rem = i;
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t c = rem / os[d];
      rem %= os[d];
      int64_t ad = static_cast<int64_t>(d) - static_cast<int64_t>(s.size() - a.shape.size());
      int64_t bd = static_cast<int64_t>(d) - static_cast<int64_t>(s.size() - b.shape.size());
      if (ad >= 0 && a.shape[static_cast<size_t>(ad)] != 1) ai += c * as[static_cast<size_t>(ad)];
      if (bd >= 0 && b.shape[static_cast<size_t>(bd)] != 1) bi += c * bs[static_cast<size_t>(bd)];
    }
    out.v[static_cast<size_t>(i)] = f(a.v[static_cast<size_t>(ai)], b.v[static_cast<size_t>(bi)]);
  }
  return out;
}

Tensor rand_input(const Shape& s, double lo, double hi, Generator& g, DType t) {
  return uniform(s, lo, hi, g, {t});
}

double rel_err(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = to_vector<double>(a), y = to_vector<double>(b);
  REQUIRE(x.size() == y.size());
  double d = 0, n = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    d = std::max(d, std::fabs(x[i] - y[i]));
    n = std::max(n, std::fabs(y[i]));
  }
  return d / std::max(n, 1e-3);
}

std::vector<Tensor> grad_leaves(const std::vector<Tensor>& base) {
  std::vector<Tensor> xs;
  for (const Tensor& x : base) xs.push_back(x.clone().requires_grad_(true));
  return xs;
}

Tensor padding_test_mask(int64_t B, int64_t L) {
  std::vector<double> m(static_cast<size_t>(B * L), 1.0);
  for (int64_t l = 0; l < L; ++l) {
    m[static_cast<size_t>(l)] = (l % 4 == 2 || l >= L - 3) ? 0.0 : 1.0;
    if (B > 1) m[static_cast<size_t>(L + l)] = l < 3 ? 0.0 : 1.0;
  }
  return from_vector(m, {B, L}, {DType::boolean});
}

void check_throws(const std::function<void()>& f, const std::vector<std::string>& fragments) {
  bool threw = false;
  std::string msg;
  try {
    f();
  } catch (const Error& e) {
    threw = true;
    msg = e.what();
  }
  CHECK_MESSAGE(threw, "expected hh::Error containing '", fragments.empty() ? "" : fragments[0], "'");
  for (const auto& frag : fragments)
    CHECK_MESSAGE(msg.find(frag) != std::string::npos, "error message '", msg, "' lacks '", frag, "'");
}

// Same values, non-contiguous layout: a transposed buffer for rank >= 2, every other element of
// a twice-as-long buffer for rank 1; scalars are returned as is.
Tensor non_contiguous(const Tensor& x) {
  if (x.dim() == 0) return x;
  if (x.dim() == 1) {
    Tensor buf = zeros({x.size(0) * 2}, {x.dtype(), x.device()});
    Tensor v = buf.slice(0, 0, x.size(0) * 2, 2);
    copy_(v, x);
    return v;
  }
  Shape s = x.shape();
  std::swap(s[s.size() - 1], s[s.size() - 2]);
  Tensor buf = empty(s, {x.dtype(), x.device()});
  Tensor v = transpose(buf, -1, -2);
  copy_(v, x);
  return v;
}

void compare(const Tensor& got, const Host& want, double rtol, double atol, const std::string& label) {
  INFO(label);
  REQUIRE_MESSAGE(got.shape() == want.shape, "shape ", shape_str(got.shape()), " vs reference ", shape_str(want.shape));
  auto g = to_vector<double>(got);
  double worst = 0.0;
  int64_t at = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    double err = std::fabs(g[i] - want.v[i]) - (atol + rtol * std::fabs(want.v[i]));
    // An infinite reference must be met exactly (inf - inf would make err NaN and pass).
    bool bad = std::isnan(g[i]) != std::isnan(want.v[i]) || (std::isinf(want.v[i]) && g[i] != want.v[i]) || err > 0;
    if (bad && (at < 0 || err > worst)) {
      worst = err;
      at = static_cast<int64_t>(i);
    }
  }
  CHECK_MESSAGE(at < 0, "element ", at, ": got ", at >= 0 ? g[static_cast<size_t>(at)] : 0.0, " want ",
                at >= 0 ? want.v[static_cast<size_t>(at)] : 0.0);
}

namespace {

std::vector<Tensor> make_inputs(const OpSpec& s, uint64_t seed, DType t) {
  Generator g(seed);
  if (s.inputs) return s.inputs(g, t);
  std::vector<Tensor> xs;
  for (const Shape& sh : s.shapes) xs.push_back(rand_input(sh, s.lo, s.hi, g, t));
  return xs;
}

std::vector<int> grad_indices(const OpSpec& s, const std::vector<Tensor>& xs) {
  if (!s.grad_inputs.empty()) return s.grad_inputs;
  std::vector<int> w;
  for (size_t i = 0; i < xs.size(); ++i)
    if (xs[i].defined() && is_floating(xs[i].dtype())) w.push_back(static_cast<int>(i));
  return w;
}

std::string label_of(const OpSpec& s) { return s.op + (s.variant.empty() ? "" : " [" + s.variant + "]"); }

}  // namespace

void gradcheck(const OpFn& fn, const std::vector<Tensor>& inputs, const std::vector<int>& which,
               const std::string& label, double tol) {
  INFO("gradcheck " << label);
  std::vector<Tensor> xs;
  for (const Tensor& x : inputs) xs.push_back(x.defined() ? clone(x).detach() : x);
  for (int i : which) xs[static_cast<size_t>(i)].requires_grad_(true);
  Tensor y = fn(xs);
  Generator g(1234);
  Tensor w = rand_input(y.shape(), -1.0, 1.0, g, DType::f64).to(y.device());
  Tensor loss = sum(mul(y, w));
  loss.backward();
  const double h = 1e-6;
  for (int i : which) {
    Tensor x = xs[static_cast<size_t>(i)];
    REQUIRE_MESSAGE(x.grad().defined(), "input ", i, " got no gradient");
    auto analytic = to_vector<double>(x.grad());
    auto base = to_vector<double>(x);
    for (size_t j = 0; j < base.size(); ++j) {
      auto eval = [&](double delta) {
        auto v = base;
        v[j] += delta;
        std::vector<Tensor> ys = xs;
        ys[static_cast<size_t>(i)] = from_vector(v, x.shape(), {DType::f64, x.device()});
        NoGradGuard ng;
        return sum(mul(fn(ys), w)).item<double>();
      };
      double numeric = (eval(h) - eval(-h)) / (2 * h);
      double err = std::fabs(analytic[j] - numeric);
      CHECK_MESSAGE(err <= tol * std::max(1.0, std::fabs(numeric)), "input ", i, " element ", j, ": analytic ",
                    analytic[j], " numeric ", numeric);
    }
  }
}

TEST_CASE("op table: every registered op has a complete spec") {
  std::set<std::string> covered;
  for (const OpSpec& s : all_specs()) {
    INFO(label_of(s));
    CHECK(static_cast<bool>(s.fn));
    CHECK_MESSAGE(static_cast<bool>(s.reference), "spec has no reference");
    CHECK_MESSAGE(static_cast<bool>(s.errors), "spec has no error checks");
    CHECK_MESSAGE((s.differentiable || !s.no_grad_reason.empty()), "non-differentiable spec must say why");
    covered.insert(s.op);
  }
  std::set<std::string> registered(registered_ops().begin(), registered_ops().end());
  CHECK(!registered.empty());
  for (const std::string& op : registered) CHECK_MESSAGE(covered.count(op), "op '", op, "' has no row in the op table");
  for (const std::string& op : covered) CHECK_MESSAGE(registered.count(op), "spec for unregistered op '", op, "'");
}

TEST_CASE("op table: forward f32/f64 vs reference, non-contiguous, errors") {
  for (const OpSpec& s : all_specs()) {
    std::string label = label_of(s);
    SUBCASE(label.c_str()) {
      for (DType t : {DType::f64, DType::f32}) {
        auto xs = make_inputs(s, 7, t);
        std::vector<Host> hs;
        for (auto& x : xs) hs.push_back(x.defined() ? to_host(x) : Host{});
        Host want = s.reference(hs);
        double rtol = t == DType::f64 ? 1e-10 : s.rtol32, atol = t == DType::f64 ? 1e-10 : s.atol32;
        compare(s.fn(xs), want, rtol, atol, label + " forward " + dtype_name(t));
        std::vector<Tensor> nc;
        for (auto& x : xs) nc.push_back(x.defined() ? non_contiguous(x) : x);
        compare(s.fn(nc), want, rtol, atol, label + " non-contiguous " + dtype_name(t));
      }
      s.errors();
    }
  }
}

TEST_CASE("op table: finite-difference gradients (f64)") {
  for (const OpSpec& s : all_specs()) {
    if (!s.differentiable) continue;
    std::string label = label_of(s);
    SUBCASE(label.c_str()) {
      auto xs = make_inputs(s, 11, DType::f64);
      gradcheck(s.fn, xs, grad_indices(s, xs), label);
    }
  }
}

TEST_CASE("op table: device matches cpu (HH_DEVICE=cuda)") {
  if (!cuda_requested()) {
    MESSAGE("skipped: HH_DEVICE is not cuda");
    return;
  }
  Device dev = test_device();
  for (const OpSpec& s : all_specs()) {
    std::string label = label_of(s);
    SUBCASE(label.c_str()) {
      auto xs = make_inputs(s, 5, DType::f32);
      std::vector<Tensor> dx;
      auto idx = grad_indices(s, xs);
      for (auto& x : xs) dx.push_back(x.defined() ? x.to(dev).detach() : x);
      std::vector<Tensor> cx;
      for (auto& x : xs) cx.push_back(x.defined() ? x.detach() : x);
      if (s.differentiable)
        for (int i : idx) {
          dx[static_cast<size_t>(i)].requires_grad_(true);
          cx[static_cast<size_t>(i)].requires_grad_(true);
        }
      Tensor yc = s.fn(cx), yd = s.fn(dx);
      CHECK_MESSAGE(yd.device() == dev, label, " output is on ", yd.device().str());
      compare(yd.to(Device::cpu()), to_host(yc), 1e-4, 1e-5, label + " cuda forward");
      if (s.differentiable && yc.requires_grad()) {
        Generator g(3);
        Tensor w = rand_input(yc.shape(), -1, 1, g, yc.dtype());
        sum(mul(yc, w)).backward();
        sum(mul(yd, w.to(dev))).backward();
        for (int i : idx)
          compare(dx[static_cast<size_t>(i)].grad().to(Device::cpu()), to_host(cx[static_cast<size_t>(i)].grad()), 1e-4,
                  1e-5, label + " cuda grad input " + std::to_string(i));
      }
    }
  }
}

}  // namespace hh::test
