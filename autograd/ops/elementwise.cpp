// Elementwise ops: unary math and activations (fused backward kernels), binary arithmetic with
// broadcasting and scalar variants (backward composed from ops), comparisons, where and
// masked_fill. Broadcasting is an `expand` of each input, whose backward sums the gradient back,
// so no backward here deals with it. bf16/f16 inputs are computed in f32 and cast back.
#include "autograd/ops/elementwise.h"

#include <cmath>
#include <limits>
#include <utility>

#include "autograd/autocast.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"
#include "core/unary_functors.h"

namespace hh {

static const OpName reg_neg("neg"), reg_abs("abs"), reg_exp("exp"), reg_log("log"), reg_log1p("log1p"),
    reg_sqrt("sqrt"), reg_rsqrt("rsqrt"), reg_square("square"), reg_sin("sin"), reg_cos("cos"), reg_tanh("tanh"),
    reg_sigmoid("sigmoid"), reg_relu("relu"), reg_elu("elu"), reg_gelu("gelu"), reg_silu("silu"),
    reg_softplus("softplus"), reg_clamp("clamp"), reg_pow("pow"), reg_add("add"), reg_sub("sub"), reg_mul("mul"),
    reg_div("div"), reg_maximum("maximum"), reg_minimum("minimum"), reg_eq("eq"), reg_ne("ne"), reg_lt("lt"),
    reg_le("le"), reg_gt("gt"), reg_ge("ge"), reg_where("where"), reg_masked_fill("masked_fill"),
    reg_sign("sign");

namespace {

bool is_half(DType t) { return t == DType::bf16 || t == DType::f16; }

// A 0-d tensor holding `v`; binary ops broadcast it with a zero stride (no per-element memory).
Tensor constant(double v, DType t, Device d) { return full({}, v, {t, d}); }

// True when `v` is an integer that dtype `t` (integral) represents exactly.
bool fits_integral(DType t, double v) {
  if (v != std::floor(v)) return false;
  switch (t) {
    case DType::i32: return v >= -2147483648.0 && v <= 2147483647.0;
    case DType::i64: return v >= -9223372036854775808.0 && v < 9223372036854775808.0;
    case DType::u8: return v >= 0.0 && v <= 255.0;
    case DType::i8: return v >= -128.0 && v <= 127.0;
    default: return false;  // bool: no arithmetic
  }
}

// ---- unary -------------------------------------------------------------------------------------

// Autocast's f32 list (autograd/autocast.h) among the unary ops, as torch's: functions whose
// result needs more range or precision than bf16 gives (exp, log, powers, reciprocals).
bool on_autocast_f32_list(UnaryOp op) {
  switch (op) {
    case UnaryOp::exp: case UnaryOp::log: case UnaryOp::log1p: case UnaryOp::rsqrt: case UnaryOp::softplus:
    case UnaryOp::pow_scalar: case UnaryOp::rdiv_scalar:
      return true;
    default:
      return false;
  }
}

Tensor unary_op(const char* name, UnaryOp op, const Tensor& x, const UnaryParams& p = {}) {
  HH_CHECK(is_floating(x.dtype()), name, ": expected a floating tensor, got ", x.dtype(), " of shape ", x.shape());
  if (is_half(x.dtype())) {
    Tensor r = unary_op(name, op, to_dtype(x, DType::f32), p);
    return AutocastMode::is_enabled() && on_autocast_f32_list(op) ? r : to_dtype(r, x.dtype());
  }
  Tensor xc = contiguous(x);  // x: any shape, computed as one flat run
  Tensor y = empty(xc.shape(), {xc.dtype(), xc.device()});
  if (y.numel() > 0) backend_of(y).unary(op, xc, y, p);
  if (!any_requires_grad({xc})) return y;
  // Save only what the fused derivative reads; the kernel gets some same-shaped tensor otherwise.
  UnaryUses uses = unary_uses(op);
  Tensor sx = uses.x ? detach(xc) : Tensor(), sy = uses.y ? y : Tensor();
  DType dt = y.dtype();
  return record(name, y, {xc}, {sx, sy}, [op, p, sx, sy, dt](const Tensor& g, const NeedsGrad&) {
    Tensor gc = contiguous(g.dtype() == dt ? g : to_dtype(g, dt));
    const Tensor& xs = sx.defined() ? sx : sy.defined() ? sy : gc;
    const Tensor& ys = sy.defined() ? sy : xs;
    Tensor gx = empty(gc.shape(), {dt, gc.device()});
    if (gx.numel() > 0) backend_of(gx).unary_backward(op, xs, ys, gc, gx, p);
    return std::vector<Tensor>{gx};
  });
}

// ---- binary ------------------------------------------------------------------------------------

void check_pair(const char* name, const Tensor& a, const Tensor& b) {
  HH_CHECK(a.device() == b.device(), name, ": tensors are on different devices: ", a.device(), " ", a.shape(),
           " and ", b.device(), " ", b.shape());
  HH_CHECK(a.dtype() == b.dtype(), name, ": dtype mismatch: ", a.dtype(), " ", a.shape(), " and ", b.dtype(), " ",
           b.shape(), " (cast one with .to(dtype))");
}

// out = a op b on already expanded, same-dtype operands; no autograd.
Tensor binary_raw(BinaryOp op, const Tensor& ae, const Tensor& be) {
  Tensor out = empty(ae.shape(), {is_comparison(op) ? DType::boolean : ae.dtype(), ae.device()});
  if (out.numel() > 0) backend_of(out).binary(op, ae, be, out);
  return out;
}

// out = cond ? a : b on already expanded operands; no autograd.
Tensor where_raw(const Tensor& ce, const Tensor& ae, const Tensor& be) {
  Tensor out = empty(ae.shape(), {ae.dtype(), ae.device()});
  if (out.numel() > 0) backend_of(out).where(ce, ae, be, out);
  return out;
}

// Backward of a binary op, given the incoming gradient and the saved tensors (all of the
// broadcast shape; a/b/out undefined unless requested through `saves`).
using BinaryGrad = std::vector<Tensor> (*)(const Tensor& g, const Tensor& a, const Tensor& b, const Tensor& out,
                                           const NeedsGrad& needs);
enum Saves : unsigned { kSaveNone = 0, kSaveA = 1, kSaveB = 2, kSaveOut = 4 };

// Under autocast, operands of two different floating dtypes are cast to the wider one (the promote
// list of autograd/autocast.h); otherwise they are returned as they are.
std::pair<Tensor, Tensor> autocast_promoted(const Tensor& a, const Tensor& b) {
  if (!AutocastMode::is_enabled() || a.dtype() == b.dtype() || !is_floating(a.dtype()) || !is_floating(b.dtype()))
    return {a, b};
  const DType t = autocast_promote(a.dtype(), b.dtype());
  return {to_dtype(a, t), to_dtype(b, t)};
}

Tensor binary_op(const char* name, BinaryOp op, const Tensor& a_in, const Tensor& b_in, BinaryGrad grad = nullptr,
                 unsigned saves = kSaveNone) {
  const std::pair<Tensor, Tensor> ab = autocast_promoted(a_in, b_in);
  const Tensor &a = ab.first, &b = ab.second;
  check_pair(name, a, b);
  Shape s = broadcast_shapes(a.shape(), b.shape(), name);
  if (is_half(a.dtype())) {
    Tensor r = binary_op(name, op, to_dtype(a, DType::f32), to_dtype(b, DType::f32), grad, saves);
    return is_comparison(op) ? r : to_dtype(r, a.dtype());
  }
  HH_CHECK(is_comparison(op) || a.dtype() == DType::f32 || a.dtype() == DType::f64 || a.dtype() == DType::i32 ||
               a.dtype() == DType::i64,
           name, ": arithmetic on ", a.dtype(), " tensors is not supported (shapes ", a.shape(), " and ", b.shape(),
           ")");
  Tensor ae = expand(a, s), be = expand(b, s);
  Tensor out = binary_raw(op, ae, be);
  if (!grad || !any_requires_grad({ae, be})) return out;
  Tensor sa = saves & kSaveA ? detach(ae) : Tensor(), sb = saves & kSaveB ? detach(be) : Tensor();
  Tensor so = saves & kSaveOut ? out : Tensor();
  return record(name, out, {ae, be}, {sa, sb, so}, [grad, sa, sb, so](const Tensor& g, const NeedsGrad& needs) {
    return grad(g, sa, sb, so, needs);
  });
}

Tensor maybe(bool need, Tensor t) { return need ? t : Tensor(); }

std::vector<Tensor> add_grad(const Tensor& g, const Tensor&, const Tensor&, const Tensor&, const NeedsGrad& n) {
  return {maybe(n[0], g), maybe(n[1], g)};
}
std::vector<Tensor> sub_grad(const Tensor& g, const Tensor&, const Tensor&, const Tensor&, const NeedsGrad& n) {
  return {maybe(n[0], g), n[1] ? neg(g) : Tensor()};
}
std::vector<Tensor> mul_grad(const Tensor& g, const Tensor& a, const Tensor& b, const Tensor&, const NeedsGrad& n) {
  return {n[0] ? mul(g, b) : Tensor(), n[1] ? mul(g, a) : Tensor()};
}
// d(a/b) = g/b, -g a / b^2
std::vector<Tensor> div_grad(const Tensor& g, const Tensor& a, const Tensor& b, const Tensor&, const NeedsGrad& n) {
  return {n[0] ? div(g, b) : Tensor(), n[1] ? neg(div(mul(g, a), mul(b, b))) : Tensor()};
}
// d(a^b) = g b a^(b-1) (0 where b == 0), g a^b log(a) (0 where a == 0, as torch for b >= 0)
std::vector<Tensor> pow_grad(const Tensor& g, const Tensor& a, const Tensor& b, const Tensor& out,
                             const NeedsGrad& n) {
  Tensor ga, gb;
  Tensor zero = constant(0.0, g.dtype(), g.device()).expand(g.shape());
  if (n[0]) ga = where_raw(eq(b, 0.0), zero, mul(g, mul(b, pow(a, sub(b, 1.0)))));
  if (n[1]) gb = where_raw(eq(a, 0.0), zero, mul(g, mul(out, log(a))));
  return {ga, gb};
}
// The gradient goes to the larger (smaller) input; ties split it 0.5 / 0.5 like torch.
std::vector<Tensor> extremum_grad(const Tensor& g, const Tensor& a, const Tensor& b, bool is_max,
                                  const NeedsGrad& n) {
  Tensor wins = to_dtype(is_max ? gt(a, b) : lt(a, b), g.dtype());
  Tensor ties = to_dtype(eq(a, b), g.dtype());
  Tensor ga = mul(g, add(wins, mul(ties, 0.5)));
  return {maybe(n[0], ga), n[1] ? sub(g, ga) : Tensor()};
}
std::vector<Tensor> max_grad(const Tensor& g, const Tensor& a, const Tensor& b, const Tensor&, const NeedsGrad& n) {
  return extremum_grad(g, a, b, true, n);
}
std::vector<Tensor> min_grad(const Tensor& g, const Tensor& a, const Tensor& b, const Tensor&, const NeedsGrad& n) {
  return extremum_grad(g, a, b, false, n);
}

Tensor promote_int(const Tensor& x) { return is_floating(x.dtype()) ? x : to_dtype(x, DType::f32); }

// Tensor-scalar arithmetic on an integral tensor: stays integral when `v` is an integer the
// dtype holds, otherwise the tensor is promoted to f32 (like torch's int + 2.5).
bool stays_integral(const Tensor& a, double v) { return !is_floating(a.dtype()) && fits_integral(a.dtype(), v); }

// Comparison of any tensor with a scalar. Integral tensors compare exactly: a fractional
// scalar is rounded the way that keeps the answer (x < 2.5 is x < 3), and a scalar outside the
// dtype's range gives a constant result.
Tensor compare_scalar(const char* name, BinaryOp op, const Tensor& a, double v) {
  if (is_floating(a.dtype())) {
    Tensor x = is_half(a.dtype()) ? to_dtype(a, DType::f32) : a;
    return binary_op(name, op, x, constant(v, x.dtype(), x.device()));
  }
  Tensor x = a.dtype() == DType::boolean || a.dtype() == DType::u8 ? to_dtype(a, DType::i32) : a;
  double c = v;
  if (v != std::floor(v) && !std::isnan(v)) {
    if (op == BinaryOp::eq || op == BinaryOp::ne) return full(a.shape(), op == BinaryOp::ne, {DType::boolean, a.device()});
    c = (op == BinaryOp::lt || op == BinaryOp::ge) ? std::ceil(v) : std::floor(v);
  }
  if (!fits_integral(x.dtype(), c) && x.dtype() == DType::i32) x = to_dtype(x, DType::i64);
  if (!fits_integral(x.dtype(), c)) {  // NaN or beyond i64: every element compares the same way
    bool above = c > 0, r = false;
    switch (op) {
      case BinaryOp::ne: r = true; break;
      case BinaryOp::lt: case BinaryOp::le: r = !std::isnan(c) && above; break;
      case BinaryOp::gt: case BinaryOp::ge: r = !std::isnan(c) && !above; break;
      default: r = false;
    }
    return full(a.shape(), r, {DType::boolean, a.device()});
  }
  return binary_op(name, op, x, constant(c, x.dtype(), x.device()));
}

}  // namespace

// ---- unary ops ---------------------------------------------------------------------------------

Tensor neg(const Tensor& x) {
  if (is_integral(x.dtype())) return binary_op("neg", BinaryOp::sub, constant(0.0, x.dtype(), x.device()), x);
  return unary_op("neg", UnaryOp::neg, x);
}
Tensor abs(const Tensor& x) { return unary_op("abs", UnaryOp::abs, x); }
Tensor exp(const Tensor& x) { return unary_op("exp", UnaryOp::exp, x); }
Tensor log(const Tensor& x) { return unary_op("log", UnaryOp::log, x); }
Tensor log1p(const Tensor& x) { return unary_op("log1p", UnaryOp::log1p, x); }
Tensor sqrt(const Tensor& x) { return unary_op("sqrt", UnaryOp::sqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary_op("rsqrt", UnaryOp::rsqrt, x); }
Tensor square(const Tensor& x) { return unary_op("square", UnaryOp::square, x); }
Tensor sin(const Tensor& x) { return unary_op("sin", UnaryOp::sin, x); }
Tensor cos(const Tensor& x) { return unary_op("cos", UnaryOp::cos, x); }
Tensor tanh(const Tensor& x) { return unary_op("tanh", UnaryOp::tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary_op("sigmoid", UnaryOp::sigmoid, x); }
Tensor relu(const Tensor& x) { return unary_op("relu", UnaryOp::relu, x); }
Tensor elu(const Tensor& x, double alpha) { return unary_op("elu", UnaryOp::elu, x, {alpha, 0.0}); }
Tensor gelu(const Tensor& x, const std::string& approximate) {
  HH_CHECK(approximate == "none" || approximate == "tanh", "gelu: approximate must be \"none\" or \"tanh\", got \"",
           approximate, "\"");
  return unary_op("gelu", approximate == "none" ? UnaryOp::gelu_erf : UnaryOp::gelu_tanh, x);
}
Tensor silu(const Tensor& x) { return unary_op("silu", UnaryOp::silu, x); }
Tensor softplus(const Tensor& x, double beta, double threshold) {
  HH_CHECK(beta != 0.0, "softplus: beta must be non-zero");
  return unary_op("softplus", UnaryOp::softplus, x, {beta, threshold});
}
Tensor clamp(const Tensor& x, double lo, double hi) {
  HH_CHECK(!(lo > hi), "clamp: lo ", lo, " is greater than hi ", hi);
  return unary_op("clamp", UnaryOp::clamp, x, {lo, hi});
}
Tensor pow(const Tensor& x, double exponent) {
  if (stays_integral(x, exponent) && exponent >= 0)
    return binary_op("pow", BinaryOp::pow, x, constant(exponent, x.dtype(), x.device()));
  return unary_op("pow", UnaryOp::pow_scalar, promote_int(x), {exponent, 0.0});
}
Tensor pow(double base, const Tensor& x) {
  Tensor e = promote_int(x);
  DType t = is_half(e.dtype()) ? DType::f32 : e.dtype();
  Tensor r = pow(constant(base, t, e.device()), to_dtype(e, t));
  return to_dtype(r, e.dtype());
}
Tensor sign(const Tensor& x) {
  // Not differentiable: the result is cut from the graph (its gradient is zero almost everywhere).
  NoGradGuard no_grad;
  return unary_op("sign", UnaryOp::sign, x);
}

// ---- binary ops --------------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) { return binary_op("add", BinaryOp::add, a, b, add_grad); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary_op("sub", BinaryOp::sub, a, b, sub_grad); }
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary_op("mul", BinaryOp::mul, a, b, mul_grad, kSaveA | kSaveB);
}
Tensor div(const Tensor& a, const Tensor& b) {
  if (is_integral(a.dtype()) && a.dtype() == b.dtype()) return div(promote_int(a), promote_int(b));  // true division
  return binary_op("div", BinaryOp::div, a, b, div_grad, kSaveA | kSaveB);
}
Tensor pow(const Tensor& a, const Tensor& b) {
  return binary_op("pow", BinaryOp::pow, a, b, pow_grad, kSaveA | kSaveB | kSaveOut);
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary_op("maximum", BinaryOp::maximum, a, b, max_grad, kSaveA | kSaveB);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary_op("minimum", BinaryOp::minimum, a, b, min_grad, kSaveA | kSaveB);
}

Tensor add(const Tensor& a, double b) {
  if (stays_integral(a, b)) return add(a, constant(b, a.dtype(), a.device()));
  return unary_op("add", UnaryOp::add_scalar, promote_int(a), {b, 0.0});
}
Tensor sub(const Tensor& a, double b) {
  if (stays_integral(a, b)) return sub(a, constant(b, a.dtype(), a.device()));
  return unary_op("sub", UnaryOp::add_scalar, promote_int(a), {-b, 0.0});
}
Tensor sub(double a, const Tensor& b) {
  if (stays_integral(b, a)) return sub(constant(a, b.dtype(), b.device()), b);
  return unary_op("sub", UnaryOp::add_scalar, neg(promote_int(b)), {a, 0.0});
}
Tensor mul(const Tensor& a, double b) {
  if (stays_integral(a, b)) return mul(a, constant(b, a.dtype(), a.device()));
  return unary_op("mul", UnaryOp::mul_scalar, promote_int(a), {b, 0.0});
}
Tensor div(const Tensor& a, double b) {
  // A true division by a broadcast constant (not a multiply by 1/b): exact like torch.
  Tensor x = promote_int(a);
  DType t = is_half(x.dtype()) ? DType::f32 : x.dtype();
  return to_dtype(div(to_dtype(x, t), constant(b, t, x.device())), x.dtype());
}
Tensor div(double a, const Tensor& b) { return unary_op("div", UnaryOp::rdiv_scalar, promote_int(b), {a, 0.0}); }
Tensor maximum(const Tensor& a, double b) {
  Tensor x = stays_integral(a, b) ? a : promote_int(a);
  return maximum(x, constant(b, x.dtype(), x.device()));
}
Tensor minimum(const Tensor& a, double b) {
  Tensor x = stays_integral(a, b) ? a : promote_int(a);
  return minimum(x, constant(b, x.dtype(), x.device()));
}

// ---- comparisons -------------------------------------------------------------------------------

Tensor eq(const Tensor& a, const Tensor& b) { return binary_op("eq", BinaryOp::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary_op("ne", BinaryOp::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary_op("lt", BinaryOp::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary_op("le", BinaryOp::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_op("gt", BinaryOp::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary_op("ge", BinaryOp::ge, a, b); }
Tensor eq(const Tensor& a, double b) { return compare_scalar("eq", BinaryOp::eq, a, b); }
Tensor ne(const Tensor& a, double b) { return compare_scalar("ne", BinaryOp::ne, a, b); }
Tensor lt(const Tensor& a, double b) { return compare_scalar("lt", BinaryOp::lt, a, b); }
Tensor le(const Tensor& a, double b) { return compare_scalar("le", BinaryOp::le, a, b); }
Tensor gt(const Tensor& a, double b) { return compare_scalar("gt", BinaryOp::gt, a, b); }
Tensor ge(const Tensor& a, double b) { return compare_scalar("ge", BinaryOp::ge, a, b); }

// ---- selection ---------------------------------------------------------------------------------

Tensor where(const Tensor& cond, const Tensor& a_in, const Tensor& b_in) {
  const std::pair<Tensor, Tensor> ab = autocast_promoted(a_in, b_in);
  const Tensor &a = ab.first, &b = ab.second;
  HH_CHECK(cond.dtype() == DType::boolean, "where: condition must be a bool tensor, got ", cond.dtype(), " of shape ",
           cond.shape());
  HH_CHECK(cond.device() == a.device(), "where: condition is on ", cond.device(), " but values are on ", a.device());
  check_pair("where", a, b);
  Shape s = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor ce = expand(cond, s), ae = expand(a, s), be = expand(b, s);  // cond, a, b: s
  Tensor out = where_raw(ce, ae, be);
  Tensor saved = detach(ce);
  return record("where", out, {ae, be}, {saved}, [saved](const Tensor& g, const NeedsGrad& needs) {
    Tensor zero = constant(0.0, g.dtype(), g.device()).expand(g.shape());
    return std::vector<Tensor>{needs[0] ? where_raw(saved, g, zero) : Tensor(),
                               needs[1] ? where_raw(saved, zero, g) : Tensor()};
  });
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  HH_CHECK(mask.dtype() == DType::boolean, "masked_fill: mask must be a bool tensor, got ", mask.dtype(),
           " of shape ", mask.shape());
  HH_CHECK(mask.device() == x.device(), "masked_fill: mask is on ", mask.device(), " but x is on ", x.device());
  HH_CHECK(broadcast_shapes(x.shape(), mask.shape(), "masked_fill") == x.shape(), "masked_fill: mask of shape ",
           mask.shape(), " does not broadcast to x of shape ", x.shape());
  Tensor me = expand(mask, x.shape());  // mask: x's shape
  Tensor out = where_raw(me, constant(value, x.dtype(), x.device()).expand(x.shape()), x);
  Tensor saved = detach(me);
  return record("masked_fill", out, {x}, {saved}, [saved](const Tensor& g, const NeedsGrad&) {
    return std::vector<Tensor>{where_raw(saved, constant(0.0, g.dtype(), g.device()).expand(g.shape()), g)};
  });
}

}  // namespace hh
