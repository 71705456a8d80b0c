// Threshold sweep (issue 41) of the index kernels behind index_select, embedding (backward:
// index_add), gather, scatter_add, one_hot and tril / triu. Forwards against naive f64 loops written
// here, backwards by directional derivatives in f64 (tests/sweep/sweep.h). The copy and cast
// kernels are swept in sweep_copy.cpp.
//
// Constants that choose a path, and the sizes below that cross them:
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
//   CUDA (cuda/cuda_index.cu):
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

Tensor index_tensor(const Shape& s, int64_t r, Generator& g, DType t) {
  if (numel_of(s) == 0 || r == 0) return zeros(s, {t, test_device()});
  return randint(0, r, s, g, {t}).to(test_device());
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
  Host out{s, std::vector<double>(static_cast<size_t>(numel_of(s)))};
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
            const std::string label = "index_select " + ori_str(c) + " " + std::string(dtype_name(dt)) + " index " + std::string(dtype_name(it));
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
                                      shape_str(e.ids) + " " + std::string(dtype_name(dt));
            auto fn = [](const std::vector<Tensor>& xs) { return embedding(xs[0], xs[1]); };
            check_forward(
                fn,
                [](const std::vector<Host>& hs) {
                  const Host &w0 = hs[0], &ids0 = hs[1];
                  const int64_t c = w0.shape[1];
                  Shape s = ids0.shape;
                  s.push_back(c);
                  Host out{s, std::vector<double>(static_cast<size_t>(numel_of(s)))};
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
            if (rd == 0 && numel_of(is) > 0) continue;
            if (numel_of(is) > 200000) continue;  // a long dim 0 / 2 replaced by K
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
                                        std::string(dtype_name(dt)) + (partial ? " (partial)" : "");
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
              "one_hot " + shape_str(c.ids) + " classes " + std::to_string(c.classes) + " " + std::string(dtype_name(out_t));
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
                Host out{s, std::vector<double>(static_cast<size_t>(numel_of(s)), 0.0)};
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
              full() && numel_of(s) < 20000 ? Sizes{-m - 2, -m - 1, -m, -1, 0, 1, n - 1, n, n + 1, n + 2} : few;
          for (int64_t k : ks)
            for (bool upper : {false, true}) {
              const Tensor x = input(s, g, dt);
              const std::string label =
                  std::string(upper ? "triu " : "tril ") + shape_str(s) + " k " + std::to_string(k) + " " + std::string(dtype_name(dt));
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
      while (numel_of(s) > 20000) s[static_cast<size_t>(rng() % s.size())] = 1;
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
