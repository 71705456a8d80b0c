// CUDA kernels for the fused transformer-block ops: residual add + layer_norm / rms_norm
// (forward; their backwards are cuda_norm.cu's kernels on h), bias + GELU forward and backward,
// and the half-split rotary embedding (the backward is the inverse rotation). Contiguous f32/f64.
#include <cmath>

#include "core/unary_functors.h"
#include "cuda/cuda_common.cuh"

namespace hh {
namespace cuda {
namespace {

// Rows of h = x + r, then y = (h - mean) * rstd * w + b (layer_norm; Rms: mean 0, no b). Each
// row gets blockDim.x threads (row_launch); every thread reads back only the h it wrote.
template <typename T, bool Rms>
__global__ void __launch_bounds__(kMaxRowThreads)
    add_norm_kernel(const T* x, const T* r, const T* w, const T* b, double eps, T* h, T* y, T* mean, T* rstd,
                    int64_t N, int64_t C) {
  __shared__ T smem[32];
  for (int64_t r0 = static_cast<int64_t>(blockIdx.x) * blockDim.y; r0 < N;
       r0 += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t row = r0 + threadIdx.y;
    const bool valid = row < N;
    const int64_t len = valid ? C : 0, base = (valid ? row : 0) * C;
    T sum = 0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const T v = x[base + j] + r[base + j];
      h[base + j] = v;
      sum += v;
    }
    T mu = 0;
    if (!Rms) {
      sum = row_reduce(sum, SumOp{}, smem);
      mu = C > 0 ? sum / static_cast<T>(C) : T(0);
    }
    T sq = 0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const T d = h[base + j] - mu;
      sq += d * d;
    }
    sq = row_reduce(sq, SumOp{}, smem);
    const double var = C > 0 ? static_cast<double>(sq) / static_cast<double>(C) : 0.0;
    const T rs = static_cast<T>(1.0 / ::sqrt(var + eps));
    if (valid && threadIdx.x == 0) {
      if (!Rms) mean[row] = mu;
      rstd[row] = rs;
    }
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      T v = (h[base + j] - mu) * rs;
      if (w) v *= w[j];
      if (b) v += b[j];
      y[base + j] = v;
    }
  }
}

// y = gelu(x + bias) over (N,C) elements, bias indexed by the column.
template <typename T, class F>
__global__ void bias_gelu_kernel(const T* x, const T* bias, T* y, int64_t total, int64_t C) {
  for (int64_t i = global_thread(); i < total; i += grid_threads())
    y[i] = F::fwd(static_cast<T>(x[i] + bias[i % C]), UnaryParams{});
}

// gx = gy * gelu'(x + bias).
template <typename T, class F>
__global__ void bias_gelu_backward_kernel(const T* x, const T* bias, const T* gy, T* gx, int64_t total, int64_t C) {
  for (int64_t i = global_thread(); i < total; i += grid_threads())
    gx[i] = F::bwd(static_cast<T>(x[i] + bias[i % C]), T(0), gy[i], UnaryParams{});
}

// One thread per rotated pair (j, j + D/2) of x (G,L,D); cos/sin (L,D/2); sign -1 rotates back.
template <typename T>
__global__ void rope_kernel(const T* x, const T* cs, const T* sn, T sign, T* y, int64_t pairs, int64_t L,
                            int64_t half) {
  for (int64_t i = global_thread(); i < pairs; i += grid_threads()) {
    const int64_t gl = i / half, j = i % half, l = gl % L;
    const int64_t p1 = gl * 2 * half + j, p2 = p1 + half;
    const T c = cs[l * half + j], s = sign * sn[l * half + j];
    const T x1 = x[p1], x2 = x[p2];
    y[p1] = x1 * c - x2 * s;
    y[p2] = x2 * c + x1 * s;
  }
}

template <typename T, bool Rms>
void add_norm_cuda(const T* x, const T* r, const T* w, const T* b, double eps, T* h, T* y, T* mean, T* rstd,
                   int64_t N, int64_t C, cudaStream_t stream) {
  const RowLaunch l = row_launch(N, C);
  add_norm_kernel<T, Rms><<<l.grid, l.block, 0, stream>>>(x, r, w, b, eps, h, y, mean, rstd, N, C);
  check_launch(Rms ? "add_rms_norm" : "add_layer_norm");
}

template <typename T>
void bias_gelu_cuda(const T* x, const T* bias, const T* gy, bool tanh_form, T* out, int64_t total, int64_t C,
                    cudaStream_t stream) {
  const unsigned grid = blocks_for(total);
  if (gy) {
    if (tanh_form)
      bias_gelu_backward_kernel<T, unary::GeluTanh><<<grid, kBlock, 0, stream>>>(x, bias, gy, out, total, C);
    else
      bias_gelu_backward_kernel<T, unary::GeluErf><<<grid, kBlock, 0, stream>>>(x, bias, gy, out, total, C);
  } else {
    if (tanh_form)
      bias_gelu_kernel<T, unary::GeluTanh><<<grid, kBlock, 0, stream>>>(x, bias, out, total, C);
    else
      bias_gelu_kernel<T, unary::GeluErf><<<grid, kBlock, 0, stream>>>(x, bias, out, total, C);
  }
  check_launch(gy ? "bias_gelu_backward" : "bias_gelu");
}

}  // namespace
}  // namespace cuda

void CudaBackend::add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                                 double eps, const Tensor& h, const Tensor& y, const Tensor& mean,
                                 const Tensor& rstd) {
  const char* op = "add_layer_norm";
  cuda::check_device(*this, op, {&x, &residual, &weight, &bias, &h, &y, &mean, &rstd});
  const cuda::Rows s = cuda::rows_of(x);
  cuda::check_operands(op, x,
                       {{&x, s.n * s.r}, {&residual, s.n * s.r}, {&weight, s.r}, {&bias, s.r}, {&h, s.n * s.r},
                        {&y, s.n * s.r}, {&mean, s.n}, {&rstd, s.n}});
  if (s.n == 0) return;
  cuda::DeviceGuard guard(index_);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::add_norm_cuda<T, false>(x.data<T>(), residual.data<T>(), cuda::ptr_or_null<T>(weight),
                                  cuda::ptr_or_null<T>(bias), eps, h.data<T>(), y.data<T>(), mean.data<T>(),
                                  rstd.data<T>(), s.n, s.r, stream_);
  });
}

void CudaBackend::add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps,
                               const Tensor& h, const Tensor& y, const Tensor& rstd) {
  const char* op = "add_rms_norm";
  cuda::check_device(*this, op, {&x, &residual, &weight, &h, &y, &rstd});
  const cuda::Rows s = cuda::rows_of(x);
  cuda::check_operands(
      op, x, {{&x, s.n * s.r}, {&residual, s.n * s.r}, {&weight, s.r}, {&h, s.n * s.r}, {&y, s.n * s.r}, {&rstd, s.n}});
  if (s.n == 0) return;
  cuda::DeviceGuard guard(index_);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::add_norm_cuda<T, true>(x.data<T>(), residual.data<T>(), cuda::ptr_or_null<T>(weight), nullptr, eps,
                                 h.data<T>(), y.data<T>(), nullptr, rstd.data<T>(), s.n, s.r, stream_);
  });
}

void CudaBackend::bias_gelu(const Tensor& x, const Tensor& bias, bool tanh_form, const Tensor& y) {
  const char* op = "bias_gelu";
  cuda::check_device(*this, op, {&x, &bias, &y});
  const cuda::Rows s = cuda::rows_of(x);
  cuda::check_operands(op, x, {{&x, s.n * s.r}, {&bias, s.r}, {&y, s.n * s.r}});
  if (s.n * s.r == 0) return;
  cuda::DeviceGuard guard(index_);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::bias_gelu_cuda<T>(x.data<T>(), bias.data<T>(), nullptr, tanh_form, y.data<T>(), s.n * s.r, s.r, stream_);
  });
}

void CudaBackend::bias_gelu_backward(const Tensor& x, const Tensor& bias, const Tensor& gy, bool tanh_form,
                                     const Tensor& gx) {
  const char* op = "bias_gelu_backward";
  cuda::check_device(*this, op, {&x, &bias, &gy, &gx});
  const cuda::Rows s = cuda::rows_of(x);
  cuda::check_operands(op, x, {{&x, s.n * s.r}, {&bias, s.r}, {&gy, s.n * s.r}, {&gx, s.n * s.r}});
  if (s.n * s.r == 0) return;
  cuda::DeviceGuard guard(index_);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::bias_gelu_cuda<T>(x.data<T>(), bias.data<T>(), gy.data<T>(), tanh_form, gx.data<T>(), s.n * s.r, s.r,
                            stream_);
  });
}

void CudaBackend::rope(const Tensor& x, const Tensor& cos, const Tensor& sin, bool inverse, const Tensor& y) {
  const char* op = "rope";
  cuda::check_device(*this, op, {&x, &cos, &sin, &y});
  HH_CHECK(x.dim() == 3 && x.size(2) % 2 == 0, op, ": expected x (G,L,D) with D even, got ", x.shape());
  const int64_t g = x.size(0), l = x.size(1), half = x.size(2) / 2;
  cuda::check_operands(op, x, {{&x, g * l * 2 * half}, {&cos, l * half}, {&sin, l * half}, {&y, g * l * 2 * half}});
  const int64_t pairs = g * l * half;
  if (pairs == 0) return;
  cuda::DeviceGuard guard(index_);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::rope_kernel<T><<<cuda::blocks_for(pairs), cuda::kBlock, 0, stream_>>>(
        x.data<T>(), cos.data<T>(), sin.data<T>(), inverse ? T(-1) : T(1), y.data<T>(), pairs, l, half);
    cuda::check_launch(op);
  });
}

}  // namespace hh
