// CPU GEMM: c (Bt,M,N) = alpha a (Bt,M,K) · b (Bt,K,N) + beta c.
//
// Two engines:
//  - f32 with AVX2/FMA (any -march=native x86 build): a BLIS-style packed GEMM written here.
//    B is packed into KC×16 slivers, A into 6×KC slivers, and a 6×16 register-blocked
//    micro-kernel (12 ymm accumulators, 2 B loads + 6 A broadcasts per k step) runs on them.
//    Eigen 3.4's own float kernel (3·8×4)
//    reached ~62% of the measured per-core FMA peak on Zen 3 (~0.7× PyTorch/MKL) whatever the
//    cache sizes given to Eigen::setCpuCacheSizes; this kernel reaches ~80-90% (see
//    apps/bench_ops.cpp and tools/bench_torch_cpu.py). Packing with in-register 8×8 transposes
//    mattered: scalar packing of a row-major A cost 40% of the time for N = 64.
//  - everything else (f64, GEMV-like or tiny shapes, non-FMA builds): Eigen::Map over our
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
// Vectorization: Release builds use -O3 -march=native (CMake), so Eigen's kernels are the
// AVX2/FMA (or AVX-512) ones; EIGEN_VECTORIZE_FMA is asserted below where FMA is available.
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <type_traits>

#include <Eigen/Core>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define HH_PACKED_SGEMM 1
#endif

#include "core/cpu/cpu_backend.h"

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

#ifdef HH_PACKED_SGEMM
// ---- packed f32 GEMM (AVX2/FMA) ----
namespace packed {

constexpr int64_t MR = 6, NR = 16;  // micro-tile: 6 rows × 16 columns (2 ymm) of c
constexpr int64_t KC = 256;         // depth of a packed block: a 16-wide B sliver (16 KiB) stays in L1
constexpr int64_t MC = 144;         // rows of A packed per block (144 KiB, in L2)
constexpr int64_t NC = 3072;        // columns of B packed at once (3 MiB, in L3)

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

// In-register 8×8 transpose: r[i][j] -> r[j][i].
inline void transpose8(__m256* r) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// A block (mc, kc) at a with strides (rs, cs) -> slivers of MR rows, k-major:
// dst[(s·kc + k)·MR + r] = a[s·MR + r, k]; rows past mc are zero. dst needs 2 floats of slack.
void pack_a(const float* a, int64_t rs, int64_t cs, int64_t mc, int64_t kc, float* dst) {
  for (int64_t i0 = 0; i0 < mc; i0 += MR, dst += MR * kc) {
    const int64_t m = std::min(MR, mc - i0);
    const float* src = a + i0 * rs;
    if (m == MR && cs == 1) {  // row-major: 6 rows × 8 k, transposed in registers
      int64_t k = 0;
      for (; k + 8 <= kc; k += 8) {
        __m256 r[8];
        for (int i = 0; i < 6; ++i) r[i] = _mm256_loadu_ps(src + i * rs + k);
        r[6] = r[7] = _mm256_setzero_ps();
        transpose8(r);
        // Each store writes 8 floats for a 6-float column; the 2 extra are overwritten next.
        for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + (k + i) * MR, r[i]);
      }
      for (; k < kc; ++k)
        for (int64_t i = 0; i < MR; ++i) dst[k * MR + i] = src[i * rs + k];
    } else if (m == MR && rs == 1) {  // column-major: each k is 6 consecutive floats already
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t i = 0; i < MR; ++i) dst[k * MR + i] = src[k * cs + i];
    } else {
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t i = 0; i < MR; ++i) dst[k * MR + i] = i < m ? src[i * rs + k * cs] : 0.0f;
    }
  }
}

// One B sliver (kc, n <= NR) at b with strides (rs, cs) -> dst[k·NR + j]; columns past n are zero.
void pack_b(const float* b, int64_t rs, int64_t cs, int64_t kc, int64_t n, float* dst) {
  if (n == NR && cs == 1) {  // row-major: two vector copies per k
    for (int64_t k = 0; k < kc; ++k) {
      _mm256_store_ps(dst + k * NR, _mm256_loadu_ps(b + k * rs));
      _mm256_store_ps(dst + k * NR + 8, _mm256_loadu_ps(b + k * rs + 8));
    }
  } else if (n == NR && rs == 1) {  // column-major (e.g. linear's weightᵀ): 8×8 transposes
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8)
      for (int h = 0; h < 2; ++h) {
        __m256 r[8];
        for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(b + (8 * h + i) * cs + k);
        transpose8(r);
        for (int i = 0; i < 8; ++i) _mm256_store_ps(dst + (k + i) * NR + 8 * h, r[i]);
      }
    for (; k < kc; ++k)
      for (int64_t j = 0; j < NR; ++j) dst[k * NR + j] = b[j * cs + k];
  } else {
    for (int64_t k = 0; k < kc; ++k)
      for (int64_t j = 0; j < NR; ++j) dst[k * NR + j] = j < n ? b[k * rs + j * cs] : 0.0f;
  }
}

// c tile (m <= MR, n <= NR; row stride ldc) = alpha · a_sliver · b_sliver + beta · c.
// beta == 0 never reads c (a fresh output may hold NaN garbage).
void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b, float* c, int64_t ldc, int64_t m,
                  int64_t n, float alpha, float beta) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t r = 0; r < m; ++r) _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    __m256 x = _mm256_broadcast_ss(a);
    c00 = _mm256_fmadd_ps(x, b0, c00);
    c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(x, b0, c10);
    c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(x, b0, c20);
    c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(x, b0, c30);
    c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(x, b0, c40);
    c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(x, b0, c50);
    c51 = _mm256_fmadd_ps(x, b1, c51);
    a += MR;
    b += NR;
  }
  const __m256 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  if (m == MR && n == NR) {
    for (int64_t r = 0; r < MR; ++r)
      for (int h = 0; h < 2; ++h) {
        float* p = c + r * ldc + 8 * h;
        __m256 v = _mm256_mul_ps(va, acc[r][h]);
        if (beta != 0.0f) v = _mm256_fmadd_ps(vb, _mm256_loadu_ps(p), v);
        _mm256_storeu_ps(p, v);
      }
    return;
  }
  alignas(32) float t[MR][NR];  // edge tile: spill, then write the valid part
  for (int64_t r = 0; r < MR; ++r) {
    _mm256_store_ps(t[r], acc[r][0]);
    _mm256_store_ps(t[r] + 8, acc[r][1]);
  }
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      float* p = c + r * ldc + j;
      *p = beta != 0.0f ? alpha * t[r][j] + beta * *p : alpha * t[r][j];
    }
}

// c (m, n; row stride ldc) = alpha a·b + beta c with a, b at any strides, on the calling thread.
// Loop nest as in BLIS: jc (NC) → pc (KC, pack B) → ic (MC, pack A) → jr (NR) → ir (MR) → micro-kernel.
void sgemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t rsa, int64_t csa, const float* b,
           int64_t rsb, int64_t csb, float beta, float* c, int64_t ldc) {
  const int64_t ncap = std::min(NC, (n + NR - 1) / NR * NR);
  float* pb = tls_scratch.get(static_cast<size_t>(KC * ncap + KC * (MC + MR) + 8));  // B panel, then the A block
  float* pa = pb + KC * ncap;
  for (int64_t jc = 0; jc < n; jc += NC) {
    const int64_t nc = std::min(NC, n - jc);
    for (int64_t pc = 0; pc < k; pc += KC) {
      const int64_t kc = std::min(KC, k - pc);
      const float be = pc == 0 ? beta : 1.0f;  // later depth blocks accumulate onto c
      for (int64_t s = 0; s * NR < nc; ++s)
        pack_b(b + pc * rsb + (jc + s * NR) * csb, rsb, csb, kc, std::min(NR, nc - s * NR), pb + s * kc * NR);
      for (int64_t ic = 0; ic < m; ic += MC) {
        const int64_t mc = std::min(MC, m - ic);
        pack_a(a + ic * rsa + pc * csa, rsa, csa, mc, kc, pa);
        for (int64_t jr = 0; jr < nc; jr += NR)
          for (int64_t ir = 0; ir < mc; ir += MR)
            micro_kernel(kc, pa + ir * kc, pb + jr * kc, c + (ic + ir) * ldc + jc + jr, ldc, std::min(MR, mc - ir),
                         std::min(NR, nc - jr), alpha, be);
      }
    }
  }
}

// How one product is split over `threads` threads: a tm × tn grid of independent sub-products
// (rows × columns of c), each packing its own panels. No barriers at all: on a loaded machine a
// descheduled thread delays only its own tile (a shared-B scheme with a barrier per depth block
// measured 10-20% slower there). Splitting rows re-packs B once per row part and splitting
// columns re-packs A, so the grid minimises tn·m + tm·n (the elements packed per unit depth).
void split_grid(int threads, int64_t m, int64_t n, int& tm, int& tn) {
  tm = tn = 1;
  double best = 0;
  for (int d = 1; d <= threads; ++d) {
    if (threads % d) continue;
    const int rows = d, cols = threads / d;
    if ((rows > 1 && m < rows * MR) || (cols > 1 && n < cols * NR)) continue;
    const double cost = static_cast<double>(cols) * static_cast<double>(m) +  // B re-packed per row part
                        static_cast<double>(rows) * static_cast<double>(n);   // A re-packed per column part
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
#endif  // HH_PACKED_SGEMM

// Runs body(i) for i in [0, n) on `threads` threads (static schedule). An exception must not
// leave an OpenMP region: the first one is kept and rethrown after it.
template <typename F>
void parallel_for(int64_t n, int threads, const F& body) {
  std::exception_ptr error;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    try {
      body(i);
    } catch (...) {
#pragma omp critical(hh_gemm_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

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

  const double per = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const bool parallel = threads > 1 && per * static_cast<double>(bt) > kGemmParallelWork;
  // Split by batch when every thread gets (nearly) the same number of matrices, or when the
  // matrices are too small to split inside; otherwise split each product.
  const bool by_batch =
      parallel && bt > 1 && (bt % threads == 0 || bt >= 4 * static_cast<int64_t>(threads) || per <= kSmallGemmWork);

#ifdef HH_PACKED_SGEMM
  if constexpr (std::is_same_v<T, float>) {
    if (packed::use_packed(m, n, k)) {
      // Element strides of each operand (the packers take any pair).
      const int64_t rsa = la.row_major ? la.ld : 1, csa = la.row_major ? 1 : la.ld;
      const int64_t rsb = lb.row_major ? lb.ld : 1, csb = lb.row_major ? 1 : lb.ld;
      if (by_batch || !parallel) {
        auto one = [&](int64_t i) {
          packed::sgemm(m, n, k, alpha, pa + i * sa, rsa, csa, pb + i * sb, rsb, csb, beta, pc + i * sc, n);
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
      packed::split_grid(threads, m, n, tm, tn);
      const int64_t mchunk = ((m + tm - 1) / tm + packed::MR - 1) / packed::MR * packed::MR;
      const int64_t nchunk = ((n + tn - 1) / tn + packed::NR - 1) / packed::NR * packed::NR;
      for (int64_t i = 0; i < bt; ++i)
        parallel_for(tm * tn, tm * tn, [&](int64_t t) {
          const int64_t r0 = (t / tn) * mchunk, c0 = (t % tn) * nchunk;
          const int64_t rows = std::min(mchunk, m - r0), cols = std::min(nchunk, n - c0);
          if (rows <= 0 || cols <= 0) return;
          packed::sgemm(rows, cols, k, alpha, pa + i * sa + r0 * rsa, rsa, csa, pb + i * sb + c0 * csb, rsb, csb, beta,
                        pc + i * sc + r0 * n + c0, n);
        });
      return;
    }
  }
#endif
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
  dispatch_float(a.dtype(), "gemm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    gemm_typed<T>(a, b, c, p);
  });
}

}  // namespace hh
