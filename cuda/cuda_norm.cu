// CUDA layer_norm and rms_norm over the last dim of contiguous (N,C) rows, forward and backward.
// Row statistics: each row gets blockDim.x threads (row_launch), two-pass mean/variance.
// Parameter gradients (gweight, gbias) are column sums over rows: a first kernel writes one
// partial per (row chunk, column), a second adds the chunks in order. No atomics, so the result
// is deterministic and independent of the launch shape's timing.
#include <cmath>

#include "core/unary_functors.h"
#include "cuda/cuda_common.cuh"

namespace hh {
namespace cuda {
namespace {

// y = (x - mean) * rstd * w + b, rstd = 1 / sqrt(var + eps), var biased. w, b may be null.
template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    layer_norm_kernel(const T* x, const T* w, const T* b, double eps, T* y, T* mean, T* rstd, int64_t N, int64_t C) {
  __shared__ T smem[32];
  for (int64_t r0 = static_cast<int64_t>(blockIdx.x) * blockDim.y; r0 < N;
       r0 += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t row = r0 + threadIdx.y;
    const bool valid = row < N;
    const int64_t len = valid ? C : 0;
    const T* xi = x + (valid ? row : 0) * C;
    T* yi = y + (valid ? row : 0) * C;
    T sum = 0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) sum += xi[j];
    sum = row_reduce(sum, SumOp{}, smem);
    const T mu = C > 0 ? sum / static_cast<T>(C) : T(0);
    T sq = 0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const T d = xi[j] - mu;
      sq += d * d;
    }
    sq = row_reduce(sq, SumOp{}, smem);
    const double var = C > 0 ? static_cast<double>(sq) / static_cast<double>(C) : 0.0;
    const T rs = static_cast<T>(1.0 / ::sqrt(var + eps));
    if (valid && threadIdx.x == 0) {
      mean[row] = mu;
      rstd[row] = rs;
    }
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      T v = (xi[j] - mu) * rs;
      if (w) v *= w[j];
      if (b) v += b[j];
      yi[j] = v;
    }
  }
}

// y = x * rstd * w, rstd = 1 / sqrt(mean_j x_j^2 + eps). w may be null.
template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    rms_norm_kernel(const T* x, const T* w, double eps, T* y, T* rstd, int64_t N, int64_t C) {
  __shared__ T smem[32];
  for (int64_t r0 = static_cast<int64_t>(blockIdx.x) * blockDim.y; r0 < N;
       r0 += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t row = r0 + threadIdx.y;
    const bool valid = row < N;
    const int64_t len = valid ? C : 0;
    const T* xi = x + (valid ? row : 0) * C;
    T* yi = y + (valid ? row : 0) * C;
    T sq = 0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) sq += xi[j] * xi[j];
    sq = row_reduce(sq, SumOp{}, smem);
    const double ms = C > 0 ? static_cast<double>(sq) / static_cast<double>(C) : 0.0;
    const T rs = static_cast<T>(1.0 / ::sqrt(ms + eps));
    if (valid && threadIdx.x == 0) rstd[row] = rs;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) yi[j] = w ? xi[j] * rs * w[j] : xi[j] * rs;
  }
}

// With xhat = (x - mean) * rstd (rms: mean = 0) and gh = gy * w:
//   layer_norm: gx = rstd * (gh - mean_j(gh) - xhat * mean_j(gh * xhat))
//   rms_norm:   gx = rstd * (gh - xhat * mean_j(gh * xhat))
template <typename T, bool Rms>
__global__ void __launch_bounds__(kMaxRowThreads)
    norm_backward_kernel(const T* x, const T* w, const T* mean, const T* rstd, const T* gy, T* gx, int64_t N,
                         int64_t C) {
  __shared__ T smem[32];
  for (int64_t r0 = static_cast<int64_t>(blockIdx.x) * blockDim.y; r0 < N;
       r0 += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t row = r0 + threadIdx.y;
    const bool valid = row < N;
    const int64_t len = valid ? C : 0, base = (valid ? row : 0) * C;
    const T* xi = x + base;
    const T* gi = gy + base;
    T* oi = gx + base;
    const T m = Rms || !valid ? T(0) : mean[row];
    const T rs = valid ? rstd[row] : T(0);
    T sum_gh = 0, sum_ghx = 0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const T gh = w ? gi[j] * w[j] : gi[j];
      sum_gh += gh;
      sum_ghx += gh * ((xi[j] - m) * rs);
    }
    if (!Rms) sum_gh = row_reduce(sum_gh, SumOp{}, smem);
    sum_ghx = row_reduce(sum_ghx, SumOp{}, smem);
    const T a = Rms || C == 0 ? T(0) : sum_gh / static_cast<T>(C);
    const T bcoef = C > 0 ? sum_ghx / static_cast<T>(C) : T(0);
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const T gh = w ? gi[j] * w[j] : gi[j];
      oi[j] = rs * (gh - a - ((xi[j] - m) * rs) * bcoef);
    }
  }
}

constexpr int kTile = 32, kLanes = 8;

// Partial column sums over the rows of chunk c: pw[c, j] = sum gy * xhat, pb[c, j] = sum gy
// (pb null for rms_norm or when gbias is not wanted).
template <typename T, bool Rms>
__global__ void norm_param_partials_kernel(const T* x, const T* mean, const T* rstd, const T* gy, int64_t N, int64_t C,
                                           int64_t chunk, int64_t nchunks, T* pw, T* pb) {
  __shared__ T sw[kLanes][kTile], sb[kLanes][kTile];
  const int64_t tiles = (C + kTile - 1) / kTile;
  for (int64_t t = blockIdx.x; t < tiles * nchunks; t += gridDim.x) {
    const int64_t c = t / tiles, j = (t % tiles) * kTile + threadIdx.x;
    const int64_t r1 = min(N, (c + 1) * chunk);
    T aw = 0, ab = 0;
    if (j < C) {
      for (int64_t r = c * chunk + threadIdx.y; r < r1; r += kLanes) {
        const T g = gy[r * C + j];
        const T m = Rms ? T(0) : mean[r];
        aw += g * ((x[r * C + j] - m) * rstd[r]);
        ab += g;
      }
    }
    __syncthreads();  // the previous task may still read sw / sb
    sw[threadIdx.y][threadIdx.x] = aw;
    sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && j < C) {
      for (int l = 1; l < kLanes; ++l) {
        aw += sw[l][threadIdx.x];
        ab += sb[l][threadIdx.x];
      }
      if (pw) pw[c * C + j] = aw;
      if (pb) pb[c * C + j] = ab;
    }
  }
}

// out[j] = sum over chunks of p[c, j], in chunk order.
template <typename T>
__global__ void sum_chunks_kernel(const T* p, int64_t C, int64_t nchunks, T* out) {
  for (int64_t j = global_thread(); j < C; j += grid_threads()) {
    T s = 0;
    for (int64_t c = 0; c < nchunks; ++c) s += p[c * C + j];
    out[j] = s;
  }
}

template <typename T>
void layer_norm_cuda(const T* x, const T* w, const T* b, double eps, T* y, T* mean, T* rstd, int64_t N, int64_t C,
                     cudaStream_t stream) {
  const RowLaunch l = row_launch(N, C);
  layer_norm_kernel<T><<<l.grid, l.block, 0, stream>>>(x, w, b, eps, y, mean, rstd, N, C);
  check_launch("layer_norm");
}

template <typename T>
void rms_norm_cuda(const T* x, const T* w, double eps, T* y, T* rstd, int64_t N, int64_t C, cudaStream_t stream) {
  const RowLaunch l = row_launch(N, C);
  rms_norm_kernel<T><<<l.grid, l.block, 0, stream>>>(x, w, eps, y, rstd, N, C);
  check_launch("rms_norm");
}

// gx, and gweight / gbias when non-null. mean is null for rms_norm.
template <typename T, bool Rms>
void norm_backward_cuda(CudaBackend& be, const T* x, const T* w, const T* mean, const T* rstd, const T* gy, T* gx,
                        T* gweight, T* gbias, int64_t N, int64_t C) {
  cudaStream_t stream = be.stream();
  const RowLaunch l = row_launch(N, C);
  norm_backward_kernel<T, Rms><<<l.grid, l.block, 0, stream>>>(x, w, mean, rstd, gy, gx, N, C);
  check_launch(Rms ? "rms_norm_backward" : "layer_norm_backward");
  if (!gweight && !gbias) return;
  if (N == 0) {  // empty sums
    if (gweight)
      HH_CUDA_CHECK(cudaMemsetAsync(gweight, 0, static_cast<size_t>(C) * sizeof(T), stream), "norm backward");
    if (gbias) HH_CUDA_CHECK(cudaMemsetAsync(gbias, 0, static_cast<size_t>(C) * sizeof(T), stream), "norm backward");
    return;
  }
  // About 1024 blocks of 32 columns, at least 64 rows per chunk.
  const int64_t tiles = (C + kTile - 1) / kTile;
  const int64_t nchunks_want = std::max<int64_t>(1, std::min((N + 63) / 64, (1024 + tiles - 1) / tiles));
  const int64_t chunk = (N + nchunks_want - 1) / nchunks_want, nchunks = (N + chunk - 1) / chunk;
  std::shared_ptr<void> buf = be.allocate(static_cast<size_t>(2 * nchunks * C) * sizeof(T));
  T* pw = gweight ? static_cast<T*>(buf.get()) : nullptr;
  T* pb = gbias ? static_cast<T*>(buf.get()) + nchunks * C : nullptr;
  norm_param_partials_kernel<T, Rms>
      <<<static_cast<unsigned>(std::min(tiles * nchunks, kMaxGrid)), dim3(kTile, kLanes), 0, stream>>>(
          x, mean, rstd, gy, N, C, chunk, nchunks, pw, pb);
  check_launch("norm backward");
  if (gweight) sum_chunks_kernel<T><<<blocks_for(C), kBlock, 0, stream>>>(pw, C, nchunks, gweight);
  if (gbias) sum_chunks_kernel<T><<<blocks_for(C), kBlock, 0, stream>>>(pb, C, nchunks, gbias);
  check_launch("norm backward");
}

// Shapes and dtypes: x (N,C) contiguous; every other defined tensor contiguous, x's dtype, and
// `numel` elements as given.
void check_norm(const char* op, const Tensor& x, std::initializer_list<std::pair<const Tensor*, int64_t>> ts) {
  HH_CHECK(x.is_contiguous(), op, ": x must be contiguous, got shape ", x.shape(), " strides ", x.strides());
  check_operands(op, x, ts);
}

}  // namespace
}  // namespace cuda

void CudaBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                             const Tensor& mean, const Tensor& rstd) {
  cuda::check_device(*this, "layer_norm", {&x, &weight, &bias, &y, &mean, &rstd});
  const cuda::Rows s = cuda::rows_of(x);
  cuda::check_norm("layer_norm", x, {{&weight, s.r}, {&bias, s.r}, {&y, s.n * s.r}, {&mean, s.n}, {&rstd, s.n}});
  if (s.n == 0) return;
  cuda::DeviceGuard guard(index_);
  dispatch_float(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::layer_norm_cuda<T>(x.data<T>(), cuda::ptr_or_null<T>(weight), cuda::ptr_or_null<T>(bias), eps, y.data<T>(),
                             mean.data<T>(), rstd.data<T>(), s.n, s.r, stream_);
  });
}

void CudaBackend::layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                                      const Tensor& gy, const Tensor& gx, const Tensor& gweight, const Tensor& gbias) {
  cuda::check_device(*this, "layer_norm_backward", {&x, &weight, &mean, &rstd, &gy, &gx, &gweight, &gbias});
  const cuda::Rows s = cuda::rows_of(x);
  cuda::check_norm(
      "layer_norm_backward", x,
      {{&weight, s.r}, {&mean, s.n}, {&rstd, s.n}, {&gy, s.n * s.r}, {&gx, s.n * s.r}, {&gweight, s.r}, {&gbias, s.r}});
  if (s.r == 0) return;
  cuda::DeviceGuard guard(index_);
  dispatch_float(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::norm_backward_cuda<T, false>(*this, x.data<T>(), cuda::ptr_or_null<T>(weight), mean.data<T>(), rstd.data<T>(),
                                       gy.data<T>(), gx.data<T>(), cuda::ptr_or_null<T>(gweight),
                                       cuda::ptr_or_null<T>(gbias), s.n, s.r);
  });
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) {
  cuda::check_device(*this, "rms_norm", {&x, &weight, &y, &rstd});
  const cuda::Rows s = cuda::rows_of(x);
  cuda::check_norm("rms_norm", x, {{&weight, s.r}, {&y, s.n * s.r}, {&rstd, s.n}});
  if (s.n == 0) return;
  cuda::DeviceGuard guard(index_);
  dispatch_float(x.dtype(), "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::rms_norm_cuda<T>(x.data<T>(), cuda::ptr_or_null<T>(weight), eps, y.data<T>(), rstd.data<T>(), s.n, s.r,
                           stream_);
  });
}

void CudaBackend::rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& gy,
                                    const Tensor& gx, const Tensor& gweight) {
  cuda::check_device(*this, "rms_norm_backward", {&x, &weight, &rstd, &gy, &gx, &gweight});
  const cuda::Rows s = cuda::rows_of(x);
  cuda::check_norm("rms_norm_backward", x,
                   {{&weight, s.r}, {&rstd, s.n}, {&gy, s.n * s.r}, {&gx, s.n * s.r}, {&gweight, s.r}});
  if (s.r == 0) return;
  cuda::DeviceGuard guard(index_);
  dispatch_float(x.dtype(), "rms_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::norm_backward_cuda<T, true>(*this, x.data<T>(), cuda::ptr_or_null<T>(weight), nullptr, rstd.data<T>(),
                                      gy.data<T>(), gx.data<T>(), cuda::ptr_or_null<T>(gweight), nullptr, s.n, s.r);
  });
}

}  // namespace hh
