// Threshold sweep (issue 41) of data movement: the strided copy / cast and fill kernels behind
// contiguous(), copy_ into views, permute / transpose / stepped slices, expand, cat / stack /
// split / unbind and dtype casts. Forwards against naive f64 loops written here (casts to bf16 /
// f16 against a round-to-nearest-even written here), backwards by directional derivatives in f64
// (tests/sweep/sweep.h). The index kernels are swept in sweep_index.cpp.
//
// Constants that choose a path, and the sizes below that cross them:
//   CPU copy (core/cpu/cpu_copy.cpp, core/cpu/strided.h; no ISA-specific copy):
//   - kParallelGrain = 32768 (core/cpu/cpu_backend.h:93): fill (cpu_copy.cpp:33) and copy
//     (cpu_copy.cpp:47) go parallel over outer runs above it: numel crossing 32768 in every rank
//     1..6 ((32767..32769), (181,181) / (128,256) / (257,128), (31,33,33) / (32,32,32),
//     (8,8,8,64) / (8,8,8,65), (4,4,4,4,128), (2,2,2,2,2,1025)), one run only ((1, 32769)) or
//     runs of one element ((32769, 1) transposed).
//   - the same-dtype memcpy run (cpu_copy.cpp:53: both inner strides 1) versus the strided loop
//     (:57), the arithmetic cast (:59) and the bf16 / f16 / bool cast through double (:61):
//     contiguous and transposed / stepped views, every cast pair below.
//   - StridedLoop (strided.h:28-43): size-1 dims dropped, dims contiguous in every operand merged
//     (slices of a middle dim merge with the inner dims), 0-d tensors one run of 1, empty dims no
//     runs (outer() = 0, :47): ranks 1..6, permutations (reversed, rotated), steps 2 and 3 on the
//     first and the last dim (an inner stride of 3), shapes with 0 and 1.
//   - fill of a strided view: split's backward zero-fills the pieces that got no gradient
//     (autograd/ops/shape.cpp:388): a split along a middle dim with only one piece used.
//   CUDA (cuda/cuda_common.cuh, cuda/cuda_copy.cu, cuda/cuda_index.cu):
//   - copy: cudaMemcpyAsync for same-dtype contiguous copies, copy_contiguous_kernel for contiguous
//     casts, copy_strided_kernel otherwise (cuda_copy.cu:68-77); fill contiguous vs strided
//     (:43-46); 1-D launches of kBlock = 256 threads (cuda_common.cuh:21): sizes crossing 256 / 512
//     in the full list, and the layouts above.
//   - OffsetCalc: at most kMaxDims = 8 non-mergeable dims (cuda_common.cuh:22; ranks here <= 6),
//     32-bit indexing below 2^31 elements (:124) and kMaxGrid = 1 << 20 blocks (:23): not reachable.
//   The full list has every size above; the fast subset keeps a few of each kind.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/sweep/sweep.h"

namespace hh::test::sweep {
namespace {

using Sizes = std::vector<int64_t>;

// The values of a strided view (shape, strides, offset; in elements) of the row-major host buffer.
Host view_ref(const Host& base, const Shape& shape, const std::vector<int64_t>& strides, int64_t offset) {
  Host out{shape, std::vector<double>(static_cast<size_t>(numel_of(shape)))};
  for (int64_t i = 0; i < out.numel(); ++i) {
    const std::vector<int64_t> c = unravel(i, shape);
    int64_t at = offset;
    for (size_t d = 0; d < c.size(); ++d) at += c[d] * strides[d];
    out.v[static_cast<size_t>(i)] = base.v[static_cast<size_t>(at)];
  }
  return out;
}

// A view of x described for view_ref and applied with the engine's view ops.
struct View {
  std::string name;
  std::function<Tensor(const Tensor&)> apply;
  std::function<Host(const Host&)> ref;
};

View permute_view(const std::vector<int64_t>& perm) {
  std::string name = "permute(";
  for (int64_t p : perm) name += std::to_string(p) + ",";
  name.back() = ')';
  return {name, [perm](const Tensor& x) { return permute(x, perm); },
          [perm](const Host& h) {
            const std::vector<int64_t> st = contiguous_strides(h.shape);
            Shape s;
            std::vector<int64_t> vs;
            for (int64_t p : perm) {
              s.push_back(h.shape[static_cast<size_t>(p)]);
              vs.push_back(st[static_cast<size_t>(p)]);
            }
            return view_ref(h, s, vs, 0);
          }};
}

View slice_view(int64_t dim, int64_t start, int64_t end, int64_t step) {
  return {"slice(dim " + std::to_string(dim) + ", " + std::to_string(start) + ":" + std::to_string(end) + ":" +
              std::to_string(step) + ")",
          [=](const Tensor& x) { return slice(x, dim, start, end, step); },
          [=](const Host& h) {
            const size_t d = static_cast<size_t>(dim);
            const int64_t len = h.shape[d];
            const int64_t s0 = std::min(start, len), e0 = std::clamp(end, s0, len);
            std::vector<int64_t> st = contiguous_strides(h.shape);
            Shape s = h.shape;
            s[d] = (e0 - s0 + step - 1) / step;
            const int64_t off = s0 * st[d];
            st[d] *= step;
            return view_ref(h, s, st, off);
          }};
}

// Round to nearest, ties to even, with `bits` significant bits; below 2^(emin - 1) (frexp's
// exponent emin) the quantum stays 2^(emin - bits) (subnormals). bf16: 8 bits, emin -125;
// f16: 11 bits, emin -13 (overflow to inf not reached by the inputs here). The engine converts
// f64 to f32 first (core/dtype.h from_double<bf16 / f16>), so the reference does too.
double round_to(double v, DType t) {
  const float f = static_cast<float>(v);
  if (t == DType::f32) return f;
  if (t == DType::f64) return v;
  const int bits = t == DType::bf16 ? 8 : 11, emin = t == DType::bf16 ? -125 : -13;
  if (f == 0.0f) return 0.0;
  int e = 0;
  std::frexp(static_cast<double>(f), &e);
  const int q = std::max(e, emin) - bits;
  return std::ldexp(std::nearbyint(std::ldexp(static_cast<double>(f), -q)), q);
}

// The value a cast from a float to dtype t stores (as a double).
double cast_ref(double v, DType t) {
  switch (t) {
    case DType::i32:
    case DType::i64:
    case DType::u8: return std::trunc(v);
    case DType::boolean: return v != 0.0 ? 1.0 : 0.0;
    default: return round_to(v, t);
  }
}

// ---- shapes ----

std::vector<Shape> copy_shapes() {
  return pick(std::vector<Shape>{{7}, {32769}, {257, 128}, {3, 5, 7, 9}, {2, 3, 1, 5, 7}, {2, 3, 4, 1, 2, 3}, {3, 0}},
              std::vector<Shape>{{0},
                                 {1},
                                 {7},
                                 {255},
                                 {257},
                                 {513},
                                 {32767},
                                 {32768},
                                 {32769},
                                 {65537},
                                 {181, 181},
                                 {128, 256},
                                 {257, 128},
                                 {1, 32769},
                                 {32769, 1},
                                 {3, 0},
                                 {31, 33, 33},
                                 {32, 32, 32},
                                 {2, 1, 16385},
                                 {8, 8, 8, 64},
                                 {8, 8, 8, 65},
                                 {3, 5, 7, 9},
                                 {4, 4, 4, 4, 128},
                                 {2, 3, 1, 5, 7},
                                 {2, 0, 3, 4, 1},
                                 {2, 2, 2, 2, 2, 1025},
                                 {2, 3, 4, 1, 2, 3}});
}

// The views swept on a tensor of shape s: reversed and rotated permutations, the last two dims
// swapped, steps 2 / 3 on the first and the last dim.
std::vector<View> views_of(const Shape& s) {
  const int64_t r = static_cast<int64_t>(s.size());
  std::vector<View> out;
  std::vector<int64_t> rev(static_cast<size_t>(r)), rot(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) {
    rev[static_cast<size_t>(d)] = r - 1 - d;
    rot[static_cast<size_t>(d)] = (d + 1) % r;
  }
  out.push_back(permute_view(rev));
  if (r > 2) out.push_back(permute_view(rot));
  if (r > 2) {
    std::vector<int64_t> sw(static_cast<size_t>(r));
    std::iota(sw.begin(), sw.end(), 0);
    std::swap(sw[static_cast<size_t>(r - 1)], sw[static_cast<size_t>(r - 2)]);
    out.push_back(permute_view(sw));
  }
  out.push_back(slice_view(0, 1, s[0], 2));
  out.push_back(slice_view(r - 1, 0, s[static_cast<size_t>(r - 1)], 3));
  if (r > 2) out.push_back(slice_view(1, 1, std::max<int64_t>(1, s[1] - 1), 1));  // merges with the inner dims
  return out;
}

// ---- copy test cases ----

TEST_SUITE("sweep") {
  TEST_CASE("sweep: copy: contiguous() of permuted and stepped views, ranks 1..6, forward and backward") {
    const std::vector<Shape> shapes = copy_shapes();
    for_each_config([&](const Config&) {
      Generator g(701);
      for (DType dt : float_dtypes())
        for (const Shape& s : shapes)
          for (const View& v : views_of(s)) {
            const Tensor x = input(s, g, dt);
            const std::string label = "contiguous(" + v.name + ") of " + shape_str(s) + " " + std::string(dtype_name(dt));
            auto fn = [&](const std::vector<Tensor>& xs) {
              Tensor y = contiguous(v.apply(xs[0]));
              CHECK(y.is_contiguous());
              return y;
            };
            check_forward(
                fn, [&](const std::vector<Host>& hs) { return v.ref(hs[0]); }, {x}, label, 0.0, 0.0);
            // Backward: permute's is a permute, slice's a zero fill and a copy_ into the stepped view.
            if (dt == DType::f64 && x.numel() > 0 && x.numel() < 40000) check_directional(fn, {x}, {0}, label);
          }
    });
  }

  TEST_CASE("sweep: copy: copy_ into strided views, same dtype and casts") {
    // dst (a zero buffer of shape s, dtype dd) gets src through a view; the whole buffer is checked.
    struct Pair {
      DType dst, src;
    };
    const std::vector<Pair> pairs =
        pick(std::vector<Pair>{{DType::f32, DType::f32}, {DType::f64, DType::f32}, {DType::bf16, DType::f64}},
             std::vector<Pair>{{DType::f32, DType::f32},
                               {DType::f64, DType::f64},
                               {DType::f64, DType::f32},
                               {DType::f32, DType::f64},
                               {DType::bf16, DType::f32},
                               {DType::bf16, DType::f64},
                               {DType::f16, DType::f32},
                               {DType::f16, DType::f64},
                               {DType::i64, DType::f32},
                               {DType::i32, DType::f64},
                               {DType::boolean, DType::f32}});
    // Same-dtype copies (memcpy runs and the strided loop) on every shape; the casts (one loop
    // each, no threshold of their own) on a subset.
    const std::vector<Shape> shapes = copy_shapes();
    const std::vector<Shape> cast_shapes = {{7}, {32769}, {257, 128}, {8, 8, 8, 65}, {2, 3, 4, 1, 2, 3}, {3, 0}};
    for_each_config([&](const Config&) {
      Generator g(702);
      for (const Pair& p : pairs)
        for (const Shape& s : p.dst == p.src && p.dst == DType::f32 ? shapes : cast_shapes)
          for (const View& v : views_of(s)) {
            if (s.size() < 2 && v.name.rfind("permute", 0) == 0) continue;  // the identity
            const Shape vs = v.ref(Host{s, std::vector<double>(static_cast<size_t>(numel_of(s)))}).shape;
            const double scale = is_floating(p.dst) ? 1.0 : 100.0;
            Tensor src = input(vs, g, p.src, -scale, scale);
            if (p.dst == DType::boolean)  // some exact zeros
              src = mul(src, to_dtype(gt(input(vs, g, DType::f32), 0.0), p.src));
            const std::string label =
                "copy_ " + std::string(dtype_name(p.src)) + " into " + v.name + " of " + shape_str(s) + " " + std::string(dtype_name(p.dst));
            check_forward(
                [&](const std::vector<Tensor>& xs) {
                  Tensor dst = zeros(s, {p.dst, test_device()});
                  copy_(v.apply(dst), xs[0]);
                  return dst;
                },
                [&](const std::vector<Host>& hs) {
                  // Mark each position of the view with its index + 1, then scatter the cast values.
                  Host pos{s, std::vector<double>(static_cast<size_t>(numel_of(s)))};
                  for (size_t i = 0; i < pos.v.size(); ++i) pos.v[i] = static_cast<double>(i);
                  const Host where = v.ref(pos);
                  Host out{s, std::vector<double>(pos.v.size(), 0.0)};
                  for (size_t i = 0; i < where.v.size(); ++i)
                    out.v[static_cast<size_t>(where.v[i])] = cast_ref(hs[0].v[i], p.dst);
                  return out;
                },
                {src}, label, 0.0, 0.0);
          }
    });
  }

  TEST_CASE("sweep: copy: dtype casts f32 / f64 / bf16 / f16 / ints / bool, contiguous and strided") {
    const std::vector<DType> all = {DType::f32, DType::f64, DType::bf16,   DType::f16,
                                    DType::i32, DType::i64, DType::boolean};
    const std::vector<Shape> shapes =
        pick(std::vector<Shape>{{9}, {32769}, {33, 1001}},
             std::vector<Shape>{{0}, {1}, {9}, {257}, {32769}, {33, 1001}, {1, 1, 7}, {3, 0, 2}});
    for_each_config([&](const Config&) {
      Generator g(703);
      for (DType from : all)
        for (DType to : all) {
          if (from == to) continue;
          if (!full() && !(is_floating(from) && is_floating(to)) && from != DType::f32) continue;
          for (const Shape& s : shapes) {
            // Source values: exact in `from` (cast there first, its reference computed alike).
            const double scale = is_floating(to) && is_floating(from) ? 1.0 : 100.0;
            Tensor base = input(s, g, DType::f64, -scale, scale);
            if (from == DType::boolean || to == DType::boolean)
              base = mul(base, to_dtype(gt(input(s, g, DType::f32), 0.0), DType::f64));
            const Tensor x = to_dtype(base, from);
            const std::string label = "to_dtype " + std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)) + " " + shape_str(s);
            check_forward([&](const std::vector<Tensor>& xs) { return to_dtype(xs[0], to); },
                          [&](const std::vector<Host>& hs) {
                            Host out = hs[0];
                            for (double& e : out.v) e = cast_ref(e, to);
                            return out;
                          },
                          {x}, label, 0.0, 0.0);
          }
        }
      // Values around f16's subnormal range (2^-24 .. 2^-14) and rounding ties of bf16 / f16.
      for (DType to : {DType::bf16, DType::f16}) {
        const Tensor x = input({pick<int64_t>(4097, 32769)}, g, DType::f32, -1e-4, 1e-4);
        check_forward([&](const std::vector<Tensor>& xs) { return to_dtype(xs[0], to); },
                      [&](const std::vector<Host>& hs) {
                        Host out = hs[0];
                        for (double& e : out.v) e = cast_ref(e, to);
                        return out;
                      },
                      {x}, "to_dtype f32 -> " + std::string(dtype_name(to)) + " near the subnormals", 0.0, 0.0);
      }
      // Backward of a float cast is the gradient cast back: d sum(w * f32(x)) / dx = w exactly (a
      // finite difference through the f32 rounding would be noise).
      for (DType mid : {DType::f32, DType::bf16, DType::f16}) {
        const Tensor x = input({pick<int64_t>(33, 32769)}, g, DType::f64);
        Tensor xl = clone(x).detach();
        xl.requires_grad_(true);
        const Tensor w = to_dtype(input(x.shape(), g, DType::f64), mid);
        sum(mul(to_dtype(xl, mid), w)).backward();
        REQUIRE(xl.grad().defined());
        Host want = to_host(w);
        compare(xl.grad(), want, 0.0, 0.0, "to_dtype f64 -> " + std::string(dtype_name(mid)) + " backward");
      }
    });
  }

  TEST_CASE("sweep: copy: expand, cat, stack, split, unbind forward and backward") {
    const std::vector<int64_t> lens = pick(Sizes{1, 257, 32769}, crossing({32768}, {0, 1, 7, 257}));
    for_each_config([&](const Config&) {
      Generator g(704);
      for (DType dt : float_dtypes())
        for (int64_t n : lens) {
          // expand: (R,1,C) -> (R,K,C), (1,C) -> (K,C), 0-d -> (n); contiguous() of a stride-0 view.
          struct Ex {
            Shape from, to;
          };
          for (const Ex& e : std::vector<Ex>{{{3, 1, n}, {3, 4, n}}, {{1, n}, {2, n}}, {{}, {n}}, {{n, 1}, {n, 3}}}) {
            const Tensor x = input(e.from, g, dt);
            const std::string label = "expand " + shape_str(e.from) + " -> " + shape_str(e.to) + " " + std::string(dtype_name(dt));
            auto fn = [&](const std::vector<Tensor>& xs) { return contiguous(expand(xs[0], e.to)); };
            check_forward(
                fn,
                [&](const std::vector<Host>& hs) {
                  const Host& h = hs[0];
                  Host out{e.to, std::vector<double>(static_cast<size_t>(numel_of(e.to)))};
                  for (int64_t i = 0; i < out.numel(); ++i) {
                    std::vector<int64_t> c = unravel(i, e.to);
                    c.erase(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(e.to.size() - h.shape.size()));
                    for (size_t d = 0; d < c.size(); ++d)
                      if (h.shape[d] == 1) c[d] = 0;
                    out.v[static_cast<size_t>(i)] = h.v[static_cast<size_t>(ravel(c, h.shape))];
                  }
                  return out;
                },
                {x}, label, 0.0, 0.0);
            if (dt == DType::f64 && numel_of(e.to) > 0) check_directional(fn, {x}, {0}, label);
          }
          // cat / stack of three pieces (one of them empty when n allows) along each dim.
          for (int64_t dim : {0, 1, 2}) {
            // Long pieces keep the other dims small: (n,1,1), (2,n,1), (2,1,n).
            Shape s1 = n > 1000 ? Shape{2, 1, 1} : Shape{2, 3, 4}, s2 = s1, s3 = s1;
            s1[static_cast<size_t>(dim)] = n;
            s2[static_cast<size_t>(dim)] = 0;
            s3[static_cast<size_t>(dim)] = 5;
            const Tensor a = input(s1, g, dt), b = input(s2, g, dt), c = input(s3, g, dt);
            const std::string label = "cat dim " + std::to_string(dim) + " of " + shape_str(s1) + ", " + shape_str(s2) +
                                      ", " + shape_str(s3) + " " + std::string(dtype_name(dt));
            auto fn = [dim](const std::vector<Tensor>& xs) { return cat(xs, dim); };
            auto ref = [dim](const std::vector<Host>& hs) {
              Shape s = hs[0].shape;
              s[static_cast<size_t>(dim)] = 0;
              for (const Host& h : hs) s[static_cast<size_t>(dim)] += h.shape[static_cast<size_t>(dim)];
              Host out{s, std::vector<double>(static_cast<size_t>(numel_of(s)))};
              for (int64_t i = 0; i < out.numel(); ++i) {
                std::vector<int64_t> co = unravel(i, s);
                size_t k = 0;
                while (co[static_cast<size_t>(dim)] >= hs[k].shape[static_cast<size_t>(dim)]) {
                  co[static_cast<size_t>(dim)] -= hs[k].shape[static_cast<size_t>(dim)];
                  ++k;
                }
                out.v[static_cast<size_t>(i)] = hs[k].v[static_cast<size_t>(ravel(co, hs[k].shape))];
              }
              return out;
            };
            check_forward(fn, ref, {a, b, c}, label, 0.0, 0.0);
            if (dt == DType::f64 && numel_of(s1) > 0) check_directional(fn, {a, b, c}, {0, 2}, label);
            // stack = cat of the pieces unsqueezed at dim.
            const Tensor d = input(s1, g, dt);
            check_forward([dim](const std::vector<Tensor>& xs) { return stack(xs, dim); },
                          [&](const std::vector<Host>& hs) {
                            std::vector<Host> us;
                            for (Host h : hs) {
                              h.shape.insert(h.shape.begin() + dim, 1);
                              us.push_back(h);
                            }
                            return ref(us);
                          },
                          {a, d}, "stack dim " + std::to_string(dim) + " of 2 x " + shape_str(s1), 0.0, 0.0);
            // split along dim into pieces of sz (the last shorter), only the second used: the others'
            // gradients are zero fills of strided views of one buffer.
            if (n >= 4) {
              const Tensor x = input(s1, g, dt);
              const int64_t sz = std::max<int64_t>(3, n / 3);
              auto sp = [dim, sz](const std::vector<Tensor>& xs) { return mul(split(xs[0], sz, dim)[1], 2.0); };
              check_forward(
                  sp,
                  [&](const std::vector<Host>& hs) {
                    Host r = slice_view(dim, sz, 2 * sz, 1).ref(hs[0]);
                    for (double& e : r.v) e *= 2.0;
                    return r;
                  },
                  {x}, "split dim " + std::to_string(dim) + " of " + shape_str(s1), 0.0, 0.0);
              if (dt == DType::f64) check_directional(sp, {x}, {0}, "split dim " + std::to_string(dim));
              // unbind along dim with two of its slices used (one view per slice: short dims only).
              if (n > 300) continue;
              auto ub = [dim](const std::vector<Tensor>& xs) {
                std::vector<Tensor> u = unbind(xs[0], dim);
                return add(u[1], mul(u.back(), 3.0));
              };
              check_forward(
                  ub,
                  [&](const std::vector<Host>& hs) {
                    const int64_t len = hs[0].shape[static_cast<size_t>(dim)];
                    Host r1 = slice_view(dim, 1, 2, 1).ref(hs[0]), r2 = slice_view(dim, len - 1, len, 1).ref(hs[0]);
                    r1.shape.erase(r1.shape.begin() + dim);
                    for (size_t i = 0; i < r1.v.size(); ++i) r1.v[i] += 3.0 * r2.v[i];
                    return r1;
                  },
                  {x}, "unbind dim " + std::to_string(dim) + " of " + shape_str(s1), rtol_of(dt), atol_of(dt));
              if (dt == DType::f64) check_directional(ub, {x}, {0}, "unbind dim " + std::to_string(dim));
            }
          }
        }
    });
  }
}

}  // namespace
}  // namespace hh::test::sweep
