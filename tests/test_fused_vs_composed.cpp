// Fused nn kernels held against composed versions built from primitive ops (exp, sum, sub, div,
// mean, var, log, gather, ...): same values and same gradients, in f64 (tight) and f32 (loose),
// on small shapes and on shapes large enough for the multi-threaded kernel paths.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "tests/cuda_compare.h"

namespace hh::test {
namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// ---- composed references (primitive ops only) ----

// The max is detached: softmax is shift invariant, so the shift carries no gradient.
Tensor softmax_composed(const Tensor& x, int64_t dim) {
  Tensor z = sub(x, detach(amax(x, {dim}, true)));
  Tensor e = exp(z);
  return div(e, sum(e, {dim}, true));
}

Tensor log_softmax_composed(const Tensor& x, int64_t dim) {
  Tensor z = sub(x, detach(amax(x, {dim}, true)));
  return sub(z, log(sum(exp(z), {dim}, true)));
}

Tensor layer_norm_composed(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  Tensor mu = mean(x, {-1}, true);
  Tensor v = var(x, {-1}, 0, true);  // biased, like layer_norm
  Tensor y = mul(sub(x, mu), rsqrt(add(v, eps)));
  if (w.defined()) y = mul(y, w);
  if (b.defined()) y = add(y, b);
  return y;
}

Tensor rms_norm_composed(const Tensor& x, const Tensor& w, double eps) {
  Tensor y = mul(x, rsqrt(add(mean(square(x), {-1}, true), eps)));
  return w.defined() ? mul(y, w) : y;
}

// torch's label-smoothed cross-entropy: (1-ε)·nll + ε·mean_j(-log p_j), ignored rows masked out.
Tensor cross_entropy_composed(const Tensor& logits, const std::vector<int64_t>& target, const Shape& tshape,
                              int64_t ignore, double eps, Reduction red) {
  std::vector<int64_t> safe = target;
  std::vector<double> keep(target.size());
  for (size_t i = 0; i < target.size(); ++i) {
    keep[i] = target[i] == ignore ? 0.0 : 1.0;
    if (target[i] == ignore) safe[i] = 0;
  }
  Tensor mask = from_vector(keep, tshape, {logits.dtype()});
  Tensor logp = log_softmax_composed(logits, -1);
  Tensor idx = unsqueeze(from_vector(safe, tshape), -1);
  Tensor nll = neg(squeeze(gather(logp, -1, idx), -1));
  Tensor smooth = neg(mean(logp, {-1}));
  Tensor loss = mul(add(mul(nll, 1.0 - eps), mul(smooth, eps)), mask);
  if (red == Reduction::none) return loss;
  if (red == Reduction::sum) return sum(loss);
  return div(sum(loss), sum(mask));
}

// rope as nn/rope.cpp composed it before the fused op: x (..., L, D), cos/sin (L, D/2).
Tensor rope_composed(const Tensor& x, const Tensor& cs, const Tensor& sn) {
  const int64_t d = x.shape().back(), half = d / 2;
  Tensor x1 = slice(x, -1, 0, half), x2 = slice(x, -1, half, d);
  return cat({sub(mul(x1, cs), mul(x2, sn)), add(mul(x2, cs), mul(x1, sn))}, -1);
}

// ---- comparison ----

// Runs both paths on fresh leaves with the same values, backpropagates the same random weights,
// and checks outputs and every input gradient agree within tol.
void compare_paths(const std::string& label, const std::vector<Tensor>& inputs, const Fn& fused, const Fn& composed,
                   double tol) {
  INFO(label);
  auto leaves = [&] {
    std::vector<Tensor> xs;
    for (const Tensor& x : inputs) xs.push_back(x.defined() ? x.detach().clone().requires_grad_(true) : x);
    return xs;
  };
  std::vector<Tensor> xf = leaves(), xc = leaves();
  Tensor yf = fused(xf), yc = composed(xc);
  REQUIRE(yf.shape() == yc.shape());
  CHECK_MESSAGE(max_abs_diff(yf, yc) <= tol, "values differ by ", max_abs_diff(yf, yc));
  Generator g(77);
  Tensor w = uniform(yf.shape(), -1, 1, g, {yf.dtype()});
  sum(mul(yf, w)).backward();
  sum(mul(yc, w)).backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    INFO("gradient of input " << i);
    REQUIRE(xf[i].grad().defined());
    REQUIRE(xc[i].grad().defined());
    CHECK_MESSAGE(max_abs_diff(xf[i].grad(), xc[i].grad()) <= tol, "gradients differ by ",
                  max_abs_diff(xf[i].grad(), xc[i].grad()));
  }
}

double tol_for(DType t) { return t == DType::f64 ? 1e-12 : 2e-5; }

}  // namespace

TEST_CASE("fused vs composed: softmax and log_softmax") {
  struct Case {
    Shape shape;
    int64_t dim;
  };
  for (DType t : {DType::f64, DType::f32})
    for (const Case& c : {Case{{4, 7}, -1}, Case{{4, 7}, 0}, Case{{2, 3, 5}, 1}, Case{{64, 700}, -1}}) {
      Generator g(1);
      Tensor x = uniform(c.shape, -5, 5, g, {t});
      const int64_t dim = c.dim;
      const std::string at = shape_str(c.shape) + " dim " + std::to_string(dim) + " " + dtype_name(t);
      compare_paths(
          "softmax " + at, {x}, [dim](const std::vector<Tensor>& v) { return softmax(v[0], dim); },
          [dim](const std::vector<Tensor>& v) { return softmax_composed(v[0], dim); }, tol_for(t));
      compare_paths(
          "log_softmax " + at, {x}, [dim](const std::vector<Tensor>& v) { return log_softmax(v[0], dim); },
          [dim](const std::vector<Tensor>& v) { return log_softmax_composed(v[0], dim); }, 5 * tol_for(t));
    }
}

TEST_CASE("fused vs composed: layer_norm and rms_norm") {
  for (DType t : {DType::f64, DType::f32})
    for (const Shape& s : {Shape{6, 10}, Shape{2, 3, 4}, Shape{200, 300}}) {
      Generator g(2);
      Tensor x = uniform(s, -2, 2, g, {t});
      Tensor w = uniform({s.back()}, 0.5, 1.5, g, {t}), b = uniform({s.back()}, -1, 1, g, {t});
      const std::string at = shape_str(s) + " " + dtype_name(t);
      // parameter gradients sum over all rows: allow for the longer f32 sums
      const double tol = tol_for(t) * (t == DType::f32 ? 10 : 1);
      compare_paths(
          "layer_norm affine " + at, {x, w, b},
          [](const std::vector<Tensor>& v) { return layer_norm(v[0], v[1], v[2], 1e-5); },
          [](const std::vector<Tensor>& v) { return layer_norm_composed(v[0], v[1], v[2], 1e-5); }, tol);
      compare_paths(
          "layer_norm plain " + at, {x}, [](const std::vector<Tensor>& v) { return layer_norm(v[0], Tensor(), Tensor()); },
          [](const std::vector<Tensor>& v) { return layer_norm_composed(v[0], Tensor(), Tensor(), 1e-5); }, tol);
      compare_paths(
          "rms_norm " + at, {x, w}, [](const std::vector<Tensor>& v) { return rms_norm(v[0], v[1], 1e-6); },
          [](const std::vector<Tensor>& v) { return rms_norm_composed(v[0], v[1], 1e-6); }, tol);
      compare_paths(
          "rms_norm plain " + at, {x}, [](const std::vector<Tensor>& v) { return rms_norm(v[0], Tensor(), 1e-6); },
          [](const std::vector<Tensor>& v) { return rms_norm_composed(v[0], Tensor(), 1e-6); }, tol);
    }
}

TEST_CASE("fused vs composed: cross_entropy") {
  struct Case {
    Shape logits;
    int64_t ignore;
    double smoothing;
    Reduction red;
  };
  for (DType t : {DType::f64, DType::f32})
    for (const Case& c : {Case{{6, 5}, -100, 0.0, Reduction::mean}, Case{{6, 5}, -100, 0.1, Reduction::mean},
                          Case{{6, 5}, 3, 0.0, Reduction::sum}, Case{{2, 3, 4}, -100, 0.25, Reduction::none},
                          Case{{128, 600}, -100, 0.1, Reduction::mean}}) {
      Generator g(3);
      Tensor x = uniform(c.logits, -3, 3, g, {t});
      const Shape ts(c.logits.begin(), c.logits.end() - 1);
      std::vector<int64_t> target = to_vector<int64_t>(randint(0, c.logits.back(), ts, g));
      for (size_t i = 0; i < target.size(); i += 4) target[i] = c.ignore;  // some ignored rows
      Tensor tt = from_vector(target, ts);
      const int64_t ignore = c.ignore;
      const double eps = c.smoothing;
      const Reduction red = c.red;
      const std::string at = shape_str(c.logits) + " eps " + std::to_string(eps) + " " + dtype_name(t);
      compare_paths(
          "cross_entropy " + at, {x},
          [tt, ignore, eps, red](const std::vector<Tensor>& v) { return cross_entropy(v[0], tt, ignore, eps, red); },
          [target, ts, ignore, eps, red](const std::vector<Tensor>& v) {
            return cross_entropy_composed(v[0], target, ts, ignore, eps, red);
          },
          5 * tol_for(t));
    }
}

TEST_CASE("fused vs composed: add_layer_norm and add_rms_norm (both outputs)") {
  for (DType t : {DType::f64, DType::f32})
    for (const Shape& s : {Shape{6, 10}, Shape{2, 3, 4}, Shape{200, 300}}) {
      Generator g(4);
      Tensor x = uniform(s, -2, 2, g, {t}), r = uniform(s, -2, 2, g, {t});
      Tensor w = uniform({s.back()}, 0.5, 1.5, g, {t}), b = uniform({s.back()}, -1, 1, g, {t});
      const std::string at = shape_str(s) + " " + dtype_name(t);
      const double tol = tol_for(t) * (t == DType::f32 ? 10 : 1);  // parameter gradients sum over rows
      // h and y stacked: the random weights of compare_paths reach both outputs
      compare_paths(
          "add_layer_norm h,y " + at, {x, r, w, b},
          [](const std::vector<Tensor>& v) {
            AddNormOut o = add_layer_norm(v[0], v[1], v[2], v[3], 1e-5);
            return stack({o.h, o.y}, 0);
          },
          [](const std::vector<Tensor>& v) {
            Tensor h = add(v[0], v[1]);
            return stack({h, layer_norm_composed(h, v[2], v[3], 1e-5)}, 0);
          },
          tol);
      compare_paths(
          "add_layer_norm y only " + at, {x, r},
          [](const std::vector<Tensor>& v) { return add_layer_norm(v[0], v[1], Tensor(), Tensor()).y; },
          [](const std::vector<Tensor>& v) { return layer_norm_composed(add(v[0], v[1]), Tensor(), Tensor(), 1e-5); },
          tol);
      compare_paths(
          "add_rms_norm h,y " + at, {x, r, w},
          [](const std::vector<Tensor>& v) {
            AddNormOut o = add_rms_norm(v[0], v[1], v[2], 1e-6);
            return stack({o.h, o.y}, 0);
          },
          [](const std::vector<Tensor>& v) {
            Tensor h = add(v[0], v[1]);
            return stack({h, rms_norm_composed(h, v[2], 1e-6)}, 0);
          },
          tol);
      compare_paths(
          "add_rms_norm h only " + at, {x, r},
          [](const std::vector<Tensor>& v) { return mul(add_rms_norm(v[0], v[1], Tensor(), 1e-6).h, 3.0); },
          [](const std::vector<Tensor>& v) { return mul(add(v[0], v[1]), 3.0); }, tol);
    }
}

TEST_CASE("fused vs composed: bias_gelu (erf and tanh)") {
  for (DType t : {DType::f64, DType::f32})
    for (const Shape& s : {Shape{4, 7}, Shape{2, 3, 5}, Shape{128, 700}})
      for (const char* approx : {"none", "tanh"}) {
        Generator g(5);
        Tensor x = uniform(s, -4, 4, g, {t}), b = uniform({s.back()}, -1, 1, g, {t});
        const std::string a = approx;
        const std::string at = shape_str(s) + " " + a + " " + dtype_name(t);
        compare_paths(
            "bias_gelu " + at, {x, b}, [a](const std::vector<Tensor>& v) { return bias_gelu(v[0], v[1], a); },
            [a](const std::vector<Tensor>& v) { return gelu(add(v[0], v[1]), a); },
            tol_for(t) * (t == DType::f32 ? 10 : 1));  // the bias gradient sums over rows
      }
}

TEST_CASE("fused vs composed: rope") {
  for (DType t : {DType::f64, DType::f32})
    for (const Shape& s : {Shape{2, 3, 5, 8}, Shape{1, 1, 1, 2}, Shape{3, 4}, Shape{4, 8, 64, 64}}) {
      Generator g(6);
      const int64_t l = s[s.size() - 2], half = s.back() / 2;
      Tensor x = uniform(s, -2, 2, g, {t});
      Tensor ang = uniform({l, half}, -3, 3, g, {t});
      Tensor cs = cos(ang), sn = sin(ang);
      const std::string at = shape_str(s) + " " + dtype_name(t);
      // cos/sin gradients sum over the leading dims: allow for the longer f32 sums
      compare_paths(
          "rope " + at, {x, cs, sn}, [](const std::vector<Tensor>& v) { return rope(v[0], v[1], v[2]); },
          [](const std::vector<Tensor>& v) { return rope_composed(v[0], v[1], v[2]); },
          tol_for(t) * (t == DType::f32 ? 10 : 1));
    }
}

TEST_CASE("fused vs composed: hedgehog_features") {
  for (DType t : {DType::f64, DType::f32})
    for (const Shape& s : {Shape{4, 7}, Shape{2, 3, 5, 16}, Shape{300, 64}}) {
      Generator g(8);
      Tensor z = uniform(s, -6, 6, g, {t});
      const std::string at = shape_str(s) + " " + dtype_name(t);
      // The CPU kernel runs softmax's own rows on z and -z: the composition's values, bit for bit.
      compare_paths(
          "hedgehog_features " + at, {z}, [](const std::vector<Tensor>& v) { return hedgehog_features(v[0]); },
          [](const std::vector<Tensor>& v) { return cat({softmax(v[0], -1), softmax(neg(v[0]), -1)}, -1); }, 0.0);
    }
}

namespace {

// The fused op on the device (HH_DEVICE=cuda) against the CPU through autograd: output and every
// input gradient, for shapes that reach the multi-row and multi-block launch paths.
void compare_devices(const std::string& label, const std::vector<Tensor>& inputs, const Fn& fn, double tol) {
  INFO(label);
  const Device d = test_device();
  std::vector<Tensor> xc, xd;
  for (const Tensor& x : inputs) {
    xc.push_back(x.detach().clone().requires_grad_(true));
    xd.push_back(x.to(d).detach().requires_grad_(true));
  }
  Tensor yc = fn(xc), yd = fn(xd);
  expect_close(yd, yc, tol, tol, label);
  Generator g(78);
  Tensor w = uniform(yc.shape(), -1, 1, g, {yc.dtype()});
  sum(mul(yc, w)).backward();
  sum(mul(yd, w.to(d))).backward();
  for (size_t i = 0; i < inputs.size(); ++i)
    expect_close(xd[i].grad(), xc[i].grad(), tol, tol, label + " grad " + std::to_string(i));
}

}  // namespace

TEST_CASE("fused ops: cuda matches cpu (HH_DEVICE=cuda)" * doctest::skip(!cuda_requested())) {
  for (DType t : {DType::f32, DType::f64}) {
    const double tol = t == DType::f32 ? 2e-4 : 1e-10;
    for (int64_t n : {1, 33, 257})
      for (int64_t c : {2, 34, 1000, 4098}) {
        const std::string at = std::to_string(n) + "x" + std::to_string(c) + " " + dtype_name(t);
        Tensor x = input({n, c}, -2, 3, t, 31), r = input({n, c}, -1, 1, t, 32);
        Tensor w = input({c}, 0.5, 1.5, t, 33), b = input({c}, -1, 1, t, 34);
        compare_devices("add_layer_norm " + at, {x, r, w, b}, [](const std::vector<Tensor>& v) {
          AddNormOut o = add_layer_norm(v[0], v[1], v[2], v[3]);
          return stack({o.h, o.y}, 0);
        }, tol);
        compare_devices("add_rms_norm " + at, {x, r, w}, [](const std::vector<Tensor>& v) {
          AddNormOut o = add_rms_norm(v[0], v[1], v[2]);
          return stack({o.h, o.y}, 0);
        }, tol);
        for (const char* approx : {"none", "tanh"}) {
          const std::string a = approx;
          compare_devices("bias_gelu " + a + " " + at, {x, b},
                          [a](const std::vector<Tensor>& v) { return bias_gelu(v[0], v[1], a); }, tol);
        }
        compare_devices("hedgehog_features " + at, {x},
                        [](const std::vector<Tensor>& v) { return hedgehog_features(v[0]); }, tol);
        // rope on (B=1, H=3, L=n, D=c), tables (n, c/2)
        Tensor q = input({1, 3, n, c}, -2, 2, t, 35), ang = input({n, c / 2}, -3, 3, t, 36);
        compare_devices("rope " + at, {q, cos(ang), sin(ang)},
                        [](const std::vector<Tensor>& v) { return rope(v[0], v[1], v[2]); }, tol);
      }
  }
}

}  // namespace hh::test
