// CPU GEMM: c (Bt,M,N) = alpha a (Bt,M,K) · b (Bt,K,N) + beta c.
//
// Two engines:
//  - f32 on a machine with AVX2/FMA or AVX-512 (chosen at run time, core/cpu_isa.h): a BLIS-style
//    packed GEMM written here. The loop nest is below; the packing routines and the register-
//    blocked micro-kernels are per ISA (sgemm_avx2.cpp: 6×16, sgemm_avx512.cpp: 6×32). Eigen
//    3.4's own float kernel (3·8×4) reached ~62% of the measured per-core FMA peak on Zen 3
//    (~0.7× PyTorch/MKL) whatever the cache sizes given to Eigen::setCpuCacheSizes; the packed
//    kernel reaches ~80-90% (see apps/bench_ops.cpp and tools/bench_torch_cpu.py).
//  - everything else (f64, GEMV-like or tiny shapes, CpuIsa::scalar): Eigen::Map over our
//    buffers, `.noalias()` so Eigen accumulates straight into c.
//
// Layout: a and b are read in place. Each has unit stride in one of its last two dims; a unit
// column stride is a row-major matrix with outer stride = row stride, a unit row stride is a
// column-major one. So a transposed view (x.transpose(-1,-2), linear's weightᵀ) costs nothing:
// the packers (and Eigen's) read either order directly. The batch stride may be 0 (broadcast).
//
// Threading (the thread count is hh::set_num_threads, see core/parallel.h):
//  - many matrices: an OpenMP loop over the batch, each product single-threaded inside (Eigen
//    checks omp_get_num_threads() > 1 in parallelize_gemm, Eigen/src/Core/products/Parallelizer.h,
//    and runs serially there). Independent matrices per thread need no synchronisation, and the
//    attention products (B·H matrices of 512×64) are too small for a split inside to pay off.
//  - one large matrix (or a batch that does not split evenly over the threads): the packed
//    engine cuts c into a grid of independent tiles, one per thread (see split_grid); Eigen
//    (f64) uses its own OpenMP split.
//
// Batch invariance (core/batch_invariant.h): under a BatchInvariant guard the engine is chosen by
// n and k alone (the packed kernel when it applies, else a plain loop in k order), so a row's
// arithmetic never depends on how many rows share the product.
//
// Vectorization: the library is built for the baseline ISA unless HH_NATIVE is on, so Eigen's
// kernels are the SSE2 ones in a portable build and the AVX2/FMA (or AVX-512) ones in a native
// build; EIGEN_VECTORIZE_FMA is asserted below where the compiler targets FMA.
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <type_traits>

#include <Eigen/Core>

#include "core/batch_invariant.h"
#include "core/cpu/cpu_backend.h"
#include "core/cpu/parallel_for.h"
#include "core/cpu/sgemm_kernels.h"
#include "core/cpu_isa.h"

#if defined(__FMA__) && !defined(EIGEN_VECTORIZE_FMA)
#error "cpu_gemm.cpp: the compiler targets FMA but Eigen's FMA kernels are not enabled"
#endif

namespace hh {
namespace {

// Below this many multiply-adds in the whole call, everything runs on the calling thread.
constexpr double kGemmParallelWork = 1 << 18;
// Matrices with at most this many multiply-adds are "small": a batch of them is always split
// over threads by batch, whatever its size.
constexpr double kSmallGemmWork = 1 << 21;

// How one (rows, cols) matrix with strides (rs, cs) maps onto Eigen: storage order plus the
// outer stride (BLAS's leading dimension). False when neither dim has unit stride, or the outer
// stride is smaller than the inner size (overlapping rows/columns other than a size-1 dim).
struct Layout {
  bool row_major = true;
  int64_t ld = 1;
};

bool matrix_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, Layout& out) {
  if ((cs == 1 || cols == 1) && (rows == 1 || rs >= cols)) {
    out = {true, rows == 1 ? std::max<int64_t>(cols, 1) : rs};
    return true;
  }
  if ((rs == 1 || rows == 1) && (cols == 1 || cs >= rows)) {
    out = {false, cols == 1 ? std::max<int64_t>(rows, 1) : cs};
    return true;
  }
  return false;
}

template <typename T, int Order>
using ConstMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>, Eigen::Unaligned,
                            Eigen::OuterStride<>>;
template <typename T>
using OutMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

// One product. `.noalias()` tells Eigen c does not overlap a or b, so it accumulates straight
// into c instead of into a temporary; `alpha * A * B` is folded into the GEMM call (no scaled copy).
template <typename T, int OrderA, int OrderB>
void gemm_one(const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t m, int64_t n, int64_t k, T alpha,
              T beta) {
  ConstMap<T, OrderA> A(a, m, k, Eigen::OuterStride<>(lda));
  ConstMap<T, OrderB> B(b, k, n, Eigen::OuterStride<>(ldb));
  OutMap<T> C(c, m, n);
  if (beta == T(0)) {
    // Assignment zero-fills c first, so garbage (even NaN) in a fresh output never leaks through.
    if (alpha == T(1))
      C.noalias() = A * B;
    else
      C.noalias() = alpha * A * B;
  } else {
    if (beta != T(1)) C *= beta;
    if (alpha == T(1))
      C.noalias() += A * B;
    else
      C.noalias() += alpha * A * B;
  }
}

template <typename T>
using GemmFn = void (*)(const T*, int64_t, const T*, int64_t, T*, int64_t, int64_t, int64_t, T, T);

template <typename T>
GemmFn<T> pick(bool a_row, bool b_row) {
  constexpr int R = Eigen::RowMajor, C = Eigen::ColMajor;
  if (a_row) return b_row ? &gemm_one<T, R, R> : &gemm_one<T, R, C>;
  return b_row ? &gemm_one<T, C, R> : &gemm_one<T, C, C>;
}

// ---- packed f32 GEMM: the loop nest (the per-ISA pieces are in sgemm_kernels.h) ----
namespace packed {

// A 64-byte aligned scratch buffer that only grows; one per thread, kept across calls so a GEMM
// allocates (and page-faults) nothing in steady state.
struct Scratch {
  float* p = nullptr;
  size_t cap = 0;
  float* get(size_t n) {
    if (n > cap) {
      std::free(p);
      p = static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64));
      HH_CHECK(p != nullptr, "gemm: out of memory for a ", n, "-float packing buffer");
      cap = n;
    }
    return p;
  }
  ~Scratch() { std::free(p); }
};
thread_local Scratch tls_scratch;  // packed B panel + packed A block

// A B operand packed once (sgemm::prepack_b's layout), in f32 or in bf16: columns [0, n) of a call
// are columns col0 + [0, n) of the prepacked B, whose padded width is np.
struct PrepackedB {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;  // widened one sliver at a time into the scratch
  int64_t np = 0, col0 = 0;
  bool any() const { return f32 != nullptr || bf16 != nullptr; }
};

// c (m, n; row stride ldc) = alpha a·b + beta c with a, b at any strides, on the calling thread.
// Loop nest as in BLIS: jc (NC) → pc (KC, pack B) → ic (MC, pack A) → jr (NR) → ir (MR) → micro-kernel.
// With a prepacked B (b, rsb, csb unused) the B slivers are read from there.
void sgemm(const sgemm::Kernel& K, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t rsa,
           int64_t csa, const float* b, int64_t rsb, int64_t csb, float beta, float* c, int64_t ldc,
           const PrepackedB& pre = {}) {
  const int64_t MR = K.mr, NR = K.nr, KC = K.kc, MC = K.mc, NC = K.nc;
  const int64_t ncap = pre.any() ? (pre.bf16 ? NR : 0) : std::min(NC, (n + NR - 1) / NR * NR);
  float* pb = tls_scratch.get(static_cast<size_t>(KC * ncap + KC * (MC + MR) + 16));  // B panel, then the A block
  float* pa = pb + KC * ncap;
  float* wide = pb;  // bf16: one widened sliver
  const uint16_t* pb16 = nullptr;
  for (int64_t jc = 0; jc < n; jc += NC) {
    const int64_t nc = std::min(NC, n - jc);
    for (int64_t pc = 0; pc < k; pc += KC) {
      const int64_t kc = std::min(KC, k - pc);
      const float be = pc == 0 ? beta : 1.0f;  // later depth blocks accumulate onto c
      const int64_t at = pc * pre.np + (pre.col0 + jc) / NR * kc * NR;
      if (pre.f32)
        pb = const_cast<float*>(pre.f32) + at;  // read only
      else if (pre.bf16)
        pb16 = pre.bf16 + at;
      else
        for (int64_t s = 0; s * NR < nc; ++s)
          K.pack_b(b + pc * rsb + (jc + s * NR) * csb, rsb, csb, kc, std::min(NR, nc - s * NR), pb + s * kc * NR);
      for (int64_t ic = 0; ic < m; ic += MC) {
        const int64_t mc = std::min(MC, m - ic);
        K.pack_a(a + ic * rsa + pc * csa, rsa, csa, mc, kc, pa);
        if (mc <= sgemm::kFewRows && pre.any()) {  // a decoding step: each B sliver read once
          for (int64_t jr = 0; jr < nc; jr += NR) {
            float* ct = c + ic * ldc + jc + jr;
            if (pb16)
              K.rows_bf16(kc, pa, pb16 + jr * kc, ct, ldc, mc, std::min(NR, nc - jr), alpha, be);
            else
              K.rows(kc, pa, pb + jr * kc, ct, ldc, mc, std::min(NR, nc - jr), alpha, be);
          }
          continue;
        }
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const float* sliver = pb + jr * kc;
          if (pb16) {
            K.widen_bf16(pb16 + jr * kc, kc * NR, wide);
            sliver = wide;
          }
          for (int64_t ir = 0; ir < mc; ir += MR)
            K.micro(kc, pa + ir * kc, sliver, c + (ic + ir) * ldc + jc + jr, ldc, std::min(MR, mc - ir),
                    std::min(NR, nc - jr), alpha, be);
        }
      }
    }
  }
}

// How one product is split over `threads` threads: a tm × tn grid of independent sub-products
// (rows × columns of c), each packing its own panels. No barriers at all: on a loaded machine a
// descheduled thread delays only its own tile (a shared-B scheme with a barrier per depth block
// measured 10-20% slower there). Splitting rows re-packs B once per row part and splitting
// columns re-packs A, so the grid minimises tn·m + tm·n (the elements packed per unit depth).
// With B prepacked nothing of B is packed again, so row parts cost nothing on that side.
void split_grid(const sgemm::Kernel& K, int threads, int64_t m, int64_t n, int& tm, int& tn, bool b_prepacked = false) {
  const int64_t MR = K.mr, NR = K.nr;
  tm = tn = 1;
  double best = 0;
  for (int d = 1; d <= threads; ++d) {
    if (threads % d) continue;
    const int rows = d, cols = threads / d;
    if ((rows > 1 && m < rows * MR) || (cols > 1 && n < cols * NR)) continue;
    // Per unit depth: each column part packs A's m rows again, each row part B's n columns.
    const double cost = static_cast<double>(cols) * static_cast<double>(m) +
                        (b_prepacked ? 0.0 : static_cast<double>(rows) * static_cast<double>(n));
    if (tm * tn == 1 || cost < best) {
      tm = rows;
      tn = cols;
      best = cost;
    }
  }
}

// Whether the packed engine takes an f32 product: not GEMV-like or tiny shapes, where padding
// to 6×16 tiles wastes work and Eigen's GEMV / coefficient-wise paths are better.
bool use_packed(int64_t m, int64_t n, int64_t k) {
  const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  return std::min(m, n) >= 4 && k >= 4 && work >= 4096;
}

}  // namespace packed

using cpu::parallel_for;

template <typename T>
void gemm_typed(const Tensor& a, const Tensor& b, const Tensor& c, const GemmParams& p) {
  const int64_t bt = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
  Layout la, lb;
  HH_CHECK(matrix_layout(m, k, a.stride(1), a.stride(2), la), "gemm: a ", a.shape(), " with strides ", a.strides(),
           " has no unit stride in its last two dims");
  HH_CHECK(matrix_layout(k, n, b.stride(1), b.stride(2), lb), "gemm: b ", b.shape(), " with strides ", b.strides(),
           " has no unit stride in its last two dims");
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* pc = c.data<T>();
  const int64_t sa = a.stride(0), sb = b.stride(0), sc = m * n;
  const T alpha = static_cast<T>(p.alpha), beta = static_cast<T>(p.beta);

  const bool invariant = BatchInvariant::active();
  const double per = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const bool parallel = threads > 1 && per * static_cast<double>(bt) > kGemmParallelWork;
  // Split by batch when every thread gets (nearly) the same number of matrices, or when the
  // matrices are too small to split inside; otherwise split each product.
  const bool by_batch =
      parallel && bt > 1 && (bt % threads == 0 || bt >= 4 * static_cast<int64_t>(threads) || per <= kSmallGemmWork);

  if constexpr (std::is_same_v<T, float>) {
    const sgemm::Kernel* kern = sgemm::kernel_for(cpu_isa());
    if (kern != nullptr && (invariant ? n >= 4 && k >= 4 : packed::use_packed(m, n, k))) {
      const sgemm::Kernel& K = *kern;
      // Element strides of each operand (the packers take any pair).
      const int64_t rsa = la.row_major ? la.ld : 1, csa = la.row_major ? 1 : la.ld;
      const int64_t rsb = lb.row_major ? lb.ld : 1, csb = lb.row_major ? 1 : lb.ld;
      if (by_batch || !parallel) {
        auto one = [&](int64_t i) {
          packed::sgemm(K, m, n, k, alpha, pa + i * sa, rsa, csa, pb + i * sb, rsb, csb, beta, pc + i * sc, n);
        };
        if (by_batch) {
          parallel_for(bt, threads, one);
        } else {
          for (int64_t i = 0; i < bt; ++i) one(i);
        }
        return;
      }
      // Each product split over a grid of independent tiles, one per thread.
      int tm, tn;
      packed::split_grid(K, threads, m, n, tm, tn);
      const int64_t mchunk = ((m + tm - 1) / tm + K.mr - 1) / K.mr * K.mr;
      const int64_t nchunk = ((n + tn - 1) / tn + K.nr - 1) / K.nr * K.nr;
      for (int64_t i = 0; i < bt; ++i)
        parallel_for(tm * tn, tm * tn, [&](int64_t t) {
          const int64_t r0 = (t / tn) * mchunk, c0 = (t % tn) * nchunk;
          const int64_t rows = std::min(mchunk, m - r0), cols = std::min(nchunk, n - c0);
          if (rows <= 0 || cols <= 0) return;
          packed::sgemm(K, rows, cols, k, alpha, pa + i * sa + r0 * rsa, rsa, csa, pb + i * sb + c0 * csb, rsb, csb, beta,
                        pc + i * sc + r0 * n + c0, n);
        });
      return;
    }
  }
  if (invariant) {  // one row at a time, k in order: the same operations for a row at any M
    const int64_t ra = la.row_major ? la.ld : 1, ca = la.row_major ? 1 : la.ld;
    const int64_t rb = lb.row_major ? lb.ld : 1, cb = lb.row_major ? 1 : lb.ld;
    auto row = [&](int64_t r) {
      const int64_t i = r / m, row_i = r % m;
      const T* ar = pa + i * sa + row_i * ra;
      const T* bi = pb + i * sb;
      T* cr = pc + i * sc + row_i * n;
      for (int64_t j = 0; j < n; ++j) {
        T acc = 0;
        for (int64_t kk = 0; kk < k; ++kk) acc += ar[kk * ca] * bi[kk * rb + j * cb];
        cr[j] = beta == T(0) ? alpha * acc : alpha * acc + beta * cr[j];
      }
    };
    if (parallel) {
      parallel_for(bt * m, threads, row);
    } else {
      for (int64_t r = 0; r < bt * m; ++r) row(r);
    }
    return;
  }
  // Eigen: inside the batch loop's parallel region it runs serially; otherwise it decides its
  // own split of each product.
  const GemmFn<T> fn = pick<T>(la.row_major, lb.row_major);
  auto one = [&](int64_t i) { fn(pa + i * sa, la.ld, pb + i * sb, lb.ld, pc + i * sc, m, n, k, alpha, beta); };
  if (by_batch) {
    parallel_for(bt, threads, one);
  } else {
    for (int64_t i = 0; i < bt; ++i) one(i);
  }
}

}  // namespace

bool sgemm::packed_applies(int64_t m, int64_t n, int64_t k) {
  if (kernel_for(cpu_isa()) == nullptr) return false;
  return BatchInvariant::active() ? n >= 4 && k >= 4 : packed::use_packed(m, n, k);
}

int64_t sgemm::prepacked_b_floats(const Kernel& K, int64_t k, int64_t n) { return k * ((n + K.nr - 1) / K.nr * K.nr); }

void sgemm::prepack_b(const Kernel& K, const float* b, int64_t rsb, int64_t csb, int64_t k, int64_t n, float* dst) {
  const int64_t np = (n + K.nr - 1) / K.nr * K.nr;
  for (int64_t pc = 0; pc < k; pc += K.kc) {
    const int64_t kc = std::min(K.kc, k - pc);
    for (int64_t s = 0; s * K.nr < n; ++s)
      K.pack_b(b + pc * rsb + s * K.nr * csb, rsb, csb, kc, std::min(K.nr, n - s * K.nr), dst + pc * np + s * kc * K.nr);
  }
}

namespace {

// c = a · (a prepacked B) + beta c, threaded as gemm_prepacked says.
void gemm_with_prepacked(const sgemm::Kernel& K, int64_t m, int64_t n, int64_t k, const float* a, int64_t rsa,
                         int64_t csa, packed::PrepackedB pre, float beta, float* c, int64_t ldc) {
  pre.np = (n + K.nr - 1) / K.nr * K.nr;
  const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads <= 1 || work <= kGemmParallelWork) {
    packed::sgemm(K, m, n, k, 1.0f, a, rsa, csa, nullptr, 0, 0, beta, c, ldc, pre);
    return;
  }
  int tm, tn;
  packed::split_grid(K, threads, m, n, tm, tn, true);
  const int64_t mchunk = ((m + tm - 1) / tm + K.mr - 1) / K.mr * K.mr;
  const int64_t nchunk = ((n + tn - 1) / tn + K.nr - 1) / K.nr * K.nr;  // tiles start on a sliver
  parallel_for(tm * tn, tm * tn, [&](int64_t t) {
    const int64_t r0 = (t / tn) * mchunk, c0 = (t % tn) * nchunk;
    const int64_t rows = std::min(mchunk, m - r0), cols = std::min(nchunk, n - c0);
    if (rows <= 0 || cols <= 0) return;
    packed::PrepackedB tile = pre;
    tile.col0 = c0;
    packed::sgemm(K, rows, cols, k, 1.0f, a + r0 * rsa, rsa, csa, nullptr, 0, 0, beta, c + r0 * ldc + c0, ldc, tile);
  });
}

}  // namespace

void sgemm::gemm_prepacked(const Kernel& K, int64_t m, int64_t n, int64_t k, const float* a, int64_t rsa, int64_t csa,
                           const float* bpre, float beta, float* c, int64_t ldc) {
  packed::PrepackedB pre;
  pre.f32 = bpre;
  gemm_with_prepacked(K, m, n, k, a, rsa, csa, pre, beta, c, ldc);
}

void sgemm::gemm_prepacked_bf16(const Kernel& K, int64_t m, int64_t n, int64_t k, const float* a, int64_t rsa,
                                int64_t csa, const uint16_t* bpre, float beta, float* c, int64_t ldc) {
  packed::PrepackedB pre;
  pre.bf16 = bpre;
  gemm_with_prepacked(K, m, n, k, a, rsa, csa, pre, beta, c, ldc);
}

const char* sgemm::engine_for(int64_t m, int64_t n, int64_t k) {
  const Kernel* kern = kernel_for(cpu_isa());
  return kern != nullptr && packed::use_packed(m, n, k) ? kern->name : "eigen";
}

void CpuBackend::gemm(const Tensor& a, const Tensor& b, const Tensor& c, const GemmParams& p) {
  HH_CHECK(a.dim() == 3 && b.dim() == 3 && c.dim() == 3, "gemm: expected 3-d a, b, c, got ", a.shape(), ", ",
           b.shape(), ", ", c.shape());
  HH_CHECK(a.size(0) == b.size(0) && a.size(0) == c.size(0) && a.size(2) == b.size(1) && c.size(1) == a.size(1) &&
               c.size(2) == b.size(2),
           "gemm: shapes ", a.shape(), " · ", b.shape(), " -> ", c.shape(), " do not match");
  HH_CHECK(a.dtype() == b.dtype() && a.dtype() == c.dtype(), "gemm: dtypes ", a.dtype(), ", ", b.dtype(), ", ",
           c.dtype(), " differ");
  HH_CHECK(c.is_contiguous(), "gemm: c must be contiguous, got strides ", c.strides());
  if (c.numel() == 0) return;
  if (a.dtype() == DType::bf16 || a.dtype() == DType::f16) {
    // The arithmetic of a tensor-core GEMM with f32 compute (cuBLAS's bf16/f16 GEMMs): the
    // operands' values are exact in f32, the products are summed in f32, the result is rounded
    // once to c's dtype. This is the CPU reference of the CUDA half GEMM and of bf16 autocast.
    auto to_f32 = [this](const Tensor& t) {
      Tensor out = empty(t.shape(), {DType::f32, t.device()});
      copy(out, t);
      return out;
    };
    Tensor c32 = p.beta != 0.0 ? to_f32(c) : empty(c.shape(), {DType::f32, c.device()});
    gemm_typed<float>(to_f32(a), to_f32(b), c32, p);
    copy(c, c32);
    return;
  }
  dispatch_float(a.dtype(), "gemm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    gemm_typed<T>(a, b, c, p);
  });
}

}  // namespace hh
