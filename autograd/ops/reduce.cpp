// Reductions over any set of dims (sum, mean, var, logsumexp, norm, amax/amin, max/min with
// indices, argmax/argmin) and cumsum. Every reduction views its input as a contiguous
// (O,R,I) block for the backend kernel: directly when the reduced dims are adjacent, otherwise
// after permuting them to the end (one copy, I = 1). bf16/f16 compute in f32 and cast back;
// integer inputs are allowed where torch allows them and never carry gradients.
#include "autograd/ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"

namespace hh {

static const OpName reg_sum("sum"), reg_mean("mean"), reg_var("var"), reg_logsumexp("logsumexp"), reg_norm("norm"),
    reg_amax("amax"), reg_amin("amin"), reg_max("max"), reg_min("min"), reg_argmax("argmax"), reg_argmin("argmin"),
    reg_cumsum("cumsum");

namespace {

// How x is reduced: which dims, the output shapes, and the kernel's (O,R,I) view.
struct Plan {
  std::vector<bool> reduced;  // per dim of x
  Shape keep_shape;           // x's shape with the reduced dims set to 1
  Shape out_shape;            // keep_shape, or without the reduced dims when !keepdim
  int64_t O = 1, R = 1, I = 1;
  std::vector<int64_t> perm;  // kept dims then reduced dims, when the reduced dims are not one block
};

// dims: empty = all; negative dims wrap; a repeated dim is an error naming the op and shape.
Plan make_plan(const Tensor& x, const Dims& dims, bool keepdim, const char* op) {
  const Shape& s = x.shape();
  const int64_t n = x.dim(), lim = std::max<int64_t>(n, 1);  // a 0-d tensor accepts dim 0 / -1
  Plan p;
  p.reduced.assign(s.size(), dims.empty());
  std::vector<bool> seen(static_cast<size_t>(lim), false);
  for (int64_t d : dims) {
    HH_CHECK(d >= -lim && d < lim, op, ": dim ", d, " out of range for a tensor of shape ", s);
    const size_t w = static_cast<size_t>(d < 0 ? d + lim : d);
    HH_CHECK(!seen[w], op, ": dim ", w, " appears more than once in the reduction dims of a tensor of shape ", s);
    seen[w] = true;
    if (n > 0) p.reduced[w] = true;
  }
  int64_t first = -1, last = -1;
  for (int64_t d = 0; d < n; ++d)
    if (p.reduced[static_cast<size_t>(d)]) {
      if (first < 0) first = d;
      last = d;
    }
  // Size-1 kept dims inside the span do not break contiguity of the reduced block.
  bool block = true;
  for (int64_t d = first + 1; d < last; ++d)
    if (!p.reduced[static_cast<size_t>(d)] && s[static_cast<size_t>(d)] != 1) block = false;
  for (int64_t d = 0; d < n; ++d) {
    const size_t u = static_cast<size_t>(d);
    const bool red = p.reduced[u];
    p.keep_shape.push_back(red ? 1 : s[u]);
    if (!red || keepdim) p.out_shape.push_back(red ? 1 : s[u]);
    if (block) {
      (d < first ? p.O : d <= last ? p.R : p.I) *= s[u];
    } else {
      (red ? p.R : p.O) *= s[u];
    }
  }
  if (!block) {
    for (int64_t d = 0; d < n; ++d)
      if (!p.reduced[static_cast<size_t>(d)]) p.perm.push_back(d);
    for (int64_t d = 0; d < n; ++d)
      if (p.reduced[static_cast<size_t>(d)]) p.perm.push_back(d);
  }
  return p;
}

// The dtype the kernels run in: f32/f64 as is, bf16/f16 in f32; integers (when allowed) in i64,
// or as is for i32 when keep_i32.
DType compute_dtype(DType t, const char* op, bool allow_int, bool keep_i32 = false) {
  if (t == DType::f32 || t == DType::f64) return t;
  if (t == DType::bf16 || t == DType::f16) return DType::f32;
  HH_CHECK(allow_int, op, ": expected a floating tensor, got ", t);
  return keep_i32 && t == DType::i32 ? DType::i32 : DType::i64;
}

Tensor as_dtype(const Tensor& t, DType d) { return t.dtype() == d ? t : to_dtype(t, d); }

// A contiguous tensor with t's shape viewed as `shape` (same numel), no autograd.
Tensor view_as_shape(const Tensor& t, const Shape& shape) {
  Tensor c = contiguous(detach(t));
  return c.as_strided(shape, contiguous_strides(shape), c.offset());
}

struct Reduced {
  Tensor values;   // out_shape, compute dtype
  Tensor indices;  // out_shape, i64 (undefined unless asked for)
};

Reduced run_reduce(ReduceOp op, const Tensor& x, const Plan& p, DType ct, bool want_idx) {
  Tensor xc = as_dtype(detach(x), ct);
  if (!p.perm.empty()) xc = permute(xc, p.perm);
  Tensor x3 = view_as_shape(xc, {p.O, p.R, p.I});
  Tensor v = empty({p.O, p.I}, {ct, x.device()});
  Tensor idx = want_idx ? empty({p.O, p.I}, {DType::i64, x.device()}) : Tensor();
  if (p.O * p.I > 0) backend_of(x).reduce(op, x3, v, idx);
  Reduced r;
  r.values = v.as_strided(p.out_shape, contiguous_strides(p.out_shape), 0);
  if (want_idx) r.indices = idx.as_strided(p.out_shape, contiguous_strides(p.out_shape), 0);
  return r;
}

void check_nonempty(const Plan& p, const Tensor& x, const char* op) {
  HH_CHECK(p.R > 0, op, ": cannot reduce over a zero-size dim of a tensor of shape ", x.shape(),
           " (the reduction has no identity)");
}

// amax / amin: gradient split evenly among the elements equal to the result.
Tensor extremum(const Tensor& x, const Dims& dims, bool keepdim, bool is_max) {
  const char* name = is_max ? "amax" : "amin";
  Plan p = make_plan(x, dims, keepdim, name);
  check_nonempty(p, x, name);
  const DType xt = x.dtype(), ct = compute_dtype(xt, name, true, true);
  Tensor out_c = run_reduce(is_max ? ReduceOp::max : ReduceOp::min, x, p, ct, false).values;
  Tensor out = as_dtype(out_c, xt);
  if (!is_floating(xt)) return out;
  Tensor xc = as_dtype(detach(x), ct), out_keep = out_c.as_strided(p.keep_shape, contiguous_strides(p.keep_shape), 0);
  Shape keep = p.keep_shape;
  return record(name, out, {x}, {xc, out_keep}, [xc, out_keep, keep, dims, ct, xt](const Tensor& g, const NeedsGrad&) {
    Tensor mask = to_dtype(eq(xc, out_keep), ct);  // (x's shape) 1 where x attains the extremum
    Tensor share = div(reshape(as_dtype(g, ct), keep), sum(mask, dims, true));
    return std::vector<Tensor>{as_dtype(mul(mask, share), xt)};
  });
}

// max / min along one dim with first-index ties; the gradient goes to the selected element.
ValuesIndices extremum_dim(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  const char* name = is_max ? "max" : "min";
  Plan p = make_plan(x, {dim}, keepdim, name);
  check_nonempty(p, x, name);
  const DType xt = x.dtype(), ct = compute_dtype(xt, name, true, true);
  Reduced r = run_reduce(is_max ? ReduceOp::max : ReduceOp::min, x, p, ct, true);
  ValuesIndices out{as_dtype(r.values, xt), r.indices};
  if (!is_floating(xt)) return out;
  const int64_t O = p.O, R = p.R, I = p.I;
  Tensor idx3 = r.indices.as_strided({O, 1, I}, {I, I, 1}, 0);
  Shape in = x.shape();
  out.values = record(name, out.values, {x}, {idx3}, [idx3, O, R, I, in](const Tensor& g, const NeedsGrad&) {
    Tensor g3 = reshape(g, {O, 1, I});
    Tensor gx = scatter_add(zeros({O, R, I}, {g.dtype(), g.device()}), 1, idx3, g3);
    return std::vector<Tensor>{reshape(gx, in)};
  });
  return out;
}

Tensor arg_extremum(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  const char* name = is_max ? "argmax" : "argmin";
  Plan p = make_plan(x, {dim}, keepdim, name);
  check_nonempty(p, x, name);
  const DType ct = compute_dtype(x.dtype(), name, true, true);
  return run_reduce(is_max ? ReduceOp::max : ReduceOp::min, x, p, ct, true).indices;
}

// t3 (O,R,I) contiguous -> a contiguous copy reversed along R.
Tensor flip_r(const Tensor& t3) {
  const int64_t O = t3.size(0), R = t3.size(1), I = t3.size(2);
  Tensor out = empty(t3.shape(), {t3.dtype(), t3.device()});
  if (t3.numel() == 0) return out;
  copy_(out, t3.as_strided({O, R, I}, {R * I, -I, 1}, t3.offset() + (R - 1) * I));
  return out;
}

}  // namespace

// sum, prod and cumsum are on autocast's f32 list (autograd/autocast.h): a bf16 input gives f32.
Tensor sum(const Tensor& x_in, const Dims& dims, bool keepdim) {
  const Tensor x = autocast_f32(x_in);
  Plan p = make_plan(x, dims, keepdim, "sum");
  const DType xt = x.dtype(), ct = compute_dtype(xt, "sum", true);
  Tensor out = run_reduce(ReduceOp::sum, x, p, ct, false).values;
  if (!is_floating(xt)) return out;  // integers sum to i64, without gradient
  Shape in = x.shape(), keep = p.keep_shape;
  return record("sum", as_dtype(out, xt), {x}, [in, keep](const Tensor& g, const NeedsGrad&) {
    return std::vector<Tensor>{expand(reshape(g, keep), in)};
  });
}

Tensor mean(const Tensor& x, const Dims& dims, bool keepdim) {
  Plan p = make_plan(x, dims, keepdim, "mean");
  const DType xt = x.dtype(), ct = compute_dtype(xt, "mean", false);
  Tensor out = as_dtype(run_reduce(ReduceOp::mean, x, p, ct, false).values, xt);
  Shape in = x.shape(), keep = p.keep_shape;
  const double n = static_cast<double>(p.R);
  return record("mean", out, {x}, [in, keep, n, ct, xt](const Tensor& g, const NeedsGrad&) {
    return std::vector<Tensor>{expand(as_dtype(div(reshape(as_dtype(g, ct), keep), n), xt), in)};
  });
}

Tensor var(const Tensor& x, const Dims& dims, int64_t correction, bool keepdim) {
  Plan p = make_plan(x, dims, keepdim, "var");
  const DType xt = x.dtype(), ct = compute_dtype(xt, "var", false);
  HH_CHECK(correction >= 0, "var: correction must be non-negative, got ", correction);
  // torch divides by max(0, N - correction): 0 gives inf/nan, as there.
  const double denom = std::max<double>(0.0, static_cast<double>(p.R - correction));
  Tensor dev, out;
  {
    NoGradGuard no_grad;
    Tensor xc = as_dtype(detach(x), ct);
    dev = sub(xc, mean(xc, dims, true));  // x - mean, (x's shape): two passes for accuracy
    out = div(sum(mul(dev, dev), dims, keepdim), denom);
  }
  Shape keep = p.keep_shape;
  return record("var", as_dtype(out, xt), {x}, [dev, keep, denom, ct, xt](const Tensor& g, const NeedsGrad&) {
    Tensor gk = mul(reshape(as_dtype(g, ct), keep), 2.0 / denom);
    return std::vector<Tensor>{as_dtype(mul(dev, gk), xt)};
  });
}

Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim) {
  Plan p = make_plan(x, dims, keepdim, "logsumexp");
  const DType xt = x.dtype(), ct = compute_dtype(xt, "logsumexp", false);
  Tensor xc = as_dtype(detach(x), ct), lse_keep;
  {
    NoGradGuard no_grad;
    if (p.R == 0) {
      lse_keep = full(p.keep_shape, -std::numeric_limits<double>::infinity(), {ct, x.device()});
    } else {
      // Subtract the max (0 where it is infinite, so all -inf rows give -inf, not nan).
      Tensor m = amax(xc, dims, true);
      m = masked_fill(m, eq(abs(m), std::numeric_limits<double>::infinity()), 0.0);
      lse_keep = add(log(sum(exp(sub(xc, m)), dims, true)), m);
    }
  }
  Tensor out = view_as_shape(lse_keep, p.out_shape);
  Shape keep = p.keep_shape;
  return record("logsumexp", as_dtype(out, xt), {x}, {xc, lse_keep},
                [xc, lse_keep, keep, ct, xt](const Tensor& g, const NeedsGrad&) {
    // d lse / dx = softmax(x) = exp(x - lse)
    Tensor gx = mul(exp(sub(xc, lse_keep)), reshape(as_dtype(g, ct), keep));
    return std::vector<Tensor>{as_dtype(gx, xt)};
  });
}

Tensor norm(const Tensor& x, double p, const Dims& dims, bool keepdim) {
  Plan pl = make_plan(x, dims, keepdim, "norm");
  const DType xt = x.dtype(), ct = compute_dtype(xt, "norm", false);
  HH_CHECK(p > 0, "norm: p must be positive or inf, got ", p, " for a tensor of shape ", x.shape());
  if (std::isinf(p)) return as_dtype(amax(abs(as_dtype(x, ct)), dims, keepdim), xt);  // composed: max |x|
  Tensor xc = as_dtype(detach(x), ct), n_keep;
  {
    NoGradGuard no_grad;
    if (p == 2.0)
      n_keep = sqrt(sum(square(xc), dims, true));
    else if (p == 1.0)
      n_keep = sum(abs(xc), dims, true);
    else
      n_keep = pow(sum(pow(abs(xc), p), dims, true), 1.0 / p);
  }
  Tensor out = view_as_shape(n_keep, pl.out_shape);
  Shape keep = pl.keep_shape;
  return record("norm", as_dtype(out, xt), {x}, {xc, n_keep},
                [xc, n_keep, keep, p, ct, xt](const Tensor& g, const NeedsGrad&) {
    Tensor gk = reshape(as_dtype(g, ct), keep);
    Tensor gx;
    if (p == 1.0) {
      gx = mul(sign(xc), gk);
    } else {
      // g / n^(p-1), set to 0 where the norm is 0 (then every x in the group is 0: a safe subgradient).
      Tensor scale = div(gk, p == 2.0 ? n_keep : pow(n_keep, p - 1.0));
      scale = masked_fill(scale, eq(n_keep, 0.0), 0.0);
      Tensor dir = p == 2.0 ? xc : p < 2.0 ? mul(sign(xc), pow(abs(xc), p - 1.0)) : mul(xc, pow(abs(xc), p - 2.0));
      gx = mul(dir, scale);
    }
    return std::vector<Tensor>{as_dtype(gx, xt)};
  });
}

Tensor amax(const Tensor& x, const Dims& dims, bool keepdim) { return extremum(x, dims, keepdim, true); }
Tensor amin(const Tensor& x, const Dims& dims, bool keepdim) { return extremum(x, dims, keepdim, false); }
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) { return extremum_dim(x, dim, keepdim, true); }
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) { return extremum_dim(x, dim, keepdim, false); }
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) { return arg_extremum(x, dim, keepdim, true); }
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) { return arg_extremum(x, dim, keepdim, false); }

Tensor cumsum(const Tensor& x_in, int64_t dim) {
  const Tensor x = autocast_f32(x_in);
  Plan p = make_plan(x, {dim}, true, "cumsum");
  const DType xt = x.dtype(), ct = compute_dtype(xt, "cumsum", true);
  const int64_t O = p.O, R = p.R, I = p.I;
  Tensor x3 = view_as_shape(as_dtype(detach(x), ct), {O, R, I});
  Tensor out3 = empty({O, R, I}, {ct, x.device()});
  backend_of(x).cumsum(x3, out3);
  Tensor out = out3.as_strided(x.shape(), contiguous_strides(x.shape()), 0);
  if (!is_floating(xt)) return out;  // integers accumulate in i64, without gradient
  Shape in = x.shape();
  return record("cumsum", as_dtype(out, xt), {x}, [O, R, I, in, ct, xt](const Tensor& g, const NeedsGrad&) {
    // gx[r] = sum_{s >= r} g[s]: a cumsum of the gradient reversed along R, reversed back.
    Tensor rev = flip_r(view_as_shape(as_dtype(g, ct), {O, R, I}));
    Tensor acc = empty({O, R, I}, {ct, g.device()});
    backend_of(g).cumsum(rev, acc);
    Tensor gx = flip_r(acc).as_strided(in, contiguous_strides(in), 0);
    return std::vector<Tensor>{as_dtype(gx, xt)};
  });
}

}  // namespace hh
