// CUDA GEMM on cuBLAS: c (Bt,M,N) = alpha a (Bt,M,K) · b (Bt,K,N) + beta c, one
// cublasGemmStridedBatchedEx call.
//
// Row-major trick: cuBLAS is column-major, and a row-major (M,N) matrix is the column-major
// (N,M) matrix Cᵀ. So we ask for Cᵀ = Bᵀ·Aᵀ. A row-major operand read column-major already is
// its transpose (op N); a column-major one (a transposed view) needs op T. Leading dimensions
// come from the strides, batch strides are passed as they are (0 broadcasts one matrix).
// f32 runs in full f32 unless set_allow_tf32(true) (core/cuda_config.h); bf16/f16 run on tensor
// cores with f32 accumulation (cuBLAS picks its cuBLASLt kernels for them).
#include <atomic>
#include <climits>

#include "core/cuda_config.h"
#include "cuda/cuda_common.cuh"

namespace hh {

namespace {
std::atomic<bool> g_allow_tf32{false};
}  // namespace

void set_allow_tf32(bool on) { g_allow_tf32.store(on); }
bool allow_tf32() { return g_allow_tf32.load(); }

namespace cuda {
namespace {

// One (rows, cols) matrix with strides (rs, cs) as BLAS sees it: storage order and leading
// dimension. False when neither dim has unit stride or rows/columns overlap (the CPU's rule).
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

// cuBLAS's types for one GEMM: the storage type of a, b, c and the compute type (the type of
// alpha and beta). bf16/f16 run on tensor cores with f32 accumulation; f32 on TF32 tensor cores
// only when set_allow_tf32(true).
struct GemmTypes {
  cudaDataType data;
  cublasComputeType_t compute;
};

GemmTypes gemm_types(DType t) {
  switch (t) {
    case DType::f32: return {CUDA_R_32F, allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
    case DType::f64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F};
    case DType::bf16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    case DType::f16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F};
    default: break;
  }
  fail(str("gemm: no CUDA GEMM for dtype ", t, " (expected f32, f64, bf16 or f16)"));
}

struct GemmArgs {
  int64_t bt, m, n, k;
  Layout la, lb;
  int64_t sa, sb;  // batch strides of a and b
};

// c (row-major, contiguous) = alpha a·b + beta c for each of bt matrices; alpha and beta point
// at values of the compute type (double for f64, float otherwise).
void gemm_cuda(cublasHandle_t handle, const GemmTypes& t, const void* a, const void* b, void* c, const GemmArgs& g,
               const void* alpha, const void* beta) {
  const cublasOperation_t op_b = g.lb.row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t op_a = g.la.row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  check_cublas(cublasGemmStridedBatchedEx(handle, op_b, op_a, static_cast<int>(g.n), static_cast<int>(g.m),
                                          static_cast<int>(g.k), alpha, b, t.data, static_cast<int>(g.lb.ld), g.sb, a,
                                          t.data, static_cast<int>(g.la.ld), g.sa, beta, c, t.data,
                                          static_cast<int>(g.n), g.m * g.n, static_cast<int>(g.bt), t.compute,
                                          CUBLAS_GEMM_DEFAULT),
               "gemm", "cublasGemmStridedBatchedEx");
}

}  // namespace
}  // namespace cuda

void CudaBackend::gemm(const Tensor& a, const Tensor& b, const Tensor& c, const GemmParams& p) {
  cuda::check_device(*this, "gemm", {&a, &b, &c});
  HH_CHECK(a.dim() == 3 && b.dim() == 3 && c.dim() == 3, "gemm: expected 3-d a, b, c, got ", a.shape(), ", ", b.shape(),
           ", ", c.shape());
  HH_CHECK(a.size(0) == b.size(0) && a.size(0) == c.size(0) && a.size(2) == b.size(1) && c.size(1) == a.size(1) &&
               c.size(2) == b.size(2),
           "gemm: shapes ", a.shape(), " · ", b.shape(), " -> ", c.shape(), " do not match");
  HH_CHECK(a.dtype() == b.dtype() && a.dtype() == c.dtype(), "gemm: dtypes ", a.dtype(), ", ", b.dtype(), ", ",
           c.dtype(), " differ");
  HH_CHECK(c.is_contiguous(), "gemm: c must be contiguous, got strides ", c.strides());
  if (c.numel() == 0) return;
  cuda::GemmArgs g{a.size(0), a.size(1), b.size(2), a.size(2), {}, {}, a.stride(0), b.stride(0)};
  if (g.k == 0) {  // no products: c = beta c (and never reads a fresh c when beta is 0)
    if (p.beta == 0.0) {
      fill(c, 0.0);
    } else if (c.dtype() == DType::bf16 || c.dtype() == DType::f16) {  // the unary kernels are f32/f64
      Tensor c32 = empty(c.shape(), {DType::f32, c.device()});
      copy(c32, c);
      unary(UnaryOp::mul_scalar, c32, c32, UnaryParams{p.beta, 0.0});
      copy(c, c32);
    } else {
      unary(UnaryOp::mul_scalar, c, c, UnaryParams{p.beta, 0.0});
    }
    return;
  }
  HH_CHECK(cuda::matrix_layout(g.m, g.k, a.stride(1), a.stride(2), g.la), "gemm: a ", a.shape(), " with strides ",
           a.strides(), " has no unit stride in its last two dims");
  HH_CHECK(cuda::matrix_layout(g.k, g.n, b.stride(1), b.stride(2), g.lb), "gemm: b ", b.shape(), " with strides ",
           b.strides(), " has no unit stride in its last two dims");
  for (int64_t v : {g.bt, g.m, g.n, g.k, g.la.ld, g.lb.ld})
    HH_CHECK(v <= INT_MAX, "gemm: shapes ", a.shape(), " · ", b.shape(), " exceed cuBLAS's 32-bit sizes");
  cuda::DeviceGuard guard(index_);
  cublasHandle_t handle = cublas();
  const cuda::GemmTypes types = cuda::gemm_types(a.dtype());
  if (a.dtype() == DType::f64) {
    const double alpha = p.alpha, beta = p.beta;
    cuda::gemm_cuda(handle, types, a.raw_data(), b.raw_data(), c.raw_data(), g, &alpha, &beta);
  } else {
    const float alpha = static_cast<float>(p.alpha), beta = static_cast<float>(p.beta);
    cuda::gemm_cuda(handle, types, a.raw_data(), b.raw_data(), c.raw_data(), g, &alpha, &beta);
  }
}

}  // namespace hh
