// View and data-movement ops: op-table rows for reshape, view, permute, transpose, slice, select,
// expand, squeeze, unsqueeze, flatten, contiguous, clone, to_dtype, to_device, cat, stack, split,
// chunk, tril and triu, each against an index-mapping host reference; plus tests that views
// share storage, that view() refuses what it cannot express, and that reshape copies only then.
#include <doctest/doctest.h>

#include <cmath>

#include "core/backend.h"
#include "tests/op_table.h"

namespace hh::test {
namespace {

using Index = std::vector<int64_t>;

Index unravel(int64_t flat, const Shape& s) {
  Index idx(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    idx[d] = flat % s[d];
    flat /= s[d];
  }
  return idx;
}

int64_t wrap(int64_t d, size_t rank) { return d < 0 ? d + static_cast<int64_t>(rank) : d; }

// out[p] = x[src(p)] over every position p of out_shape.
Host map_ref(const Host& x, const Shape& out_shape, const std::function<Index(const Index&)>& src) {
  Host out{out_shape, std::vector<double>(static_cast<size_t>(numel_of(out_shape)))};
  for (int64_t f = 0; f < out.numel(); ++f) out.v[static_cast<size_t>(f)] = x.at(src(unravel(f, out_shape)));
  return out;
}

Host reshape_ref(const Host& x, const Shape& s) { return Host{s, x.v}; }

Host permute_ref(const Host& x, const std::vector<int64_t>& perm) {
  Shape s;
  for (int64_t p : perm) s.push_back(x.shape[static_cast<size_t>(wrap(p, perm.size()))]);
  return map_ref(x, s, [&](const Index& o) {
    Index i(o.size());
    for (size_t k = 0; k < perm.size(); ++k) i[static_cast<size_t>(wrap(perm[k], perm.size()))] = o[k];
    return i;
  });
}

Host slice_ref(const Host& x, int64_t dim, int64_t start, int64_t len, int64_t step) {
  dim = wrap(dim, x.shape.size());
  Shape s = x.shape;
  s[static_cast<size_t>(dim)] = len;
  return map_ref(x, s, [&](Index i) {
    i[static_cast<size_t>(dim)] = start + i[static_cast<size_t>(dim)] * step;
    return i;
  });
}

// Broadcast read: size-1 (or missing leading) dims of x repeat.
Host expand_ref(const Host& x, const Shape& s) {
  return map_ref(x, s, [&](const Index& o) {
    Index i(x.shape.size());
    size_t lead = s.size() - x.shape.size();
    for (size_t d = 0; d < i.size(); ++d) i[d] = x.shape[d] == 1 ? 0 : o[d + lead];
    return i;
  });
}

// Concatenation of hosts along dim.
Host cat_ref(const std::vector<Host>& xs, int64_t dim) {
  dim = wrap(dim, xs[0].shape.size());
  Shape s = xs[0].shape;
  s[static_cast<size_t>(dim)] = 0;
  for (const Host& h : xs) s[static_cast<size_t>(dim)] += h.shape[static_cast<size_t>(dim)];
  Host out{s, std::vector<double>(static_cast<size_t>(numel_of(s)))};
  for (int64_t f = 0; f < out.numel(); ++f) {
    Index i = unravel(f, s);
    size_t k = 0;
    while (i[static_cast<size_t>(dim)] >= xs[k].shape[static_cast<size_t>(dim)]) {
      i[static_cast<size_t>(dim)] -= xs[k].shape[static_cast<size_t>(dim)];
      ++k;
    }
    out.v[static_cast<size_t>(f)] = xs[k].at(i);
  }
  return out;
}

Host unsqueeze_ref(const Host& x, int64_t dim) {
  Shape s = x.shape;
  s.insert(s.begin() + wrap(dim, s.size() + 1), 1);
  return Host{s, x.v};
}

Host triangle_ref(const Host& x, int64_t k, bool upper) {
  Host out = x;
  const size_t r = x.shape.size();
  for (int64_t f = 0; f < x.numel(); ++f) {
    Index i = unravel(f, x.shape);
    int64_t diff = i[r - 1] - i[r - 2];
    if (upper ? diff < k : diff > k) out.v[static_cast<size_t>(f)] = 0;
  }
  return out;
}

OpSpec row(std::string op, std::string variant, std::vector<Shape> shapes, OpFn fn, RefFn ref,
           std::function<void()> errors) {
  OpSpec s;
  s.op = std::move(op);
  s.variant = std::move(variant);
  s.shapes = std::move(shapes);
  s.fn = std::move(fn);
  s.reference = std::move(ref);
  s.errors = std::move(errors);
  return s;
}

std::vector<OpSpec> shape_rows() {
  std::vector<OpSpec> r;
  using X = const std::vector<Tensor>&;
  using H = const std::vector<Host>&;

  auto reshape_err = [] {
    check_throws([] { reshape(zeros({2, 3}), {4, 2}); }, {"reshape: shape", "(2, 3)"});
    check_throws([] { reshape(zeros({2, 3}), {-1, -1}); }, {"reshape: only one dimension can be -1"});
  };
  r.push_back(row("reshape", "(2,3,4) -> (4,-1)", {{2, 3, 4}}, [](X x) { return reshape(x[0], {4, -1}); },
                  [](H h) { return reshape_ref(h[0], {4, 6}); }, reshape_err));
  r.push_back(row("reshape", "(6,) -> (3,2)", {{6}}, [](X x) { return reshape(x[0], {3, 2}); },
                  [](H h) { return reshape_ref(h[0], {3, 2}); }, reshape_err));

  // Splitting the last dim is viewable for the harness's non-contiguous (transposed) layout too.
  auto view_err = [] {
    check_throws([] { view(zeros({3, 4}).t(), {12}); }, {"view: cannot view", "(4, 3)", "reshape"});
    check_throws([] { view(zeros({2, 3}), {5}); }, {"view: shape", "(2, 3)"});
  };
  r.push_back(row("view", "(2,3,4) -> (2,3,2,2)", {{2, 3, 4}}, [](X x) { return view(x[0], {2, 3, 2, 2}); },
                  [](H h) { return reshape_ref(h[0], {2, 3, 2, 2}); }, view_err));
  r.push_back(row("view", "(6,) -> (2,-1)", {{6}}, [](X x) { return view(x[0], {2, -1}); },
                  [](H h) { return reshape_ref(h[0], {2, 3}); }, view_err));

  auto permute_err = [] {
    check_throws([] { permute(zeros({2, 3}), {0}); }, {"permute: got 1 dims", "(2, 3)"});
    check_throws([] { permute(zeros({2, 3}), {1, -1}); }, {"permute: dim -1 repeated"});
  };
  r.push_back(row("permute", "(2,3,4) {2,0,1}", {{2, 3, 4}}, [](X x) { return permute(x[0], {2, 0, 1}); },
                  [](H h) { return permute_ref(h[0], {2, 0, 1}); }, permute_err));
  r.push_back(row("permute", "(2,3,4) {-1,1,0}", {{2, 3, 4}}, [](X x) { return permute(x[0], {-1, 1, 0}); },
                  [](H h) { return permute_ref(h[0], {2, 1, 0}); }, permute_err));

  auto transpose_err = [] {
    check_throws([] { transpose(zeros({2, 3}), 0, 2); }, {"transpose: dim 2 out of range"});
  };
  r.push_back(row("transpose", "(2,3,4) 0<->2", {{2, 3, 4}}, [](X x) { return transpose(x[0], 0, 2); },
                  [](H h) { return permute_ref(h[0], {2, 1, 0}); }, transpose_err));
  r.push_back(row("transpose", "(3,4) -1<->-2", {{3, 4}}, [](X x) { return transpose(x[0], -1, -2); },
                  [](H h) { return permute_ref(h[0], {1, 0}); }, transpose_err));

  auto slice_err = [] {
    check_throws([] { slice(zeros({2, 3}), 1, 0, 2, 0); }, {"slice: step must be positive"});
    check_throws([] { slice(zeros({2, 3}), 2, 0, 1); }, {"slice: dim 2 out of range"});
  };
  r.push_back(row("slice", "(5,4) dim 0 [1:5:2]", {{5, 4}}, [](X x) { return slice(x[0], 0, 1, 5, 2); },
                  [](H h) { return slice_ref(h[0], 0, 1, 2, 2); }, slice_err));
  r.push_back(row("slice", "(3,6) dim -1 [-4:100] clamps", {{3, 6}}, [](X x) { return slice(x[0], -1, -4, 100); },
                  [](H h) { return slice_ref(h[0], -1, 2, 4, 1); }, slice_err));

  auto select_err = [] {
    check_throws([] { select(zeros({2, 3}), 1, 3); }, {"select: index 3 out of range", "size 3"});
    check_throws([] { select(scalar_tensor(1.0), 0, 0); }, {"select: cannot select from a 0-d tensor"});
  };
  r.push_back(row("select", "(3,4) dim 1 index -1", {{3, 4}}, [](X x) { return select(x[0], 1, -1); },
                  [](H h) { return map_ref(h[0], {3}, [](const Index& o) { return Index{o[0], 3}; }); },
                  select_err));
  r.push_back(row("select", "(2,3,4) dim 0 index 1", {{2, 3, 4}}, [](X x) { return select(x[0], 0, 1); },
                  [](H h) { return map_ref(h[0], {3, 4}, [](const Index& o) { return Index{1, o[0], o[1]}; }); },
                  select_err));

  auto expand_err = [] {
    check_throws([] { expand(zeros({3, 2}), {3, 4}); }, {"expand: cannot expand shape (3, 2) to (3, 4)"});
    check_throws([] { expand(zeros({3, 1}), {3}); }, {"expand: cannot expand shape (3, 1)"});
  };
  r.push_back(row("expand", "(3,1) -> (2,3,4)", {{3, 1}}, [](X x) { return expand(x[0], {2, 3, 4}); },
                  [](H h) { return expand_ref(h[0], {2, 3, 4}); }, expand_err));
  r.push_back(row("expand", "(1,4) -> (-1,4) then (3,4)", {{1, 4}},
                  [](X x) { return expand(expand(x[0], {-1, 4}), {3, 4}); },
                  [](H h) { return expand_ref(h[0], {3, 4}); }, expand_err));

  auto squeeze_err = [] { check_throws([] { squeeze(zeros({2, 3}), 2); }, {"squeeze: dim 2 out of range"}); };
  r.push_back(row("squeeze", "(3,1,4) dim 1", {{3, 1, 4}}, [](X x) { return squeeze(x[0], 1); },
                  [](H h) { return reshape_ref(h[0], {3, 4}); }, squeeze_err));
  r.push_back(row("squeeze", "(1,3,1) all", {{1, 3, 1}}, [](X x) { return squeeze(x[0]); },
                  [](H h) { return reshape_ref(h[0], {3}); }, squeeze_err));
  r.push_back(row("squeeze", "(3,4) dim 0 of size 3 is kept", {{3, 4}}, [](X x) { return squeeze(x[0], 0); },
                  [](H h) { return h[0]; }, squeeze_err));

  auto unsqueeze_err = [] { check_throws([] { unsqueeze(zeros({2, 3}), 4); }, {"unsqueeze: dim 4 out of range"}); };
  r.push_back(row("unsqueeze", "(3,4) dim 0", {{3, 4}}, [](X x) { return unsqueeze(x[0], 0); },
                  [](H h) { return unsqueeze_ref(h[0], 0); }, unsqueeze_err));
  r.push_back(row("unsqueeze", "(3,4) dim -1", {{3, 4}}, [](X x) { return unsqueeze(x[0], -1); },
                  [](H h) { return unsqueeze_ref(h[0], -1); }, unsqueeze_err));

  auto flatten_err = [] {
    check_throws([] { flatten(zeros({2, 3, 4}), 2, 1); }, {"flatten: start_dim 2 is after end_dim 1"});
  };
  r.push_back(row("flatten", "(2,3,4) dims 1..2", {{2, 3, 4}}, [](X x) { return flatten(x[0], 1, 2); },
                  [](H h) { return reshape_ref(h[0], {2, 12}); }, flatten_err));
  r.push_back(row("flatten", "(2,3,4) all", {{2, 3, 4}}, [](X x) { return flatten(x[0]); },
                  [](H h) { return reshape_ref(h[0], {24}); }, flatten_err));

  auto undefined_err = [](std::function<void()> f) {
    return [f] { check_throws(f, {"undefined tensor"}); };
  };
  r.push_back(row("contiguous", "(3,4)", {{3, 4}}, [](X x) { return contiguous(x[0]); },
                  [](H h) { return h[0]; }, undefined_err([] { contiguous(Tensor()); })));
  r.push_back(row("contiguous", "of a transposed (3,4)", {{3, 4}}, [](X x) { return contiguous(x[0].t()); },
                  [](H h) { return permute_ref(h[0], {1, 0}); }, undefined_err([] { contiguous(Tensor()); })));
  r.push_back(row("clone", "(3,4)", {{3, 4}}, [](X x) { return clone(x[0]); }, [](H h) { return h[0]; },
                  undefined_err([] { clone(Tensor()); })));

  // to_dtype: f32 -> f64 is exact (and gradchecks trivially in f64); f64 -> f32 rounds, so its
  // row compares against float-rounded values and its backward is tested below.
  auto to_dtype_err = [] {
    check_throws([] { to_dtype(Tensor(), DType::f32); }, {"undefined tensor"});
    check_throws([] { to_dtype(zeros({2}), DType::i64).requires_grad_(); }, {"requires_grad_", "i64"});
  };
  r.push_back(row("to_dtype", "to f64", {{3, 4}}, [](X x) { return to_dtype(x[0], DType::f64); },
                  [](H h) { return h[0]; }, to_dtype_err));
  OpSpec narrowing = row("to_dtype", "f32 <-> f64", {{3, 4}},
                         [](X x) { return to_dtype(x[0], x[0].dtype() == DType::f64 ? DType::f32 : DType::f64); },
                         [](H h) { return unary_ref(h[0], [](double v) { return double(float(v)); }); },
                         to_dtype_err);
  narrowing.differentiable = false;
  narrowing.no_grad_reason = "f64 -> f32 rounds below the finite-difference step; backward tested in a TEST_CASE";
  r.push_back(narrowing);

  // Round trip through the CPU: the identity here, two real copies with HH_DEVICE=cuda.
  r.push_back(row("to_device", "round trip through cpu", {{3, 4}},
                  [](X x) { return to_device(to_device(x[0], Device::cpu()), x[0].device()); },
                  [](H h) { return h[0]; },
                  [] {
                    check_throws([] { parse_device("gpu"); }, {"device: bad device string 'gpu'"});
                    check_throws([] { parse_device("cuda:x"); }, {"bad device string 'cuda:x'"});
#ifndef HH_WITH_CUDA
                    check_throws([] { to_device(zeros({2}), Device::cuda(0)); }, {"built without CUDA"});
#endif
                  }));

  auto cat_err = [] {
    check_throws([] { cat({zeros({2, 3}), zeros({3, 3})}, 1); }, {"cat: tensor 1 has shape (3, 3)", "(2, 3)"});
    check_throws([] { cat({zeros({2, 3}), zeros({2, 3}, DType::f64)}, 0); }, {"cat: tensor 1 has dtype f64"});
    check_throws([] { cat({}, 0); }, {"cat: expected a non-empty list"});
  };
  r.push_back(row("cat", "(2,3),(2,1),(2,2) dim 1", {{2, 3}, {2, 1}, {2, 2}},
                  [](X x) { return cat(x, 1); }, [](H h) { return cat_ref(h, 1); }, cat_err));
  r.push_back(row("cat", "(1,3),(2,3) dim -2", {{1, 3}, {2, 3}}, [](X x) { return cat(x, -2); },
                  [](H h) { return cat_ref(h, 0); }, cat_err));

  auto stack_err = [] {
    check_throws([] { stack({zeros({2, 3}), zeros({3, 2})}, 0); }, {"stack: tensor 1 has shape (3, 2)", "(2, 3)"});
  };
  auto stack_ref = [](const std::vector<Host>& h, int64_t dim) {
    std::vector<Host> us;
    for (const Host& x : h) us.push_back(unsqueeze_ref(x, dim));
    return cat_ref(us, wrap(dim, h[0].shape.size() + 1));
  };
  r.push_back(row("stack", "2 x (2,3) dim 0", {{2, 3}, {2, 3}}, [](X x) { return stack(x, 0); },
                  [stack_ref](H h) { return stack_ref(h, 0); }, stack_err));
  r.push_back(row("stack", "3 x (2,3) dim -1", {{2, 3}, {2, 3}, {2, 3}}, [](X x) { return stack(x, -1); },
                  [stack_ref](H h) { return stack_ref(h, -1); }, stack_err));

  // split/chunk: reassemble some pieces out of order, so sizes, order and the zero gradient of
  // the dropped pieces all matter.
  auto split_err = [] {
    check_throws([] { split(zeros({4, 2}), std::vector<int64_t>{1, 2}, 0); }, {"split: sizes sum to 3", "(4, 2)"});
    check_throws([] { split(zeros({4, 2}), int64_t{0}, 0); }, {"split: split_size must be positive"});
  };
  r.push_back(row("split", "(5,3) size 2 dim 0: pieces 2,0", {{5, 3}},
                  [](X x) {
                    auto p = split(x[0], int64_t{2}, 0);
                    return cat({p[2], p[0]}, 0);
                  },
                  [](H h) { return cat_ref({slice_ref(h[0], 0, 4, 1, 1), slice_ref(h[0], 0, 0, 2, 1)}, 0); },
                  split_err));
  r.push_back(row("split", "(2,4) sizes {1,3} dim -1: pieces 1,0", {{2, 4}},
                  [](X x) {
                    auto p = split(x[0], std::vector<int64_t>{1, 3}, -1);
                    return cat({p[1], p[0]}, 1);
                  },
                  [](H h) { return cat_ref({slice_ref(h[0], 1, 1, 3, 1), slice_ref(h[0], 1, 0, 1, 1)}, 1); },
                  split_err));

  auto unbind_err = [] { check_throws([] { unbind(zeros({}), 0); }, {"unbind: cannot unbind a 0-d tensor"}); };
  r.push_back(row("unbind", "(3,2,4) dim 1: pieces 1,0 restacked", {{3, 2, 4}},
                  [](X x) {
                    auto p = unbind(x[0], 1);
                    return stack({p[1], p[0]}, 1);
                  },
                  [](H h) { return cat_ref({slice_ref(h[0], 1, 1, 1, 1), slice_ref(h[0], 1, 0, 1, 1)}, 1); },
                  unbind_err));
  r.push_back(row("unbind", "(2,3) dim -1: pieces 2,0 (piece 1 gets no gradient)", {{2, 3}},
                  [](X x) {
                    auto p = unbind(x[0], -1);
                    return stack({p[2], p[0]}, -1);
                  },
                  [](H h) { return cat_ref({slice_ref(h[0], 1, 2, 1, 1), slice_ref(h[0], 1, 0, 1, 1)}, 1); },
                  unbind_err));

  auto chunk_err = [] { check_throws([] { chunk(zeros({4}), 0, 0); }, {"chunk: number of chunks must be positive"}); };
  r.push_back(row("chunk", "(2,7) 3 chunks dim 1: pieces 2,1", {{2, 7}},
                  [](X x) {
                    auto p = chunk(x[0], 3, 1);
                    return cat({p[2], p[1]}, 1);
                  },
                  [](H h) { return cat_ref({slice_ref(h[0], 1, 6, 1, 1), slice_ref(h[0], 1, 3, 3, 1)}, 1); },
                  chunk_err));
  r.push_back(row("chunk", "(6,2) 2 chunks dim 0: piece 1", {{6, 2}}, [](X x) { return chunk(x[0], 2, 0)[1]; },
                  [](H h) { return slice_ref(h[0], 0, 3, 3, 1); }, chunk_err));

  for (bool upper : {false, true}) {
    std::string op = upper ? "triu" : "tril";
    auto err = [op, upper] {
      check_throws([upper] { upper ? triu(zeros({4})) : tril(zeros({4})); },
                   {op + ": expected a tensor with at least 2 dims", "(4,)"});
    };
    auto fn = [upper](const Tensor& x, int64_t k) { return upper ? triu(x, k) : tril(x, k); };
    for (auto [shape, k] : std::vector<std::pair<Shape, int64_t>>{{{3, 4}, 0}, {{2, 3, 3}, -1}, {{4, 3}, 1}})
      r.push_back(row(op, shape_str(shape) + " k=" + std::to_string(k), {shape},
                      [fn, k = k](X x) { return fn(x[0], k); },
                      [upper, k = k](H h) { return triangle_ref(h[0], k, upper); }, err));
  }
  return r;
}

const bool registered = add_specs(shape_rows());

}  // namespace

TEST_CASE("views share storage with their base") {
  Tensor x = zeros({2, 3});
  Tensor s = x.slice(1, 1, 3);
  CHECK(s.storage() == x.storage());
  copy_(s, ones({2, 2}));
  CHECK(to_vector<double>(x) == std::vector<double>{0, 1, 1, 0, 1, 1});
  // Through a transpose and a select: column 0 of x is row 0 of x.t().
  copy_(x.t().select(0, 0), full({2}, 7.0));
  CHECK(to_vector<double>(x) == std::vector<double>{7, 1, 1, 7, 1, 1});
  Tensor v = x.view({3, 2});
  CHECK(v.storage() == x.storage());
  copy_(v.select(0, 2), full({2}, -1.0));  // elements 4 and 5 of x
  CHECK(to_vector<double>(x) == std::vector<double>{7, 1, 1, 7, -1, -1});
  Tensor e = x.unsqueeze(0).expand({4, 2, 3});
  CHECK(e.storage() == x.storage());
  CHECK(e.stride(0) == 0);
}

TEST_CASE("view refuses a non-viewable transpose; reshape copies it") {
  Tensor x = arange(6).reshape({2, 3});
  check_throws([&] { x.t().view({6}); }, {"view: cannot view a tensor of shape (3, 2)", "call reshape"});
  Tensor r = x.t().reshape({6});
  CHECK(r.storage() != x.storage());
  CHECK(to_vector<double>(r) == std::vector<double>{0, 3, 1, 4, 2, 5});
  Tensor same = x.reshape({3, 2});  // contiguous: no copy
  CHECK(same.storage() == x.storage());
  CHECK(x.t().contiguous().storage() != x.storage());
  CHECK(x.contiguous().storage() == x.storage());
}

TEST_CASE("to_dtype: backward casts the gradient back to the input dtype") {
  Tensor x = from_vector(std::vector<double>{1.5, -2, 3}, {3}, DType::f32).requires_grad_();
  Tensor y = to_dtype(x, DType::f64);
  CHECK(y.dtype() == DType::f64);
  y.backward(from_vector(std::vector<double>{0.25, 2, -1}, {3}, DType::f64));
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == DType::f32);
  CHECK(to_vector<double>(x.grad()) == std::vector<double>{0.25, 2, -1});
  // bf16 storage round trip keeps the graph; integer casts cut it.
  Tensor b = to_dtype(x, DType::bf16);
  CHECK(b.requires_grad());
  CHECK(to_vector<double>(b) == std::vector<double>{1.5, -2, 3});
  CHECK(!to_dtype(x, DType::i64).requires_grad());
}

}  // namespace hh::test
