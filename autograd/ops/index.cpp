// Indexing ops with torch semantics: gather, scatter_add, index_select, embedding (whose backward
// is the scatter-add of gradient rows), one_hot. Ops check ranks, shapes, dtypes and devices,
// view their operands as contiguous (O,R,I) blocks (outer, indexed dim, inner) and call the
// backend kernels; index values are range-checked by the kernels. bf16/f16 accumulate in f32.
#include "autograd/ops/index.h"

#include <algorithm>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"

namespace hh {

static const OpName reg_gather("gather"), reg_scatter_add("scatter_add"), reg_index_select("index_select"),
    reg_embedding("embedding"), reg_one_hot("one_hot");

namespace {

bool is_index_dtype(DType t) { return t == DType::i64 || t == DType::i32; }

// `what` ("index", "ids") must be an i64/i32 tensor on x's device.
void check_index(const Tensor& index, const Tensor& x, const char* op, const char* what = "index") {
  HH_CHECK(index.defined(), op, ": ", what, " is an undefined tensor");
  HH_CHECK(is_index_dtype(index.dtype()), op, ": ", what, " must be an i64 or i32 tensor, got ", index.dtype());
  HH_CHECK(index.device() == x.device(), op, ": ", what, " is on ", index.device(), " but the input is on ",
           x.device());
}

// Contiguous, detached copy or view of an index tensor, shaped `s` (0-d inputs included).
Tensor index_as(const Tensor& index, const Shape& s) {
  Tensor c = contiguous(detach(index));
  return (c.dim() == 0 ? unsqueeze(c, 0) : c).reshape(s);
}

// (O,R,I) split of `s` around `dim`.
struct ORI {
  int64_t o = 1, r = 1, i = 1;
};
ORI ori_at(const Shape& s, int64_t dim) {
  ORI v;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    int64_t n = s[static_cast<size_t>(d)];
    if (d < dim) v.o *= n;
    else if (d == dim) v.r = n;
    else v.i *= n;
  }
  return v;
}

// The dtype accumulating kernels run in: f32/f64/i32/i64 as is, bf16/f16 in f32.
DType accumulate_dtype(DType t, const char* op) {
  if (t == DType::bf16 || t == DType::f16) return DType::f32;
  HH_CHECK(t == DType::f32 || t == DType::f64 || t == DType::i32 || t == DType::i64, op,
           ": expected a floating or i32/i64 tensor, got ", t);
  return t;
}

// A contiguous tensor with t's values in dtype `ct` (t itself when it already is one).
Tensor contiguous_as(const Tensor& t, DType ct) {
  if (t.dtype() == ct && t.is_contiguous()) return detach(t);
  Tensor c = empty(t.shape(), {ct, t.device()});
  copy_(c, t);
  return c;
}

// zeros(shape) with g (O,K,I) added at index (K) along `dim`: the backward of index_select and
// embedding. `index` is contiguous.
Tensor index_add_zeros(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& g) {
  DType ct = accumulate_dtype(g.dtype(), "index_select backward");
  Tensor gx = zeros(shape, {ct, g.device()});
  ORI s = ori_at(shape, dim);
  int64_t k = index.numel();
  if (k > 0 && s.o * s.i > 0)
    backend_of(gx).index_add(gx.reshape({s.o, s.r, s.i}), index.reshape({k}),
                             contiguous_as(g, ct).reshape({s.o, k, s.i}));
  return ct == g.dtype() ? gx : to_dtype(gx, g.dtype());
}

}  // namespace

// out[..., j, ...] = x[..., index[..., j, ...], ...] along dim; out has index's shape.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_index(index, x, "gather");
  HH_CHECK(index.dim() == x.dim(), "gather: index of shape ", index.shape(), " must have the same rank as input ",
           x.shape());
  if (x.dim() == 0) {
    wrap_dim(dim, 1, "gather");
    return squeeze(gather(unsqueeze(x, 0), 0, unsqueeze(index, 0)), 0);
  }
  dim = wrap_dim(dim, x.dim(), "gather");
  // x: (..., R, ...); dims other than `dim` are cut to index's sizes (torch allows smaller).
  Tensor xs = x;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d == dim) continue;
    HH_CHECK(index.size(d) <= x.size(d), "gather: index of shape ", index.shape(), " is larger than input ",
             x.shape(), " in dim ", d);
    if (index.size(d) < x.size(d)) xs = slice(xs, d, 0, index.size(d));
  }
  ORI s = ori_at(xs.shape(), dim);
  int64_t k = index.size(dim);
  Tensor ic = contiguous(detach(index));
  Tensor out = empty(index.shape(), {x.dtype(), x.device()});
  if (out.numel() > 0)
    backend_of(out).gather(contiguous(detach(xs)).reshape({s.o, s.r, s.i}), ic.reshape({s.o, k, s.i}),
                           out.reshape({s.o, k, s.i}));
  Shape xs_shape = xs.shape();
  return record("gather", out, {xs}, {ic}, [xs_shape, dim, ic](const Tensor& g, const NeedsGrad&) {
    Tensor gx = zeros(xs_shape, {g.dtype(), g.device()});
    return std::vector<Tensor>{scatter_add(gx, dim, ic, g)};
  });
}

// out = x, then out[..., index[..., j, ...], ...] += src[..., j, ...] along dim for every position
// of index. Only index's extent of src is used; other dims of index may be smaller than x's.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  check_index(index, x, "scatter_add");
  HH_CHECK(src.dtype() == x.dtype(), "scatter_add: src dtype ", src.dtype(), " differs from input dtype ", x.dtype());
  HH_CHECK(src.device() == x.device(), "scatter_add: src is on ", src.device(), " but the input is on ", x.device());
  HH_CHECK(index.dim() == x.dim() && src.dim() == x.dim(), "scatter_add: input ", x.shape(), ", index ",
           index.shape(), " and src ", src.shape(), " must have the same rank");
  if (x.dim() == 0) {
    wrap_dim(dim, 1, "scatter_add");
    return squeeze(scatter_add(unsqueeze(x, 0), 0, unsqueeze(index, 0), unsqueeze(src, 0)), 0);
  }
  dim = wrap_dim(dim, x.dim(), "scatter_add");
  DType ct = accumulate_dtype(x.dtype(), "scatter_add");
  Tensor ss = src;  // src cut to index's shape
  bool partial = false;  // index smaller than x in some dim other than `dim`
  for (int64_t d = 0; d < x.dim(); ++d) {
    HH_CHECK(index.size(d) <= src.size(d), "scatter_add: index of shape ", index.shape(), " is larger than src ",
             src.shape(), " in dim ", d);
    if (index.size(d) < src.size(d)) ss = slice(ss, d, 0, index.size(d));
    if (d == dim) continue;
    HH_CHECK(index.size(d) <= x.size(d), "scatter_add: index of shape ", index.shape(), " is larger than input ",
             x.shape(), " in dim ", d);
    partial = partial || index.size(d) < x.size(d);
  }
  Tensor out = empty(x.shape(), {ct, x.device()});  // a fresh copy: x is never written
  copy_(out, x);
  Tensor ic = contiguous(detach(index));
  if (index.numel() > 0) {
    // The kernel needs a contiguous (O,R,I) target: the block of out that index covers.
    Tensor view = out, target = out;
    if (partial) {
      for (int64_t d = 0; d < x.dim(); ++d)
        if (d != dim) view = slice(view, d, 0, index.size(d));
      target = contiguous_as(view, ct);
    }
    ORI s = ori_at(target.shape(), dim);
    int64_t k = index.size(dim);
    backend_of(out).scatter_add(target.reshape({s.o, s.r, s.i}), ic.reshape({s.o, k, s.i}),
                                contiguous_as(ss, ct).reshape({s.o, k, s.i}));
    if (partial) copy_(view, target);
  }
  if (ct != x.dtype()) out = to_dtype(out, x.dtype());
  return record("scatter_add", out, {x, ss}, {ic}, [dim, ic](const Tensor& g, const NeedsGrad& needs) {
    std::vector<Tensor> gs(2);
    if (needs[0]) gs[0] = g;
    if (needs[1]) gs[1] = gather(g, dim, ic);
    return gs;
  });
}

// out = x with dim replaced by index's K entries: out[..., k, ...] = x[..., index[k], ...].
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  check_index(index, x, "index_select");
  HH_CHECK(index.dim() <= 1, "index_select: index must be 1-D, got shape ", index.shape());
  if (x.dim() == 0) {
    wrap_dim(dim, 1, "index_select");
    HH_CHECK(index.numel() == 1, "index_select: a 0-d input needs exactly one index, got ", index.numel());
    return squeeze(index_select(unsqueeze(x, 0), 0, index), 0);
  }
  dim = wrap_dim(dim, x.dim(), "index_select");
  ORI s = ori_at(x.shape(), dim);
  int64_t k = index.numel();
  Shape os = x.shape();
  os[static_cast<size_t>(dim)] = k;
  Tensor out = empty(os, {x.dtype(), x.device()});
  Tensor ic = index_as(index, {k});
  if (k > 0)
    backend_of(out).index_select(contiguous(detach(x)).reshape({s.o, s.r, s.i}), ic, out.reshape({s.o, k, s.i}));
  Shape x_shape = x.shape();
  return record("index_select", out, {x}, {ic}, [x_shape, dim, ic](const Tensor& g, const NeedsGrad&) {
    return std::vector<Tensor>{index_add_zeros(x_shape, dim, ic, g)};
  });
}

// weight (V,C), ids (...) -> (..., C); the backward scatter-adds gradient rows into (V,C).
Tensor embedding(const Tensor& weight, const Tensor& ids) {
  HH_CHECK(weight.dim() == 2, "embedding: weight must be 2-D (V,C), got shape ", weight.shape());
  check_index(ids, weight, "embedding", "ids");
  int64_t v = weight.size(0), c = weight.size(1), n = ids.numel();
  Tensor flat = index_as(ids, {n});  // (N)
  Shape os = ids.shape();
  os.push_back(c);
  Tensor out = empty(os, {weight.dtype(), weight.device()});  // (..., C) viewed as (1,N,C)
  if (n > 0) {
    try {
      backend_of(out).index_select(contiguous(detach(weight)).reshape({1, v, c}), flat, out.reshape({1, n, c}));
    } catch (const Error& e) {
      fail(str("embedding: bad id for weight of shape ", weight.shape(), ": ", e.what()));
    }
  }
  Shape w_shape = weight.shape();
  return record("embedding", out, {weight}, {flat}, [w_shape, flat](const Tensor& g, const NeedsGrad&) {
    return std::vector<Tensor>{index_add_zeros(w_shape, 0, flat, g)};
  });
}

// ids (...) -> (..., num_classes) with a 1 at each id; num_classes = -1 infers max id + 1.
Tensor one_hot(const Tensor& ids, int64_t num_classes, DType dtype) {
  HH_CHECK(ids.defined(), "one_hot: ids is an undefined tensor");
  HH_CHECK(is_index_dtype(ids.dtype()), "one_hot: ids must be an i64 or i32 tensor, got ", ids.dtype());
  HH_CHECK(num_classes > 0 || num_classes == -1, "one_hot: num_classes must be positive (or -1 to infer), got ",
           num_classes);
  int64_t n = ids.numel();
  if (num_classes == -1) {
    HH_CHECK(n > 0, "one_hot: cannot infer num_classes from an empty ids tensor of shape ", ids.shape());
    int64_t hi = 0;
    for (int64_t id : to_vector<int64_t>(ids)) {
      HH_CHECK(id >= 0, "one_hot: class id ", id, " is negative");
      hi = std::max(hi, id);
    }
    num_classes = hi + 1;
  }
  // Built in an accumulating dtype (f32 for the others), then cast.
  DType ct = dtype == DType::f32 || dtype == DType::f64 || dtype == DType::i32 || dtype == DType::i64 ? dtype
                                                                                                      : DType::f32;
  Shape os = ids.shape();
  os.push_back(num_classes);
  Tensor out = zeros(os, {ct, ids.device()});  // (..., num_classes) viewed as (N, num_classes, 1)
  if (n > 0) {
    Tensor ic = index_as(ids, {n, 1, 1});
    try {
      backend_of(out).scatter_add(out.reshape({n, num_classes, 1}), ic, ones({n, 1, 1}, {ct, ids.device()}));
    } catch (const Error& e) {
      fail(str("one_hot: class id out of range for num_classes ", num_classes, ": ", e.what()));
    }
  }
  return ct == dtype ? out : to_dtype(out, dtype);
}

}  // namespace hh
