// Sweep: the reductions (sum, mean, amax/amin, max/min with indices, argmax/argmin, prod, var,
// logsumexp, norm) and cumsum, across the thresholds that choose their paths.
//
// CPU (core/cpu/cpu_reduce.cpp; every reduction is a contiguous (O,R,I) view reduced over R):
//   kColBlock = 256        columns of I per task (I = 255 | 256 | 257, 511 | 512 | 513: 1, 2, 3 blocks)
//   I == 1                 the row path (row_partial) instead of the column path (col_partial)
//   kFewTasks = 64         R is split across tasks only when O x I-blocks < 64: O x blocks = 63 | 64 | 65
//   kChunkElems = 32768    the split's rows per task: max(16, 32768 / min(I, 256)) = 128 for I >= 256,
//                          4,681 for I = 7, 32,768 for I = 1: R = chunk - 1 | chunk | chunk + 1
//                          (issue 41: unsplit tasks stopped at this chunk, dropping every row past it)
//   kParallelGrain = 32768 (core/cpu/cpu_backend.h) elements below which a reduction runs on one thread
//   cumsum: I == 1 (rows) vs 256-column blocks, O x blocks as the parallel tasks
//   The reduction kernels have no per-ISA copies: the sweep runs 1, 2 and 4 threads on the best path.
// CUDA (cuda/cuda_reduce.cu): 32-column tiles (kColTile; I = 31 | 32 | 33); R split when O x tiles <
//   1,024 (kWantTasks) and R > 2 x 256 rows (columns) or 2 x 8,192 elements (I == 1): R = 511 | 512 |
//   513 and 16,383 | 16,384 | 16,385; rows get up to 512 threads (cols / 4: R around 2,048); cumsum's
//   rows are scanned in chunks of blockDim x 4 (kItems).
// Also: empty R (sum 0, mean NaN), size-1 dims, NaN propagation is the op table's (tests/ops/test_reduce.cpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/backend.h"
#include "tests/sweep/sweep.h"

namespace hh::test::sweep {
namespace {

struct Case {
  int64_t O, R, I;
  std::string name() const {
    return "(" + std::to_string(O) + "," + std::to_string(R) + "," + std::to_string(I) + ") over dim 1";
  }
};

// The CPU split's rows per task for I columns.
int64_t split_rows(int64_t I) { return std::max<int64_t>(16, 32768 / std::min<int64_t>(std::max<int64_t>(I, 1), 256)); }

// Cases crossing every threshold above: for each I, the outer rows around the 64-task line and the
// rows around the split chunk, each case at most 1.5M elements (600K in the fast subset).
std::vector<Case> cases() {
  std::vector<Case> out;
  auto add = [&](int64_t O, int64_t R, int64_t I) {
    if (O >= 1 && R >= 0 && I >= 1 && O * R * I <= (full() ? 1'500'000 : 600'000)) out.push_back({O, R, I});
  };
  if (!full()) {
    // The defect's shapes and their neighbours, the row path at its chunk, a split and a tiny case.
    for (int64_t O : {63, 64}) add(O, 129, 256);
    add(22, 129, 768);            // 22 x 3 blocks = 66 tasks (MiniLM-like widths)
    add(1, 32769, 1);             // the row path, split
    add(64, 4097, 1);             // the row path, unsplit, many rows
    add(2, 300, 7);               // a split of a narrow column block
    add(3, 0, 5);                 // empty R
    add(1, 1, 1);
    return out;
  }
  for (int64_t I : crossing({256, 512}, {1, 2, 7, 31, 32, 33})) {
    const int64_t blocks = (I + 255) / 256;
    const int64_t o64 = (64 + blocks - 1) / blocks;  // the fewest outer rows giving 64 tasks
    const int64_t rows = split_rows(I);
    for (int64_t O : {o64 - 1, o64, o64 + 1}) {
      add(O, rows + 1, I);  // unsplit past the chunk (the defect) or split, by O
      add(O, rows, I);
    }
    add(1, rows - 1, I);
    add(1, rows + 1, I);
    add(o64, 0, I);
    add(o64, 1, I);
  }
  // The CUDA splits (R around 2 x 256 rows of columns, 2 x 8,192 elements of a row) and row widths.
  for (int64_t R : crossing({512, 2048, 16384})) add(2, R, 1);
  for (int64_t R : crossing({512})) add(2, R, 33);
  return out;
}

// Naive reduction of x's (O,R,I) values over R with f.
Host reduce_ref(const Host& x, const Case& c, double (*f)(const std::vector<double>&)) {
  Host out{{c.O, c.I}, std::vector<double>(static_cast<size_t>(c.O * c.I))};
  std::vector<double> g(static_cast<size_t>(c.R));
  for (int64_t o = 0; o < c.O; ++o)
    for (int64_t i = 0; i < c.I; ++i) {
      for (int64_t r = 0; r < c.R; ++r) g[static_cast<size_t>(r)] = x.v[static_cast<size_t>((o * c.R + r) * c.I + i)];
      out.v[static_cast<size_t>(o * c.I + i)] = f(g);
    }
  return out;
}

double g_sum(const std::vector<double>& g) {
  double s = 0;
  for (double v : g) s += v;
  return s;
}
double g_mean(const std::vector<double>& g) {
  return g.empty() ? std::numeric_limits<double>::quiet_NaN() : g_sum(g) / static_cast<double>(g.size());
}
double g_max(const std::vector<double>& g) { return *std::max_element(g.begin(), g.end()); }
double g_min(const std::vector<double>& g) { return *std::min_element(g.begin(), g.end()); }
double g_argmax(const std::vector<double>& g) { return static_cast<double>(std::max_element(g.begin(), g.end()) - g.begin()); }
double g_argmin(const std::vector<double>& g) { return static_cast<double>(std::min_element(g.begin(), g.end()) - g.begin()); }
double g_prod(const std::vector<double>& g) {
  double p = 1;
  for (double v : g) p *= v;
  return p;
}
double g_var(const std::vector<double>& g) {
  if (g.size() < 2) return std::numeric_limits<double>::quiet_NaN();
  const double m = g_mean(g);
  double s = 0;
  for (double v : g) s += (v - m) * (v - m);
  return s / static_cast<double>(g.size() - 1);
}
double g_lse(const std::vector<double>& g) {
  const double m = g_max(g);
  double s = 0;
  for (double v : g) s += std::exp(v - m);
  return m + std::log(s);
}
double g_norm2(const std::vector<double>& g) {
  double s = 0;
  for (double v : g) s += v * v;
  return std::sqrt(s);
}

using DimOp = std::function<Tensor(const Tensor&, int64_t dim)>;

// prod has no autograd op: the backend's kernel directly (contiguous input, reduced over dim 1 of (O,R,I)).
Tensor prod_kernel(const Tensor& x, int64_t dim) {
  REQUIRE(dim == 1);
  const Tensor c = contiguous(x);
  Tensor v = empty({c.size(0), c.size(2)}, {c.dtype(), c.device()});
  backend_for(c.device()).reduce(ReduceOp::prod, c, v, Tensor());
  return v;
}

struct Red {
  const char* name;
  double (*ref)(const std::vector<double>&);
  DimOp op;
  int64_t min_rows;  // var needs 2; max/min/argmax/logsumexp 1 (an error over an empty dim)
  bool differentiable;
  bool any_dim = true;  // prod: dim 1 of a 3-d tensor only
  double lo = -1, hi = 1;
  bool separated = false;  // a kink at ties: inputs whose values along R are 2/R apart (below)
};

// (O,R,I) f64 values whose entries along R are a permutation of a grid 2/R apart, so a finite
// difference of step 1e-5 never crosses max/min's kink (random values tie within 1e-5 at 4K rows).
Tensor separated_input(const Case& c) {
  std::vector<double> v(static_cast<size_t>(c.O * c.R * c.I));
  for (int64_t o = 0; o < c.O; ++o)
    for (int64_t r = 0; r < c.R; ++r)
      for (int64_t i = 0; i < c.I; ++i) {
        const int64_t k = (r * 7919 + o * 31 + i * 17) % c.R;  // 7919 is prime: a permutation of 0..R-1 (R no multiple of it)
        v[static_cast<size_t>((o * c.R + r) * c.I + i)] = 2.0 * static_cast<double>(k) / static_cast<double>(c.R) - 1.0;
      }
  return from_vector(v, {c.O, c.R, c.I}, {DType::f64}).to(test_device());
}

const std::vector<Red>& reductions() {
  static const std::vector<Red> r = {
      {"sum", g_sum, [](const Tensor& x, int64_t d) { return sum(x, {d}); }, 0, true},
      {"mean", g_mean, [](const Tensor& x, int64_t d) { return mean(x, {d}); }, 0, true},
      {"amax", g_max, [](const Tensor& x, int64_t d) { return amax(x, {d}); }, 1, true, true, -1, 1, true},
      {"amin", g_min, [](const Tensor& x, int64_t d) { return amin(x, {d}); }, 1, true, true, -1, 1, true},
      {"argmax", g_argmax, [](const Tensor& x, int64_t d) { return argmax(x, d); }, 1, false},
      {"argmin", g_argmin, [](const Tensor& x, int64_t d) { return argmin(x, d); }, 1, false},
      // Products of values near 1 stay finite over thousands of rows.
      {"prod", g_prod, prod_kernel, 0, false, false, 0.999, 1.001},
      {"var", g_var, [](const Tensor& x, int64_t d) { return var(x, {d}); }, 2, true},
      {"logsumexp", g_lse, [](const Tensor& x, int64_t d) { return logsumexp(x, {d}); }, 1, true},
      // Away from 0: over R = 1 the norm is |x|, whose kink a finite difference must not cross.
      {"norm", g_norm2, [](const Tensor& x, int64_t d) { return norm(x, 2.0, {d}); }, 0, true, true, 0.1, 1},
  };
  return r;
}

OpFn over(const Red& r, int64_t dim) {
  return [&r, dim](const std::vector<Tensor>& x) { return r.op(x[0], dim); };
}

}  // namespace

TEST_SUITE("sweep") {
  TEST_CASE("sweep: reduce: every op over (O,R,I) shapes crossing the column blocks, task counts and splits") {
    const std::vector<Case> cs = cases();
    for_each_config([&](const Config&) {
      for (const Case& c : cs) {
        for (const Red& r : reductions()) {
          if (c.R < r.min_rows) continue;
          for (DType t : float_dtypes()) {
            Generator g(static_cast<uint64_t>(c.O * 1000003 + c.R * 1009 + c.I));
            const Tensor x = input({c.O, c.R, c.I}, g, t, r.lo, r.hi);
            // f32: sums of up to 33K values accumulate in double; var/logsumexp/norm round per element.
            const double tol = t == DType::f32 ? 2e-5 : 1e-10;
            check_forward(over(r, 1), [&](const std::vector<Host>& h) { return reduce_ref(h[0], c, r.ref); }, {x},
                          std::string(r.name) + " " + c.name() + " " + dtype_name(t), tol, tol);
          }
        }
      }
    }, /*isa_paths=*/false);
  }

  TEST_CASE("sweep: reduce: gradients over the same shapes (directional, f64)") {
    std::vector<Case> cs = cases();
    for_each_config([&](const Config&) {
      for (const Case& c : cs) {
        if (c.R == 0) continue;
        for (const Red& r : reductions()) {
          if (!r.differentiable || c.R < r.min_rows) continue;
          Generator g(static_cast<uint64_t>(c.O * 7 + c.R * 13 + c.I));
          const Tensor x = r.separated ? separated_input(c) : input({c.O, c.R, c.I}, g, DType::f64, r.lo, r.hi);
          check_directional(over(r, 1), {x}, {0}, std::string(r.name) + " " + c.name());
        }
      }
    }, /*isa_paths=*/false);
  }

  TEST_CASE("sweep: reduce: cumsum over rows and column blocks") {
    std::vector<Case> cs;
    for (int64_t I : pick(std::vector<int64_t>{1, 257}, crossing({256}, {1, 2, 31, 32, 33})))
      for (int64_t O : pick(std::vector<int64_t>{3}, std::vector<int64_t>{1, 63, 64, 65}))
        for (int64_t R : pick(std::vector<int64_t>{2049}, crossing({2048, 129}, {0, 1})))
          if (O * R * I <= 3'000'000) cs.push_back({O, R, I});
    for_each_config([&](const Config&) {
      for (const Case& c : cs) {
        for (DType t : float_dtypes()) {
          Generator g(static_cast<uint64_t>(c.O + c.R + c.I));
          const Tensor x = input({c.O, c.R, c.I}, g, t);
          auto ref = [&](const std::vector<Host>& h) {
            Host out = h[0];
            for (int64_t o = 0; o < c.O; ++o)
              for (int64_t i = 0; i < c.I; ++i) {
                double s = 0;
                for (int64_t r = 0; r < c.R; ++r) {
                  const size_t at = static_cast<size_t>((o * c.R + r) * c.I + i);
                  s += h[0].v[at];
                  out.v[at] = s;
                }
              }
            return out;
          };
          const double tol = t == DType::f32 ? 2e-5 : 1e-10;
          check_forward([](const std::vector<Tensor>& x) { return cumsum(x[0], 1); }, ref, {x},
                        "cumsum " + c.name() + " " + dtype_name(t), tol, tol);
        }
        if (c.R > 0) {
          Generator g(static_cast<uint64_t>(c.O * 3 + c.R));
          check_directional([](const std::vector<Tensor>& x) { return cumsum(x[0], 1); },
                            {input({c.O, c.R, c.I}, g, DType::f64)}, {0}, "cumsum " + c.name());
        }
      }
    }, /*isa_paths=*/false);
  }

  TEST_CASE("sweep: reduce: random shapes and dims (property test; the seed is printed)") {
    const uint64_t seed = sweep_seed();
    INFO("HH_SWEEP_SEED=" << seed);
    Generator pick_gen(seed);
    const int n = full() ? 60 : 8;
    for_each_config([&](const Config&) {
      for (int k = 0; k < n; ++k) {
        // A 3-d shape with each size drawn from a threshold's neighbourhood or a small odd size.
        const std::vector<int64_t> sizes = {1, 2, 3, 7, 31, 33, 63, 64, 65, 127, 129, 255, 257};
        auto draw = [&] {
          const double u = uniform({1}, 0.0, 1.0, pick_gen, {DType::f64}).item<double>();
          return sizes[static_cast<size_t>(u * static_cast<double>(sizes.size())) % sizes.size()];
        };
        Shape s = {draw(), draw(), draw()};
        while (numel_of(s) > 700'000) s[0] = std::max<int64_t>(1, s[0] / 2);
        const double u = uniform({1}, 0.0, 3.0, pick_gen, {DType::f64}).item<double>();
        const int64_t dim = static_cast<int64_t>(u);
        const Tensor x = input(s, pick_gen, DType::f64);
        // Reduce `dim` of a 3-d tensor: the same as reducing dim 1 of its (O,R,I) view.
        int64_t O = 1, I = 1;
        for (int64_t d = 0; d < 3; ++d) {
          if (d < dim) O *= s[static_cast<size_t>(d)];
          if (d > dim) I *= s[static_cast<size_t>(d)];
        }
        const Case c{O, s[static_cast<size_t>(dim)], I};
        Shape out_shape = s;
        out_shape.erase(out_shape.begin() + dim);
        for (const Red& r : reductions()) {
          if (!r.any_dim || c.R < r.min_rows) continue;
          auto ref = [&](const std::vector<Host>& h) {
            Host o = reduce_ref(h[0], c, r.ref);
            o.shape = out_shape;
            return o;
          };
          const std::string name = r.name;
          check_forward(over(r, dim), ref, {x}, name + " of " + shape_str(s) + " over dim " + std::to_string(dim), 1e-10, 1e-10);
        }
      }
    }, /*isa_paths=*/false);
  }
}

}  // namespace hh::test::sweep
