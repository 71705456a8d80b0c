// Threshold sweep (issue 41) of data movement and indexing: the strided copy / cast and fill
// kernels behind contiguous(), copy_ into views, permute / transpose / stepped slices, expand,
// cat / stack / split / unbind and dtype casts; and the index kernels behind index_select,
// embedding (backward: index_add), gather, scatter_add, one_hot and tril / triu. Forwards against
// naive f64 loops written here (casts to bf16 / f16 against a round-to-nearest-even written here),
// backwards by directional derivatives in f64 (tests/sweep/sweep.h).
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
//   CPU index (core/cpu/cpu_index.cpp; viewed as (O, R, I) = outer, indexed dim, inner):
//   - kTile = 256 (cpu_index.cpp:63): index_add (:111) and scatter_add (:171) give each thread
//     (o, 256-wide tile of I) jobs: I crossing 256 and 512, O = 1 (one job when I <= 256: serial)
//     and O > 1, with repeated indices (K > R, and R = 1) so one target row gets many adds.
//   - kParallelGrain: index_select / gather go parallel when rows x I > 32768 (:83, :141),
//     index_add when O K I > 32768 and jobs > 1 (:112), scatter_add when the index has > 32768
//     elements and jobs > 1 (:172), triangle when rows x N > 32768 (:198), check_range (:40,
//     parallel max-reduction, then the first offender is reported): O K I crossing 32768
//     ((1,128,256) / (1,129,256) / (1,128,255) ...), an out-of-range index past the grain.
//   - empty index lists (K = 0: no kernel call, autograd/ops/index.cpp:74, :104, :142, :181),
//     0-d indices, i32 and i64 index dtypes, gather / scatter_add with an index smaller than the
//     input in other dims (the `partial` path, index.cpp:145), embedding ids of any rank.
//   - triangle's clamp of k (:197): k from -M-2 to N+2 on square and non-square matrices.
//   - one_hot is scatter_add on (N, classes, 1) (index.cpp:236): classes crossing 256, N x classes
//     crossing 32768, classes inferred (-1), empty ids.
//   CUDA (cuda/cuda_common.cuh, cuda/cuda_copy.cu, cuda/cuda_index.cu):
//   - copy: cudaMemcpyAsync for same-dtype contiguous copies, copy_contiguous_kernel for contiguous
//     casts, copy_strided_kernel otherwise (cuda_copy.cu:68-77); fill contiguous vs strided
//     (:43-46); 1-D launches of kBlock = 256 threads (cuda_common.cuh:21): sizes crossing 256 / 512
//     in the full list, and the layouts above.
//   - OffsetCalc: at most kMaxDims = 8 non-mergeable dims (cuda_common.cuh:22; ranks here <= 6),
//     32-bit indexing below 2^31 elements (:124) and kMaxGrid = 1 << 20 blocks (:23): not reachable.
//   - index kernels use row_launch(rows, I, 256) (cuda_index.cu:113-144): blockDim.x = 32 doubled
//     while < 256 and 4 blockDim.x < I, so it changes at I = 128 / 256 / 512; blockDim.y =
//     256 / blockDim.x = 8 / 4 / 2 / 1 rows per block: I crossing 128, 256, 512 and row counts
//     O K crossing 2, 4, 8. index_add / scatter_add accumulate with atomics: repeated indices.
//   - check_range_kernel (cuda_index.cu:27): blocks_for(n), the smallest bad position reported.
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

std::string dname(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
  }
  return "?";
}

int64_t count(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Row-major strides of s, in elements.
std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

// Multi-index of flat position i in s.
std::vector<int64_t> unravel(int64_t i, const Shape& s) {
  std::vector<int64_t> c(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    c[d] = i % s[d];
    i /= s[d];
  }
  return c;
}

int64_t ravel(const std::vector<int64_t>& c, const Shape& s) {
  int64_t f = 0;
  for (size_t d = 0; d < s.size(); ++d) f = f * s[d] + c[d];
  return f;
}

// The values of a strided view (shape, strides, offset; in elements) of the row-major host buffer.
Host view_ref(const Host& base, const Shape& shape, const std::vector<int64_t>& strides, int64_t offset) {
  Host out{shape, std::vector<double>(static_cast<size_t>(count(shape)))};
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
            const std::vector<int64_t> st = strides_of(h.shape);
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
            std::vector<int64_t> st = strides_of(h.shape);
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

Tensor index_tensor(const Shape& s, int64_t r, Generator& g, DType t) {
  if (count(s) == 0 || r == 0) return zeros(s, {t, test_device()});
  return randint(0, r, s, g, {t}).to(test_device());
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
            const std::string label = "contiguous(" + v.name + ") of " + shape_str(s) + " " + dname(dt);
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
            const Shape vs = v.ref(Host{s, std::vector<double>(static_cast<size_t>(count(s)))}).shape;
            const double scale = is_floating(p.dst) ? 1.0 : 100.0;
            Tensor src = input(vs, g, p.src, -scale, scale);
            if (p.dst == DType::boolean)  // some exact zeros
              src = mul(src, to_dtype(gt(input(vs, g, DType::f32), 0.0), p.src));
            const std::string label =
                "copy_ " + dname(p.src) + " into " + v.name + " of " + shape_str(s) + " " + dname(p.dst);
            check_forward(
                [&](const std::vector<Tensor>& xs) {
                  Tensor dst = zeros(s, {p.dst, test_device()});
                  copy_(v.apply(dst), xs[0]);
                  return dst;
                },
                [&](const std::vector<Host>& hs) {
                  // Mark each position of the view with its index + 1, then scatter the cast values.
                  Host pos{s, std::vector<double>(static_cast<size_t>(count(s)))};
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
            const std::string label = "to_dtype " + dname(from) + " -> " + dname(to) + " " + shape_str(s);
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
                      {x}, "to_dtype f32 -> " + dname(to) + " near the subnormals", 0.0, 0.0);
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
        compare(xl.grad(), want, 0.0, 0.0, "to_dtype f64 -> " + dname(mid) + " backward");
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
            const std::string label = "expand " + shape_str(e.from) + " -> " + shape_str(e.to) + " " + dname(dt);
            auto fn = [&](const std::vector<Tensor>& xs) { return contiguous(expand(xs[0], e.to)); };
            check_forward(
                fn,
                [&](const std::vector<Host>& hs) {
                  const Host& h = hs[0];
                  Host out{e.to, std::vector<double>(static_cast<size_t>(count(e.to)))};
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
            if (dt == DType::f64 && count(e.to) > 0) check_directional(fn, {x}, {0}, label);
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
                                      ", " + shape_str(s3) + " " + dname(dt);
            auto fn = [dim](const std::vector<Tensor>& xs) { return cat(xs, dim); };
            auto ref = [dim](const std::vector<Host>& hs) {
              Shape s = hs[0].shape;
              s[static_cast<size_t>(dim)] = 0;
              for (const Host& h : hs) s[static_cast<size_t>(dim)] += h.shape[static_cast<size_t>(dim)];
              Host out{s, std::vector<double>(static_cast<size_t>(count(s)))};
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
            if (dt == DType::f64 && count(s1) > 0) check_directional(fn, {a, b, c}, {0, 2}, label);
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

// ---- index references ----

// out (index's shape) = x[p with p[dim] = index[p]] for every position p of index.
Host gather_ref(const Host& x, int64_t dim, const Host& idx) {
  Host out{idx.shape, std::vector<double>(idx.v.size())};
  for (int64_t i = 0; i < idx.numel(); ++i) {
    std::vector<int64_t> c = unravel(i, idx.shape);
    c[static_cast<size_t>(dim)] = static_cast<int64_t>(idx.v[static_cast<size_t>(i)]);
    out.v[static_cast<size_t>(i)] = x.v[static_cast<size_t>(ravel(c, x.shape))];
  }
  return out;
}

// out = x; out[p with p[dim] = index[p]] += src[p] for every position p of index.
Host scatter_add_ref(const Host& x, int64_t dim, const Host& idx, const Host& src) {
  Host out = x;
  for (int64_t i = 0; i < idx.numel(); ++i) {
    std::vector<int64_t> c = unravel(i, idx.shape);
    const double s = src.v[static_cast<size_t>(ravel(c, src.shape))];
    c[static_cast<size_t>(dim)] = static_cast<int64_t>(idx.v[static_cast<size_t>(i)]);
    out.v[static_cast<size_t>(ravel(c, x.shape))] += s;
  }
  return out;
}

// out = x with dim replaced by index's entries.
Host index_select_ref(const Host& x, int64_t dim, const Host& idx) {
  Shape s = x.shape;
  s[static_cast<size_t>(dim)] = idx.numel();
  Host out{s, std::vector<double>(static_cast<size_t>(count(s)))};
  for (int64_t i = 0; i < out.numel(); ++i) {
    std::vector<int64_t> c = unravel(i, s);
    c[static_cast<size_t>(dim)] = static_cast<int64_t>(idx.v[static_cast<size_t>(c[static_cast<size_t>(dim)])]);
    out.v[static_cast<size_t>(i)] = x.v[static_cast<size_t>(ravel(c, x.shape))];
  }
  return out;
}

// (O, R, I, K): x (O, R, I) indexed along dim 1 by K indices (the kernel's own view).
struct Ori {
  int64_t o, r, i, k;
};
std::string ori_str(const Ori& s) {
  return "O " + std::to_string(s.o) + " R " + std::to_string(s.r) + " I " + std::to_string(s.i) + " K " +
         std::to_string(s.k);
}

// I crossing kTile (256, 512) and the CUDA row_launch widths (128, 256, 512); O K I crossing the
// grain; repeated indices (K > R, R = 1); empty index lists.
std::vector<Ori> ori_cases() {
  return pick(
      std::vector<Ori>{{1, 5, 256, 7}, {3, 4, 257, 9}, {1, 3, 1, 0}, {1, 128, 257, 129}, {65, 1, 1, 3}},
      std::vector<Ori>{{1, 5, 1, 1},       {1, 5, 127, 7},   {1, 5, 128, 7},   {1, 5, 129, 7},     {1, 5, 255, 7},
                       {1, 5, 256, 7},     {1, 5, 257, 7},   {1, 5, 511, 3},   {1, 5, 512, 3},     {1, 5, 513, 3},
                       {3, 4, 257, 9},     {2, 1, 300, 5},   {1, 3, 1, 0},     {4, 3, 0, 2},       {3, 0, 5, 0},
                       {65, 1, 1, 3},      {9, 7, 3, 8},     {5, 4, 2, 3},     {1, 200, 256, 128}, {1, 200, 256, 129},
                       {1, 200, 255, 128}, {2, 64, 256, 65}, {33, 7, 1000, 1}, {1, 128, 257, 129}, {4, 11, 513, 17},
                       {1000, 3, 33, 2}});
}

TEST_SUITE("sweep") {
  TEST_CASE("sweep: index: index_select and its backward (index_add) across kTile and the grain") {
    for_each_config([&](const Config&) {
      Generator g(801);
      for (DType dt : float_dtypes())
        for (const Ori& c : ori_cases())
          for (DType it : {DType::i64, DType::i32}) {
            if (it == DType::i32 && dt == DType::f64) continue;  // i32 indices: f32, dim 1
            // x (O, R, I) indexed along 1; and the same data as (R, O*I)-like layouts: dims 0 and 2.
            const Tensor x = input({c.o, c.r, c.i}, g, dt);
            const Tensor idx = index_tensor({c.k}, c.r, g, it);
            const std::string label = "index_select " + ori_str(c) + " " + dname(dt) + " index " + dname(it);
            for (int64_t dim : {1, 0, 2}) {
              if (dim != 1 && (!full() || it == DType::i32)) continue;
              const int64_t rd = dim == 1 ? c.r : dim == 0 ? c.o : c.i;
              const Tensor id = dim == 1 ? idx : index_tensor({c.k}, rd, g, it);
              if (rd == 0 && c.k > 0) continue;
              if (x.numel() / std::max<int64_t>(rd, 1) * c.k > 200000) continue;  // a long dim 0 / 2 selected K times
              auto fn = [dim](const std::vector<Tensor>& xs) { return index_select(xs[0], dim, xs[1]); };
              const std::string l = label + " dim " + std::to_string(dim);
              check_forward(
                  fn, [dim](const std::vector<Host>& hs) { return index_select_ref(hs[0], dim, hs[1]); }, {x, id}, l,
                  0.0, 0.0);
              if (dt == DType::f64 && x.numel() > 0 && c.k > 0) check_directional(fn, {x, id}, {0}, l);
            }
          }
    });
  }

  TEST_CASE("sweep: index: embedding forward and backward with repeated ids") {
    struct Emb {
      int64_t v, c;
      Shape ids;
    };
    const std::vector<Emb> cases =
        pick(std::vector<Emb>{{7, 256, {3, 11}}, {5, 257, {2, 70}}, {1, 33, {4}}, {9, 8, {0, 3}}},
             std::vector<Emb>{{7, 1, {5}},
                              {7, 127, {3, 11}},
                              {7, 128, {3, 11}},
                              {7, 129, {3, 11}},
                              {7, 255, {3, 11}},
                              {7, 256, {3, 11}},
                              {7, 257, {3, 11}},
                              {7, 512, {2, 5}},
                              {7, 513, {2, 5}},
                              {5, 257, {2, 70}},
                              {50, 256, {128}},
                              {50, 256, {129}},
                              {50, 255, {128}},
                              {1, 33, {4}},
                              {9, 8, {0, 3}},
                              {9, 8, {}},
                              {3, 1000, {2, 3, 7}},
                              {100, 300, {1, 1, 1}}});
    for_each_config([&](const Config&) {
      Generator g(802);
      for (DType dt : float_dtypes())
        for (const Emb& e : cases)
          for (DType it : {DType::i64, DType::i32}) {
            const Tensor w = input({e.v, e.c}, g, dt);
            const Tensor ids = index_tensor(e.ids, e.v, g, it);
            const std::string label = "embedding V " + std::to_string(e.v) + " C " + std::to_string(e.c) + " ids " +
                                      shape_str(e.ids) + " " + dname(dt);
            auto fn = [](const std::vector<Tensor>& xs) { return embedding(xs[0], xs[1]); };
            check_forward(
                fn,
                [](const std::vector<Host>& hs) {
                  const Host &w0 = hs[0], &ids0 = hs[1];
                  const int64_t c = w0.shape[1];
                  Shape s = ids0.shape;
                  s.push_back(c);
                  Host out{s, std::vector<double>(static_cast<size_t>(count(s)))};
                  for (int64_t n = 0; n < ids0.numel(); ++n)
                    for (int64_t j = 0; j < c; ++j)
                      out.v[static_cast<size_t>(n * c + j)] =
                          w0.v[static_cast<size_t>(static_cast<int64_t>(ids0.v[static_cast<size_t>(n)]) * c + j)];
                  return out;
                },
                {w, ids}, label, 0.0, 0.0);
            if (dt == DType::f64 && ids.numel() > 0) check_directional(fn, {w, ids}, {0}, label);
          }
    });
  }

  TEST_CASE("sweep: index: gather and scatter_add along each dim, full and partial index, forward and backward") {
    for_each_config([&](const Config&) {
      Generator g(803);
      for (DType dt : float_dtypes())
        for (const Ori& c : ori_cases())
          for (int64_t dim : {1, 0, 2}) {
            if (dim != 1 && !full()) continue;
            const Shape xs = {c.o, c.r, c.i};
            Shape is = xs;
            is[static_cast<size_t>(dim)] = c.k;
            const int64_t rd = xs[static_cast<size_t>(dim)];
            if (rd == 0 && count(is) > 0) continue;
            if (count(is) > 200000) continue;  // a long dim 0 / 2 replaced by K
            for (bool partial : {false, true}) {
              if (partial && dim != 1) continue;  // the partial path is a slice and a copy, no threshold of its own
              Shape ps = is;                      // an index smaller than x in the other dims
              if (partial) {
                bool any = false;
                for (size_t d = 0; d < 3; ++d)
                  if (static_cast<int64_t>(d) != dim && ps[d] > 1) {
                    ps[d] = ps[d] - 1;
                    any = true;
                  }
                if (!any) continue;
              }
              const DType it = partial ? DType::i32 : DType::i64;
              const Tensor x = input(xs, g, dt), idx = index_tensor(ps, rd, g, it);
              const std::string label = ori_str(c) + " dim " + std::to_string(dim) + " index " + shape_str(ps) + " " +
                                        dname(dt) + (partial ? " (partial)" : "");
              auto ga = [dim](const std::vector<Tensor>& t) { return gather(t[0], dim, t[1]); };
              check_forward(
                  ga, [dim](const std::vector<Host>& hs) { return gather_ref(hs[0], dim, hs[1]); }, {x, idx},
                  "gather " + label, 0.0, 0.0);
              if (dt == DType::f64 && idx.numel() > 0) check_directional(ga, {x, idx}, {0}, "gather " + label);
              // scatter_add: src with index's shape plus one more in dim (only index's extent is used).
              Shape ss = ps;
              ss[static_cast<size_t>(dim)] += 1;
              const Tensor src = input(ss, g, dt);
              auto sa = [dim](const std::vector<Tensor>& t) { return scatter_add(t[0], dim, t[1], t[2]); };
              // Repeated targets accumulate in a different order than the reference: f32 rounding.
              check_forward(
                  sa, [dim](const std::vector<Host>& hs) { return scatter_add_ref(hs[0], dim, hs[1], hs[2]); },
                  {x, idx, src}, "scatter_add " + label, rtol_of(dt), atol_of(dt));
              if (dt == DType::f64 && idx.numel() > 0)
                check_directional(sa, {x, idx, src}, {0, 2}, "scatter_add " + label);
            }
          }
    });
  }

  TEST_CASE("sweep: index: one_hot across kTile and the grain, inferred and empty") {
    struct Oh {
      Shape ids;
      int64_t classes;
    };
    const std::vector<Oh> cases =
        pick(std::vector<Oh>{{{3, 5}, 256}, {{129}, 257}, {{0}, 4}, {{7}, -1}}, std::vector<Oh>{{{3, 5}, 1},
                                                                                                {{3, 5}, 255},
                                                                                                {{3, 5}, 256},
                                                                                                {{3, 5}, 257},
                                                                                                {{128}, 256},
                                                                                                {{129}, 256},
                                                                                                {{128}, 255},
                                                                                                {{129}, 257},
                                                                                                {{0}, 4},
                                                                                                {{2, 0}, 3},
                                                                                                {{7}, -1},
                                                                                                {{}, 9},
                                                                                                {{33000}, 2},
                                                                                                {{2, 3, 4}, -1}});
    for_each_config([&](const Config&) {
      Generator g(804);
      for (const Oh& c : cases)
        for (DType out_t : {DType::f32, DType::f64, DType::i64, DType::bf16}) {
          const int64_t k = c.classes == -1 ? 11 : c.classes;
          const Tensor ids = index_tensor(c.ids, k, g, DType::i64);
          const std::string label =
              "one_hot " + shape_str(c.ids) + " classes " + std::to_string(c.classes) + " " + dname(out_t);
          check_forward(
              [&](const std::vector<Tensor>& xs) { return one_hot(xs[0], c.classes, out_t); },
              [&](const std::vector<Host>& hs) {
                int64_t classes = c.classes;
                if (classes == -1) {
                  classes = 0;
                  for (double v : hs[0].v) classes = std::max(classes, static_cast<int64_t>(v) + 1);
                }
                Shape s = hs[0].shape;
                s.push_back(classes);
                Host out{s, std::vector<double>(static_cast<size_t>(count(s)), 0.0)};
                for (int64_t n = 0; n < hs[0].numel(); ++n)
                  out.v[static_cast<size_t>(n * classes + static_cast<int64_t>(hs[0].v[static_cast<size_t>(n)]))] = 1.0;
                return out;
              },
              {ids}, label, 0.0, 0.0);
        }
    });
  }

  TEST_CASE("sweep: index: tril and triu across k and the grain, forward and backward") {
    const std::vector<Shape> shapes = pick(
        std::vector<Shape>{{7, 9}, {2, 129, 257}, {1, 1}},
        std::vector<Shape>{
            {1, 1}, {7, 9}, {9, 7}, {3, 0, 4}, {2, 129, 257}, {181, 181}, {128, 256}, {2, 2, 7, 600}, {5, 1, 33000}});
    for_each_config([&](const Config&) {
      Generator g(805);
      for (DType dt : float_dtypes())
        for (const Shape& s : shapes) {
          const int64_t m = s[s.size() - 2], n = s.back();
          // Every k around the clamp on the small shapes; a few on the ones past the grain.
          const Sizes few = {-m - 1, -1, 0, 2, n + 1};
          const Sizes ks =
              full() && count(s) < 20000 ? Sizes{-m - 2, -m - 1, -m, -1, 0, 1, n - 1, n, n + 1, n + 2} : few;
          for (int64_t k : ks)
            for (bool upper : {false, true}) {
              const Tensor x = input(s, g, dt);
              const std::string label =
                  std::string(upper ? "triu " : "tril ") + shape_str(s) + " k " + std::to_string(k) + " " + dname(dt);
              auto fn = [k, upper](const std::vector<Tensor>& xs) { return upper ? triu(xs[0], k) : tril(xs[0], k); };
              check_forward(
                  fn,
                  [&](const std::vector<Host>& hs) {
                    Host out = hs[0];
                    for (int64_t i = 0; i < out.numel(); ++i) {
                      const int64_t r = (i / n) % m, col = i % n;
                      const bool keep = upper ? col - r >= k : col - r <= k;
                      if (!keep) out.v[static_cast<size_t>(i)] = 0.0;
                    }
                    return out;
                  },
                  {x}, label, 0.0, 0.0);
              if (dt == DType::f64 && x.numel() > 0 && (k == 0 || (full() && k == -1)))
                check_directional(fn, {x}, {0}, label);
            }
        }
    });
  }

  TEST_CASE("sweep: index: an out-of-range index past the grain names the first offender") {
    const Sizes ns = pick(Sizes{32769}, Sizes{5, 32767, 32769, 70000});
    for_each_config([&](const Config&) {
      for (int64_t n : ns) {
        std::vector<int64_t> v(static_cast<size_t>(n), 1);
        v[static_cast<size_t>(n - 2)] = 9;  // the first offender
        v[static_cast<size_t>(n - 1)] = -3;
        const Tensor idx = from_vector(v, {n}, {DType::i64, test_device()});
        const Tensor x = zeros({2, 4}, {DType::f32, test_device()});
        check_throws([&] { (void)index_select(x, 1, idx); }, {"index_select", "index 9 is out of range"});
        check_throws(
            [&] {
              (void)embedding(zeros({4, 3}, {DType::f32, test_device()}), idx);
            },
            {"embedding", "index 9"});
        const Tensor gi = idx.reshape({1, n});
        check_throws([&] { (void)gather(zeros({1, 4}, {DType::f32, test_device()}), 1, gi); }, {"gather", "index 9"});
        check_throws(
            [&] {
              (void)scatter_add(zeros({1, 4}, {DType::f32, test_device()}), 1, gi,
                                zeros({1, n}, {DType::f32, test_device()}));
            },
            {"scatter_add", "index 9"});
      }
    });
  }

  TEST_CASE("sweep: index: random shapes for gather, scatter_add and index_select (property)") {
    const uint64_t seed = sweep_seed();
    INFO("HH_SWEEP_SEED=" << seed);
    std::mt19937_64 rng(seed);
    struct Case {
      Shape x;
      int64_t dim, k;
    };
    std::vector<Case> cases;
    const int n = full() ? 80 : 10;
    for (int c = 0; c < n; ++c) {
      const int rank = 1 + static_cast<int>(rng() % 4);
      Shape s;
      for (int d = 0; d < rank; ++d) s.push_back(1 + static_cast<int64_t>(rng() % (rng() % 6 == 0 ? 600 : 9)));
      while (count(s) > 20000) s[static_cast<size_t>(rng() % s.size())] = 1;
      cases.push_back({s, static_cast<int64_t>(rng() % static_cast<uint64_t>(rank)), static_cast<int64_t>(rng() % 12)});
    }
    for_each_config([&](const Config&) {
      Generator g(seed + 3);
      for (const Case& c : cases) {
        const int64_t r = c.x[static_cast<size_t>(c.dim)];
        const std::string label = shape_str(c.x) + " dim " + std::to_string(c.dim) + " K " + std::to_string(c.k);
        const Tensor x = input(c.x, g, DType::f64);
        const Tensor i1 = index_tensor({c.k}, r, g, DType::i64);
        auto is = [&](const std::vector<Tensor>& t) { return index_select(t[0], c.dim, t[1]); };
        check_forward(
            is, [&](const std::vector<Host>& hs) { return index_select_ref(hs[0], c.dim, hs[1]); }, {x, i1},
            "index_select " + label, 0.0, 0.0);
        if (c.k > 0) check_directional(is, {x, i1}, {0}, "index_select " + label);
        Shape ps = c.x;
        ps[static_cast<size_t>(c.dim)] = c.k;
        const Tensor i2 = index_tensor(ps, r, g, DType::i64);
        auto ga = [&](const std::vector<Tensor>& t) { return gather(t[0], c.dim, t[1]); };
        check_forward(
            ga, [&](const std::vector<Host>& hs) { return gather_ref(hs[0], c.dim, hs[1]); }, {x, i2},
            "gather " + label, 0.0, 0.0);
        const Tensor src = input(ps, g, DType::f64);
        auto sa = [&](const std::vector<Tensor>& t) { return scatter_add(t[0], c.dim, t[1], t[2]); };
        check_forward(
            sa, [&](const std::vector<Host>& hs) { return scatter_add_ref(hs[0], c.dim, hs[1], hs[2]); }, {x, i2, src},
            "scatter_add " + label, 1e-10, 1e-10);
        if (i2.numel() > 0) check_directional(sa, {x, i2, src}, {0, 2}, "scatter_add " + label);
      }
    });
  }
}

}  // namespace
}  // namespace hh::test::sweep
