// Views and data movement. Views return tensors sharing storage; their backward maps the
// gradient back through the inverse view (or a scatter into zeros for slice/select). split, chunk
// and unbind are one node with one output per piece: the pieces' gradients land in one buffer.
#include "autograd/ops/shape.h"

#include <algorithm>
#include <numeric>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"

namespace hh {

static const OpName reg_reshape("reshape"), reg_view("view"), reg_permute("permute"), reg_transpose("transpose"),
    reg_slice("slice"), reg_select("select"), reg_expand("expand"), reg_squeeze("squeeze"),
    reg_unsqueeze("unsqueeze"), reg_flatten("flatten"), reg_contiguous("contiguous"), reg_clone("clone"),
    reg_to_dtype("to_dtype"), reg_to_device("to_device"), reg_cat("cat"), reg_stack("stack"), reg_split("split"),
    reg_chunk("chunk"), reg_unbind("unbind"), reg_tril("tril"), reg_triu("triu");

namespace {

Shape infer_shape(const Shape& requested, int64_t numel, const char* op, const Shape& from) {
  Shape s = requested;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      HH_CHECK(infer < 0, op, ": only one dimension can be -1 in ", requested);
      infer = static_cast<int64_t>(i);
    } else {
      HH_CHECK(s[i] >= 0, op, ": invalid size ", s[i], " in ", requested);
      known *= s[i];
    }
  }
  if (infer >= 0) {
    HH_CHECK(known != 0 && numel % known == 0, op, ": shape ", requested, " is invalid for input of shape ", from);
    s[static_cast<size_t>(infer)] = numel / known;
  }
  HH_CHECK(numel_of(s) == numel, op, ": shape ", requested, " is invalid for input of shape ", from, " (",
           numel, " elements)");
  return s;
}

// Strides for viewing x as `shape` without a copy, or false if impossible (PyTorch's rule:
// each group of merged/split dims must be contiguous within itself).
bool view_strides(const Tensor& x, const Shape& shape, Strides& out) {
  const Shape& os = x.shape();
  const Strides& ost = x.strides();
  out.assign(shape.size(), 0);
  if (x.numel() == 0 || os.empty()) {  // empty, or 0-d (one element: any view works)
    out = contiguous_strides(shape);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = ost.empty() ? 1 : ost.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t td = static_cast<int64_t>(os.size()) - 1; td >= 0; --td) {
    tensor_numel *= os[static_cast<size_t>(td)];
    bool boundary = td == 0 || (os[static_cast<size_t>(td - 1)] != 1 &&
                                ost[static_cast<size_t>(td - 1)] != tensor_numel * chunk_base_stride);
    if (boundary) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[static_cast<size_t>(view_d)] == 1)) {
        out[static_cast<size_t>(view_d)] = view_numel * chunk_base_stride;
        view_numel *= shape[static_cast<size_t>(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (td > 0) {
        chunk_base_stride = ost[static_cast<size_t>(td - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

Tensor view_impl(const Tensor& x, const Shape& shape, const char* name) {
  Strides st;
  HH_CHECK(view_strides(x, shape, st), name, ": cannot view a tensor of shape ", x.shape(), " and strides ",
           x.strides(), " as ", shape, "; call reshape (which copies) or contiguous() first");
  Tensor out = x.as_strided(shape, st, x.offset());
  Shape in_shape = x.shape();
  return record(name, out, {x}, [in_shape](const Tensor& g, const NeedsGrad&) {
    return std::vector<Tensor>{reshape(g, in_shape)};
  });
}

}  // namespace

Tensor view(const Tensor& x, Shape shape) { return view_impl(x, infer_shape(shape, x.numel(), "view", x.shape()), "view"); }

Tensor reshape(const Tensor& x, Shape shape) {
  shape = infer_shape(shape, x.numel(), "reshape", x.shape());
  Strides st;
  if (view_strides(x, shape, st)) return view_impl(x, shape, "reshape");
  return view_impl(contiguous(x), shape, "reshape");
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  int64_t n = x.dim();
  HH_CHECK(static_cast<int64_t>(dims.size()) == n, "permute: got ", dims.size(), " dims for a tensor of shape ",
           x.shape());
  std::vector<int64_t> d(dims.size()), inverse(dims.size());
  std::vector<bool> seen(dims.size(), false);
  Shape s(dims.size());
  Strides st(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    d[i] = wrap_dim(dims[i], n, "permute");
    HH_CHECK(!seen[static_cast<size_t>(d[i])], "permute: dim ", dims[i], " repeated");
    seen[static_cast<size_t>(d[i])] = true;
    s[i] = x.shape()[static_cast<size_t>(d[i])];
    st[i] = x.strides()[static_cast<size_t>(d[i])];
    inverse[static_cast<size_t>(d[i])] = static_cast<int64_t>(i);
  }
  return record("permute", x.as_strided(s, st, x.offset()), {x}, [inverse](const Tensor& g, const NeedsGrad&) {
    return std::vector<Tensor>{permute(g, inverse)};
  });
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  int64_t n = x.dim();
  if (n == 0) return x;
  d0 = wrap_dim(d0, n, "transpose");
  d1 = wrap_dim(d1, n, "transpose");
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<size_t>(d0)], perm[static_cast<size_t>(d1)]);
  return permute(x, perm);
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  dim = wrap_dim(dim, x.dim(), "slice");
  HH_CHECK(x.dim() > 0, "slice: cannot slice a 0-d tensor");
  HH_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t len = x.shape()[static_cast<size_t>(dim)];
  if (start < 0) start += len;
  if (end < 0) end += len;
  start = std::clamp<int64_t>(start, 0, len);
  end = std::clamp<int64_t>(end, start, len);
  Shape s = x.shape();
  Strides st = x.strides();
  s[static_cast<size_t>(dim)] = (end - start + step - 1) / step;
  st[static_cast<size_t>(dim)] *= step;
  Tensor out = x.as_strided(s, st, x.offset() + start * x.strides()[static_cast<size_t>(dim)]);
  Shape in_shape = x.shape();
  return record("slice", out, {x}, [in_shape, dim, start, end, step](const Tensor& g, const NeedsGrad&) {
    Tensor gx = zeros(in_shape, {g.dtype(), g.device()});
    copy_(slice(gx, dim, start, end, step), g);
    return std::vector<Tensor>{gx};
  });
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  HH_CHECK(x.dim() > 0, "select: cannot select from a 0-d tensor");
  dim = wrap_dim(dim, x.dim(), "select");
  int64_t len = x.shape()[static_cast<size_t>(dim)];
  HH_CHECK(index >= -len && index < len, "select: index ", index, " out of range for dim ", dim, " of size ", len);
  if (index < 0) index += len;
  return squeeze(slice(x, dim, index, index + 1), dim);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  HH_CHECK(shape.size() >= x.shape().size(), "expand: cannot expand shape ", x.shape(), " to ", shape);
  size_t lead = shape.size() - x.shape().size();
  Shape s(shape.size());
  Strides st(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      HH_CHECK(shape[i] >= 0, "expand: size -1 not allowed in a new leading dim of ", shape);
      s[i] = shape[i];
      st[i] = 0;
      continue;
    }
    int64_t xs = x.shape()[i - lead];
    int64_t want = shape[i] == -1 ? xs : shape[i];
    HH_CHECK(xs == want || xs == 1, "expand: cannot expand shape ", x.shape(), " to ", shape);
    s[i] = want;
    st[i] = xs == want ? x.strides()[i - lead] : 0;
  }
  if (s == x.shape()) return x;
  Shape in_shape = x.shape();
  return record("expand", x.as_strided(s, st, x.offset()), {x}, [in_shape](const Tensor& g, const NeedsGrad&) {
    return std::vector<Tensor>{sum_to(g, in_shape)};
  });
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) { return expand(x, shape); }

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  size_t lead = g.shape().size() - shape.size();
  Dims dims;
  for (size_t i = 0; i < g.shape().size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1)) dims.push_back(static_cast<int64_t>(i));
  Tensor r = dims.empty() ? g : sum(g, dims, true);
  return lead == 0 && r.shape() == shape ? r : reshape(r, shape);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  if (x.dim() == 0) return x;
  dim = wrap_dim(dim, x.dim(), "squeeze");
  if (x.shape()[static_cast<size_t>(dim)] != 1) return x;
  Shape s = x.shape();
  Strides st = x.strides();
  s.erase(s.begin() + dim);
  st.erase(st.begin() + dim);
  Shape in_shape = x.shape();
  return record("squeeze", x.as_strided(s, st, x.offset()), {x}, [in_shape](const Tensor& g, const NeedsGrad&) {
    return std::vector<Tensor>{reshape(g, in_shape)};
  });
}

Tensor squeeze(const Tensor& x) {
  Shape s;
  for (int64_t d : x.shape())
    if (d != 1) s.push_back(d);
  return s.size() == x.shape().size() ? x : reshape(x, s);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  dim = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape s = x.shape();
  Strides st = x.strides();
  int64_t stride = dim < x.dim() ? x.strides()[static_cast<size_t>(dim)] * x.shape()[static_cast<size_t>(dim)] : 1;
  s.insert(s.begin() + dim, 1);
  st.insert(st.begin() + dim, stride);
  Shape in_shape = x.shape();
  return record("unsqueeze", x.as_strided(s, st, x.offset()), {x}, [in_shape](const Tensor& g, const NeedsGrad&) {
    return std::vector<Tensor>{reshape(g, in_shape)};
  });
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  if (x.dim() == 0) return reshape(x, {1});
  start_dim = wrap_dim(start_dim, x.dim(), "flatten");
  end_dim = wrap_dim(end_dim, x.dim(), "flatten");
  HH_CHECK(start_dim <= end_dim, "flatten: start_dim ", start_dim, " is after end_dim ", end_dim);
  Shape s;
  for (int64_t i = 0; i < start_dim; ++i) s.push_back(x.shape()[static_cast<size_t>(i)]);
  int64_t m = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i) m *= x.shape()[static_cast<size_t>(i)];
  s.push_back(m);
  for (int64_t i = end_dim + 1; i < x.dim(); ++i) s.push_back(x.shape()[static_cast<size_t>(i)]);
  return reshape(x, s);
}

Tensor clone(const Tensor& x) {
  Tensor out = empty(x.shape(), {x.dtype(), x.device()});
  copy_(out, x);
  return record("clone", out, {x}, [](const Tensor& g, const NeedsGrad&) { return std::vector<Tensor>{g}; });
}

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor out = empty(x.shape(), {x.dtype(), x.device()});
  copy_(out, x);
  return record("contiguous", out, {x}, [](const Tensor& g, const NeedsGrad&) { return std::vector<Tensor>{g}; });
}

Tensor detach(const Tensor& x) {
  auto impl = std::make_shared<TensorImpl>(*x.impl_ptr());
  impl->requires_grad = false;
  impl->grad.reset();
  impl->grad_fn.reset();
  return Tensor(impl);
}

Tensor to_dtype(const Tensor& x, DType t) {
  if (x.dtype() == t) return x;
  Tensor out = empty(x.shape(), {t, x.device()});
  if (out.numel() > 0) backend_of(out).copy(out, x);
  if (!is_floating(t) || !is_floating(x.dtype())) return out;  // casts to/from integers cut the graph
  DType from = x.dtype();
  return record("to_dtype", out, {x}, [from](const Tensor& g, const NeedsGrad&) {
    return std::vector<Tensor>{to_dtype(g, from)};
  });
}

Tensor to_device(const Tensor& x, Device d) {
  if (x.device() == d) return x;
  Tensor src = contiguous(x);
  Tensor out = empty(x.shape(), {x.dtype(), d});
  size_t nbytes = static_cast<size_t>(x.numel()) * itemsize(x.dtype());
  if (nbytes > 0) {
    if (d.is_cpu()) {
      backend_of(src).copy_to_host(out.raw_data(), src.raw_data(), nbytes);
    } else if (src.device().is_cpu()) {
      backend_for(d).copy_from_host(out.raw_data(), src.raw_data(), nbytes);
    } else {  // device to device through the host
      Tensor host = to_device(src, Device::cpu());
      backend_for(d).copy_from_host(out.raw_data(), host.raw_data(), nbytes);
    }
  }
  Device from = x.device();
  return record("to_device", out, {src}, [from](const Tensor& g, const NeedsGrad&) {
    return std::vector<Tensor>{to_device(g, from)};
  });
}

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  HH_CHECK(!xs.empty(), "cat: expected a non-empty list of tensors");
  const Tensor& first = xs[0];
  HH_CHECK(first.dim() > 0, "cat: zero-dimensional tensor cannot be concatenated");
  dim = wrap_dim(dim, first.dim(), "cat");
  Shape s = first.shape();
  int64_t total = 0;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    HH_CHECK(t.dim() == first.dim(), "cat: tensor ", i, " has shape ", t.shape(), ", expected rank ", first.dim(),
             " like ", first.shape());
    HH_CHECK(t.dtype() == first.dtype(), "cat: tensor ", i, " has dtype ", t.dtype(), ", expected ", first.dtype());
    HH_CHECK(t.device() == first.device(), "cat: tensor ", i, " is on ", t.device(), ", expected ", first.device());
    for (int64_t d = 0; d < first.dim(); ++d)
      HH_CHECK(d == dim || t.shape()[static_cast<size_t>(d)] == s[static_cast<size_t>(d)], "cat: tensor ", i,
               " has shape ", t.shape(), " but tensor 0 has shape ", first.shape(), " (only dim ", dim, " may differ)");
    sizes.push_back(t.shape()[static_cast<size_t>(dim)]);
    total += sizes.back();
  }
  s[static_cast<size_t>(dim)] = total;
  Tensor out = empty(s, {first.dtype(), first.device()});
  int64_t at = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (sizes[i] > 0) copy_(slice(detach(out), dim, at, at + sizes[i]), xs[i]);
    at += sizes[i];
  }
  return record("cat", out, xs, [sizes, dim](const Tensor& g, const NeedsGrad& needs) {
    std::vector<Tensor> gs(sizes.size());
    int64_t at = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (needs[i]) gs[i] = slice(g, dim, at, at + sizes[i]);
      at += sizes[i];
    }
    return gs;
  });
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  HH_CHECK(!xs.empty(), "stack: expected a non-empty list of tensors");
  dim = wrap_dim(dim, xs[0].dim() + 1, "stack");
  std::vector<Tensor> us;
  for (size_t i = 0; i < xs.size(); ++i) {
    HH_CHECK(xs[i].shape() == xs[0].shape(), "stack: tensor ", i, " has shape ", xs[i].shape(),
             " but tensor 0 has shape ", xs[0].shape());
    us.push_back(unsqueeze(xs[i], dim));
  }
  return cat(us, dim);
}

namespace {
// The pieces of x along dim (consecutive, of `sizes`) as views, recorded as the outputs of one node
// (PyTorch's split_with_sizes / unbind): its backward writes each piece's gradient, or zeros for a
// piece that got none, into one buffer laid out like x, instead of one zero-filled buffer per
// piece summed. `drop` removes dim from each piece (unbind: pieces of size 1).
std::vector<Tensor> split_node(const char* op, const Tensor& x, int64_t dim, const std::vector<int64_t>& sizes,
                               bool drop) {
  const size_t d = static_cast<size_t>(dim);
  auto piece = [d, drop](const Tensor& t, int64_t start, int64_t size) {  // a raw view (no autograd)
    Shape sh = t.shape();
    Strides st = t.strides();
    sh[d] = size;
    if (drop) {
      sh.erase(sh.begin() + static_cast<std::ptrdiff_t>(d));
      st.erase(st.begin() + static_cast<std::ptrdiff_t>(d));
    }
    return t.as_strided(sh, st, t.offset() + start * t.strides()[d]);
  };
  std::vector<Tensor> outs;
  std::vector<int64_t> starts;
  int64_t at = 0;
  for (int64_t size : sizes) {
    outs.push_back(piece(x, at, size));
    starts.push_back(at);
    at += size;
  }
  const Shape xs = x.shape();
  const Strides xst = x.strides();
  return record_outputs(op, std::move(outs), {x}, {}, [=](const std::vector<Tensor>& g, const NeedsGrad&) {
    const Tensor& any = *std::find_if(g.begin(), g.end(), [](const Tensor& t) { return t.defined(); });
    Tensor gx = empty_in_layout(xs, xst, {any.dtype(), any.device()});
    for (size_t i = 0; i < g.size(); ++i) {
      Tensor part = piece(gx, starts[i], sizes[i]);
      if (part.numel() == 0) continue;
      if (g[i].defined())
        copy_(part, g[i]);
      else
        backend_of(part).fill(part, 0.0);
    }
    return std::vector<Tensor>{gx};
  });
}
}  // namespace

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  dim = wrap_dim(dim, x.dim(), "split");
  int64_t len = x.shape()[static_cast<size_t>(dim)], total = 0;
  for (int64_t s : sizes) {
    HH_CHECK(s >= 0, "split: negative size ", s);
    total += s;
  }
  HH_CHECK(total == len, "split: sizes sum to ", total, " but dim ", dim, " of shape ", x.shape(), " has ", len);
  return split_node("split", x, dim, sizes, false);
}

std::vector<Tensor> unbind(const Tensor& x, int64_t dim) {
  HH_CHECK(x.dim() > 0, "unbind: cannot unbind a 0-d tensor");
  dim = wrap_dim(dim, x.dim(), "unbind");
  return split_node("unbind", x, dim, std::vector<int64_t>(static_cast<size_t>(x.size(dim)), 1), true);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  HH_CHECK(split_size > 0, "split: split_size must be positive, got ", split_size);
  dim = wrap_dim(dim, x.dim(), "split");
  int64_t len = x.shape()[static_cast<size_t>(dim)];
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < len; at += split_size) sizes.push_back(std::min(split_size, len - at));
  if (sizes.empty()) sizes.push_back(0);
  return split(x, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  HH_CHECK(chunks > 0, "chunk: number of chunks must be positive, got ", chunks);
  dim = wrap_dim(dim, x.dim(), "chunk");
  int64_t len = x.shape()[static_cast<size_t>(dim)];
  return split(x, std::max<int64_t>(1, (len + chunks - 1) / chunks), dim);
}

namespace {
Tensor triangle(const Tensor& x, int64_t k, bool upper) {
  const char* name = upper ? "triu" : "tril";
  HH_CHECK(x.dim() >= 2, name, ": expected a tensor with at least 2 dims, got shape ", x.shape());
  Tensor xc = contiguous(x);
  int64_t m = x.size(-2), n = x.size(-1);
  Tensor out = empty(x.shape(), {x.dtype(), x.device()});
  if (out.numel() > 0)
    backend_of(out).triangle(detach(xc).reshape({-1, m, n}), out.reshape({-1, m, n}), k, upper);
  return record(name, out, {x}, [k, upper](const Tensor& g, const NeedsGrad&) {
    return std::vector<Tensor>{upper ? triu(g, k) : tril(g, k)};
  });
}
}  // namespace

Tensor tril(const Tensor& x, int64_t k) { return triangle(x, k, false); }
Tensor triu(const Tensor& x, int64_t k) { return triangle(x, k, true); }

}  // namespace hh
