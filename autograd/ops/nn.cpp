// Fused nn ops: softmax / log_softmax, layer_norm, rms_norm, cross_entropy (fused kernels with
// fused backward kernels), mse_loss and dropout (one node each, computed with primitive ops).
// bf16/f16 inputs are cast to f32, computed, and cast back (the casts carry the gradient).
// Saved tensors are detached copies, so a node never keeps its own output's graph alive.
#include "autograd/ops/nn.h"

#include "autograd/autocast.h"
#include "autograd/ops/nn_node.h"

#include <cmath>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"

namespace hh {

static const OpName reg_softmax("softmax"), reg_log_softmax("log_softmax"), reg_layer_norm("layer_norm"),
    reg_rms_norm("rms_norm"), reg_cross_entropy("cross_entropy"), reg_mse_loss("mse_loss"), reg_dropout("dropout");

namespace {

bool is_half(DType t) { return t == DType::bf16 || t == DType::f16; }

// Half inputs compute in f32; undefined tensors stay undefined.
Tensor to_compute(const Tensor& t) { return t.defined() && is_half(t.dtype()) ? to_dtype(t, DType::f32) : t; }

void check_float(const char* op, const char* what, const Tensor& t) {
  HH_CHECK(is_floating(t.dtype()), op, ": ", what, " must be a floating tensor, got ", t.dtype(), " of shape ",
           t.shape());
}

void check_same_device(const char* op, const char* what, const Tensor& x, const Tensor& t) {
  HH_CHECK(t.device() == x.device(), op, ": ", what, " is on ", t.device().str(), " but the input is on ",
           x.device().str());
}

// Product of all dims but the last (number of rows when the last dim is reduced).
int64_t leading(const Shape& s) {
  int64_t n = 1;
  for (size_t i = 0; i + 1 < s.size(); ++i) n *= s[i];
  return n;
}

// A contiguous tensor viewed as (n, r), without autograd (kernel argument).
Tensor as_rows(const Tensor& t, int64_t n, int64_t r) { return detach(t).as_strided({n, r}, {r, 1}, t.offset()); }
Tensor as_vec(const Tensor& t) { return detach(t).as_strided({t.numel()}, {1}, t.offset()); }

// The incoming gradient as a contiguous tensor of the forward's dtype.
Tensor grad_like(const Tensor& g, DType t) { return contiguous(g.dtype() == t ? g : to_dtype(g, t)); }

// ---- softmax / log_softmax ----

Tensor softmax_impl(const Tensor& x, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  check_float(op, "input", x);
  if (is_half(x.dtype())) return to_dtype(softmax_impl(to_compute(x), dim, log), x.dtype());
  if (x.dim() == 0) {
    wrap_dim(dim, 1, op);
    return reshape(softmax_impl(reshape(x, {1}), 0, log), {});
  }
  dim = wrap_dim(dim, x.dim(), op);
  if (dim != x.dim() - 1) return transpose(softmax_impl(transpose(x, dim, -1), -1, log), dim, -1);
  // x: (..., R) -> rows (N, R)
  Tensor xc = contiguous(x);
  const int64_t r = x.shape().back(), n = leading(x.shape());
  Tensor y = empty(x.shape(), {x.dtype(), x.device()});
  if (y.numel() > 0) backend_of(y).softmax(as_rows(xc, n, r), as_rows(y, n, r), log);
  Tensor ys = detach(y);
  return record(op, y, {xc}, {ys}, [ys, n, r, log](const Tensor& g, const NeedsGrad&) {
    Tensor gc = grad_like(g, ys.dtype());
    Tensor gx = empty(ys.shape(), {ys.dtype(), ys.device()});
    if (gx.numel() > 0) backend_of(gx).softmax_backward(as_rows(ys, n, r), as_rows(gc, n, r), as_rows(gx, n, r), log);
    return std::vector<Tensor>{gx};
  });
}

// ---- norms ----

// weight/bias (C) of x's dtype and device, or undefined.
void check_param(const char* op, const char* what, const Tensor& x, const Tensor& p) {
  if (!p.defined()) return;
  const int64_t c = x.shape().back();
  HH_CHECK(p.shape() == Shape{c}, op, ": ", what, " must have shape (", c, ",) to match the last dim of input ",
           x.shape(), ", got ", p.shape());
  HH_CHECK(p.dtype() == x.dtype(), op, ": ", what, " has dtype ", p.dtype(), " but the input has ", x.dtype());
  check_same_device(op, what, x, p);
}

void check_norm_input(const char* op, const Tensor& x, double eps) {
  check_float(op, "input", x);
  HH_CHECK(x.dim() >= 1, op, ": input must have at least 1 dim (normalized over the last), got shape ", x.shape());
  HH_CHECK(eps >= 0.0, op, ": eps must be >= 0, got ", eps);
}

Tensor contiguous_or_undef(const Tensor& t) { return t.defined() ? contiguous(t) : t; }
Tensor detach_or_undef(const Tensor& t) { return t.defined() ? detach(t) : t; }

// ---- losses ----

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::mean: return "mean";
    case Reduction::sum: return "sum";
    case Reduction::none: return "none";
  }
  return "?";
}

}  // namespace

Tensor record_layer_norm(const char* op, const Tensor& y, const Tensor& xc, const Tensor& wc, const Tensor& bc,
                         const Tensor& mean, const Tensor& rstd) {
  const int64_t c = xc.shape().back(), n = leading(xc.shape());
  Tensor xs = detach(xc), wd = detach_or_undef(wc);
  return record(op, y, {xc, wc, bc}, {xs, wd}, [xs, wd, mean, rstd, n, c](const Tensor& g, const NeedsGrad& needs) {
    Tensor gc = grad_like(g, xs.dtype());
    Options o{xs.dtype(), xs.device()};
    Tensor gx = empty(xs.shape(), o);
    Tensor gw = needs[1] ? empty({c}, o) : Tensor(), gb = needs[2] ? empty({c}, o) : Tensor();
    if (gx.numel() > 0) {
      backend_of(gx).layer_norm_backward(as_rows(xs, n, c), wd, mean, rstd, as_rows(gc, n, c), as_rows(gx, n, c), gw,
                                         gb);
    } else {  // no rows: parameter gradients are empty sums
      if (gw.defined()) gw = zeros({c}, o);
      if (gb.defined()) gb = zeros({c}, o);
    }
    return std::vector<Tensor>{gx, gw, gb};
  });
}

Tensor record_rms_norm(const char* op, const Tensor& y, const Tensor& xc, const Tensor& wc, const Tensor& rstd) {
  const int64_t c = xc.shape().back(), n = leading(xc.shape());
  Tensor xs = detach(xc), wd = detach_or_undef(wc);
  return record(op, y, {xc, wc}, {xs, wd}, [xs, wd, rstd, n, c](const Tensor& g, const NeedsGrad& needs) {
    Tensor gc = grad_like(g, xs.dtype());
    Options o{xs.dtype(), xs.device()};
    Tensor gx = empty(xs.shape(), o);
    Tensor gw = needs[1] ? empty({c}, o) : Tensor();
    if (gx.numel() > 0)
      backend_of(gx).rms_norm_backward(as_rows(xs, n, c), wd, rstd, as_rows(gc, n, c), as_rows(gx, n, c), gw);
    else if (gw.defined())
      gw = zeros({c}, o);
    return std::vector<Tensor>{gx, gw};
  });
}

// The ops below are on autocast's f32 list (autograd/autocast.h): under autocast, bf16/f16 inputs
// are cast to f32 and the results stay f32.
Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(autocast_f32(x), dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(autocast_f32(x), dim, true); }

Tensor layer_norm(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, double eps) {
  const char* op = "layer_norm";
  const Tensor x = autocast_f32(x_in), weight = autocast_f32(weight_in), bias = autocast_f32(bias_in);
  check_norm_input(op, x, eps);
  check_param(op, "weight", x, weight);
  check_param(op, "bias", x, bias);
  if (is_half(x.dtype()))
    return to_dtype(layer_norm(to_compute(x), to_compute(weight), to_compute(bias), eps), x.dtype());
  // x: (..., C) -> rows (N, C); mean, rstd: (N)
  const int64_t c = x.shape().back(), n = leading(x.shape());
  Tensor xc = contiguous(x), wc = contiguous_or_undef(weight), bc = contiguous_or_undef(bias);
  Options o{x.dtype(), x.device()};
  Tensor y = empty(x.shape(), o), mean = empty({n}, o), rstd = empty({n}, o);
  Tensor wd = detach_or_undef(wc), bd = detach_or_undef(bc);
  if (y.numel() > 0) backend_of(y).layer_norm(as_rows(xc, n, c), wd, bd, eps, as_rows(y, n, c), mean, rstd);
  return record_layer_norm(op, y, xc, wc, bc, mean, rstd);
}

Tensor rms_norm(const Tensor& x_in, const Tensor& weight_in, double eps) {
  const char* op = "rms_norm";
  const Tensor x = autocast_f32(x_in), weight = autocast_f32(weight_in);
  check_norm_input(op, x, eps);
  check_param(op, "weight", x, weight);
  if (is_half(x.dtype())) return to_dtype(rms_norm(to_compute(x), to_compute(weight), eps), x.dtype());
  // x: (..., C) -> rows (N, C); rstd: (N)
  const int64_t c = x.shape().back(), n = leading(x.shape());
  Tensor xc = contiguous(x), wc = contiguous_or_undef(weight);
  Options o{x.dtype(), x.device()};
  Tensor y = empty(x.shape(), o), rstd = empty({n}, o);
  Tensor wd = detach_or_undef(wc);
  if (y.numel() > 0) backend_of(y).rms_norm(as_rows(xc, n, c), wd, eps, as_rows(y, n, c), rstd);
  return record_rms_norm(op, y, xc, wc, rstd);
}

// mean divides by the number of non-ignored rows; when every row is ignored that is 0/0 = NaN,
// as in torch (the gradient is then all zeros: ignored rows never receive gradient).
Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, int64_t ignore_index, double label_smoothing,
                     Reduction reduction) {
  const char* op = "cross_entropy";
  const Tensor logits = autocast_f32(logits_in);
  check_float(op, "logits", logits);
  HH_CHECK(logits.dim() >= 1, op, ": logits must be (..., V), got shape ", logits.shape());
  HH_CHECK(target.dtype() == DType::i64 || target.dtype() == DType::i32, op,
           ": target must hold class ids as i64 (or i32), got ", target.dtype(), " of shape ", target.shape());
  const Shape rows_shape(logits.shape().begin(), logits.shape().end() - 1);
  HH_CHECK(target.shape() == rows_shape, op, ": target shape ", target.shape(), " does not match logits ",
           logits.shape(), " (expected ", rows_shape, ")");
  check_same_device(op, "target", logits, target);
  HH_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, op, ": label_smoothing must be in [0, 1], got ",
           label_smoothing);
  const int64_t v = logits.shape().back(), n = leading(logits.shape());
  HH_CHECK(v > 0, op, ": logits ", logits.shape(), " have no classes (V = 0)");
  if (is_half(logits.dtype()))
    return to_dtype(cross_entropy(to_compute(logits), target, ignore_index, label_smoothing, reduction),
                    logits.dtype());
  // logits: (..., V) -> (N, V); target: (...) -> (N); loss, lse: (N)
  Tensor xc = contiguous(logits);
  Tensor tc = contiguous(target.dtype() == DType::i64 ? target : to_dtype(target, DType::i64));
  Options o{logits.dtype(), logits.device()};
  Tensor loss = empty({n}, o), lse = empty({n}, o);
  CrossEntropyParams p;
  p.ignore_index = ignore_index;
  p.label_smoothing = label_smoothing;
  if (n > 0) backend_of(loss).cross_entropy(as_rows(xc, n, v), as_vec(tc), p, loss, lse);
  Tensor out, count;
  {
    NoGradGuard ng;
    switch (reduction) {
      case Reduction::none: out = loss.as_strided(rows_shape, contiguous_strides(rows_shape), 0); break;
      case Reduction::sum: out = sum(loss); break;
      case Reduction::mean:
        count = sum(to_dtype(ne(as_vec(tc), static_cast<double>(ignore_index)), o.dtype));
        out = div(sum(loss), count);
        break;
    }
  }
  Tensor xs = detach(xc), ts = as_vec(tc);
  return record(op, out, {xc}, {xs, ts}, [xs, ts, lse, count, p, reduction, n, v](const Tensor& g, const NeedsGrad&) {
    Tensor gc = grad_like(g, xs.dtype());
    Tensor gloss;  // (N)
    switch (reduction) {
      case Reduction::none: gloss = as_vec(gc); break;
      case Reduction::sum: gloss = contiguous(expand(gc, {n})); break;
      case Reduction::mean: gloss = contiguous(expand(div(gc, count), {n})); break;
    }
    Tensor gx = empty(xs.shape(), {xs.dtype(), xs.device()});
    if (n > 0) backend_of(gx).cross_entropy_backward(as_rows(xs, n, v), ts, lse, gloss, p, as_rows(gx, n, v));
    return std::vector<Tensor>{gx};
  });
}

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  const char* op = "mse_loss";
  const Tensor input = autocast_f32(input_in), target = autocast_f32(target_in);
  check_float(op, "input", input);
  check_float(op, "target", target);
  HH_CHECK(input.shape() == target.shape(), op, ": input shape ", input.shape(), " and target shape ",
           target.shape(), " differ (reduction ", reduction_name(reduction), ")");
  HH_CHECK(input.dtype() == target.dtype(), op, ": input has dtype ", input.dtype(), " but target has ",
           target.dtype());
  check_same_device(op, "target", input, target);
  if (is_half(input.dtype()))
    return to_dtype(mse_loss(to_compute(input), to_compute(target), reduction), input.dtype());
  Tensor d, out;
  {
    NoGradGuard ng;
    d = sub(detach(input), detach(target));
    Tensor sq = mul(d, d);
    out = reduction == Reduction::none ? sq : reduction == Reduction::sum ? sum(sq) : mean(sq);
  }
  const double scale = reduction == Reduction::mean ? 2.0 / static_cast<double>(input.numel()) : 2.0;
  return record(op, out, {input, target}, [d, scale](const Tensor& g, const NeedsGrad& needs) {
    Tensor gi = mul(d, mul(g, scale));  // g is a scalar (mean/sum) or d's shape (none)
    return std::vector<Tensor>{needs[0] ? gi : Tensor(), needs[1] ? neg(gi) : Tensor()};
  });
}

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  const char* op = "dropout";
  HH_CHECK(p >= 0.0 && p <= 1.0, op, ": probability p must be in [0, 1], got ", p);
  check_float(op, "input", x);
  if (!training || p == 0.0) return x;
  if (is_half(x.dtype())) return to_dtype(dropout(to_compute(x), p, training, gen), x.dtype());
  Options o{x.dtype(), x.device()};
  Tensor mask, out;
  {
    NoGradGuard ng;
    // keep with probability 1-p, scaled so the expectation is unchanged; p == 1 drops everything
    mask = p == 1.0 ? zeros(x.shape(), o) : mul(bernoulli(x.shape(), 1.0 - p, gen, o), 1.0 / (1.0 - p));
    out = mul(detach(x), mask);
  }
  return record(op, out, {x}, [mask](const Tensor& g, const NeedsGrad&) {
    return std::vector<Tensor>{mul(g, mask)};
  });
}

}  // namespace hh
