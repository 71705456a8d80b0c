// Threshold sweep (issue 41) of the fused nn ops: softmax / log_softmax (last dim and other dims),
// layer_norm, rms_norm, cross_entropy (ignore_index, label smoothing, mean / sum / none), mse_loss
// and dropout, forward against naive f64 loops written here and backward by directional
// derivatives (tests/sweep/sweep.h). add_*_norm, bias_gelu, rope, hedgehog_features:
// tests/sweep/sweep_fused.cpp.
//
// Constants that choose a path, and the sizes below that cross them:
//   CPU (core/cpu/cpu_nn.inc, compiled twice: core/cpu/cpu_nn.cpp baseline, core/cpu/avx2/cpu_nn.cpp
//   AVX2+FMA; with_cpu_kernels (core/cpu/cpu_kernels.h:36) runs the AVX2 copy on the avx512 path):
//   - kParallelGrain = 32768 (core/cpu/cpu_backend.h:93): every kernel goes parallel when rows x
//     row length > 32768 (softmax cpu_nn.inc:163, softmax_backward :176, layer_norm :245,
//     layer_norm_backward :297, rms_norm :356, rms_norm_backward :390, cross_entropy :437,
//     cross_entropy_backward :474). The norm backwards then sum weight / bias gradients in
//     per-thread Partials (cpu_nn.inc:60, used at :299 and :391). Crossed by the "kParallelGrain"
//     cases (rows, length): (511 / 512 / 513, 64) = 32704 / 32768 / 32832 elements, one row of
//     32767 / 32768 / 32769, (32769, 1) rows of one element, (993, 33) an odd length, (2, 16384);
//     the norms with weights on and off.
//   - vector widths of the `omp simd` loops and of Eigen's packet exp (softmax f32, cpu_nn.inc:113):
//     f32 8 (AVX2) / 16 (AVX-512 machine, AVX2 copy), f64 4 / 8, SSE2 baseline 4 / 2: row lengths
//     crossing({2, 4, 8, 16, 32}) plus 1 and 0 (empty rows).
//   - softmax_row's infinite-max branch (cpu_nn.inc:98) and row_logsumexp's -inf return (:51):
//     rows with some -inf entries (masked softmax, masked vocabulary in cross_entropy) and rows
//     that are all -inf (NaN, as PyTorch). Rows holding +inf are not swept: the CPU and CUDA give
//     NaN only at the +inf entry (0 / -inf elsewhere) where PyTorch gives NaN for the whole row;
//     nothing here defines which is wanted.
//   - vec::exp's cut at x - max < -88 (f32, core/cpu/vec_math.h:24, the softmax f32 path): a
//     wide-valued case, inputs U(-120, 20), so rows have entries on both sides of the cut.
//   - cross_entropy's label-smoothing branch (cpu_nn.inc:448) and ignore_index rows (:443, :479):
//     smoothing 0 / 0.1 / 1, ignore_index -100 with a quarter of the rows ignored, ignore_index
//     equal to a valid class id, every row ignored (mean = 0 / 0 = NaN as PyTorch, zero gradient),
//     i32 targets (converted in autograd/ops/nn.cpp).
//   - softmax over a dim other than the last is transposed to the last (autograd/ops/nn.cpp:
//     softmax_impl): 3-d inputs, dims 0 and 1, the reduced dim crossing the vector widths.
//   - dropout has no kernel of its own: Philox uniforms (core/cpu/cpu_copy.cpp random, parallel over
//     kParallelGrain, 4 uniforms per Philox block: core/philox.h philox_uniform_at), a compare and
//     a product. It is deterministic for a Generator's (seed, offset), so its mask is recomputed
//     here from philox_uniform_at (the RNG's definition) and checked at sizes crossing 4, 8 and
//     kParallelGrain with p = 0.25, and p = 0, p = 1 and training off at the short sizes.
//   - mse_loss is composed of sub / mul / sum (their own families' kernels): sizes crossing the
//     widths (each reduction) and kParallelGrain (mean).
//   No other block constants exist in these kernels: one row per OpenMP iteration, no chunking of
//   a row (cross_entropy's vocabulary is one pass per row on the CPU).
//   CUDA (cuda/cuda_common.cuh, cuda/cuda_softmax.cu, cuda/cuda_norm.cu, cuda/cuda_loss.cu):
//   - row_launch (cuda_common.cuh:174): blockDim.x = 32, doubled while < kMaxRowThreads = 512
//     (:169) and 4·blockDim.x < row length, so it changes at lengths 128 / 256 / 512 / 1024 (and
//     stays 512 above); blockDim.y = kBlock / blockDim.x = 8 / 4 / 2 / 1 rows per block (kBlock
//     = 256, :21). Used by softmax (cuda_softmax.cu:76, :86), the norms (cuda_norm.cu:158, :165,
//     :175) and cross_entropy (cuda_loss.cu:92, :104). Lengths crossing({128, 256, 512, 1024})
//     plus 2048; row counts crossing({2, 4, 8}) so a block's last rows are partly past N.
//   - row_reduce (cuda_common.cuh:150): a one-warp row (<= 32 threads) skips shared memory:
//     lengths <= 128 versus above (the same crossings).
//   - norm weight / bias gradients (cuda_norm.cu:185-197): tiles of kTile = 32 columns x kLanes = 8
//     rows (:109), nchunks = min(ceil(N / 64), ceil(1024 / tiles)) row chunks (:187): C crossing
//     32 / 64, N crossing 64 / 128 (N = 65: two chunks of 33; N = 129: three of 43).
//   - kMaxGrid = 1 << 20 blocks (cuda_common.cuh:23): not reachable at test sizes.
//   The full list has every size above; the fast subset keeps a few of each kind.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/cpu/cpu_backend.h"
#include "core/philox.h"
#include "tests/sweep/sweep.h"

namespace hh::test::sweep {
namespace {

using Sizes = std::vector<int64_t>;
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string dname(DType t) { return t == DType::f32 ? "f32" : "f64"; }

// ---- naive references (f64 loops over host values) ----

// softmax / log_softmax of x along dim (a 0-d x is one row of one element).
Host softmax_ref(const Host& x, int64_t dim, bool log) {
  const Shape s = x.shape.empty() ? Shape{1} : x.shape;
  const int64_t nd = static_cast<int64_t>(s.size());
  if (dim < 0) dim += nd;
  int64_t outer = 1, inner = 1;
  const int64_t len = s[static_cast<size_t>(dim)];
  for (int64_t i = 0; i < dim; ++i) outer *= s[static_cast<size_t>(i)];
  for (int64_t i = dim + 1; i < nd; ++i) inner *= s[static_cast<size_t>(i)];
  Host out{x.shape, x.v};
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t j) { return static_cast<size_t>((o * len + j) * inner + in); };
      double m = -kInf;
      for (int64_t j = 0; j < len; ++j) m = std::max(m, x.v[at(j)]);
      double sum = 0.0;  // an all -inf row: m = -inf, x - m = NaN, so the row is NaN (PyTorch's)
      for (int64_t j = 0; j < len; ++j) sum += std::exp(x.v[at(j)] - m);
      for (int64_t j = 0; j < len; ++j)
        out.v[at(j)] = log ? x.v[at(j)] - m - std::log(sum) : std::exp(x.v[at(j)] - m) / sum;
    }
  return out;
}

// layer_norm (rms = false) or rms_norm (rms = true) over the last dim; w / b may be null.
Host norm_ref(const Host& x, const Host* w, const Host* b, double eps, bool rms) {
  const int64_t c = x.shape.back(), n = c == 0 ? 0 : x.numel() / c;
  Host out{x.shape, x.v};
  for (int64_t i = 0; i < n; ++i) {
    const double* xi = x.v.data() + i * c;
    double mu = 0.0, var = 0.0;
    if (!rms) {
      for (int64_t j = 0; j < c; ++j) mu += xi[j];
      mu /= static_cast<double>(c);
    }
    for (int64_t j = 0; j < c; ++j) var += (xi[j] - mu) * (xi[j] - mu);
    const double rstd = 1.0 / std::sqrt(var / static_cast<double>(c) + eps);
    for (int64_t j = 0; j < c; ++j) {
      double y = (xi[j] - mu) * rstd;
      if (w) y *= w->v[static_cast<size_t>(j)];
      if (b) y += b->v[static_cast<size_t>(j)];
      out.v[static_cast<size_t>(i * c + j)] = y;
    }
  }
  return out;
}

// cross_entropy of logits (..., V) and target (...) with PyTorch's label smoothing; mean divides by
// the non-ignored rows (0 / 0 = NaN when there are none).
Host ce_ref(const Host& x, const Host& t, int64_t ignore, double eps, Reduction red) {
  const int64_t v = x.shape.back(), n = x.numel() / v;
  Host rows{t.shape, std::vector<double>(static_cast<size_t>(n), 0.0)};
  double total = 0.0, count = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t ti = static_cast<int64_t>(t.v[static_cast<size_t>(i)]);
    if (ti == ignore) continue;
    const double* xi = x.v.data() + i * v;
    double m = -kInf, s = 0.0, mean = 0.0;
    for (int64_t j = 0; j < v; ++j) m = std::max(m, xi[j]);
    for (int64_t j = 0; j < v; ++j) {
      s += std::exp(xi[j] - m);
      mean += xi[j] / static_cast<double>(v);
    }
    const double lse = m + std::log(s);
    double l = (1.0 - eps) * (lse - xi[ti]);
    if (eps != 0.0) l += eps * (lse - mean);
    rows.v[static_cast<size_t>(i)] = l;
    total += l;
    count += 1.0;
  }
  if (red == Reduction::none) return rows;
  return Host{{}, {red == Reduction::sum ? total : total / count}};
}

const char* red_name(Reduction r) { return r == Reduction::mean ? "mean" : r == Reduction::sum ? "sum" : "none"; }

// compare() does not see an infinity against a finite value (inf - inf is NaN, never > tol): the
// infinities must sit where the reference has them, with the same sign.
void check_infinities(const Tensor& got, const Host& want, const std::string& label) {
  INFO(label);
  const std::vector<double> g = to_vector<double>(got);
  REQUIRE(g.size() == want.v.size());
  int64_t bad = -1;
  for (size_t i = 0; i < g.size() && bad < 0; ++i)
    if ((std::isinf(g[i]) || std::isinf(want.v[i])) && g[i] != want.v[i]) bad = static_cast<int64_t>(i);
  CHECK_MESSAGE(bad < 0, "element ", bad, ": got ", bad >= 0 ? g[static_cast<size_t>(bad)] : 0.0, " want ",
                bad >= 0 ? want.v[static_cast<size_t>(bad)] : 0.0);
}

// Forward in f32 and f64 (contiguous and non-contiguous, harness tolerances) and, when `which` is
// not empty, the backward in f64 by directional derivatives. make(t) draws the inputs.
void check_op(const std::function<std::vector<Tensor>(DType)>& make, const OpFn& fn, const RefFn& ref,
              const std::vector<int>& which, const std::string& label) {
  for (DType t : float_dtypes()) check_forward(fn, ref, make(t), label + " " + dname(t), rtol_of(t), atol_of(t));
  if (!which.empty()) check_directional(fn, make(DType::f64), which, label);
}

// An input of shape s whose host values come from `values` (on the device under test).
Tensor from_host(const std::vector<double>& values, const Shape& s, DType t) {
  return from_vector(values, s, {t}).to(test_device());
}

// Row counts x lengths crossing the parallel grain (rows x length = 32767 / 32768 / 32769).
std::vector<std::pair<int64_t, int64_t>> grain_shapes() {
  const std::vector<std::pair<int64_t, int64_t>> fast = {{511, 64}, {513, 64}, {1, 32769}};
  std::vector<std::pair<int64_t, int64_t>> all;
  for (int64_t n : around(512)) all.push_back({n, 64});  // 32704 / 32768 (serial) / 32832
  for (int64_t r : around(kParallelGrain)) all.push_back({1, r});  // one row
  all.push_back({kParallelGrain + 1, 1});  // rows of one element
  all.push_back({993, 33});                // 32769, an odd length
  all.push_back({2, kParallelGrain / 2});  // 32768: two rows, serial
  return pick(fast, all);
}

// Row lengths crossing the vector widths and CUDA's row_launch steps; row counts crossing CUDA's
// rows per block.
Sizes row_lengths() {
  return pick(Sizes{0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33, 129, 257},
              crossing({2, 4, 8, 16, 32, 128, 256, 512, 1024}, {0, 1, 2048}));
}
Sizes row_counts() { return pick(Sizes{1, 3, 9}, crossing({2, 4, 8}, {0, 1})); }

// The norms' directional checks use eps = 1e-2: with the default eps a short row whose values
// nearly coincide (layer_norm of 2 values, rms_norm of 1) is a steep step, where the finite
// difference (h = 1e-5) is inaccurate. eps chooses no path; the forwards use the defaults.
constexpr double kGradEps = 1e-2;

// Weight and bias present or not (each a branch of the forward, and of the backward's partials).
struct NormVariant {
  bool rms, weight, bias;
  std::string name() const {
    return std::string(rms ? "rms_norm" : "layer_norm") + (weight ? " +w" : "") + (bias ? " +b" : "");
  }
};

void check_norm(const NormVariant& nv, int64_t n, int64_t c, uint64_t seed) {
  const Shape s{n, c};
  auto make_eps = [&](DType t) {
    Generator g(seed);
    std::vector<Tensor> xs{input(s, g, t, -2.0, 2.0)};
    xs.push_back(nv.weight ? input({c}, g, t, 0.5, 1.5) : Tensor());
    xs.push_back(nv.bias ? input({c}, g, t) : Tensor());
    return xs;
  };
  auto fn_of = [&](double eps) {
    return [nv, eps](const std::vector<Tensor>& x) {
      return nv.rms ? rms_norm(x[0], x[1], eps) : layer_norm(x[0], x[1], x[2], eps);
    };
  };
  const double eps = nv.rms ? 1e-6 : 1e-5;  // the ops' defaults
  auto ref = [nv, eps](const std::vector<Host>& x) {
    return norm_ref(x[0], nv.weight ? &x[1] : nullptr, nv.bias ? &x[2] : nullptr, eps, nv.rms);
  };
  const std::string label = str(nv.name(), " ", s);
  for (DType t : float_dtypes())
    check_forward(fn_of(eps), ref, make_eps(t), label + " " + dname(t), rtol_of(t), atol_of(t));
  std::vector<int> which{0};
  if (nv.weight) which.push_back(1);
  if (nv.bias) which.push_back(2);
  check_directional(fn_of(kGradEps), make_eps(DType::f64), which, label);
}

struct CeCase {
  int64_t ignore_index = -100;
  double smoothing = 0.0;
  Reduction reduction = Reduction::mean;
  double ignored = 0.25;  // fraction of rows whose target is ignore_index
  bool i32 = false;       // i32 targets
  double masked = 0.0;    // fraction of non-target logits set to -inf (needs smoothing 0)
  std::string name() const {
    return str("cross_entropy ignore_index ", ignore_index, " smoothing ", smoothing, " ", red_name(reduction),
               i32 ? " i32" : "", masked > 0 ? " masked" : "");
  }
};

void check_ce(const CeCase& cc, int64_t n, int64_t v, uint64_t seed) {
  const Shape s{n, v};
  auto make = [&](DType t) {
    Generator g(seed);
    std::vector<int64_t> target(static_cast<size_t>(n));
    for (auto& e : target) {
      const bool ignore = g.next_uniform() <= cc.ignored;
      e = ignore ? cc.ignore_index : g.next_int(0, v);
    }
    std::vector<double> x(static_cast<size_t>(n * v));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < v; ++j) {
        double& e = x[static_cast<size_t>(i * v + j)];
        e = 8.0 * g.next_uniform() - 4.0;
        if (j != target[static_cast<size_t>(i)] && cc.masked > 0 && g.next_uniform() < cc.masked) e = -kInf;
      }
    Tensor tt = from_vector(target, {n}).to(test_device());
    if (cc.i32) tt = to_dtype(tt, DType::i32);
    return std::vector<Tensor>{from_host(x, s, t), tt};
  };
  auto fn = [cc](const std::vector<Tensor>& x) {
    return cross_entropy(x[0], x[1], cc.ignore_index, cc.smoothing, cc.reduction);
  };
  auto ref = [cc](const std::vector<Host>& x) {
    return ce_ref(x[0], x[1], cc.ignore_index, cc.smoothing, cc.reduction);
  };
  const std::string label = str(cc.name(), " ", s);
  for (DType t : float_dtypes()) check_forward(fn, ref, make(t), label + " " + dname(t), rtol_of(t), atol_of(t));
  // mean over no rows is 0 / 0 = NaN: no finite difference.
  const std::vector<Tensor> x64 = make(DType::f64);
  const Host t64 = to_host(x64[1]);
  const bool any_row = std::any_of(t64.v.begin(), t64.v.end(),
                                   [&](double e) { return static_cast<int64_t>(e) != cc.ignore_index; });
  if (cc.reduction != Reduction::mean || any_row) check_directional(fn, x64, {0}, label);
}

// The mask recomputed from the RNG's definition: keep element i (row-major) when its uniform
// philox_uniform_at(seed, offset, i), compared in f32, is <= 1 - p; kept elements scale by 1/(1-p).
Host dropout_ref(const Host& x, double p, uint64_t seed) {
  Host out{x.shape, x.v};
  const float keep = static_cast<float>(1.0 - p);
  for (size_t i = 0; i < out.v.size(); ++i) {
    const bool kept = p < 1.0 && philox_uniform_at(seed, 0, static_cast<int64_t>(i)) <= keep;
    out.v[i] = kept ? x.v[i] / (1.0 - p) : 0.0;
  }
  return out;
}

}  // namespace

TEST_SUITE("sweep") {

// ---- softmax / log_softmax ----

TEST_CASE("sweep: nn: softmax and log_softmax over the last dim, lengths x rows") {
  for_each_config([&](const Config&) {
    uint64_t seed = 100;
    for (int64_t r : row_lengths())
      for (int64_t n : row_counts())
        for (bool log : {false, true}) {
          const Shape s{n, r};
          const std::string label = str(log ? "log_softmax " : "softmax ", s);
          ++seed;
          auto make = [&](DType t) {
            Generator g(seed);
            return std::vector<Tensor>{input(s, g, t, -4.0, 4.0)};
          };
          auto fn = [log](const std::vector<Tensor>& x) { return log ? log_softmax(x[0], -1) : softmax(x[0], -1); };
          auto ref = [log](const std::vector<Host>& x) { return softmax_ref(x[0], -1, log); };
          check_op(make, fn, ref, {0}, label);
        }
    // A 0-d input is one row of one element; a 1-d input one row.
    for (const Shape& s : {Shape{}, Shape{1}, Shape{17}})
      for (bool log : {false, true}) {
        auto make = [&](DType t) {
          Generator g(7);
          return std::vector<Tensor>{input(s, g, t)};
        };
        auto fn = [log](const std::vector<Tensor>& x) { return log ? log_softmax(x[0], 0) : softmax(x[0], 0); };
        auto ref = [log](const std::vector<Host>& x) { return softmax_ref(x[0], 0, log); };
        check_op(make, fn, ref, {0}, str(log ? "log_softmax " : "softmax ", s));
      }
  });
}

TEST_CASE("sweep: nn: softmax and log_softmax across kParallelGrain") {
  for_each_config([&](const Config&) {
    for (const auto& shape : grain_shapes())
      for (bool log : {false, true}) {
        const int64_t n = shape.first, r = shape.second;
        const Shape s{n, r};
        auto make = [&](DType t) {
          Generator g(static_cast<uint64_t>(n * 7 + r));
          return std::vector<Tensor>{input(s, g, t, -4.0, 4.0)};
        };
        auto fn = [log](const std::vector<Tensor>& x) { return log ? log_softmax(x[0], -1) : softmax(x[0], -1); };
        auto ref = [log](const std::vector<Host>& x) { return softmax_ref(x[0], -1, log); };
        check_op(make, fn, ref, {0}, str(log ? "log_softmax " : "softmax ", s));
      }
  });
}

TEST_CASE("sweep: nn: softmax and log_softmax over the first and a middle dim") {
  const Sizes lens = pick(Sizes{0, 1, 9}, crossing({4, 8, 16, 128}, {0, 1}));
  const Sizes others = pick(Sizes{3}, Sizes{1, 3, 17});
  for_each_config([&](const Config&) {
    for (int64_t r : lens)
      for (int64_t a : others)
        for (int64_t dim : {0, 1})
          for (bool log : {false, true}) {
            const Shape s = dim == 0 ? Shape{r, a, 5} : Shape{a, r, 9};
            auto make = [&](DType t) {
              Generator g(static_cast<uint64_t>(r * 31 + a));
              return std::vector<Tensor>{input(s, g, t, -4.0, 4.0)};
            };
            auto fn = [log, dim](const std::vector<Tensor>& x) {
              return log ? log_softmax(x[0], dim) : softmax(x[0], dim);
            };
            auto ref = [log, dim](const std::vector<Host>& x) { return softmax_ref(x[0], dim, log); };
            check_op(make, fn, ref, {0}, str(log ? "log_softmax " : "softmax ", s, " dim ", dim));
          }
  });
}

// Rows with -inf entries (a mask): row 0 all -inf (NaN, as PyTorch), row 1 one finite entry, the
// others -inf with probability 0.3 (one entry kept finite). The backward is checked on the rows that are not all -inf
// (log_softmax through exp(), so the loss of its -inf outputs stays finite).
TEST_CASE("sweep: nn: masked softmax: -inf entries and all -inf rows") {
  const Sizes lens = pick(Sizes{1, 9, 17}, crossing({2, 4, 8, 16, 32, 128, 1024}, {1}));
  for_each_config([&](const Config&) {
    for (int64_t r : lens) {
      const int64_t n = 9;
      std::vector<double> v(static_cast<size_t>(n * r));
      Generator g(static_cast<uint64_t>(1000 + r));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < r; ++j) {
          double& e = v[static_cast<size_t>(i * r + j)];
          e = 8.0 * g.next_uniform() - 4.0;
          // Rows past 1 keep entry i % r finite, so only row 0 is all -inf.
          if (i == 0 || (i == 1 && j != r / 2) || (i > 1 && j != i % r && g.next_uniform() < 0.3)) e = -kInf;
        }
      const Shape s{n, r};
      for (bool log : {false, true}) {
        const std::string label = str(log ? "masked log_softmax " : "masked softmax ", s);
        auto fn = [log](const std::vector<Tensor>& x) { return log ? log_softmax(x[0], -1) : softmax(x[0], -1); };
        auto ref = [log](const std::vector<Host>& x) { return softmax_ref(x[0], -1, log); };
        for (DType t : float_dtypes()) {
          const Tensor x = from_host(v, s, t);
          check_forward(fn, ref, {x}, label + " " + dname(t), rtol_of(t), atol_of(t));
          NoGradGuard ng;
          check_infinities(fn({non_contiguous(x)}), softmax_ref(to_host(x), -1, log), label + " " + dname(t));
        }
        // Backward without row 0.
        const std::vector<double> rest(v.begin() + r, v.end());
        const Tensor x = from_host(rest, Shape{n - 1, r}, DType::f64);
        auto fn_grad = [log](const std::vector<Tensor>& xs) {
          return log ? exp(log_softmax(xs[0], -1)) : softmax(xs[0], -1);
        };
        check_directional(fn_grad, {x}, {0}, label);
      }
    }
  });
}

// Inputs U(-120, 20): entries on both sides of vec::exp's cut at x - max = -88 (f32).
TEST_CASE("sweep: nn: softmax with entries past the exp cut") {
  const Sizes lens = pick(Sizes{9, 33}, crossing({8, 16, 32, 128}, {1}));
  for_each_config([&](const Config&) {
    for (int64_t r : lens)
      for (bool log : {false, true}) {
        const Shape s{5, r};
        auto make = [&](DType t) {
          Generator g(static_cast<uint64_t>(2000 + r));
          return std::vector<Tensor>{input(s, g, t, -120.0, 20.0)};
        };
        auto fn = [log](const std::vector<Tensor>& x) { return log ? log_softmax(x[0], -1) : softmax(x[0], -1); };
        auto ref = [log](const std::vector<Host>& x) { return softmax_ref(x[0], -1, log); };
        for (DType t : float_dtypes())
          check_forward(fn, ref, make(t), str(log ? "log_softmax " : "softmax ", s, " wide ", dname(t)), rtol_of(t),
                        atol_of(t));
      }
  });
}

// ---- layer_norm / rms_norm ----

TEST_CASE("sweep: nn: layer_norm and rms_norm, lengths x rows") {
  for_each_config([&](const Config&) {
    uint64_t seed = 3000;
    for (int64_t c : row_lengths())
      for (int64_t n : row_counts()) {
        check_norm({false, true, true}, n, c, ++seed);
        check_norm({true, true, false}, n, c, ++seed);
      }
  });
}

TEST_CASE("sweep: nn: layer_norm and rms_norm with and without weight and bias") {
  const Sizes lens = pick(Sizes{1, 9}, crossing({4, 8, 16, 32}, {1}));
  const Sizes rows = pick(Sizes{3}, Sizes{1, 3, 65});
  for_each_config([&](const Config&) {
    uint64_t seed = 4000;
    for (int64_t c : lens)
      for (int64_t n : rows) {
        for (bool w : {false, true})
          for (bool b : {false, true}) check_norm({false, w, b}, n, c, ++seed);
        check_norm({true, false, false}, n, c, ++seed);
      }
  });
}

// CUDA's parameter-gradient reduction: kTile = 32 columns, row chunks of at least 64 rows.
TEST_CASE("sweep: nn: layer_norm and rms_norm parameter gradients across row chunks") {
  const Sizes rows = pick(Sizes{65}, crossing({64, 128}));
  const Sizes lens = pick(Sizes{33}, crossing({32, 64}, {1}));
  for_each_config([&](const Config&) {
    uint64_t seed = 5000;
    for (int64_t n : rows)
      for (int64_t c : lens) {
        check_norm({false, true, true}, n, c, ++seed);
        check_norm({true, true, false}, n, c, ++seed);
      }
  });
}

TEST_CASE("sweep: nn: layer_norm and rms_norm across kParallelGrain") {
  for_each_config([&](const Config&) {
    uint64_t seed = 6000;
    for (const auto& [n, c] : grain_shapes()) {
      check_norm({false, true, true}, n, c, ++seed);
      check_norm({true, true, false}, n, c, ++seed);
      if (full() && n * c > kParallelGrain && (n == 1 || c == 64)) {  // parallel, no per-thread partials
        check_norm({false, false, false}, n, c, ++seed);
        check_norm({true, false, false}, n, c, ++seed);
      }
    }
  });
}

// ---- cross_entropy ----

TEST_CASE("sweep: nn: cross_entropy, vocabulary x rows") {
  const Sizes vocab = pick(Sizes{1, 2, 9, 17, 129}, crossing({2, 4, 8, 16, 32, 128, 256, 512, 1024}, {1, 2048}));
  const Sizes rows = pick(Sizes{1, 5}, crossing({2, 4, 8}, {1, 33}));
  for_each_config([&](const Config&) {
    uint64_t seed = 7000;
    for (int64_t v : vocab)
      for (int64_t n : rows) {
        CeCase cc;
        cc.smoothing = 0.1;
        check_ce(cc, n, v, ++seed);
        cc.smoothing = 0.0;
        cc.reduction = Reduction::none;
        check_ce(cc, n, v, ++seed);
      }
  });
}

TEST_CASE("sweep: nn: cross_entropy options: ignore_index, label smoothing, reductions, masked vocabulary") {
  const std::vector<std::pair<int64_t, int64_t>> shapes =
      pick(std::vector<std::pair<int64_t, int64_t>>{{5, 9}, {0, 9}},
           std::vector<std::pair<int64_t, int64_t>>{{0, 9}, {1, 1}, {5, 9}, {9, 17}, {3, 129}, {33, 8}});
  for_each_config([&](const Config&) {
    uint64_t seed = 8000;
    for (const auto& [n, v] : shapes)
      for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none})
        for (double smoothing : {0.0, 0.1, 1.0}) {
          CeCase cc;
          cc.reduction = red;
          cc.smoothing = smoothing;
          check_ce(cc, n, v, ++seed);
          cc.ignore_index = 2;  // a valid class id: its rows are ignored
          cc.ignored = 0.0;
          check_ce(cc, n, v, ++seed);
          cc.ignore_index = -100;
          cc.ignored = 1.0;  // every row ignored: mean is NaN, sum 0
          check_ce(cc, n, v, ++seed);
          cc.ignored = 0.25;
          cc.i32 = true;
          check_ce(cc, n, v, ++seed);
          if (smoothing == 0.0) {  // smoothing takes the mean of every logit: -inf there is -inf
            cc.i32 = false;
            cc.masked = 0.5;
            check_ce(cc, n, v, ++seed);
          }
        }
  });
}

// Every row ignored: no gradient reaches the logits (mean's 1 / 0 never multiplies a row).
TEST_CASE("sweep: nn: cross_entropy with every row ignored has a zero gradient") {
  for_each_config([&](const Config&) {
    for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
      Generator g(9000);
      Tensor x = input({5, 17}, g, DType::f64).requires_grad_(true);
      Tensor t = hh::full({5}, -100.0, {DType::i64}).to(test_device());
      sum(cross_entropy(x, t, -100, 0.1, red)).backward();
      REQUIRE(x.grad().defined());
      CHECK_MESSAGE(max_abs_diff(x.grad(), zeros({5, 17}, {DType::f64, x.device()})) == 0.0, red_name(red));
    }
  });
}

TEST_CASE("sweep: nn: cross_entropy across kParallelGrain") {
  std::vector<std::pair<int64_t, int64_t>> shapes = grain_shapes();
  if (full()) shapes.push_back({2, 50257});  // a GPT-2 vocabulary
  for_each_config([&](const Config&) {
    uint64_t seed = 10000;
    for (const auto& [n, v] : shapes) {
      CeCase cc;
      cc.smoothing = 0.1;
      check_ce(cc, n, v, ++seed);
      if (full()) {
        cc.smoothing = 0.0;
        cc.reduction = Reduction::sum;
        check_ce(cc, n, v, ++seed);
      }
    }
  });
}

// ---- mse_loss (composed of sub / mul / sum) ----

TEST_CASE("sweep: nn: mse_loss, sizes x reductions") {
  const Sizes sizes = pick(Sizes{0, 1, 9, kParallelGrain + 1}, crossing({4, 8, 16, kParallelGrain}, {0, 1}));
  for_each_config([&](const Config&) {
    for (int64_t m : sizes)
      for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
        if (m > 64 && red != Reduction::mean) continue;  // the long sizes: one reduction
        const Shape s = m / 2 > 0 && m % 2 == 0 ? Shape{2, m / 2} : Shape{m};
        auto make = [&](DType t) {
          Generator g(static_cast<uint64_t>(11000 + m));
          return std::vector<Tensor>{input(s, g, t), input(s, g, t)};
        };
        auto fn = [red](const std::vector<Tensor>& x) { return mse_loss(x[0], x[1], red); };
        auto ref = [red](const std::vector<Host>& x) {
          Host d{x[0].shape, x[0].v};
          double total = 0.0;
          for (size_t i = 0; i < d.v.size(); ++i) {
            d.v[i] = (x[0].v[i] - x[1].v[i]) * (x[0].v[i] - x[1].v[i]);
            total += d.v[i];
          }
          if (red == Reduction::none) return d;
          return Host{{}, {red == Reduction::sum ? total : total / static_cast<double>(d.v.size())}};
        };
        // mean of no elements is 0 / 0 = NaN: forward only.
        check_op(make, fn, ref, red == Reduction::mean && m == 0 ? std::vector<int>{} : std::vector<int>{0, 1},
                 str("mse_loss ", s, " ", red_name(red)));
      }
  });
}

// ---- dropout: deterministic for a Generator's (seed, offset) ----

TEST_CASE("sweep: nn: dropout against its Philox mask") {
  const Sizes sizes = pick(Sizes{0, 1, 9, kParallelGrain + 1}, crossing({4, 8, kParallelGrain}, {0, 1, 2}));
  // p = 0.25 while training at every size; p = 0 and 1 and eval mode (no random draw) at the short.
  using Modes = std::vector<std::pair<double, bool>>;
  const Modes long_modes{{0.25, true}}, short_modes{{0.25, true}, {0.0, true}, {1.0, true}, {0.25, false}};
  for_each_config([&](const Config&) {
    for (int64_t m : sizes)
      for (const auto& mode : m > 64 ? long_modes : short_modes) {
        const double p = mode.first;
        const bool training = mode.second;
        const Shape s = m > 1 && m % 3 == 0 ? Shape{3, m / 3} : Shape{m};
        const uint64_t seed = static_cast<uint64_t>(12000 + m);
        auto make = [&](DType t) {
          Generator g(seed + 1);
          return std::vector<Tensor>{input(s, g, t)};
        };
        auto fn = [p, training, seed](const std::vector<Tensor>& x) {
          Generator g(seed);  // the same mask on every call
          return dropout(x[0], p, training, g);
        };
        auto ref = [p, training, seed](const std::vector<Host>& x) {
          return training && p > 0.0 ? dropout_ref(x[0], p, seed) : x[0];
        };
        check_op(make, fn, ref, {0}, str("dropout ", s, " p ", p, training ? " training" : " eval"));
      }
  });
}

// ---- random shapes (property) ----

TEST_CASE("sweep: nn: random shapes") {
  const uint64_t seed = sweep_seed();
  INFO("HH_SWEEP_SEED=" << seed);
  for_each_config([&](const Config&) {
    Generator g(seed);
    const int cases = full() ? 40 : 4;
    for (int k = 0; k < cases; ++k) {
      const int64_t n = g.next_int(0, 40), r = g.next_int(1, 300);
      const uint64_t s = seed + static_cast<uint64_t>(k);
      INFO("case " << k << ": rows " << n << ", length " << r);
      for (bool log : {false, true}) {
        auto make = [&](DType t) {
          Generator gi(s);
          return std::vector<Tensor>{input({n, r}, gi, t, -4.0, 4.0)};
        };
        auto fn = [log](const std::vector<Tensor>& x) { return log ? log_softmax(x[0], -1) : softmax(x[0], -1); };
        auto ref = [log](const std::vector<Host>& x) { return softmax_ref(x[0], -1, log); };
        check_op(make, fn, ref, {0}, str(log ? "log_softmax " : "softmax ", Shape{n, r}));
      }
      check_norm({false, true, true}, n, r, s);
      check_norm({true, true, false}, n, r, s);
      CeCase cc;
      cc.smoothing = g.next_uniform() < 0.5 ? 0.0 : 0.1;
      cc.reduction = g.next_uniform() < 0.5 ? Reduction::sum : Reduction::none;
      check_ce(cc, n, r, s);
    }
  });
}

}  // TEST_SUITE("sweep")

}  // namespace hh::test::sweep
