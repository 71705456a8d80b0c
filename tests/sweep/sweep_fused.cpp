// Threshold sweep (issue 41) of the fused transformer-block ops (autograd/ops/fused.h):
// add_layer_norm / add_rms_norm, bias_gelu (erf and tanh forms), rope (and the inverse rotation
// its backward runs) and hedgehog_features, forward against naive f64 loops written here and
// backward by directional derivatives (tests/sweep/sweep.h). softmax, the norms, the losses and
// dropout: tests/sweep/sweep_nn.cpp.
//
// Constants that choose a path, and the sizes below that cross them:
//   CPU (core/cpu/cpu_fused.inc and, for hedgehog_features, core/cpu/cpu_nn.inc; each compiled twice:
//   baseline and core/cpu/avx2/ AVX2+FMA, which also runs on the avx512 path, cpu_kernels.h:36):
//   - kParallelGrain = 32768 (core/cpu/cpu_backend.h:93): add_norm goes parallel when N x C > 32768
//     (cpu_fused.inc:83), bias_gelu (:161) and its backward (:178, one scratch row per thread) too,
//     rope when G x L x D > 32768 (:197, collapse(2) over G and L), hedgehog_features when
//     N x F > 32768 (cpu_nn.inc:190, :213, one scratch row per thread). The backwards of add_norm
//     are layer_norm_backward / rms_norm_backward on h (cpu_nn.inc:297, :390, per-thread Partials).
//     Crossed by the "kParallelGrain" cases (rows, length): (511 / 512 / 513, 64) = 32704 / 32768 /
//     32832 elements, one row of 32767 / 32768 / 32769, (32769, 1), (993, 33), (2, 16384); for rope
//     G x L x D = 32512 / 32768 / 33024 and one row of D = 32766 / 32768 / 32770.
//   - vector widths: f32 8 (AVX2) / 16 (AVX-512 machine), f64 4 / 8, SSE2 4 / 2, in the omp simd
//     loops and Eigen's packets (bias_gelu's f32 path, cpu_fused.inc:97-123, and softmax's f32
//     path behind hedgehog_features): lengths crossing({2, 4, 8, 16, 32}) plus 1 and 0; rope's
//     half head dim D/2 crossing({2, 4, 8, 16}) plus 1.
//   - value thresholds of the f32 GELU: Eigen's erf and tanh saturate (|z| about 4 and 9) and
//     vec::exp (core/cpu/vec_math.h:24) cuts exp(-z^2 / 2) to 0 below -88 (|z| > 13.3): inputs
//     U(-20, 20) so each row has values on both sides of all three.
//   - the forward's weight / bias branches (cpu_fused.inc:53-65): add_layer_norm with neither,
//     either or both; add_rms_norm with and without weight.
//   No other block constants exist in these kernels (one row, or one (G, L) row, per iteration).
//   CUDA (cuda/cuda_fused.cu, cuda/cuda_common.cuh, cuda/cuda_feature_maps.cpp):
//   - add_norm_kernel runs on row_launch (cuda_fused.cu:88; cuda_common.cuh:174): blockDim.x 32,
//     64, 128, 256, 512 for C up to 128 / 256 / 512 / 1024 / above, 8 / 4 / 2 / 1 rows per block:
//     C crossing({128, 256, 512, 1024}) plus 2048, N crossing({2, 4, 8}).
//   - bias_gelu (cuda_fused.cu:96) and rope (:188) are 1-D grid-stride kernels of kBlock = 256
//     threads (cuda_common.cuh:21): element / pair counts crossing 256 (bias_gelu (1, 255..257) and
//     (3, 85) / (3, 86); rope G x L x D/2 = 240 / 256 / 272) and, for bias_gelu, i % C with C not
//     dividing the block.
//   - hedgehog_features on CUDA is composed (cuda_feature_maps.cpp): softmax over 2N rows of F
//     (row_launch on F): F crossing 128 / 256 / 512 / 1024 as above.
//   - kMaxGrid = 1 << 20 blocks (cuda_common.cuh:23): not reachable at test sizes.
//   The full list has every size above; the fast subset keeps a few of each kind.
#include <cmath>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/cpu/cpu_backend.h"
#include "tests/sweep/sweep.h"

namespace hh::test::sweep {
namespace {

using Sizes = std::vector<int64_t>;
using Shapes2 = std::vector<std::pair<int64_t, int64_t>>;

std::string dname(DType t) { return t == DType::f32 ? "f32" : "f64"; }

// Forward in f32 and f64 (contiguous and non-contiguous, harness tolerances) and, when `which` is
// not empty, the backward in f64 by directional derivatives. make(t) draws the inputs.
void check_op(const std::function<std::vector<Tensor>(DType)>& make, const OpFn& fn, const RefFn& ref,
              const std::vector<int>& which, const std::string& label) {
  for (DType t : float_dtypes()) check_forward(fn, ref, make(t), label + " " + dname(t), rtol_of(t), atol_of(t));
  if (!which.empty()) check_directional(fn, make(DType::f64), which, label);
}

Sizes row_lengths() {
  return pick(Sizes{0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33, 129, 257},
              crossing({2, 4, 8, 16, 32, 128, 256, 512, 1024}, {0, 1, 2048}));
}
Sizes row_counts() { return pick(Sizes{1, 3, 9}, crossing({2, 4, 8}, {0, 1})); }

// (rows, length) with rows x length = 32767 / 32768 / 32769 in several splits.
Shapes2 grain_shapes() {
  const Shapes2 fast = {{511, 64}, {513, 64}, {1, 32769}};
  Shapes2 all;
  for (int64_t n : around(512)) all.push_back({n, 64});  // 32704 / 32768 (serial) / 32832
  for (int64_t r : around(kParallelGrain)) all.push_back({1, r});  // one row
  all.push_back({kParallelGrain + 1, 1});  // rows of one element
  all.push_back({993, 33});                // 32769, an odd length
  all.push_back({2, kParallelGrain / 2});  // 32768: two rows, serial
  return pick(fast, all);
}

// The directional checks of the norms use eps = 1e-2: with the default eps a short row whose
// values nearly coincide is a steep step where the finite difference (h = 1e-5) is inaccurate. eps
// chooses no path; the forwards use the defaults.
constexpr double kGradEps = 1e-2;

// ---- add_layer_norm / add_rms_norm ----

struct AddNorm {
  bool rms, weight, bias;
  std::string name() const {
    return std::string(rms ? "add_rms_norm" : "add_layer_norm") + (weight ? " +w" : "") + (bias ? " +b" : "");
  }
};

// [h | y] per row: h = x + residual, y = the norm of h (w / b may be null), in f64.
Host add_norm_ref(const Host& x, const Host& res, const Host* w, const Host* b, double eps, bool rms) {
  const int64_t c = x.shape.back(), n = c == 0 ? 0 : x.numel() / c;
  Shape s = x.shape;
  s.back() = 2 * c;
  Host out{s, std::vector<double>(static_cast<size_t>(2 * n * c))};
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> h(static_cast<size_t>(c));
    for (int64_t j = 0; j < c; ++j) {
      const size_t u = static_cast<size_t>(i * c + j);
      h[static_cast<size_t>(j)] = x.v[u] + res.v[u];
    }
    double mu = 0.0, var = 0.0;
    if (!rms) {
      for (double e : h) mu += e;
      mu /= static_cast<double>(c);
    }
    for (double e : h) var += (e - mu) * (e - mu);
    const double rstd = 1.0 / std::sqrt(var / static_cast<double>(c) + eps);
    double* oh = out.v.data() + i * 2 * c;
    double* oy = oh + c;
    for (int64_t j = 0; j < c; ++j) {
      const size_t u = static_cast<size_t>(j);
      oh[j] = h[u];
      double y = (h[u] - mu) * rstd;
      if (w) y *= w->v[u];
      if (b) y += b->v[u];
      oy[j] = y;
    }
  }
  return out;
}

void check_add_norm(const AddNorm& an, int64_t n, int64_t c, uint64_t seed) {
  const Shape s{n, c};
  auto make = [&](DType t) {
    Generator g(seed);
    std::vector<Tensor> xs{input(s, g, t, -2.0, 2.0), input(s, g, t)};
    xs.push_back(an.weight ? input({c}, g, t, 0.5, 1.5) : Tensor());
    xs.push_back(an.bias ? input({c}, g, t) : Tensor());
    return xs;
  };
  auto fn_of = [&](double eps) {
    return [an, eps](const std::vector<Tensor>& x) {
      const AddNormOut o = an.rms ? add_rms_norm(x[0], x[1], x[2], eps) : add_layer_norm(x[0], x[1], x[2], x[3], eps);
      return cat({o.h, o.y}, -1);  // both outputs, so the loss reaches h's gradient path too
    };
  };
  const double eps = an.rms ? 1e-6 : 1e-5;  // the ops' defaults
  auto ref = [an, eps](const std::vector<Host>& x) {
    return add_norm_ref(x[0], x[1], an.weight ? &x[2] : nullptr, an.bias ? &x[3] : nullptr, eps, an.rms);
  };
  const std::string label = str(an.name(), " ", s);
  for (DType t : float_dtypes())
    check_forward(fn_of(eps), ref, make(t), label + " " + dname(t), rtol_of(t), atol_of(t));
  std::vector<int> which{0, 1};
  if (an.weight) which.push_back(2);
  if (an.bias) which.push_back(3);
  check_directional(fn_of(kGradEps), make(DType::f64), which, label);
}

// ---- bias_gelu ----

double gelu_ref(double z, bool tanh_form) {
  if (tanh_form) return 0.5 * z * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (z + 0.044715 * z * z * z)));
  return 0.5 * z * (1.0 + std::erf(z / std::sqrt(2.0)));
}

void check_bias_gelu(bool tanh_form, int64_t n, int64_t c, double range, uint64_t seed) {
  const Shape s{n, c};
  auto make = [&](DType t) {
    Generator g(seed);
    return std::vector<Tensor>{input(s, g, t, -range, range), input({c}, g, t)};
  };
  auto fn = [tanh_form](const std::vector<Tensor>& x) { return bias_gelu(x[0], x[1], tanh_form ? "tanh" : "none"); };
  auto ref = [tanh_form](const std::vector<Host>& x) {
    Host y{x[0].shape, x[0].v};
    const int64_t cc = x[1].numel();
    for (size_t i = 0; i < y.v.size(); ++i)
      y.v[i] = gelu_ref(x[0].v[i] + x[1].v[i % static_cast<size_t>(cc)], tanh_form);
    return y;
  };
  check_op(make, fn, ref, {0, 1}, str("bias_gelu ", tanh_form ? "tanh " : "erf ", s, " U(-", range, ", ", range, ")"));
}

// ---- rope ----

// x (..., L, D), cos / sin (L, D/2); inverse rotates by the opposite angle.
Host rope_ref(const Host& x, const Host& cs, const Host& sn, bool inverse) {
  const int64_t d = x.shape.back(), l = x.shape[x.shape.size() - 2], half = d / 2;
  const int64_t g = l * d == 0 ? 0 : x.numel() / (l * d);
  Host y{x.shape, x.v};
  for (int64_t gi = 0; gi < g; ++gi)
    for (int64_t li = 0; li < l; ++li)
      for (int64_t j = 0; j < half; ++j) {
        const size_t p1 = static_cast<size_t>((gi * l + li) * d + j), p2 = p1 + static_cast<size_t>(half);
        const double c = cs.v[static_cast<size_t>(li * half + j)];
        const double s = (inverse ? -1.0 : 1.0) * sn.v[static_cast<size_t>(li * half + j)];
        y.v[p1] = x.v[p1] * c - x.v[p2] * s;
        y.v[p2] = x.v[p2] * c + x.v[p1] * s;
      }
  return y;
}

// The backend's rope kernel with inverse = true (the rotation rope's backward runs), on (G, L, D).
Tensor rope_inverse_kernel(const std::vector<Tensor>& xs) {
  const Tensor x = contiguous(xs[0]), c = contiguous(xs[1]), s = contiguous(xs[2]);
  Tensor y = empty(x.shape(), {x.dtype(), x.device()});
  if (y.numel() > 0) backend_of(y).rope(x, c, s, true, y);
  return y;
}

void check_rope(const Shape& s, uint64_t seed) {
  const int64_t l = s[s.size() - 2], half = s.back() / 2;
  auto make = [&](DType t) {
    Generator g(seed);
    return std::vector<Tensor>{input(s, g, t), input({l, half}, g, t), input({l, half}, g, t)};
  };
  auto fn = [](const std::vector<Tensor>& x) { return rope(x[0], x[1], x[2]); };
  auto ref = [](const std::vector<Host>& x) { return rope_ref(x[0], x[1], x[2], false); };
  check_op(make, fn, ref, {0, 1, 2}, str("rope ", s));
  if (s.size() == 3) {  // the inverse rotation, forward, straight from the kernel
    auto ref_inv = [](const std::vector<Host>& x) { return rope_ref(x[0], x[1], x[2], true); };
    for (DType t : float_dtypes())
      check_forward(rope_inverse_kernel, ref_inv, make(t), str("rope inverse kernel ", s, " ", dname(t)), rtol_of(t),
                    atol_of(t));
  }
}

// ---- hedgehog_features ----

// [softmax(z), softmax(-z)] per row of z (..., F).
Host hedgehog_ref(const Host& z) {
  const int64_t f = z.shape.back(), n = f == 0 ? 0 : z.numel() / f;
  Shape s = z.shape;
  s.back() = 2 * f;
  Host y{s, std::vector<double>(static_cast<size_t>(2 * n * f))};
  for (int64_t i = 0; i < n; ++i)
    for (int half = 0; half < 2; ++half) {
      const double sign = half == 0 ? 1.0 : -1.0;
      const double* zi = z.v.data() + i * f;
      double m = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j < f; ++j) m = std::max(m, sign * zi[j]);
      for (int64_t j = 0; j < f; ++j) sum += std::exp(sign * zi[j] - m);
      for (int64_t j = 0; j < f; ++j)
        y.v[static_cast<size_t>(i * 2 * f + half * f + j)] = std::exp(sign * zi[j] - m) / sum;
    }
  return y;
}

void check_hedgehog(const Shape& s, uint64_t seed) {
  auto make = [&](DType t) {
    Generator g(seed);
    return std::vector<Tensor>{input(s, g, t, -4.0, 4.0)};
  };
  auto fn = [](const std::vector<Tensor>& x) { return hedgehog_features(x[0]); };
  auto ref = [](const std::vector<Host>& x) { return hedgehog_ref(x[0]); };
  check_op(make, fn, ref, {0}, str("hedgehog_features ", s));
}

}  // namespace

TEST_SUITE("sweep") {

TEST_CASE("sweep: fused: add_layer_norm and add_rms_norm, lengths x rows") {
  for_each_config([&](const Config&) {
    uint64_t seed = 100;
    for (int64_t c : row_lengths())
      for (int64_t n : row_counts()) {
        check_add_norm({false, true, true}, n, c, ++seed);
        check_add_norm({true, true, false}, n, c, ++seed);
      }
  });
}

TEST_CASE("sweep: fused: add_layer_norm and add_rms_norm with and without weight and bias") {
  const Sizes lens = pick(Sizes{1, 9}, crossing({4, 8, 16, 32}, {1}));
  const Sizes rows = pick(Sizes{3}, Sizes{1, 3, 65});
  for_each_config([&](const Config&) {
    uint64_t seed = 1000;
    for (int64_t c : lens)
      for (int64_t n : rows) {
        for (bool w : {false, true})
          for (bool b : {false, true}) check_add_norm({false, w, b}, n, c, ++seed);
        check_add_norm({true, false, false}, n, c, ++seed);
      }
  });
}

TEST_CASE("sweep: fused: add_layer_norm and add_rms_norm across kParallelGrain") {
  for_each_config([&](const Config&) {
    uint64_t seed = 2000;
    for (const auto& [n, c] : grain_shapes()) {
      check_add_norm({false, true, true}, n, c, ++seed);
      check_add_norm({true, true, false}, n, c, ++seed);
    }
  });
}

TEST_CASE("sweep: fused: bias_gelu, lengths x rows, erf and tanh") {
  for_each_config([&](const Config&) {
    uint64_t seed = 3000;
    for (int64_t c : row_lengths())
      for (int64_t n : row_counts())
        for (bool tanh_form : {false, true}) check_bias_gelu(tanh_form, n, c, 3.0, ++seed);
  });
}

// Values past the f32 saturation points of Eigen's erf / tanh and vec::exp's cut.
TEST_CASE("sweep: fused: bias_gelu with wide inputs") {
  const Sizes lens = pick(Sizes{9, 33}, crossing({4, 8, 16, 32}, {1, 129}));
  for_each_config([&](const Config&) {
    uint64_t seed = 4000;
    for (int64_t c : lens)
      for (bool tanh_form : {false, true}) check_bias_gelu(tanh_form, 5, c, 20.0, ++seed);
  });
}

// CUDA's 1-D launch: element counts around kBlock = 256, C not dividing a block.
TEST_CASE("sweep: fused: bias_gelu around CUDA's block and across kParallelGrain") {
  Shapes2 shapes = pick(Shapes2{{1, 257}, {3, 86}}, Shapes2{{1, 255}, {1, 256}, {1, 257}, {3, 85}, {3, 86}, {2, 128}});
  for (const auto& nc : grain_shapes()) shapes.push_back(nc);
  for_each_config([&](const Config&) {
    uint64_t seed = 5000;
    for (const auto& [n, c] : shapes)
      for (bool tanh_form : {false, true}) check_bias_gelu(tanh_form, n, c, 3.0, ++seed);
  });
}

TEST_CASE("sweep: fused: rope and its inverse, head dims x positions") {
  const Sizes halves = pick(Sizes{1, 4, 9}, crossing({2, 4, 8, 16}, {1, 64}));
  const Sizes lens = pick(Sizes{1, 3}, Sizes{1, 2, 3, 7, 8, 9});
  for_each_config([&](const Config&) {
    uint64_t seed = 6000;
    for (int64_t h : halves)
      for (int64_t l : lens) {
        check_rope({3, l, 2 * h}, ++seed);
        if (full()) check_rope({2, 2, l, 2 * h}, ++seed);  // (B, H, L, D)
      }
    check_rope({4, 2}, ++seed);      // (L, D): one group
    check_rope({0, 3, 8}, ++seed);   // no groups
    check_rope({2, 0, 8}, ++seed);   // no positions
  });
}

// rope is parallel over G x L when G x L x D > kParallelGrain; CUDA has one thread per pair
// (G x L x D/2 pairs around kBlock = 256).
TEST_CASE("sweep: fused: rope across kParallelGrain and CUDA's block") {
  const std::vector<Shape> fast = {{129, 4, 64}, {1, 1, 32770}, {1, 16, 32}};
  std::vector<Shape> all;
  for (int64_t g : around(128)) all.push_back({g, 4, 64});  // 32512 / 32768 / 33024 elements
  for (int64_t d : {32766, 32768, 32770}) all.push_back({1, 1, d});
  for (int64_t d : {30, 32, 34}) all.push_back({1, 16, d});  // 240 / 256 / 272 pairs
  all.push_back({2, 256, 64});
  for_each_config([&](const Config&) {
    uint64_t seed = 7000;
    for (const Shape& s : pick(fast, all)) check_rope(s, ++seed);
  });
}

TEST_CASE("sweep: fused: hedgehog_features, features x rows") {
  for_each_config([&](const Config&) {
    uint64_t seed = 8000;
    for (int64_t f : row_lengths())
      for (int64_t n : row_counts()) check_hedgehog({n, f}, ++seed);
    check_hedgehog({1}, ++seed);  // 1-d inputs: one row
    check_hedgehog({17}, ++seed);
  });
}

TEST_CASE("sweep: fused: hedgehog_features across kParallelGrain") {
  for_each_config([&](const Config&) {
    uint64_t seed = 9000;
    for (const auto& [n, f] : grain_shapes()) check_hedgehog({n, f}, ++seed);
  });
}

TEST_CASE("sweep: fused: random shapes") {
  const uint64_t seed = sweep_seed();
  INFO("HH_SWEEP_SEED=" << seed);
  for_each_config([&](const Config&) {
    Generator g(seed + 1);
    const int cases = full() ? 40 : 4;
    for (int k = 0; k < cases; ++k) {
      const int64_t n = g.next_int(0, 40), c = g.next_int(1, 300);
      const uint64_t s = seed + static_cast<uint64_t>(k);
      INFO("case " << k << ": rows " << n << ", length " << c);
      check_add_norm({false, true, true}, n, c, s);
      check_add_norm({true, true, false}, n, c, s);
      check_bias_gelu(g.next_uniform() < 0.5, n, c, 3.0, s);
      check_rope({n % 5, 1 + n / 5, 2 * (1 + c % 40)}, s);
      check_hedgehog({n, c}, s);
    }
  });
}

}  // TEST_SUITE("sweep")

}  // namespace hh::test::sweep
