// Fused transformer-block ops: add_layer_norm / add_rms_norm, bias_gelu, rope (see fused.h).
// Checks, forward dispatch and backward together, as in nn.cpp. bf16/f16 inputs compute in f32
// and are cast back (the casts carry the gradient). Saved tensors are detached.
#include "autograd/ops/fused.h"

#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/ops/nn_node.h"
#include "core/backend.h"
#include "core/kernels/feature_maps.h"

namespace hh {

static const OpName reg_add_layer_norm("add_layer_norm"), reg_add_rms_norm("add_rms_norm"),
    reg_bias_gelu("bias_gelu"), reg_rope("rope"), reg_hedgehog_features("hedgehog_features");

namespace {

bool is_half(DType t) { return t == DType::bf16 || t == DType::f16; }
Tensor to_compute(const Tensor& t) { return t.defined() && is_half(t.dtype()) ? to_dtype(t, DType::f32) : t; }
Tensor contiguous_or_undef(const Tensor& t) { return t.defined() ? contiguous(t) : t; }
Tensor detach_or_undef(const Tensor& t) { return t.defined() ? detach(t) : t; }

// A contiguous tensor viewed with a new shape, without autograd (kernel argument).
Tensor view_as(const Tensor& t, const Shape& s) { return detach(t).as_strided(s, contiguous_strides(s), t.offset()); }
Tensor as_rows(const Tensor& t, int64_t n, int64_t c) { return view_as(t, {n, c}); }

// The incoming gradient as a contiguous tensor of the forward's dtype.
Tensor grad_like(const Tensor& g, DType t) { return contiguous(g.dtype() == t ? g : to_dtype(g, t)); }

// Product of all dims but the last.
int64_t leading(const Shape& s) {
  int64_t n = 1;
  for (size_t i = 0; i + 1 < s.size(); ++i) n *= s[i];
  return n;
}

void check_float(const char* op, const char* what, const Tensor& t) {
  HH_CHECK(t.defined(), op, ": ", what, " is undefined");
  HH_CHECK(is_floating(t.dtype()), op, ": ", what, " must be a floating tensor, got ", t.dtype(), " of shape ",
           t.shape());
}

// t has x's dtype and device (named `what` in the message).
void check_like(const char* op, const char* what, const Tensor& x, const Tensor& t) {
  HH_CHECK(t.dtype() == x.dtype(), op, ": ", what, " has dtype ", t.dtype(), " but the input has ", x.dtype());
  HH_CHECK(t.device() == x.device(), op, ": ", what, " is on ", t.device().str(), " but the input is on ",
           x.device().str());
}

// A per-channel parameter (C) matching x's last dim, or undefined when optional.
void check_channel(const char* op, const char* what, const Tensor& x, const Tensor& p, bool required) {
  if (!p.defined()) {
    HH_CHECK(!required, op, ": ", what, " is undefined");
    return;
  }
  const int64_t c = x.shape().back();
  HH_CHECK(p.shape() == Shape{c}, op, ": ", what, " must have shape (", c, ",) to match the last dim of input ",
           x.shape(), ", got ", p.shape());
  check_like(op, what, x, p);
}

// x (..., C) and residual of the same shape, dtype and device; eps >= 0.
void check_add_norm(const char* op, const Tensor& x, const Tensor& residual, double eps) {
  check_float(op, "input", x);
  HH_CHECK(residual.defined(), op, ": residual is undefined");
  HH_CHECK(x.dim() >= 1, op, ": input must have at least 1 dim (normalized over the last), got shape ", x.shape());
  HH_CHECK(residual.shape() == x.shape(), op, ": residual shape ", residual.shape(), " does not match input shape ",
           x.shape());
  check_like(op, "residual", x, residual);
  HH_CHECK(eps >= 0.0, op, ": eps must be >= 0, got ", eps);
}

// h = x + residual as a graph node (its backward passes the gradient to both).
Tensor record_residual(const char* op, const Tensor& h, const Tensor& x, const Tensor& residual) {
  return record(op, h, {x, residual}, [](const Tensor& g, const NeedsGrad& needs) {
    return std::vector<Tensor>{needs[0] ? g : Tensor(), needs[1] ? g : Tensor()};
  });
}

AddNormOut cast_out(const AddNormOut& o, DType t) { return {to_dtype(o.h, t), to_dtype(o.y, t)}; }

}  // namespace

// Under autocast (autograd/autocast.h) the residual norms are on the f32 list, as the norms are,
// and bias_gelu and rope promote their operands to the widest floating dtype, as the composed
// add, gelu and mul would.
Tensor autocast_to(const Tensor& t, DType d) { return t.defined() && is_floating(t.dtype()) ? to_dtype(t, d) : t; }
DType autocast_widest(DType a, const Tensor& b) {
  return a == b.dtype() || !is_floating(a) || !is_floating(b.dtype()) ? a : autocast_promote(a, b.dtype());
}

AddNormOut add_layer_norm(const Tensor& x_in, const Tensor& residual_in, const Tensor& weight_in,
                          const Tensor& bias_in, double eps) {
  const char* op = "add_layer_norm";
  const Tensor x = autocast_f32(x_in), residual = autocast_f32(residual_in);
  const Tensor weight = autocast_f32(weight_in), bias = autocast_f32(bias_in);
  check_add_norm(op, x, residual, eps);
  check_channel(op, "weight", x, weight, false);
  check_channel(op, "bias", x, bias, false);
  if (is_half(x.dtype()))
    return cast_out(add_layer_norm(to_compute(x), to_compute(residual), to_compute(weight), to_compute(bias), eps),
                    x.dtype());
  // x, residual, h, y: (..., C) -> rows (N, C); mean, rstd: (N)
  const int64_t c = x.shape().back(), n = leading(x.shape());
  Tensor xc = contiguous(x), rc = contiguous(residual), wc = contiguous_or_undef(weight),
         bc = contiguous_or_undef(bias);
  Options o{x.dtype(), x.device()};
  Tensor h = empty(x.shape(), o), y = empty(x.shape(), o), mean = empty({n}, o), rstd = empty({n}, o);
  Tensor wd = detach_or_undef(wc), bd = detach_or_undef(bc);
  if (y.numel() > 0)
    backend_of(y).add_layer_norm(as_rows(xc, n, c), as_rows(rc, n, c), wd, bd, eps, as_rows(h, n, c),
                                 as_rows(y, n, c), mean, rstd);
  h = record_residual(op, h, xc, rc);
  y = record_layer_norm(op, y, h, wc, bc, mean, rstd);  // the norm of h: layer_norm's node (nn_node.h)
  return {h, y};
}

AddNormOut add_rms_norm(const Tensor& x_in, const Tensor& residual_in, const Tensor& weight_in, double eps) {
  const Tensor x = autocast_f32(x_in), residual = autocast_f32(residual_in), weight = autocast_f32(weight_in);
  const char* op = "add_rms_norm";
  check_add_norm(op, x, residual, eps);
  check_channel(op, "weight", x, weight, false);
  if (is_half(x.dtype()))
    return cast_out(add_rms_norm(to_compute(x), to_compute(residual), to_compute(weight), eps), x.dtype());
  // x, residual, h, y: (..., C) -> rows (N, C); rstd: (N)
  const int64_t c = x.shape().back(), n = leading(x.shape());
  Tensor xc = contiguous(x), rc = contiguous(residual), wc = contiguous_or_undef(weight);
  Options o{x.dtype(), x.device()};
  Tensor h = empty(x.shape(), o), y = empty(x.shape(), o), rstd = empty({n}, o);
  Tensor wd = detach_or_undef(wc);
  if (y.numel() > 0)
    backend_of(y).add_rms_norm(as_rows(xc, n, c), as_rows(rc, n, c), wd, eps, as_rows(h, n, c), as_rows(y, n, c),
                               rstd);
  h = record_residual(op, h, xc, rc);
  y = record_rms_norm(op, y, h, wc, rstd);  // the norm of h: rms_norm's node (nn_node.h)
  return {h, y};
}

Tensor bias_gelu(const Tensor& x_in, const Tensor& bias_in, const std::string& approximate) {
  const char* op = "bias_gelu";
  Tensor x = x_in, bias = bias_in;
  if (AutocastMode::is_enabled() && x.defined() && bias.defined()) {
    const DType t = autocast_widest(x.dtype(), bias);
    x = autocast_to(x, t);
    bias = autocast_to(bias, t);
  }
  HH_CHECK(approximate == "none" || approximate == "tanh", op, ": approximate must be 'none' or 'tanh', got '",
           approximate, "'");
  check_float(op, "input", x);
  HH_CHECK(x.dim() >= 1, op, ": input must have at least 1 dim (the bias runs over the last), got shape ",
           x.shape());
  check_channel(op, "bias", x, bias, true);
  if (is_half(x.dtype())) return to_dtype(bias_gelu(to_compute(x), to_compute(bias), approximate), x.dtype());
  const bool tanh_form = approximate == "tanh";
  // x, y: (..., C) -> rows (N, C); bias (C)
  const int64_t c = x.shape().back(), n = leading(x.shape());
  Tensor xc = contiguous(x), bc = contiguous(bias);
  Tensor y = empty(x.shape(), {x.dtype(), x.device()});
  Tensor xs = detach(xc), bs = detach(bc);
  if (y.numel() > 0) backend_of(y).bias_gelu(as_rows(xs, n, c), bs, tanh_form, as_rows(y, n, c));
  return record(op, y, {xc, bc}, {xs, bs}, [xs, bs, tanh_form, n, c](const Tensor& g, const NeedsGrad& needs) {
    Tensor gc = grad_like(g, xs.dtype());
    Tensor gx = empty(xs.shape(), {xs.dtype(), xs.device()});
    if (gx.numel() > 0)
      backend_of(gx).bias_gelu_backward(as_rows(xs, n, c), bs, as_rows(gc, n, c), tanh_form, as_rows(gx, n, c));
    Tensor gb = needs[1] ? sum(as_rows(gx, n, c), {0}) : Tensor();
    return std::vector<Tensor>{needs[0] ? gx : Tensor(), gb};
  });
}

Tensor rope(const Tensor& x_in, const Tensor& cos_in, const Tensor& sin_in) {
  const char* op = "rope";
  Tensor x = x_in, cos = cos_in, sin = sin_in;
  if (AutocastMode::is_enabled() && x.defined() && cos.defined() && sin.defined()) {
    const DType t = autocast_widest(autocast_widest(x.dtype(), cos), sin);
    x = autocast_to(x, t);
    cos = autocast_to(cos, t);
    sin = autocast_to(sin, t);
  }
  check_float(op, "input", x);
  HH_CHECK(x.dim() >= 2, op, ": input must be (..., L, D), got shape ", x.shape());
  const int64_t l = x.size(-2), d = x.size(-1), half = d / 2;
  HH_CHECK(d % 2 == 0, op, ": the last dim (head dim) of input ", x.shape(), " must be even, got ", d);
  for (const auto& [what, t] : {std::pair<const char*, const Tensor*>{"cos", &cos}, {"sin", &sin}}) {
    HH_CHECK(t->defined(), op, ": ", what, " is undefined");
    HH_CHECK(t->shape() == (Shape{l, half}), op, ": ", what, " must have shape (", l, ", ", half, ") = (L, D/2) for input ",
             x.shape(), ", got ", t->shape());
    check_like(op, what, x, *t);
  }
  if (is_half(x.dtype())) return to_dtype(rope(to_compute(x), to_compute(cos), to_compute(sin)), x.dtype());
  // x, y: (..., L, D) -> (G, L, D)
  const int64_t g = l * d == 0 ? 0 : x.numel() / (l * d);
  Tensor xc = contiguous(x), cc = contiguous(cos), sc = contiguous(sin);
  Tensor y = empty(x.shape(), {x.dtype(), x.device()});
  Tensor xs = detach(xc), cs = detach(cc), ss = detach(sc);
  const Shape rows{g, l, d};
  if (y.numel() > 0) backend_of(y).rope(view_as(xs, rows), cs, ss, false, view_as(y, rows));
  return record(op, y, {xc, cc, sc}, {xs, cs, ss}, [xs, cs, ss, rows, half](const Tensor& gy, const NeedsGrad& needs) {
    Tensor gc = grad_like(gy, xs.dtype());
    Tensor gx = empty(xs.shape(), {xs.dtype(), xs.device()});
    if (gx.numel() > 0) backend_of(gx).rope(view_as(gc, rows), cs, ss, true, view_as(gx, rows));
    Tensor gcos, gsin;
    if (needs[1] || needs[2]) {  // sums over G of the products with x (tables are rarely trained)
      Tensor x3 = view_as(xs, rows), g3 = view_as(gc, rows);
      const int64_t d = rows[2];
      Tensor x1 = slice(x3, -1, 0, half), x2 = slice(x3, -1, half, d);
      Tensor g1 = slice(g3, -1, 0, half), g2 = slice(g3, -1, half, d);
      if (needs[1]) gcos = sum(add(mul(g1, x1), mul(g2, x2)), {0});
      if (needs[2]) gsin = sum(sub(mul(g2, x1), mul(g1, x2)), {0});
    }
    return std::vector<Tensor>{needs[0] ? gx : Tensor(), gcos, gsin};
  });
}

Tensor hedgehog_features(const Tensor& z_in) {
  const char* op = "hedgehog_features";
  const Tensor z = autocast_f32(z_in);  // softmax's list: f32 statistics
  check_float(op, "input", z);
  HH_CHECK(z.dim() >= 1, op, ": input must have at least 1 dim (the features are the last), got shape ", z.shape());
  if (is_half(z.dtype())) return to_dtype(hedgehog_features(to_compute(z)), z.dtype());
  // z (..., F) -> rows (N, F); y (..., 2F) -> rows (N, 2F)
  const int64_t f = z.shape().back(), n = leading(z.shape());
  Tensor zc = contiguous(z);
  Shape ys = z.shape();
  ys.back() = 2 * f;
  Tensor y = empty(ys, {z.dtype(), z.device()});
  if (y.numel() > 0) kernels::hedgehog_features(y.device(), as_rows(zc, n, f), as_rows(y, n, 2 * f));
  Tensor yd = detach(y);
  return record(op, y, {zc}, {yd}, [yd, n, f](const Tensor& g, const NeedsGrad&) {
    Tensor gc = grad_like(g, yd.dtype());
    Shape zs = yd.shape();
    zs.back() = f;
    Tensor gz = empty(zs, {yd.dtype(), yd.device()});
    if (gz.numel() > 0)
      kernels::hedgehog_features_backward(gz.device(), as_rows(yd, n, 2 * f), as_rows(gc, n, 2 * f), as_rows(gz, n, f));
    return std::vector<Tensor>{gz};
  });
}

}  // namespace hh
