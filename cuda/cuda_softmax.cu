// CUDA softmax / log-softmax over the last dim of contiguous (N,R) rows, forward and backward.
// Each row gets blockDim.x threads (one warp for short rows, up to 1024 threads for long ones),
// several rows per block; the row is read once per pass (max, sum, write), the re-reads hit
// L1/L2. f32 accumulates in f32 (tree sums), f64 in f64. Rows whose max is infinite follow the
// CPU: exp(x - lse) with lse = +-inf, so an all -inf row gives NaN like PyTorch.
#include "core/unary_functors.h"
#include "cuda/cuda_common.cuh"

namespace hh {
namespace cuda {
namespace {

struct MaxIgnoreNaN {  // std::max(m, x) as the CPU's row_max: a NaN never becomes the max
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return b > a ? b : a;
  }
};

template <typename T, bool Log>
__global__ void __launch_bounds__(kMaxRowThreads) softmax_kernel(const T* x, T* y, int64_t N, int64_t R) {
  __shared__ T smem[32];
  for (int64_t r0 = static_cast<int64_t>(blockIdx.x) * blockDim.y; r0 < N;
       r0 += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t row = r0 + threadIdx.y;
    const int64_t len = row < N ? R : 0;
    const T* xi = x + (row < N ? row : 0) * R;
    T* yi = y + (row < N ? row : 0) * R;
    T m = -infinity<T>();
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) m = MaxIgnoreNaN{}(m, xi[j]);
    m = row_reduce(m, MaxIgnoreNaN{}, smem);
    // Every thread of the block reaches each row_reduce (rows of one block may take different
    // branches, and row_reduce may synchronize the block).
    const bool inf_row = m == infinity<T>() || m == -infinity<T>();
    T sum = 0;
    if (!inf_row)
      for (int64_t j = threadIdx.x; j < len; j += blockDim.x) sum += umath::exp(xi[j] - m);
    sum = row_reduce(sum, SumOp{}, smem);
    if (inf_row) {
      for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
        const T l = xi[j] - m;
        yi[j] = Log ? l : umath::exp(l);
      }
    } else if (Log) {
      const T shift = m + umath::log(sum);
      for (int64_t j = threadIdx.x; j < len; j += blockDim.x) yi[j] = xi[j] - shift;
    } else {
      const T inv = T(1) / sum;
      for (int64_t j = threadIdx.x; j < len; j += blockDim.x) yi[j] = umath::exp(xi[j] - m) * inv;
    }
  }
}

// softmax: gx = y * (gy - sum_j gy_j y_j);  log-softmax: gx = gy - exp(y) * sum_j gy_j.
template <typename T, bool Log>
__global__ void __launch_bounds__(kMaxRowThreads)
    softmax_backward_kernel(const T* y, const T* gy, T* gx, int64_t N, int64_t R) {
  __shared__ T smem[32];
  for (int64_t r0 = static_cast<int64_t>(blockIdx.x) * blockDim.y; r0 < N;
       r0 += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t row = r0 + threadIdx.y;
    const int64_t len = row < N ? R : 0, base = (row < N ? row : 0) * R;
    const T* yi = y + base;
    const T* gi = gy + base;
    T* oi = gx + base;
    T dot = 0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) dot += Log ? gi[j] : gi[j] * yi[j];
    dot = row_reduce(dot, SumOp{}, smem);
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
      oi[j] = Log ? gi[j] - umath::exp(yi[j]) * dot : yi[j] * (gi[j] - dot);
  }
}

template <typename T>
void softmax_cuda(const T* x, T* y, int64_t N, int64_t R, bool log, cudaStream_t stream) {
  const RowLaunch l = row_launch(N, R);
  if (log)
    softmax_kernel<T, true><<<l.grid, l.block, 0, stream>>>(x, y, N, R);
  else
    softmax_kernel<T, false><<<l.grid, l.block, 0, stream>>>(x, y, N, R);
  check_launch("softmax");
}

template <typename T>
void softmax_backward_cuda(const T* y, const T* gy, T* gx, int64_t N, int64_t R, bool log, cudaStream_t stream) {
  const RowLaunch l = row_launch(N, R);
  if (log)
    softmax_backward_kernel<T, true><<<l.grid, l.block, 0, stream>>>(y, gy, gx, N, R);
  else
    softmax_backward_kernel<T, false><<<l.grid, l.block, 0, stream>>>(y, gy, gx, N, R);
  check_launch("softmax_backward");
}

void check_rows(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor& first = **ts.begin();
  for (const Tensor* t : ts)
    HH_CHECK(t->is_contiguous() && t->shape() == first.shape() && t->dtype() == first.dtype(), op,
             ": expected contiguous tensors of one shape and dtype, got ", t->shape(), " ", t->dtype(), " and ",
             first.shape(), " ", first.dtype());
}

}  // namespace
}  // namespace cuda

void CudaBackend::softmax(const Tensor& x, const Tensor& y, bool log) {
  cuda::check_device(*this, "softmax", {&x, &y});
  cuda::check_rows("softmax", {&x, &y});
  const cuda::Rows s = cuda::rows_of(x);
  if (s.n * s.r == 0) return;
  cuda::DeviceGuard guard(index_);
  dispatch_float(x.dtype(), "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::softmax_cuda<T>(x.data<T>(), y.data<T>(), s.n, s.r, log, stream_);
  });
}

void CudaBackend::softmax_backward(const Tensor& y, const Tensor& gy, const Tensor& gx, bool log) {
  cuda::check_device(*this, "softmax_backward", {&y, &gy, &gx});
  cuda::check_rows("softmax_backward", {&y, &gy, &gx});
  const cuda::Rows s = cuda::rows_of(y);
  if (s.n * s.r == 0) return;
  cuda::DeviceGuard guard(index_);
  dispatch_float(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::softmax_backward_cuda<T>(y.data<T>(), gy.data<T>(), gx.data<T>(), s.n, s.r, log, stream_);
  });
}

}  // namespace hh
