// Op-table rows for the fused transformer-block ops (autograd/ops/fused.h): add_layer_norm,
// add_rms_norm, bias_gelu, rope. References are plain loops over host values in f64; the
// two-output norms are checked with h and y stacked, so gradients reach both outputs.
#include <cmath>

#include "tests/op_table.h"

namespace hh::test {
namespace {

// h = x + r and y = norm(h) over the last dim (layer_norm, or rms_norm when rms), stacked (2, ...).
Host add_norm_ref(const Host& x, const Host& r, const Host* w, const Host* b, double eps, bool rms) {
  const int64_t c = x.shape.back(), n = x.numel() / c;
  Shape s = x.shape;
  s.insert(s.begin(), 2);
  Host out{s, std::vector<double>(static_cast<size_t>(2 * x.numel()))};
  double* h = out.v.data();
  double* y = h + x.numel();
  for (int64_t i = 0; i < x.numel(); ++i) h[i] = x.v[static_cast<size_t>(i)] + r.v[static_cast<size_t>(i)];
  for (int64_t i = 0; i < n; ++i) {
    const double* hi = h + i * c;
    double mu = 0.0, var = 0.0;
    if (!rms) {
      for (int64_t j = 0; j < c; ++j) mu += hi[j];
      mu /= static_cast<double>(c);
    }
    for (int64_t j = 0; j < c; ++j) var += (hi[j] - mu) * (hi[j] - mu);
    const double rstd = 1.0 / std::sqrt(var / static_cast<double>(c) + eps);
    for (int64_t j = 0; j < c; ++j) {
      double v = (hi[j] - mu) * rstd;
      if (w) v *= w->v[static_cast<size_t>(j)];
      if (b) v += b->v[static_cast<size_t>(j)];
      y[i * c + j] = v;
    }
  }
  return out;
}

double gelu_ref(double z, bool tanh_form) {
  if (tanh_form) return 0.5 * z * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (z + 0.044715 * z * z * z)));
  return 0.5 * z * (1.0 + std::erf(z / std::sqrt(2.0)));
}

Host bias_gelu_ref(const Host& x, const Host& b, bool tanh_form) {
  const int64_t c = x.shape.back();
  Host out{x.shape, x.v};
  for (int64_t i = 0; i < x.numel(); ++i)
    out.v[static_cast<size_t>(i)] = gelu_ref(x.v[static_cast<size_t>(i)] + b.v[static_cast<size_t>(i % c)], tanh_form);
  return out;
}

// x (..., L, D), cos/sin (L, D/2): element j rotates with j + D/2.
Host rope_ref(const Host& x, const Host& cs, const Host& sn) {
  const int64_t d = x.shape.back(), l = x.shape[x.shape.size() - 2], half = d / 2, g = x.numel() / (l * d);
  Host out{x.shape, x.v};
  for (int64_t gi = 0; gi < g; ++gi)
    for (int64_t li = 0; li < l; ++li)
      for (int64_t j = 0; j < half; ++j) {
        const size_t p1 = static_cast<size_t>((gi * l + li) * d + j), p2 = p1 + static_cast<size_t>(half);
        const double c = cs.v[static_cast<size_t>(li * half + j)], s = sn.v[static_cast<size_t>(li * half + j)];
        out.v[p1] = x.v[p1] * c - x.v[p2] * s;
        out.v[p2] = x.v[p2] * c + x.v[p1] * s;
      }
  return out;
}

void add_norm_errors() {
  Tensor x = zeros({2, 3});
  check_throws([&] { add_layer_norm(x, zeros({2, 4}), Tensor(), Tensor()); },
               {"add_layer_norm", "residual", "(2, 4)", "(2, 3)"});
  check_throws([&] { add_layer_norm(x, zeros({2, 3}, DType::f64), Tensor(), Tensor()); },
               {"add_layer_norm", "residual", "f64", "f32"});
  check_throws([&] { add_layer_norm(x, x, zeros({4}), Tensor()); }, {"add_layer_norm", "weight", "(3,)", "(4,)"});
  check_throws([&] { add_layer_norm(x, x, Tensor(), zeros({3, 1})); }, {"add_layer_norm", "bias", "(3, 1)"});
  check_throws([&] { add_layer_norm(x, x, Tensor(), Tensor(), -1.0); }, {"add_layer_norm", "eps"});
  check_throws([&] { add_layer_norm(zeros({}), zeros({}), Tensor(), Tensor()); }, {"add_layer_norm", "at least 1 dim"});
  check_throws([&] { add_rms_norm(x, zeros({3, 2}), Tensor()); }, {"add_rms_norm", "residual", "(3, 2)", "(2, 3)"});
  check_throws([&] { add_rms_norm(x, x, zeros({2})); }, {"add_rms_norm", "weight", "(3,)", "(2,)"});
  check_throws([&] { add_rms_norm(zeros({2, 3}, DType::i32), zeros({2, 3}, DType::i32), Tensor()); },
               {"add_rms_norm", "i32"});
}

void bias_gelu_errors() {
  Tensor x = zeros({2, 3});
  check_throws([&] { bias_gelu(x, zeros({2})); }, {"bias_gelu", "bias", "(3,)", "(2, 3)", "(2,)"});
  check_throws([&] { bias_gelu(x, Tensor()); }, {"bias_gelu", "bias", "undefined"});
  check_throws([&] { bias_gelu(x, zeros({3}, DType::f64)); }, {"bias_gelu", "bias", "f64", "f32"});
  check_throws([&] { bias_gelu(x, zeros({3}), "fast"); }, {"bias_gelu", "approximate", "fast"});
  check_throws([&] { bias_gelu(zeros({}), zeros({1})); }, {"bias_gelu", "at least 1 dim"});
}

void rope_errors() {
  check_throws([&] { rope(zeros({1, 2, 3, 4}), zeros({3, 2}), zeros({3, 3})); }, {"rope", "sin", "(3, 2)", "(3, 3)"});
  check_throws([&] { rope(zeros({1, 2, 3, 4}), zeros({2, 2}), zeros({3, 2})); },
               {"rope", "cos", "(1, 2, 3, 4)", "(2, 2)"});
  check_throws([&] { rope(zeros({1, 2, 3, 5}), zeros({3, 2}), zeros({3, 2})); }, {"rope", "even", "5"});
  check_throws([&] { rope(zeros({4}), zeros({1, 2}), zeros({1, 2})); }, {"rope", "(..., L, D)", "(4,)"});
  check_throws([&] { rope(zeros({3, 4}), zeros({3, 2}, DType::f64), zeros({3, 2})); }, {"rope", "cos", "f64"});
}

OpSpec add_norm_spec(bool rms, bool affine) {
  OpSpec s;
  s.op = rms ? "add_rms_norm" : "add_layer_norm";
  s.variant = affine ? "h and y stacked, affine" : "h and y stacked, no weight";
  s.shapes = {{3, 5}, {3, 5}};
  if (affine) s.shapes.push_back({5});
  if (affine && !rms) s.shapes.push_back({5});
  s.fn = [rms, affine](const std::vector<Tensor>& v) {
    Tensor w = affine ? v[2] : Tensor(), b = affine && !rms ? v[3] : Tensor();
    AddNormOut o = rms ? add_rms_norm(v[0], v[1], w, 1e-6) : add_layer_norm(v[0], v[1], w, b, 1e-5);
    return stack({o.h, o.y}, 0);
  };
  s.reference = [rms, affine](const std::vector<Host>& h) {
    return add_norm_ref(h[0], h[1], affine ? &h[2] : nullptr, affine && !rms ? &h[3] : nullptr, rms ? 1e-6 : 1e-5,
                        rms);
  };
  s.errors = add_norm_errors;
  return s;
}

OpSpec bias_gelu_spec(bool tanh_form, Shape x_shape) {
  OpSpec s;
  s.op = "bias_gelu";
  s.variant = std::string(tanh_form ? "tanh" : "erf") + " " + shape_str(x_shape);
  const int64_t c = x_shape.back();
  s.shapes = {x_shape, {c}};
  s.lo = -3.0;
  s.hi = 3.0;
  s.fn = [tanh_form](const std::vector<Tensor>& v) { return bias_gelu(v[0], v[1], tanh_form ? "tanh" : "none"); };
  s.reference = [tanh_form](const std::vector<Host>& h) { return bias_gelu_ref(h[0], h[1], tanh_form); };
  s.errors = bias_gelu_errors;
  return s;
}

OpSpec rope_spec(Shape x_shape) {
  OpSpec s;
  s.op = "rope";
  s.variant = shape_str(x_shape);
  const int64_t l = x_shape[x_shape.size() - 2], half = x_shape.back() / 2;
  s.shapes = {x_shape, {l, half}, {l, half}};
  s.fn = [](const std::vector<Tensor>& v) { return rope(v[0], v[1], v[2]); };
  s.reference = [](const std::vector<Host>& h) { return rope_ref(h[0], h[1], h[2]); };
  s.errors = rope_errors;
  return s;
}

// [softmax(z), softmax(-z)] per row of the last dim, in f64.
Host hedgehog_features_ref(const Host& z) {
  const int64_t f = z.shape.back(), n = static_cast<int64_t>(z.v.size()) / std::max<int64_t>(f, 1);
  Host y{z.shape, std::vector<double>(z.v.size() * 2)};
  y.shape.back() = 2 * f;
  for (int64_t i = 0; i < n; ++i)
    for (double sign : {1.0, -1.0}) {
      double mx = -1e300, total = 0;
      for (int64_t j = 0; j < f; ++j) mx = std::max(mx, sign * z.v[static_cast<size_t>(i * f + j)]);
      for (int64_t j = 0; j < f; ++j) total += std::exp(sign * z.v[static_cast<size_t>(i * f + j)] - mx);
      for (int64_t j = 0; j < f; ++j)
        y.v[static_cast<size_t>(i * 2 * f + (sign > 0 ? 0 : f) + j)] =
            std::exp(sign * z.v[static_cast<size_t>(i * f + j)] - mx) / total;
    }
  return y;
}

OpSpec hedgehog_features_spec(Shape z_shape) {
  OpSpec s;
  s.op = "hedgehog_features";
  s.variant = shape_str(z_shape);
  s.shapes = {z_shape};
  s.lo = -3.0;
  s.hi = 3.0;
  s.fn = [](const std::vector<Tensor>& v) { return hedgehog_features(v[0]); };
  s.reference = [](const std::vector<Host>& h) { return hedgehog_features_ref(h[0]); };
  s.errors = [] {
    check_throws([] { hedgehog_features(zeros({})); }, {"hedgehog_features", "at least 1 dim"});
    check_throws([] { hedgehog_features(zeros({2, 3}, DType::i64)); }, {"hedgehog_features", "floating", "i64"});
  };
  return s;
}

const bool registered = add_specs({
    hedgehog_features_spec({2, 3, 5}),
    hedgehog_features_spec({4, 1}),
    add_norm_spec(false, true),
    add_norm_spec(false, false),
    add_norm_spec(true, true),
    add_norm_spec(true, false),
    bias_gelu_spec(false, {3, 4}),
    bias_gelu_spec(true, {2, 3, 4}),
    rope_spec({2, 2, 3, 4}),
    rope_spec({3, 2}),
});

}  // namespace
TEST_CASE("fused ops: half inputs compute in f32 and keep their dtype") {
  Generator g(5);
  Tensor x = uniform({3, 8}, -2, 2, g), r = uniform({3, 8}, -2, 2, g);
  Tensor w = uniform({8}, 0.5, 1.5, g), b = uniform({8}, -0.5, 0.5, g);
  Tensor q = uniform({2, 3, 8}, -2, 2, g), ang = uniform({3, 4}, -3, 3, g);
  for (DType h : {DType::bf16, DType::f16}) {
    INFO(dtype_name(h));
    // the f32 result of the same (rounded) inputs, rounded once: within a few of h's ulps
    const double tol = h == DType::bf16 ? 8e-2 : 8e-3;
    auto f32 = [](const Tensor& t) { return t.to(DType::f32); };
    Tensor xh = x.to(h), rh = r.to(h), wh = w.to(h), bh = b.to(h), qh = q.to(h);
    AddNormOut ln = add_layer_norm(xh, rh, wh, bh);
    AddNormOut ln32 = add_layer_norm(f32(xh), f32(rh), f32(wh), f32(bh));
    CHECK(ln.h.dtype() == h);
    CHECK(ln.y.dtype() == h);
    CHECK(max_abs_diff(f32(ln.h), ln32.h) < tol);
    CHECK(max_abs_diff(f32(ln.y), ln32.y) < tol);
    AddNormOut rn = add_rms_norm(xh, rh, wh);
    CHECK(rn.y.dtype() == h);
    CHECK(max_abs_diff(f32(rn.y), add_rms_norm(f32(xh), f32(rh), f32(wh)).y) < tol);
    Tensor bg = bias_gelu(xh, bh, "tanh");
    CHECK(bg.dtype() == h);
    CHECK(max_abs_diff(f32(bg), bias_gelu(f32(xh), f32(bh), "tanh")) < tol);
    Tensor cs = cos(ang).to(h), sn = sin(ang).to(h);
    Tensor ro = rope(qh, cs, sn);
    CHECK(ro.dtype() == h);
    CHECK(max_abs_diff(f32(ro), rope(f32(qh), f32(cs), f32(sn))) < tol);
    // gradients flow back through the casts in the inputs' dtype, into both outputs of the norm
    Tensor xl = xh.detach().requires_grad_(true), rl = rh.detach().requires_grad_(true);
    AddNormOut o = add_layer_norm(xl, rl, wh, bh);
    add(sum(f32(o.h)), sum(mul(f32(o.y), f32(o.y)))).backward();
    REQUIRE(xl.grad().defined());
    CHECK(xl.grad().dtype() == h);
    CHECK(rl.grad().dtype() == h);
  }
}

}  // namespace hh::test
