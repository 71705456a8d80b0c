// Threshold sweep (issue 41), family "gemm": GEMM and batched GEMM as the ops reach them (matmul
// with broadcasting and 1-d operands, linear with and without bias, transposed operands, the
// backward products) and Backend::gemm itself (alpha, beta, a batch stride of 0).
//
// The constants that choose a path, and the sizes here that cross them:
//
// core/cpu/cpu_gemm.cpp
//   kGemmParallelWork = 1 << 18 (cpu_gemm.cpp:51): bt·M·N·K > it runs on the threads, else on the
//     calling thread. Crossed by (M,N,K) = (27,133,73) [262143], (64,64,64) [262144 = the threshold,
//     still serial: the test is '>'], (65,37,109) [262145]; and bt = 4 of (16,64,64) [262144] and of
//     (16,64,65) [266240].
//   kSmallGemmWork = 1 << 21 (cpu_gemm.cpp:54): with the threads on and bt > 1, a batch of matrices of
//     at most this many multiply-adds is split by batch, a larger one product by product (unless bt
//     divides over the threads or bt >= 4·threads, cpu_gemm.cpp:231). Crossed by per-matrix (M,N,K)
//     = (49,127,337) [2097151], (128,128,128) [2097152], (40,481,109) [2097160] at bt = 2, 3, 5 and
//     by bt = 7, 8, 9 (4·2 threads) and 15, 16, 17 (4·4 threads) at the larger one (full sweep).
//   packed::use_packed (cpu_gemm.cpp:188): f32 takes the packed engine iff min(M,N) >= 4, K >= 4 and
//     M·N·K >= 4096, else Eigen. Crossed by M, N, K in {3, 4, 5} and (M,N,K) = (9,35,13) [4095],
//     (16,16,16) [4096], (8,27,19) [4104].
//   packed::split_grid (cpu_gemm.cpp:168): one product over t threads as a tm × tn tile grid; a row
//     split needs M >= tm·MR, a column split N >= tn·NR; tiles are rounded up to MR/NR (255-256) and
//     the ones past the edge skipped (261). Crossed (parallel sizes, bt = 1) by M in {5, 6, 7, 11,
//     12, 13, 23, 24, 25} (MR, 2·MR, 4·MR) and N in {31, 32, 33, 63, 64, 65, 127, 128, 129} (2·16,
//     4·16 = 2·32, 4·32).
//   matrix_layout (cpu_gemm.cpp:64): row- or column-major operand (unit column or row stride), size-1
//     dims of any stride: every case runs on contiguous and transposed (column-major) inputs;
//     expand() gives a batch stride of 0; Backend::gemm is also called with batch stride 0 directly.
//   beta == 0 (never reads c) / beta == 1 (linear's bias) / other alpha and beta (gemm_one, the
//     micro-kernels' epilogue): linear with and without bias, Backend::gemm with alpha 0.5, beta
//     -2 and with a NaN-filled c at beta 0; K = 0 (c = beta c).
//   f64 always, f32 under HH_CPU_ISA=scalar or below use_packed: Eigen (its own blocking and its own
//     OpenMP split), reached by every case in f64 and by the scalar configs in f32. Eigen splits a
//     product over the threads only when M·N·K >= 2·kMinTaskSize, kMinTaskSize = 50000
//     (/usr/include/eigen3/Eigen/src/Core/products/Parallelizer.h:131-132), with at most work/50000
//     threads: crossed by (M,N,K) = (9,41,271) [99999], (40,50,50) [100000], (4,23,1087) [100004],
//     (18,41,271) [199998], (40,50,100) [200000], (20,87,115) [200100]. Below 100000 multiply-adds
//     no engine uses a second thread, so the sweep runs such cases under 1 thread per ISA only
//     (kThreadsMatter below).
// core/cpu/sgemm_avx2.cpp (AVX2 packed engine): MR = 6, NR = 16, KC = sgemm::kDepthBlock = 192 (the
//   same for both kernels, so they give the same bits; 256 before), MC = 144, NC = 3072.
//   core/cpu/sgemm_avx512.cpp: MR = 6, NR = 32, KC = kDepthBlock, MC = 144, NC = 3072.
//   core/cpu/sgemm_x86.h: pack_a6 transposes 8 k at a time when a sliver has all 6 rows and unit
//   column stride (:40-51), copies column-major slivers (:52), zero-pads tail slivers (:55);
//   pack_b_avx the same for full NR-wide row-major / column-major slivers (:66-79) and pads the
//   rest (:80). The micro-kernels store a full tile directly and an edge tile through a spill
//   (avx2 :56-66) or masked stores (avx512 :50-60). Crossed by:
//     M in {1, 3, 4, 5, 6, 7, 11, 12, 13, 17, 18, 19, 143, 144, 145} (MR multiples, MC) at N = 37,
//       K = 40,
//     N in {1, 3, 4, 5, 15, 16, 17, 31, 32, 33, 47, 48, 49, 63, 64, 65, 95, 96, 97, 3071, 3072,
//       3073} (NR = 16 and 32 multiples, NC) at M = 13, K = 24,
//     K in {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 191, 192, 193, 255, 256, 257, 383, 384, 385} (the 8-wide
//       pack transposes, KC of both kernels and 2·KC of avx512: the depth blocks after the first
//       accumulate onto c with beta 1, cpu_gemm.cpp:148) at M = 31, N = 37,
//   each with the other two dims at a size the packed engine takes; the two storage orders of each
//   operand select the packers' paths.
// Batch folding (autograd/ops/linalg.cpp, gemm_product): a batch dim of both operands is the GEMM
//   batch, one only the left operand has is folded into the rows, one only the right has into the
//   columns (a copy when not evenly spaced), one summed in the backward into K. Crossed by
//   (B,M,K)·(B,K,N), (B,M,K)·(K,N), (M,K)·(B,K,N), (B,1,M,K)·(1,H,K,N), (B,H,M,K)·(1,H,K,N),
//   1-d operands on either side, and an expand()ed operand, forward and both gradients.
// linear (autograd/ops/linalg.cpp): leading dims folded into the GEMM rows, weightᵀ a column-major
//   operand, the bias copied into c first and the GEMM accumulating onto it (beta 1), in_features 0
//   handled without a GEMM. Crossed by rows in {0, 1, 5, 6, 7, 11, 12, 13, 143, 144, 145},
//   out_features in {0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65}, in_features in {0, 1, 7, 8, 9, 191,
//   192, 193, 255, 256, 257}, a 3-d and a 1-d input, each with and without bias.
// Empty and size-1 dims: M, N, K, bt = 0 and 1 (K = 0: matmul fills zeros without a GEMM).
//
// cuda/cuda_gemm.cu: one cublasGemmStridedBatchedEx call, no hand-written kernel and no size
//   threshold of its own. Its paths: op N / op T per operand storage order (:76-77, both layouts
//   here), batch stride 0 (Backend::gemm case), K = 0 through fill / mul_scalar (:101-112, the K = 0
//   Backend::gemm case with beta 0, 1 and -2), the 32-bit size check (:118, INT_MAX: not testable at a
//   sane size; not covered). cuBLAS's own heuristics are crossed by the same sizes (tails of 16/32/64
//   tiles) with HH_DEVICE=cuda.
//
// Every forward is compared with a naive triple loop in f64 written here; the backward (both
// gradients, f32 and f64, contiguous and transposed inputs) with the same loop's gradient of
// sum(w · out), and in f64 also by check_directional.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/backend.h"
#include "core/parallel.h"
#include "tests/sweep/sweep.h"

namespace hh::test::sweep {
namespace {

std::string shape_label(const std::vector<Shape>& shapes) {
  std::string s;
  for (const Shape& sh : shapes) {
    if (!s.empty()) s += " x ";
    s += "(";
    for (size_t i = 0; i < sh.size(); ++i) s += (i ? "," : "") + std::to_string(sh[i]);
    s += ")";
  }
  return s;
}

// ---- naive references ----

// torch.matmul on host values: a 1-d left operand is a row (1,K), a 1-d right operand a column
// (K,1), both squeezed back out of the result; batch dims right-aligned and broadcast. Without w,
// returns {out}; with w (a weight of out's shape) returns the gradients of sum(w · out): {ga, gb}.
std::vector<Host> matmul_naive(const Host& a, const Host& b, const Host* w) {
  const bool a1 = a.shape.size() == 1, b1 = b.shape.size() == 1;
  const Shape as = a1 ? Shape{1, a.shape[0]} : a.shape, bs = b1 ? Shape{b.shape[0], 1} : b.shape;
  const int64_t M = as[as.size() - 2], K = as[as.size() - 1], N = bs[bs.size() - 1];
  const size_t na = as.size() - 2, nb = bs.size() - 2, nd = std::max(na, nb);
  Shape batch(nd, 1);
  std::vector<int64_t> sa(nd, 0), sb(nd, 0);  // batch strides of a and b, 0 where broadcast
  int64_t stride_a = M * K, stride_b = K * N;
  for (size_t d = nd; d-- > 0;) {
    const int64_t da = d + na >= nd ? as[d + na - nd] : 1, db = d + nb >= nd ? bs[d + nb - nd] : 1;
    batch[d] = std::max(da, db);
    if (da > 1) sa[d] = stride_a;
    if (db > 1) sb[d] = stride_b;
    stride_a *= da;
    stride_b *= db;
  }
  const int64_t nbatch = numel_of(batch);
  Shape out_shape = batch;
  if (!a1) out_shape.push_back(M);
  if (!b1) out_shape.push_back(N);
  Host out{out_shape, std::vector<double>(static_cast<size_t>(nbatch * M * N), 0.0)};
  Host ga{a.shape, std::vector<double>(a.v.size(), 0.0)}, gb{b.shape, std::vector<double>(b.v.size(), 0.0)};
  for (int64_t ob = 0; ob < nbatch; ++ob) {
    int64_t oa = 0, obb = 0, rest = ob;
    for (size_t d = nd; d-- > 0;) {
      const int64_t i = rest % batch[d];
      rest /= batch[d];
      oa += i * sa[d];
      obb += i * sb[d];
    }
    const double* pa = a.v.data() + oa;
    const double* pb = b.v.data() + obb;
    const size_t oc = static_cast<size_t>(ob * M * N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t p = 0; p < K; ++p) {
        const double aip = pa[i * K + p];
        double gaip = 0.0;
        for (int64_t j = 0; j < N; ++j) {
          if (w == nullptr) {
            out.v[oc + static_cast<size_t>(i * N + j)] += aip * pb[p * N + j];
          } else {
            const double wij = w->v[oc + static_cast<size_t>(i * N + j)];
            gaip += wij * pb[p * N + j];
            gb.v[static_cast<size_t>(obb + p * N + j)] += wij * aip;
          }
        }
        if (w != nullptr) ga.v[static_cast<size_t>(oa + i * K + p)] += gaip;
      }
  }
  if (w == nullptr) return {out};
  return {ga, gb};
}

// linear on host values: x (..., in) · weight (out, in)ᵀ + bias (out) when given. Without w returns
// {out}; with w, the gradients of sum(w · out): {gx, gweight[, gbias]}.
std::vector<Host> linear_naive(const std::vector<Host>& in, const Host* w) {
  const Host& x = in[0];
  const Host& wt = in[1];
  const bool has_bias = in.size() > 2;
  const int64_t O = wt.shape[0], I = wt.shape[1];
  const int64_t R = numel_of(Shape(x.shape.begin(), x.shape.end() - 1));
  Shape out_shape(x.shape.begin(), x.shape.end() - 1);
  out_shape.push_back(O);
  Host out{out_shape, std::vector<double>(static_cast<size_t>(R * O), 0.0)};
  Host gx{x.shape, std::vector<double>(x.v.size(), 0.0)}, gw{wt.shape, std::vector<double>(wt.v.size(), 0.0)};
  Host gbias{has_bias ? in[2].shape : Shape{}, std::vector<double>(static_cast<size_t>(has_bias ? O : 0), 0.0)};
  for (int64_t r = 0; r < R; ++r)
    for (int64_t o = 0; o < O; ++o) {
      const size_t oi = static_cast<size_t>(r * O + o);
      if (w == nullptr) {
        double s = has_bias ? in[2].v[static_cast<size_t>(o)] : 0.0;
        for (int64_t i = 0; i < I; ++i) s += x.v[static_cast<size_t>(r * I + i)] * wt.v[static_cast<size_t>(o * I + i)];
        out.v[oi] = s;
      } else {
        const double g = w->v[oi];
        for (int64_t i = 0; i < I; ++i) {
          gx.v[static_cast<size_t>(r * I + i)] += g * wt.v[static_cast<size_t>(o * I + i)];
          gw.v[static_cast<size_t>(o * I + i)] += g * x.v[static_cast<size_t>(r * I + i)];
        }
        if (has_bias) gbias.v[static_cast<size_t>(o)] += g;
      }
    }
  if (w == nullptr) return {out};
  if (has_bias) return {gx, gw, gbias};
  return {gx, gw};
}

using NaiveFn = std::function<std::vector<Host>(const std::vector<Host>&, const Host*)>;

// Below this many multiply-adds (M·N·K over the batch) a product runs on the calling thread in
// every engine: ours below kGemmParallelWork = 2^18 (cpu_gemm.cpp:228), Eigen's own split below
// 2·kMinTaskSize = 2·50000 (Eigen/src/Core/products/Parallelizer.h:131-132, at least 2 tasks). So a
// smaller case under 2 or 4 threads repeats the 1-thread run of the same ISA and is skipped there.
constexpr int64_t kThreadsMatter = 100000;

using ConfigFilter = std::function<bool(const Config&)>;
struct CaseOpts {
  bool grads = true;                            // false: forward only
  ConfigFilter only;                            // when set, the configs where the case crosses something
  std::vector<DType> dtypes = float_dtypes();  // the dtypes compared
};

// Whether config c adds anything for a case of `work` multiply-adds (see kThreadsMatter).
bool threads_matter(const Config& c, int64_t work) {
  if (cuda_requested() || c.threads == 1 || work >= kThreadsMatter) return true;
  for (const Config& o : configs())
    if (o.threads == 1 && o.isa == c.isa) return false;  // the 1-thread run of this ISA covers it
  return true;
}

// One op case: inputs of `shapes` (drawn once per dtype, the reference computed once), then under
// every config: the forward on contiguous and non-contiguous (transposed) inputs against the naive
// loop; the gradients of sum(w · out) for every input, on both layouts, against the naive loop's;
// in f64 the directional-derivative check too, under the first config only (it checks the
// backward's formula; the exact gradient comparison runs under every config and catches a path
// that computes a product wrongly). The inner dim is shapes[0]'s last (matmul's K, linear's in).
void run_case(const std::string& what, const std::vector<Shape>& shapes, const OpFn& fn, const NaiveFn& naive,
              uint64_t seed, const CaseOpts& o = {}) {
  const std::string label = what + " " + shape_label(shapes);
  const bool grads = o.grads;
  for (DType dt : o.dtypes) {
    Generator g(seed);
    std::vector<Tensor> xs;
    std::vector<Host> hs;
    for (const Shape& s : shapes) {
      xs.push_back(input(s, g, dt));
      hs.push_back(to_host(xs.back()));
    }
    const Host want = naive(hs, nullptr)[0];
    const Tensor w = input(want.shape, g, dt);
    const Host wh = to_host(w);
    const std::vector<Host> want_g = grads ? naive(hs, &wh) : std::vector<Host>{};
    const std::string dl = label + " " + dtype_name(dt);
    bool first = true;
    for_each_config([&](const Config& cfg) {
      if (!threads_matter(cfg, want.numel() * shapes[0].back())) return;
      if (o.only && !cuda_requested() && !o.only(cfg)) return;
      const bool directional = dt == DType::f64 && first;
      first = false;
      check_forward(fn, [&](const std::vector<Host>&) { return want; }, xs, dl, rtol_of(dt), atol_of(dt));
      if (!grads) return;
      for (bool nc : {false, true}) {
        std::vector<Tensor> leaves = layout(xs, nc);
        for (Tensor& l : leaves) {
          l = l.detach();
          l.requires_grad_(true);
        }
        sum(mul(fn(leaves), w)).backward();
        for (size_t i = 0; i < leaves.size(); ++i) {
          const std::string gl = dl + " grad " + std::to_string(i) + (nc ? " (non-contiguous)" : "");
          const Tensor gi = leaves[i].grad();
          if (!gi.defined()) {  // an empty input: nothing to compare, but a non-empty one needs its gradient
            CHECK_MESSAGE(leaves[i].numel() == 0, gl, ": no gradient");
            continue;
          }
          compare(gi, want_g[i], rtol_of(dt), atol_of(dt), gl);
        }
      }
      if (directional) {
        std::vector<int> which;
        for (size_t i = 0; i < xs.size(); ++i)
          if (xs[i].numel() > 0) which.push_back(static_cast<int>(i));
        if (!which.empty()) check_directional(fn, xs, which, dl);
      }
    });
  }
}

Tensor mm_op(const std::vector<Tensor>& x) { return matmul(x[0], x[1]); }
std::vector<Host> mm_naive(const std::vector<Host>& h, const Host* w) { return matmul_naive(h[0], h[1], w); }

Tensor linear_op(const std::vector<Tensor>& x) { return linear(x[0], x[1], x.size() > 2 ? x[2] : Tensor()); }

void run_matmul(const Shape& a, const Shape& b, uint64_t seed, const CaseOpts& o = {}) {
  run_case("matmul", {a, b}, mm_op, mm_naive, seed, o);
}

}  // namespace

TEST_SUITE("sweep") {

TEST_CASE("sweep: gemm: micro-tile tails and cache blocks (M, N, K one at a time)") {
  // Other dims at sizes the packed engine takes (min(M,N) >= 4, K >= 4, M·N·K >= 4096).
  const std::vector<int64_t> ms = pick(std::vector<int64_t>{1, 4, 5, 6, 7, 12, 13, 145},
                                       crossing({6, 12, 18, 144}, {1, 3, 4}));
  const std::vector<int64_t> ns = pick(std::vector<int64_t>{1, 4, 16, 17, 31, 33, 65},
                                       crossing({16, 32, 48, 64, 96, 3072}, {1, 3, 4, 5}));
  const std::vector<int64_t> ks = pick(std::vector<int64_t>{1, 4, 8, 9, 193, 257},
                                       crossing({8, 16, 192, 256, 384}, {1, 3, 4, 5}));
  uint64_t seed = 100;
  for (int64_t m : ms) run_matmul({m, 40}, {40, 37}, ++seed);
  for (int64_t n : ns) run_matmul({13, 24}, {24, n}, ++seed);  // packed from N = 14
  for (int64_t k : ks) run_matmul({31, k}, {k, 37}, ++seed);  // packed from K = 4
}

TEST_CASE("sweep: gemm: packed-engine and parallel-work thresholds") {
  // use_packed: min(M,N) and K around 4, M·N·K around 4096; kGemmParallelWork: bt·M·N·K around 2^18.
  std::vector<std::vector<Shape>> cases = {
      {{9, 35}, {35, 13}},    {{16, 16}, {16, 16}},   {{8, 27}, {27, 19}},    // M·N·K 4095, 4096, 4104
      {{3, 100}, {100, 50}},  {{4, 100}, {100, 50}},  {{50, 100}, {100, 3}},  {{50, 100}, {100, 4}},
      {{50, 3}, {3, 100}},    {{50, 4}, {4, 100}},    {{27, 73}, {73, 133}},  {{64, 64}, {64, 64}},
      {{65, 109}, {109, 37}}, {{4, 16, 64}, {4, 64, 64}}, {{4, 16, 65}, {4, 65, 64}},
      // Eigen's own split (f64, f32 on scalar): M·N·K around 2·50000 and 4·50000.
      {{9, 271}, {271, 41}},  {{40, 50}, {50, 50}},   {{4, 1087}, {1087, 23}},
      {{18, 271}, {271, 41}}, {{40, 100}, {100, 50}}, {{20, 115}, {115, 87}},
  };
  if (!full()) cases = {cases[0], cases[1], cases[2], cases[3], cases[4], cases[10], cases[11], cases[15], cases[16]};
  uint64_t seed = 200;
  for (const auto& c : cases) run_matmul(c[0], c[1], ++seed);
}

TEST_CASE("sweep: gemm: the tile grid of one product over the threads") {
  // Parallel sizes (M·N·K > 2^18) at bt = 1: the grid's row split needs M >= tm·6, its column split
  // N >= tn·NR (16 or 32); tiles past the edge are skipped. Only a threaded config splits a product
  // (the packed grid under avx2/avx512, Eigen's own split under scalar). Full sweep: the whole M × N
  // grid forward, the gradients along the M = 25 line.
  const std::vector<int64_t> ms = pick(std::vector<int64_t>{7, 25}, crossing({6, 12, 24}));
  const std::vector<int64_t> ns = pick(std::vector<int64_t>{33, 129}, crossing({32, 64, 128}));
  const ConfigFilter threaded = [](const Config& c) { return c.threads > 1; };
  const ConfigFilter packed_threaded = [](const Config& c) { return c.threads > 1 && c.isa != CpuIsa::scalar; };
  auto k_for = [](int64_t m, int64_t n) { return (int64_t{1} << 18) / (m * n) + 1; };  // just over kGemmParallelWork
  uint64_t seed = 300;
  for (int64_t m : ms)
    for (int64_t n : ns) {
      const int64_t k = k_for(m, n);
      // The whole grid in f32 on the packed configs; the two lines in both dtypes on every threaded one.
      CaseOpts o;
      o.grads = full() && m == 25;
      o.only = o.grads || !full() ? threaded : packed_threaded;
      o.dtypes = o.grads || !full() ? float_dtypes() : std::vector<DType>{DType::f32};
      run_case("matmul", {{m, k}, {k, n}}, mm_op, mm_naive, ++seed, o);
    }
  // The fast configs (1 thread on the best path, 4 threads on scalar) never reach the packed grid:
  // the fast subset also runs these under 2 threads on the best path.
  if (!full() && !cuda_requested() && cpu_isa_detected() != CpuIsa::scalar) {
    struct Restore {
      int threads = num_threads();
      CpuIsa isa = cpu_isa();
      ~Restore() {
        set_num_threads(threads);
        set_cpu_isa(isa);
      }
    } restore;
    set_num_threads(2);
    set_cpu_isa(cpu_isa_detected());
    for (int64_t m : ms)
      for (int64_t n : ns) {
        const int64_t k = k_for(m, n);
        Generator g(++seed);
        const std::vector<Tensor> xs = {input({m, k}, g, DType::f32), input({k, n}, g, DType::f32)};
        const Host want = matmul_naive(to_host(xs[0]), to_host(xs[1]), nullptr)[0];
        check_forward(mm_op, [&](const std::vector<Host>&) { return want; }, xs,
                      "matmul " + shape_label({{m, k}, {k, n}}) + " f32, 2 threads, best ISA", rtol_of(DType::f32),
                      atol_of(DType::f32));
      }
  }
}

TEST_CASE("sweep: gemm: batch split against split per product (kSmallGemmWork, bt vs threads)") {
  // per-matrix work just below, at and above 2^21, bt that does not divide over 2 or 4 threads and
  // bt around 4·threads. Forward only: the products are large (the backward runs the same engine
  // and is swept at smaller sizes above).
  std::vector<std::pair<int64_t, Shape>> cases;  // (bt, (M, N, K))
  // (pick returns a reference to one of its arguments: named lists, not temporaries, in a range-for.)
  const std::vector<int64_t> bts = pick(std::vector<int64_t>{3}, std::vector<int64_t>{2, 3, 5});
  const std::vector<Shape> pers =
      pick(std::vector<Shape>{{40, 481, 109}}, std::vector<Shape>{{49, 127, 337}, {128, 128, 128}, {40, 481, 109}});
  for (int64_t bt : bts)
    for (const Shape& s : pers) cases.push_back({bt, s});
  if (full())
    for (int64_t bt : {7, 8, 9, 15, 16, 17}) cases.push_back({bt, {40, 481, 109}});
  // Only threaded configs choose between the two splits; bt around 16 matters at 4 threads only.
  uint64_t seed = 400;
  for (const auto& [bt, s] : cases) {
    const int64_t b = bt;
    const ConfigFilter only = [b](const Config& c) { return c.threads > 1 && (b < 15 || c.threads == 4); };
    CaseOpts o;
    o.grads = false;
    o.only = only;
    run_case("matmul", {{bt, s[0], s[2]}, {bt, s[2], s[1]}}, mm_op, mm_naive, ++seed, o);
  }
}

TEST_CASE("sweep: gemm: batched matmul, broadcasting, 1-d operands, empty and size-1 dims") {
  std::vector<std::vector<Shape>> cases = {
      {{3, 13, 20}, {3, 20, 17}},         // both batched: the GEMM batch
      {{3, 13, 20}, {20, 17}},            // left-only batch: folded into the rows
      {{13, 20}, {3, 20, 17}},            // right-only batch: folded into the columns
      {{2, 1, 7, 20}, {1, 3, 20, 17}},    // one of each
      {{2, 3, 7, 20}, {1, 3, 20, 33}},    // batch and rows
      {{20}, {20}},                       // dot
      {{20}, {20, 17}},                   // row vector
      {{13, 20}, {20}},                   // matrix-vector
      {{3, 13, 20}, {20}},                // batched matrix-vector
      {{20}, {3, 20, 17}},                // vector-batched matrix
      {{1, 20}, {20, 17}},    {{13, 20}, {20, 1}},    {{13, 1}, {1, 17}},    {{1, 1}, {1, 1}},
      {{0, 20}, {20, 17}},    {{13, 20}, {20, 0}},    {{13, 0}, {0, 17}},    {{0, 13, 20}, {0, 20, 17}},
      {{3, 0, 20}, {3, 20, 17}}, {{3, 13, 0}, {0, 17}},
  };
  if (full()) {
    cases.push_back({{5, 30, 270}, {5, 270, 40}});  // packed sizes, two depth blocks
    cases.push_back({{2, 3, 30, 200}, {1, 3, 200, 40}});
    cases.push_back({{9, 30, 200}, {200, 40}});
  }
  uint64_t seed = 500;
  for (const auto& c : cases) run_matmul(c[0], c[1], ++seed);
  // An expand()ed operand: a batch stride of 0 in the GEMM's batch.
  const OpFn expanded = [](const std::vector<Tensor>& x) {
    return matmul(expand(x[0], {x[1].size(0), x[0].size(0), x[0].size(1)}), x[1]);
  };
  const std::vector<std::vector<Shape>> expand_cases =
      pick(std::vector<std::vector<Shape>>{{{13, 20}, {3, 20, 17}}},
           std::vector<std::vector<Shape>>{{{13, 20}, {3, 20, 17}}, {{30, 270}, {5, 270, 40}}});
  for (const auto& s : expand_cases) run_case("matmul(expand(a), b)", s, expanded, mm_naive, ++seed);
}

TEST_CASE("sweep: gemm: linear with and without bias") {
  // rows (M) across MR and MC, out_features (N) across NR, in_features (K) across KC.
  std::vector<std::pair<Shape, Shape>> xw;  // (x, weight)
  const std::vector<int64_t> rows = pick(std::vector<int64_t>{1, 7, 145}, crossing({6, 12, 144}, {1}));
  const std::vector<int64_t> outs = pick(std::vector<int64_t>{0, 1, 33}, crossing({16, 32, 64}, {0, 1}));
  const std::vector<int64_t> ins = pick(std::vector<int64_t>{0, 1, 257}, crossing({8, 192, 256}, {0, 1}));
  for (int64_t r : rows) xw.push_back({{r, 20}, {17, 20}});
  for (int64_t o : outs) xw.push_back({{13, 20}, {o, 20}});
  for (int64_t i : ins) xw.push_back({{13, i}, {17, i}});
  xw.push_back({{2, 7, 20}, {33, 20}});  // leading dims folded into the rows
  xw.push_back({{20}, {17, 20}});        // 1-d input
  xw.push_back({{0, 20}, {17, 20}});     // no rows
  uint64_t seed = 600;
  for (const auto& [x, w] : xw) {
    run_case("linear", {x, w}, linear_op, linear_naive, ++seed);
    run_case("linear+bias", {x, w, {w[0]}}, linear_op, linear_naive, ++seed);
  }
}

TEST_CASE("sweep: gemm: Backend::gemm alpha, beta, batch stride 0, NaN in a fresh c, K = 0") {
  // The kernel contract below the ops: c = alpha a·b + beta c, beta == 0 never reads c.
  struct G {
    int64_t bt, m, k, n;
    bool a0, b0;  // a / b broadcast over the batch (batch stride 0)
  };
  std::vector<G> cases = {{1, 13, 20, 17, false, false}, {3, 30, 270, 40, false, true}, {5, 9, 13, 7, true, false},
                          {4, 16, 64, 65, true, false},  {3, 7, 0, 5, false, false},   {2, 4, 4, 4, false, false}};
  if (full()) {
    cases.push_back({1, 145, 385, 97, false, false});
    cases.push_back({3, 49, 337, 127, false, true});
  }
  uint64_t seed = 700;
  for (const G& c : cases)
    for (DType dt : float_dtypes())
      for (const auto& ab : {std::pair<double, double>{1.0, 0.0}, {0.5, -2.0}, {1.0, 1.0}, {-1.5, 0.0}}) {
        const double alpha = ab.first, beta = ab.second;
        Generator g(++seed);
        const Tensor a = input({c.a0 ? 1 : c.bt, c.m, c.k}, g, dt), b = input({c.b0 ? 1 : c.bt, c.k, c.n}, g, dt);
        const Tensor c0 = input({c.bt, c.m, c.n}, g, dt);
        const Host ha = to_host(a), hb = to_host(b), hc = to_host(c0);
        Host want = matmul_naive(ha, hb, nullptr)[0];
        for (size_t i = 0; i < want.v.size(); ++i) want.v[i] = alpha * want.v[i] + beta * hc.v[i];
        const Tensor av = a.as_strided({c.bt, c.m, c.k}, {c.a0 ? 0 : c.m * c.k, c.k, 1}, a.offset());
        const Tensor bv = b.as_strided({c.bt, c.k, c.n}, {c.b0 ? 0 : c.k * c.n, c.n, 1}, b.offset());
        const std::string label = "Backend::gemm bt " + std::to_string(c.bt) + " (" + std::to_string(c.m) + "," +
                                  std::to_string(c.k) + "," + std::to_string(c.n) + ") alpha " + std::to_string(alpha) +
                                  " beta " + std::to_string(beta) + " " + dtype_name(dt);
        for_each_config([&](const Config&) {
          // beta 0: c starts as NaN, which must not leak into the result.
          Tensor out = beta == 0.0 ? hh::full(c0.shape(), std::numeric_limits<double>::quiet_NaN(), {dt, c0.device()})
                                   : clone(c0);
          backend_of(out).gemm(av, bv, out, {alpha, beta});
          compare(out, want, rtol_of(dt), atol_of(dt), label);
          // b transposed (column-major): the other packer path.
          Tensor bt = non_contiguous(b);
          const Tensor btv = bt.as_strided({c.bt, c.k, c.n}, {c.b0 ? 0 : bt.stride(0), bt.stride(1), bt.stride(2)},
                                           bt.offset());
          Tensor out2 = beta == 0.0 ? hh::full(c0.shape(), std::numeric_limits<double>::quiet_NaN(), {dt, c0.device()})
                                    : clone(c0);
          backend_of(out2).gemm(av, btv, out2, {alpha, beta});
          compare(out2, want, rtol_of(dt), atol_of(dt), label + " (b column-major)");
        });
      }
}

TEST_CASE("sweep: gemm: seeded random shapes (property)") {
  const uint64_t seed = sweep_seed();
  INFO("HH_SWEEP_SEED=" << seed);
  std::mt19937_64 rng(seed);
  auto draw = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int count = full() ? 10 : 3;
  for (int i = 0; i < count; ++i) {
    const int64_t hi = full() ? 160 : 48;
    const int64_t m = draw(1, hi), n = draw(1, hi), k = draw(1, hi + hi / 2), bt = draw(0, 3);
    Shape a{m, k}, b{k, n};
    if (bt > 0) {
      a.insert(a.begin(), bt);
      if (draw(0, 1)) b.insert(b.begin(), bt);  // both batched, or the left one only
    }
    run_matmul(a, b, seed + static_cast<uint64_t>(i));
  }
}

}  // TEST_SUITE("sweep")

}  // namespace hh::test::sweep
