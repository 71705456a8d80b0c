// CPU GEMM: c (Bt,M,N) = alpha a (Bt,M,K) · b (Bt,K,N) + beta c, on Eigen.
//
// Layout: a and b are mapped in place with Eigen::Map. Each has unit stride in one of its last
// two dims; a unit column stride is a row-major matrix with outer stride = row stride, a unit row
// stride is a column-major one with outer stride = column stride. So a transposed view
// (x.transpose(-1,-2), linear's weightᵀ) costs nothing: Eigen's packing routines read either
// storage order directly. The batch stride may be 0 (a broadcast operand is read in place).
//
// Threading (the thread count is hh::set_num_threads, see core/parallel.h):
//  - one large matrix (or a batch that does not split evenly over the threads): Eigen's own
//    OpenMP GEMM. It splits the result over threads and shares the packed panels of the right
//    operand between them, which beats any split we could do from outside.
//  - many matrices: an OpenMP loop over the batch, Eigen single-threaded inside. Eigen checks
//    omp_get_num_threads() > 1 (Eigen/src/Core/products/Parallelizer.h, parallelize_gemm) and
//    runs serially inside a parallel region, so there is no oversubscription. Independent
//    matrices per thread need no synchronisation at all, and the attention products (B·H
//    matrices of 512×64) are too small for Eigen's split to pay off.
//
// Vectorization: Release builds use -O3 -march=native (CMake), so Eigen's GEBP micro-kernel is
// the AVX2/FMA (or AVX-512) one; EIGEN_VECTORIZE_FMA is asserted below where FMA is available.
#include <omp.h>

#include <Eigen/Core>

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
  if (a_row) return b_row ? &gemm_one<T, Eigen::RowMajor, Eigen::RowMajor> : &gemm_one<T, Eigen::RowMajor, Eigen::ColMajor>;
  return b_row ? &gemm_one<T, Eigen::ColMajor, Eigen::RowMajor> : &gemm_one<T, Eigen::ColMajor, Eigen::ColMajor>;
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
  GemmFn<T> fn = pick<T>(la.row_major, lb.row_major);

  const double per = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  // Split by batch when every thread gets (nearly) the same number of matrices, or when the
  // matrices are too small for Eigen's own split; otherwise let Eigen split each product.
  const bool by_batch = bt > 1 && threads > 1 &&
                        (bt % threads == 0 || bt >= 4 * static_cast<int64_t>(threads) || per <= kSmallGemmWork) &&
                        per * static_cast<double>(bt) > kGemmParallelWork;
  if (by_batch) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < bt; ++i) fn(pa + i * sa, la.ld, pb + i * sb, lb.ld, pc + i * sc, m, n, k, alpha, beta);
  } else {
    for (int64_t i = 0; i < bt; ++i) fn(pa + i * sa, la.ld, pb + i * sb, lb.ld, pc + i * sc, m, n, k, alpha, beta);
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
