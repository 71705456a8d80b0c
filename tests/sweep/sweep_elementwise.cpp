// Threshold sweep (issue 41) of the elementwise family: unary math and activations (forward and
// fused backward), binary arithmetic with broadcasting and scalar operands, integer arithmetic,
// comparisons, where and masked_fill, and the broadcast backward (sum_to, through the reduction
// kernel). Forwards against naive f64 loops written here; unary backwards against the derivative
// written here (f32 and f64: the f32 vectorized backward is a kernel path of its own), the others
// by directional derivatives in f64 (tests/sweep/sweep.h).
//
// Constants that choose a path, and the sizes below that cross them:
//   CPU (core/cpu/cpu_elementwise.inc, compiled twice: core/cpu/cpu_elementwise.cpp baseline and
//   core/cpu/avx2/cpu_elementwise.cpp AVX2+FMA; on an AVX-512 machine the AVX2 copy runs,
//   core/cpu/cpu_kernels.h:35):
//   - kParallelGrain = 32768 (core/cpu/cpu_backend.h:93): the unary loops go parallel above it
//     (cpu_elementwise.inc:119 for_blocks, :132 scalar forward, :146 scalar backward), and so do
//     parallel_runs (:220, binary and where). Unary n crossing 32768; binary / where totals
//     crossing 32768 as one run (1-D) and as many runs ((33, 1000), (4096, 9), ...).
//   - kBlock = 4096 (cpu_elementwise.inc:117): the f32 vectorized unary ops (VecF32: exp :36,
//     GeluErf :41, GeluTanh :55, Elu :75) run Eigen over blocks of 4096, the last one partial.
//     n crossing 4096 and 8192, and 40961 (10 blocks + 1, parallel).
//   - vec::kBlock = 16 (core/cpu/vec_math.h, vec::blocked): inside those blocks the Eigen
//     expressions run in fixed blocks of 16, the last partial one through zero-padded copies (the
//     same bits at any address): n crossing 16 and 32 (below), and 4097.
//   - ELU's vectorized backward only for alpha == 1 (usable_bwd, :78): elu(alpha = 1) and
//     elu(alpha = 0.5) (the scalar backward), both in f32.
//   - vec::exp's cut at x < -88 (f32) / -708 (f64) (core/cpu/vec_math.h:24): exp on U(-100, 3),
//     entries on both sides of the cut.
//   - Eigen packet widths and the auto-vectorized binary loops' tails: f32 4 (SSE2 baseline) /
//     8 (AVX2), f64 2 / 4, unrolled up to 4 packets: n crossing 4, 8, 16, 32 plus 0, 1, 3.
//   - kChunk = 16384 (:218): parallel_runs splits the element range in chunks of 16384 that may
//     start and end inside a run (:225): 1-D n crossing 16384 and 49152 (three chunks), rows of
//     1000 and 2049 elements whose runs straddle chunk ends.
//   - binary_loop's inner-run branches (:243 all contiguous, :245 tensor op scalar, :248 scalar op
//     tensor, :251 general strides): (n) op (n); (n) op 0-d; 0-d op (n); (R,1) op (R,C) and
//     (R,C) op (R,1) (a stride-0 operand inside each run); (1,C) op (R,C) (stride 0 only across
//     runs); and every case again non-contiguous (a transposed buffer, or a stride-2 1-D view).
//   - where_loop's two branches (:293 all contiguous, :295 strided or broadcast): same shapes with
//     three operands; masked_fill is where with a 0-d value expanded (stride 0 everywhere).
//   - StridedLoop (core/cpu/strided.h:28-43): size-1 dims dropped, dims contiguous in every operand
//     merged, a 0-d / all-ones shape becomes one run of 1: ranks 1..6 with size-1 dims, 0-d
//     operands, empty dims (0 in the first, middle or last dim: no kernel call).
//   - integer arithmetic (:162 int_pow, :177 DivF: truncation, x / 0 = 0, x / -1 without a trap):
//     i32 and i64 add / sub / mul / maximum / pow with zero and negative divisors and exponents,
//     sizes crossing kParallelGrain. div() of two integer tensors is a true division in f32
//     (autograd/ops/elementwise.cpp:278, torch's), so DivF's integer branch is reached only through
//     the backend: it is called directly here (Backend::binary on expanded operands).
//   - the broadcast backward is sum_to (autograd/ops/shape.cpp:190), a sum over the broadcast dims
//     in the reduction kernel (core/cpu/cpu_reduce.cpp: 618237c fixed rows past 128 being dropped):
//     (64,200,256) op (1,200,1) and (64,200,64) op (64,1,64) (a reduced middle dim of 200 > 128
//     under 64 outer rows) in the full list, (8,130,33) op (1,130,1) and (64,130,8) op (64,1,8)
//     in the fast one.
//   Comparisons use the same binary_loop with a bool output; inputs quantized to quarters so ties
//   (eq, le, ge) occur.
//   CUDA (cuda/cuda_common.cuh, cuda/cuda_unary.cu, cuda/cuda_binary.cu):
//   - kBlock = 256 threads per block (cuda_common.cuh:21), blocks_for(n) = ceil(n / 256)
//     (:25; cuda_unary.cu:27, :34; cuda_binary.cu:108, :169): n crossing 256 and 512.
//   - kMaxGrid = 1 << 20 blocks (:23): grid-stride past 2^28 elements, not reachable at test sizes.
//   - binary Layout (cuda_binary.cu:66): contiguous / a_scalar / b_scalar only when the merged
//     shape is one dim, else strided (OffsetCalc); where's `contiguous` flag (:169): the CPU shapes
//     above cover each (one merged dim vs several, stride 0 in the single dim).
//   - OffsetCalc: at most kMaxDims = 8 non-mergeable dims (cuda_common.cuh:22; ranks here are at
//     most 6), 32-bit index arithmetic below 2^31 elements (:124; not reachable).
//   The full list has every size above; the fast subset keeps a few of each kind.
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/backend.h"
#include "tests/sweep/sweep.h"

namespace hh::test::sweep {
namespace {

using Sizes = std::vector<int64_t>;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kPi = 3.14159265358979323846;

std::string dname(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    default: return "other";
  }
}

// ---- naive references ----

// The broadcast shape of `shapes` (numpy rules), computed here.
Shape broadcast_of(const std::vector<Shape>& shapes) {
  size_t r = 0;
  for (const Shape& s : shapes) r = std::max(r, s.size());
  Shape out(r, 1);
  for (const Shape& s : shapes)
    for (size_t d = 0; d < s.size(); ++d) {
      const size_t od = r - s.size() + d;
      if (s[d] != 1) out[od] = s[d];
    }
  return out;
}

// out[i] = f(x0[i'], x1[i''], ...) with numpy broadcasting, one element at a time.
Host broadcast_ref(const std::vector<Host>& xs, const std::function<double(const std::vector<double>&)>& f) {
  std::vector<Shape> shapes;
  for (const Host& x : xs) shapes.push_back(x.shape);
  const Shape s = broadcast_of(shapes);
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  Host out{s, std::vector<double>(static_cast<size_t>(n))};
  std::vector<int64_t> coord(s.size());
  std::vector<double> args(xs.size());
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i;
    for (size_t d = s.size(); d-- > 0;) {
      coord[d] = rem % s[d];
      rem /= s[d];
    }
    for (size_t k = 0; k < xs.size(); ++k) {
      const Shape& xs_shape = xs[k].shape;
      int64_t flat = 0;
      for (size_t d = 0; d < xs_shape.size(); ++d) {
        const size_t od = s.size() - xs_shape.size() + d;
        flat = flat * xs_shape[d] + (xs_shape[d] == 1 ? 0 : coord[od]);
      }
      args[k] = xs[k].v[static_cast<size_t>(flat)];
    }
    out.v[static_cast<size_t>(i)] = f(args);
  }
  return out;
}

double sigmoid_d(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double phi(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * kPi); }
double big_phi(double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_inner(double x) { return kSqrt2OverPi * (x + 0.044715 * x * x * x); }

// A unary op: the op, its value and derivative as naive formulas, its input range.
struct Unary {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> f, df;
  double lo = -3.0, hi = 3.0;
  bool vec = false;  // an f32 VecF32 path (cpu_elementwise.inc:36-86)
};

std::vector<Unary> unary_ops() {
  return {
      // f32 vectorized (VecF32) forwards; exp's range crosses the -88 cut (f32).
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); },
       [](double x) { return std::exp(x); }, -100.0, 3.0, true},
      {"gelu erf", [](const Tensor& x) { return gelu(x); }, [](double x) { return x * big_phi(x); },
       [](double x) { return big_phi(x) + x * phi(x); }, -3.0, 3.0, true},
      {"gelu tanh", [](const Tensor& x) { return gelu(x, "tanh"); },
       [](double x) { return 0.5 * x * (1.0 + std::tanh(gelu_tanh_inner(x))); },
       [](double x) {
         const double t = std::tanh(gelu_tanh_inner(x));
         return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * x * x);
       },
       -3.0, 3.0, true},
      {"elu alpha 1", [](const Tensor& x) { return elu(x, 1.0); }, [](double x) { return x > 0 ? x : std::expm1(x); },
       [](double x) { return x > 0 ? 1.0 : std::exp(x); }, -3.0, 3.0, true},
      {"elu alpha 0.5", [](const Tensor& x) { return elu(x, 0.5); },
       [](double x) { return x > 0 ? x : 0.5 * std::expm1(x); },
       [](double x) { return x > 0 ? 1.0 : 0.5 * std::exp(x); }, -3.0, 3.0, true},
      // The scalar loops.
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); },
       [](double x) { return 1.0 - std::tanh(x) * std::tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, sigmoid_d,
       [](double x) { return sigmoid_d(x) * (1.0 - sigmoid_d(x)); }},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); },
       [](double x) { return 1.0 / x; }, 0.1, 4.0},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double x) { return x * sigmoid_d(x); },
       [](double x) { return sigmoid_d(x) * (1.0 + x * (1.0 - sigmoid_d(x))); }},
      {"pow 2.5", [](const Tensor& x) { return pow(x, 2.5); }, [](double x) { return std::pow(x, 2.5); },
       [](double x) { return 2.5 * std::pow(x, 1.5); }, 0.1, 2.0},
      // Scalar operands as unary kernels (add_scalar, mul_scalar, rdiv_scalar).
      {"add 0.75", [](const Tensor& x) { return add(x, 0.75); }, [](double x) { return x + 0.75; },
       [](double) { return 1.0; }},
      {"mul -1.5", [](const Tensor& x) { return mul(x, -1.5); }, [](double x) { return -1.5 * x; },
       [](double) { return -1.5; }},
      {"2 / x", [](const Tensor& x) { return div(2.0, x); }, [](double x) { return 2.0 / x; },
       [](double x) { return -2.0 / (x * x); }, 0.5, 2.0},
  };
}

// Forward of u on x against the formula; backward (gradient of sum(w * u(x))) against w * u'(x).
void check_unary(const Unary& u, const Tensor& x, Generator& g, const std::string& label) {
  const DType dt = x.dtype();
  check_forward([&](const std::vector<Tensor>& xs) { return u.op(xs[0]); },
                [&](const std::vector<Host>& hs) {
                  Host out = hs[0];
                  for (double& v : out.v) v = u.f(v);
                  return out;
                },
                {x}, label, rtol_of(dt), atol_of(dt));
  if (x.numel() == 0) return;
  Tensor xl = clone(x).detach();
  xl.requires_grad_(true);
  Tensor y = u.op(xl);
  Tensor w = input(y.shape(), g, dt);
  sum(mul(y, w)).backward();
  REQUIRE_MESSAGE(xl.grad().defined(), label, ": no gradient");
  const Host hx = to_host(x), hw = to_host(w);
  Host want = hx;
  for (size_t i = 0; i < want.v.size(); ++i) want.v[i] = hw.v[i] * u.df(hx.v[i]);
  compare(xl.grad(), want, rtol_of(dt), atol_of(dt), label + " backward");
}

// A binary op with its naive value and its operands' ranges.
struct Binary {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> f;
  double alo = -1.0, ahi = 1.0, blo = -1.0, bhi = 1.0;
};

double max_ref(double a, double b) { return a > b ? a : b; }
double min_ref(double a, double b) { return a < b ? a : b; }

std::vector<Binary> binary_ops() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double a, double b) { return a - b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double a, double b) { return a / b; },
       -1.0, 1.0, 0.5, 2.0},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
       [](double a, double b) { return std::pow(a, b); }, 0.5, 2.0, -1.5, 1.5},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, max_ref},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, min_ref},
  };
}

const Binary& binary_named(const std::string& name) {
  static const std::vector<Binary> ops = binary_ops();
  for (const Binary& b : ops)
    if (b.name == name) return b;
  FAIL("no binary op " << name);
  return ops[0];
}

struct ShapePair {
  Shape a, b;
};

std::string pair_str(const ShapePair& p) { return shape_str(p.a) + " op " + shape_str(p.b); }

// maximum / minimum have a kink where a == b: a finite difference across it (|a - b| < h) is not
// the derivative. Their operands are kept apart: a on the grid k/64 + 1/256, b on k/64.
Tensor kink_free(const Tensor& x, bool offset) {
  Tensor q = div(to_dtype(to_dtype(mul(x, 64.0), DType::i64), x.dtype()), 64.0);
  return offset ? add(q, 1.0 / 256) : q;
}

// Forward in f32 and f64 (contiguous and non-contiguous), backward in f64 by directional derivatives.
void check_binary(const Binary& op, const ShapePair& p, Generator& g, bool backward,
                  const std::vector<DType>& dtypes = float_dtypes()) {
  for (DType dt : dtypes) {
    Tensor a = input(p.a, g, dt, op.alo, op.ahi), b = input(p.b, g, dt, op.blo, op.bhi);
    if (op.name == "maximum" || op.name == "minimum") {
      a = kink_free(a, true);
      b = kink_free(b, false);
    }
    const std::string label = op.name + " " + pair_str(p) + " " + dname(dt);
    check_forward([&](const std::vector<Tensor>& xs) { return op.op(xs[0], xs[1]); },
                  [&](const std::vector<Host>& hs) {
                    return broadcast_ref(hs, [&](const std::vector<double>& v) { return op.f(v[0], v[1]); });
                  },
                  {a, b}, label, rtol_of(dt), atol_of(dt));
    if (backward && dt == DType::f64 && numel_of(broadcast_of({p.a, p.b})) > 0)
      check_directional([&](const std::vector<Tensor>& xs) { return op.op(xs[0], xs[1]); }, {a, b}, {0, 1}, label);
  }
}

// The (a, b) shapes of the binary sweep: each binary_loop branch, runs crossing the chunk and the
// grain, ranks 1..6, size-1 and empty dims.
std::vector<ShapePair> binary_shapes() {
  std::vector<ShapePair> out;
  const Sizes flat =
      pick(Sizes{0, 1, 7, 9, 16385, 32769}, crossing({4, 8, 16, 32, 256, 512, 16384, 32768, 49152}, {0, 1, 3}));
  for (int64_t n : flat) out.push_back({{n}, {n}});  // one contiguous run
  const Sizes scalar_n = pick(Sizes{1, 17, 32769}, crossing({8, 16384, 32768}, {1, 3}));
  for (int64_t n : scalar_n) {
    out.push_back({{n}, {}});  // tensor op scalar
    out.push_back({{}, {n}});  // scalar op tensor
  }
  out.push_back({{}, {}});
  // A stride-0 operand inside every run; runs straddling chunk ends; many runs past the grain.
  const std::vector<ShapePair> runs = {{{33, 1}, {33, 1000}},
                                       {{33, 1000}, {33, 1}},
                                       {{1, 1000}, {33, 1000}},
                                       {{17, 2049}, {2049}},
                                       {{4096, 1}, {4096, 9}},
                                       {{5, 3}, {1, 3}},
                                       {{9, 1}, {1, 7}},
                                       {{3, 1, 5}, {1, 4, 1}},
                                       {{2, 1, 3, 1, 5, 4}, {1, 3, 3, 2, 1, 4}},
                                       {{3, 1, 4, 1, 6}, {1, 5, 1, 7, 1}},
                                       {{1, 1, 1}, {1}},
                                       {{0, 5}, {1, 5}},
                                       {{3, 0}, {3, 1}},
                                       {{4, 0, 2}, {4, 1, 2}},
                                       {{1, 8, 1}, {8, 1}}};
  const std::vector<ShapePair> runs_fast = {{{33, 1}, {33, 1000}},
                                            {{1, 1000}, {33, 1000}},
                                            {{2, 1, 3, 1, 5, 4}, {1, 3, 3, 2, 1, 4}},
                                            {{0, 5}, {1, 5}},
                                            {{1, 1, 1}, {1}}};
  for (const ShapePair& p : pick(runs_fast, runs)) out.push_back(p);
  return out;
}

// ---- test cases ----

TEST_SUITE("sweep") {
  TEST_CASE("sweep: elementwise: unary forward and backward across kBlock, kParallelGrain and vector tails") {
    // The vectorized ops (VecF32, blocks of kBlock) get every size; the scalar-loop ops share one
    // loop shape (only kParallelGrain and the compiler's vector tails choose a path there).
    const Sizes vec_sizes =
        pick(Sizes{0, 1, 7, 9, 4097, 32769}, crossing({4, 8, 16, 32, 256, 512, 4096, 8192, 32768}, {0, 1, 3, 40961}));
    const Sizes scalar_sizes = pick(Sizes{1, 9, 32769}, crossing({8, 16, 32768}, {0, 1, 3}));
    const std::vector<Unary> ops = unary_ops();
    for_each_config([&](const Config&) {
      Generator g(101);
      for (DType dt : float_dtypes())
        for (const Unary& u : ops)
          for (int64_t n : u.vec ? vec_sizes : scalar_sizes) {
            const Tensor x = input({n}, g, dt, u.lo, u.hi);
            check_unary(u, x, g, u.name + " (" + std::to_string(n) + ") " + dname(dt));
          }
    });
  }

  TEST_CASE("sweep: elementwise: unary on multi-dim and non-contiguous inputs past the grain") {
    // unary_op makes its input contiguous (autograd/ops/elementwise.cpp:65): the kernel sees one flat run.
    const std::vector<Shape> shapes =
        pick(std::vector<Shape>{{33, 1001}, {2, 1, 3}},
             std::vector<Shape>{{33, 1001}, {2, 1, 3}, {8, 4097}, {1, 1, 32769}, {3, 0, 5}, {2, 3, 2, 3, 2, 3}});
    const std::vector<Unary> ops = unary_ops();
    for_each_config([&](const Config&) {
      Generator g(102);
      for (DType dt : float_dtypes())
        for (const Unary& u : ops) {
          if (!(full() && u.vec) && u.name != "gelu tanh" && u.name != "tanh") continue;
          for (const Shape& s : shapes)
            check_unary(u, input(s, g, dt, u.lo, u.hi), g, u.name + " " + shape_str(s) + " " + dname(dt));
        }
    });
  }

  TEST_CASE("sweep: elementwise: binary ops over every loop branch, chunk and grain") {
    const std::vector<ShapePair> shapes = binary_shapes();
    const std::vector<Binary> ops = binary_ops();
    for_each_config([&](const Config&) {
      Generator g(201);
      for (const Binary& op : ops)
        for (const ShapePair& p : shapes) {
          // Every shape with add and mul; the other ops (the same loop, another functor) on the
          // shapes up to 20000 elements and one past the grain.
          const bool all_shapes = op.name == "add" || op.name == "mul";
          const int64_t n = numel_of(broadcast_of({p.a, p.b}));
          if (!all_shapes && n > 20000 && !(p.a == Shape{32769} && p.b == Shape{32769})) continue;
          check_binary(op, p, g, true);
        }
    });
  }

  TEST_CASE("sweep: elementwise: broadcast backward reduces long dims under many outer rows") {
    // The gradient of the broadcast operand is sum_to over the broadcast dims (the reduction kernel).
    const std::vector<ShapePair> shapes =
        pick(std::vector<ShapePair>{{{8, 130, 33}, {1, 130, 1}}, {{64, 130, 8}, {64, 1, 8}}},
             std::vector<ShapePair>{{{64, 200, 256}, {1, 200, 1}},
                                    {{64, 200, 64}, {64, 1, 64}},
                                    {{64, 130, 8}, {64, 1, 8}},
                                    {{1, 200, 1}, {64, 200, 9}},
                                    {{129, 1}, {129, 257}},
                                    {{65, 129, 3}, {129, 1}}});
    for_each_config([&](const Config&) {
      Generator g(301);
      for (const ShapePair& p : shapes) {
        // Past a million elements f64 only: the forward's f32 path is the same loop as on the smaller shapes.
        const bool huge = numel_of(broadcast_of({p.a, p.b})) >= 1000000;
        check_binary(binary_named("mul"), p, g, true, huge ? std::vector<DType>{DType::f64} : float_dtypes());
        if (!huge) check_binary(binary_named("div"), p, g, true);
      }
    });
  }

  TEST_CASE("sweep: elementwise: integer arithmetic (truncating division, zero divisors, exact pow)") {
    const Sizes sizes = pick(Sizes{1, 9, 32769}, crossing({8, 32768}, {0, 1}));
    auto int_pow = [](double a, double e) {
      const int64_t b = static_cast<int64_t>(a), k = static_cast<int64_t>(e);
      if (k < 0) return b == 1 ? 1.0 : b == -1 ? (k % 2 ? -1.0 : 1.0) : 0.0;
      double r = 1.0;
      for (int64_t i = 0; i < k; ++i) r *= static_cast<double>(b);
      return r;
    };
    auto trunc_div = [](double a, double b) { return b == 0 ? 0.0 : std::trunc(a / b); };
    auto int_div_kernel = [](const Tensor& a, const Tensor& b) {
      const Shape s = broadcast_of({a.shape(), b.shape()});
      Tensor out = empty(s, {a.dtype(), a.device()});
      if (out.numel() > 0) backend_of(out).binary(BinaryOp::div, expand(a, s), expand(b, s), out);
      return out;
    };
    struct IntOp {
      std::string name;
      std::function<Tensor(const Tensor&, const Tensor&)> op;
      std::function<double(double, double)> f;
      int64_t alo, ahi, blo, bhi;  // randint ranges [lo, hi)
    };
    const std::vector<IntOp> ops = {
        {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; },
         -1000, 1000, -1000, 1000},
        {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double a, double b) { return a - b; },
         -1000, 1000, -1000, 1000},
        {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; },
         -1000, 1000, -1000, 1000},
        // div of two integer tensors is a true division in f32 (torch's; autograd/ops/elementwise.cpp:278);
        // the kernel's truncating integer division (DivF) is called directly.
        {"div (true, f32)", [](const Tensor& a, const Tensor& b) { return div(a, b); },
         [](double a, double b) { return static_cast<double>(static_cast<float>(a) / static_cast<float>(b)); }, -1000,
         1000, -5, 6},
        {"div kernel (truncating)", int_div_kernel, trunc_div, -1000, 1000, -5, 6},
        {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, max_ref, -50, 50, -50, 50},
        {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, int_pow, -3, 4, -2, 5},
    };
    for_each_config([&](const Config&) {
      Generator g(401);
      for (DType dt : {DType::i32, DType::i64})
        for (const IntOp& op : ops)
          for (int64_t n : sizes) {
            // Past the grain only add and the truncating division (the others: the same loop).
            if (n > 20000 && op.name != "add" && op.name != "div kernel (truncating)") continue;
            for (const ShapePair& p : std::vector<ShapePair>{{{n}, {n}}, {{n}, {1}}, {{2, n}, {1, n}}}) {
              const Tensor a = randint(op.alo, op.ahi, p.a, g, {dt}).to(test_device());
              const Tensor b = randint(op.blo, op.bhi, p.b, g, {dt}).to(test_device());
              check_forward([&](const std::vector<Tensor>& xs) { return op.op(xs[0], xs[1]); },
                            [&](const std::vector<Host>& hs) {
                              return broadcast_ref(hs, [&](const std::vector<double>& v) { return op.f(v[0], v[1]); });
                            },
                            {a, b}, op.name + " " + pair_str(p) + " " + dname(dt), 0.0, 0.0);
            }
          }
    });
  }

  TEST_CASE("sweep: elementwise: comparisons with ties, tensor and scalar operands") {
    struct Cmp {
      std::string name;
      std::function<Tensor(const Tensor&, const Tensor&)> op;
      std::function<Tensor(const Tensor&, double)> op_scalar;
      std::function<bool(double, double)> f;
    };
    const std::vector<Cmp> ops = {
        {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); },
         [](const Tensor& a, double b) { return eq(a, b); }, [](double a, double b) { return a == b; }},
        {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); },
         [](const Tensor& a, double b) { return ne(a, b); }, [](double a, double b) { return a != b; }},
        {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); },
         [](const Tensor& a, double b) { return lt(a, b); }, [](double a, double b) { return a < b; }},
        {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); },
         [](const Tensor& a, double b) { return le(a, b); }, [](double a, double b) { return a <= b; }},
        {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); },
         [](const Tensor& a, double b) { return gt(a, b); }, [](double a, double b) { return a > b; }},
        {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); },
         [](const Tensor& a, double b) { return ge(a, b); }, [](double a, double b) { return a >= b; }},
    };
    const std::vector<ShapePair> shapes =
        pick(std::vector<ShapePair>{{{9}, {9}}, {{32769}, {32769}}, {{33, 1}, {33, 1000}}, {{7}, {}}},
             std::vector<ShapePair>{{{0}, {0}},
                                    {{9}, {9}},
                                    {{33}, {33}},
                                    {{16385}, {16385}},
                                    {{32767}, {32767}},
                                    {{32769}, {32769}},
                                    {{49153}, {49153}},
                                    {{33, 1}, {33, 1000}},
                                    {{1, 1000}, {33, 1000}},
                                    {{2, 1, 3, 1, 5, 4}, {1, 3, 3, 2, 1, 4}},
                                    {{7}, {}},
                                    {{}, {32769}}});
    // Quarters in [-1, 1]: many ties.
    auto quarters = [&](const Shape& s, Generator& g, DType dt) {
      return mul(to_dtype(randint(-4, 5, s, g), dt), 0.25).to(test_device());
    };
    for_each_config([&](const Config&) {
      Generator g(501);
      for (DType dt : {DType::f32, DType::f64, DType::i64})
        for (const Cmp& c : ops)
          for (const ShapePair& p : shapes) {
            // Every shape with eq and lt; the other comparisons (the same loop) up to 20000 elements.
            if (c.name != "eq" && c.name != "lt" && numel_of(broadcast_of({p.a, p.b})) > 20000) continue;
            const DType vt = dt == DType::i64 ? DType::f64 : dt;
            Tensor a = quarters(p.a, g, vt), b = quarters(p.b, g, vt);
            if (dt == DType::i64) {  // integers: quarters times 4
              a = to_dtype(mul(a, 4.0), DType::i64);
              b = to_dtype(mul(b, 4.0), DType::i64);
            }
            const std::string label = c.name + " " + pair_str(p) + " " + dname(dt);
            check_forward([&](const std::vector<Tensor>& xs) { return c.op(xs[0], xs[1]); },
                          [&](const std::vector<Host>& hs) {
                            return broadcast_ref(
                                hs, [&](const std::vector<double>& v) { return c.f(v[0], v[1]) ? 1.0 : 0.0; });
                          },
                          {a, b}, label, 0.0, 0.0);
            const double s = dt == DType::i64 ? 1.0 : 0.25;  // a value that occurs: ties with the scalar
            check_forward([&](const std::vector<Tensor>& xs) { return c.op_scalar(xs[0], s); },
                          [&](const std::vector<Host>& hs) {
                            return broadcast_ref(
                                hs, [&](const std::vector<double>& v) { return c.f(v[0], s) ? 1.0 : 0.0; });
                          },
                          {a}, label + " vs scalar", 0.0, 0.0);
          }
    });
  }

  TEST_CASE("sweep: elementwise: where and masked_fill over broadcast shapes, forward and backward") {
    struct Triple {
      Shape c, a, b;
    };
    const std::vector<Triple> shapes = pick(
        std::vector<Triple>{{{9}, {9}, {9}}, {{32769}, {32769}, {32769}}, {{33, 1}, {33, 1000}, {1000}}, {{}, {5}, {}}},
        std::vector<Triple>{{{0}, {0}, {0}},
                            {{1}, {1}, {1}},
                            {{9}, {9}, {9}},
                            {{16385}, {16385}, {16385}},
                            {{32767}, {32767}, {32767}},
                            {{32769}, {32769}, {32769}},
                            {{49153}, {49153}, {49153}},
                            {{33, 1}, {33, 1000}, {1000}},
                            {{1, 1000}, {33, 1}, {33, 1000}},
                            {{4096, 9}, {4096, 1}, {}},
                            {{2, 1, 3, 1, 5, 4}, {1, 3, 3, 2, 1, 4}, {4}},
                            {{}, {5}, {}},
                            {{3, 0}, {3, 1}, {1, 0}}});
    for_each_config([&](const Config&) {
      Generator g(601);
      for (DType dt : float_dtypes())
        for (const Triple& t : shapes) {
          const Tensor c = gt(input(t.c, g, DType::f32), 0.0);
          const Tensor a = input(t.a, g, dt), b = input(t.b, g, dt);
          const std::string label =
              "where " + shape_str(t.c) + ", " + shape_str(t.a) + ", " + shape_str(t.b) + " " + dname(dt);
          auto fn = [](const std::vector<Tensor>& xs) { return where(xs[0], xs[1], xs[2]); };
          check_forward(
              fn,
              [](const std::vector<Host>& hs) {
                return broadcast_ref(hs, [](const std::vector<double>& v) { return v[0] != 0.0 ? v[1] : v[2]; });
              },
              {c, a, b}, label, rtol_of(dt), atol_of(dt));
          if (dt == DType::f64 && numel_of(broadcast_of({t.c, t.a, t.b})) > 0)
            check_directional(fn, {c, a, b}, {1, 2}, label);
          // masked_fill: the mask broadcast to a's shape.
          const Shape ms = broadcast_of({t.c, t.a}) == t.a ? t.c : t.a;
          const Tensor m = gt(input(ms, g, DType::f32), 0.0);
          auto mf = [](const std::vector<Tensor>& xs) { return masked_fill(xs[0], xs[1], -7.5); };
          check_forward(
              mf,
              [](const std::vector<Host>& hs) {
                return broadcast_ref(hs, [](const std::vector<double>& v) { return v[1] != 0.0 ? -7.5 : v[0]; });
              },
              {a, m}, "masked_fill " + shape_str(t.a) + " mask " + shape_str(ms) + " " + dname(dt), rtol_of(dt),
              atol_of(dt));
          if (dt == DType::f64 && a.numel() > 0) check_directional(mf, {a, m}, {0}, "masked_fill " + shape_str(t.a));
        }
    });
  }

  TEST_CASE("sweep: elementwise: random broadcast shapes and layouts (property)") {
    const uint64_t seed = sweep_seed();
    INFO("HH_SWEEP_SEED=" << seed);
    std::mt19937_64 rng(seed);
    const std::vector<Binary> ops = binary_ops();
    struct Case {
      size_t op;
      ShapePair p;
    };
    std::vector<Case> cases;
    const int count = full() ? 80 : 12;
    for (int k = 0; k < count; ++k) {
      const int rank = 1 + static_cast<int>(rng() % 6);
      Shape s;
      int64_t total = 1;
      for (int d = 0; d < rank; ++d) {
        // Mostly small dims, sometimes one long enough to cross the chunk / grain.
        int64_t n = 1 + static_cast<int64_t>(rng() % 9);
        if (rng() % 8 == 0) n = 1 + static_cast<int64_t>((rng() % 40000) / static_cast<uint64_t>(total));
        if (rng() % 20 == 0) n = 0;
        s.push_back(n);
        total *= std::max<int64_t>(n, 1);
      }
      // At most 40000 elements (a dim past the grain stays possible: (40000) alone).
      while (numel_of(s) > 40000) {
        int64_t& d = s[static_cast<size_t>(rng() % s.size())];
        d = std::max<int64_t>(1, d / 2);
      }
      Shape a = s, b = s;
      for (int d = 0; d < rank; ++d) {
        if (rng() % 3 == 0)
          a[static_cast<size_t>(d)] = 1;
        else if (rng() % 3 == 0)
          b[static_cast<size_t>(d)] = 1;
      }
      // Drop leading dims of b sometimes (rank broadcasting).
      const size_t drop = rng() % (b.size() + 1);
      b.erase(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(drop % 2 == 0 ? 0 : drop));
      cases.push_back({static_cast<size_t>(rng() % ops.size()), {a, b}});
    }
    for_each_config([&](const Config&) {
      Generator g(seed + 1);
      for (const Case& c : cases) check_binary(ops[c.op], c.p, g, true);
    });
  }
}

}  // namespace
}  // namespace hh::test::sweep
