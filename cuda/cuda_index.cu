// CUDA indexing kernels on contiguous (O,R,I) views: index_select / index_add along R with a 1-D
// index, gather / scatter_add with a full (O,K,I) index, and the triangle mask behind tril/triu.
// Indices (i32 or i64) are range-checked by a first kernel, before anything is written; the
// first offender is reported with the CPU's message. The accumulating kernels use atomicAdd
// (duplicates accumulate; float sums may round in a different order than the CPU). Selections
// (index_select, gather, triangle) move elements by size only, so they take every dtype.
#include "cuda/cuda_common.cuh"

namespace hh {
namespace cuda {
namespace {

template <typename Idx>
__global__ void check_range_kernel(const Idx* idx, int64_t n, int64_t r, unsigned long long* bad) {
  for (int64_t k = global_thread(); k < n; k += grid_threads()) {
    const int64_t v = static_cast<int64_t>(idx[k]);
    if (v < 0 || v >= r) flag_bad(bad, k);
  }
}

// Throws naming `op`, the first bad index value and the dim size unless every idx[0..n) is in
// [0, r). Waits for the stream.
template <typename Idx>
void check_range_cuda(CudaBackend& b, const Idx* idx, int64_t n, int64_t r, const char* op) {
  if (n == 0) return;
  BadPosition bad(b);
  check_range_kernel<Idx><<<blocks_for(n), kBlock, 0, b.stream()>>>(idx, n, r, bad.ptr());
  check_launch(op);
  const int64_t k = bad.first();
  if (k >= 0) {
    const int64_t v = static_cast<int64_t>(read_device(b, idx + k));
    fail(str(op, ": index ", v, " is out of range for a dimension of size ", r));
  }
}

// Atomic accumulation for the accumulate dtypes (two's complement: i64 adds as u64).
__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int32_t* p, int32_t v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int64_t* p, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

// Each (o, k) row of I elements gets blockDim.x threads, blockDim.y rows per block (no block-wide
// synchronization here, so a thread simply walks its own rows).
// out (O,K,I) = x (O,R,I)[:, idx[k], :]
template <typename U, typename Idx>
__global__ void __launch_bounds__(kMaxRowThreads)
    index_select_kernel(const U* x, const Idx* idx, U* out, int64_t O, int64_t R, int64_t K, int64_t I) {
  for (int64_t row = first_row(); row < O * K; row += row_step()) {
    const int64_t o = row / K, k = row % K;
    const U* src = x + (o * R + static_cast<int64_t>(idx[k])) * I;
    U* dst = out + row * I;
    for (int64_t i = threadIdx.x; i < I; i += blockDim.x) dst[i] = src[i];
  }
}

// out (O,R,I)[:, idx[k], :] += src (O,K,I)
template <typename T, typename Idx>
__global__ void __launch_bounds__(kMaxRowThreads)
    index_add_kernel(T* out, const Idx* idx, const T* src, int64_t O, int64_t R, int64_t K, int64_t I) {
  for (int64_t row = first_row(); row < O * K; row += row_step()) {
    const int64_t o = row / K, k = row % K;
    T* dst = out + (o * R + static_cast<int64_t>(idx[k])) * I;
    const T* from = src + row * I;
    for (int64_t i = threadIdx.x; i < I; i += blockDim.x) atomic_add(dst + i, from[i]);
  }
}

// out (O,K,I)[o,k,i] = x (O,R,I)[o, idx[o,k,i], i]
template <typename U, typename Idx>
__global__ void __launch_bounds__(kMaxRowThreads)
    gather_kernel(const U* x, const Idx* idx, U* out, int64_t O, int64_t R, int64_t K, int64_t I) {
  for (int64_t row = first_row(); row < O * K; row += row_step()) {
    const U* xo = x + (row / K) * R * I;
    const Idx* ir = idx + row * I;
    U* dst = out + row * I;
    for (int64_t i = threadIdx.x; i < I; i += blockDim.x) dst[i] = xo[static_cast<int64_t>(ir[i]) * I + i];
  }
}

// out (O,R,I)[o, idx[o,k,i], i] += src (O,K,I)[o,k,i]
template <typename T, typename Idx>
__global__ void __launch_bounds__(kMaxRowThreads)
    scatter_add_kernel(T* out, const Idx* idx, const T* src, int64_t O, int64_t R, int64_t K, int64_t I) {
  for (int64_t row = first_row(); row < O * K; row += row_step()) {
    T* dst = out + (row / K) * R * I;
    const Idx* ir = idx + row * I;
    const T* from = src + row * I;
    for (int64_t i = threadIdx.x; i < I; i += blockDim.x)
      atomic_add(dst + static_cast<int64_t>(ir[i]) * I + i, from[i]);
  }
}

// out (Bt,M,N): row i keeps columns j with j - i <= k (lower) or j - i >= k (upper), zero elsewhere.
template <typename U>
__global__ void __launch_bounds__(kMaxRowThreads)
    triangle_kernel(const U* x, U* out, int64_t rows, int64_t M, int64_t N, int64_t k, bool upper) {
  for (int64_t row = first_row(); row < rows; row += row_step()) {
    const int64_t i = row % M;
    const U* src = x + row * N;
    U* dst = out + row * N;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
      const bool keep = upper ? j - i >= k : j - i <= k;
      dst[j] = keep ? src[j] : U(0);
    }
  }
}

template <typename U, typename Idx>
void index_select_cuda(const U* x, const Idx* idx, U* out, int64_t O, int64_t R, int64_t K, int64_t I,
                       cudaStream_t stream) {
  const RowLaunch l = row_launch(O * K, I, 256);
  index_select_kernel<U, Idx><<<l.grid, l.block, 0, stream>>>(x, idx, out, O, R, K, I);
  check_launch("index_select");
}

template <typename T, typename Idx>
void index_add_cuda(T* out, const Idx* idx, const T* src, int64_t O, int64_t R, int64_t K, int64_t I,
                    cudaStream_t stream) {
  const RowLaunch l = row_launch(O * K, I, 256);
  index_add_kernel<T, Idx><<<l.grid, l.block, 0, stream>>>(out, idx, src, O, R, K, I);
  check_launch("index_add");
}

template <typename U, typename Idx>
void gather_cuda(const U* x, const Idx* idx, U* out, int64_t O, int64_t R, int64_t K, int64_t I, cudaStream_t stream) {
  const RowLaunch l = row_launch(O * K, I, 256);
  gather_kernel<U, Idx><<<l.grid, l.block, 0, stream>>>(x, idx, out, O, R, K, I);
  check_launch("gather");
}

template <typename T, typename Idx>
void scatter_add_cuda(T* out, const Idx* idx, const T* src, int64_t O, int64_t R, int64_t K, int64_t I,
                      cudaStream_t stream) {
  const RowLaunch l = row_launch(O * K, I, 256);
  scatter_add_kernel<T, Idx><<<l.grid, l.block, 0, stream>>>(out, idx, src, O, R, K, I);
  check_launch("scatter_add");
}

template <typename U>
void triangle_cuda(const U* x, U* out, int64_t rows, int64_t M, int64_t N, int64_t k, bool upper, cudaStream_t stream) {
  const RowLaunch l = row_launch(rows, N, 256);
  triangle_kernel<U><<<l.grid, l.block, 0, stream>>>(x, out, rows, M, N, k, upper);
  check_launch("triangle");
}

// ---- dispatch helpers (the CPU's dtype rules and messages) ----

template <typename F>
void dispatch_index(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::i32:
      f(type_tag<int32_t>{});
      return;
    case DType::i64:
      f(type_tag<int64_t>{});
      return;
    default:
      fail(str(op, ": index must be an i64 or i32 tensor, got ", dtype_name(t)));
  }
}

template <typename F>
void dispatch_accumulate(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32:
      f(type_tag<float>{});
      return;
    case DType::f64:
      f(type_tag<double>{});
      return;
    case DType::i32:
      f(type_tag<int32_t>{});
      return;
    case DType::i64:
      f(type_tag<int64_t>{});
      return;
    default:
      fail(str(op, ": expected a f32, f64, i32 or i64 tensor, got ", dtype_name(t)));
  }
}

// An unsigned type of the dtype's size, for kernels that only move elements.
template <typename F>
void dispatch_by_size(DType t, const char* op, F&& f) {
  switch (itemsize(t)) {
    case 1:
      f(type_tag<uint8_t>{});
      return;
    case 2:
      f(type_tag<uint16_t>{});
      return;
    case 4:
      f(type_tag<uint32_t>{});
      return;
    case 8:
      f(type_tag<uint64_t>{});
      return;
    default:
      fail(str(op, ": unsupported dtype ", dtype_name(t)));
  }
}

struct ORI {
  int64_t o, r, i;
};
ORI ori_of(const Tensor& t, const char* op) {
  HH_CHECK(t.dim() == 3, op, ": kernel expects an (O,R,I) tensor, got shape ", t.shape());
  HH_CHECK(t.is_contiguous(), op, ": kernel expects contiguous tensors");
  return {t.size(0), t.size(1), t.size(2)};
}

}  // namespace
}  // namespace cuda

void CudaBackend::index_select(const Tensor& x, const Tensor& index, const Tensor& out) {
  cuda::check_device(*this, "index_select", {&x, &index, &out});
  const cuda::ORI s = cuda::ori_of(x, "index_select");
  const int64_t K = index.numel();
  HH_CHECK(out.numel() == s.o * K * s.i, "index_select: output of shape ", out.shape(), " does not match x ", x.shape(),
           " and ", K, " indices");
  HH_CHECK(index.is_contiguous(), "index_select: kernel expects a contiguous index");
  HH_CHECK(out.is_contiguous() && out.dtype() == x.dtype(), "index_select: output must be contiguous ", x.dtype());
  cuda::DeviceGuard guard(index_);
  cuda::dispatch_index(index.dtype(), "index_select", [&](auto itag) {
    using Idx = typename decltype(itag)::type;
    const Idx* idx = index.data<Idx>();
    cuda::check_range_cuda(*this, idx, K, s.r, "index_select");
    if (out.numel() == 0) return;
    cuda::dispatch_by_size(x.dtype(), "index_select", [&](auto tag) {
      using U = typename decltype(tag)::type;
      cuda::index_select_cuda<U, Idx>(static_cast<const U*>(x.raw_data()), idx, static_cast<U*>(out.raw_data()), s.o,
                                      s.r, K, s.i, stream_);
    });
  });
}

void CudaBackend::index_add(const Tensor& out, const Tensor& index, const Tensor& src) {
  cuda::check_device(*this, "index_add", {&out, &index, &src});
  const cuda::ORI s = cuda::ori_of(out, "index_add");
  const int64_t K = index.numel();
  HH_CHECK(src.numel() == s.o * K * s.i, "index_add: source of shape ", src.shape(), " does not match out ",
           out.shape(), " and ", K, " indices");
  HH_CHECK(src.dtype() == out.dtype(), "index_add: source dtype ", src.dtype(), " differs from out ", out.dtype());
  HH_CHECK(index.is_contiguous() && src.is_contiguous(), "index_add: kernel expects contiguous index and source");
  cuda::DeviceGuard guard(index_);
  cuda::dispatch_index(index.dtype(), "index_add", [&](auto itag) {
    using Idx = typename decltype(itag)::type;
    const Idx* idx = index.data<Idx>();
    cuda::check_range_cuda(*this, idx, K, s.r, "index_add");
    cuda::dispatch_accumulate(out.dtype(), "index_add", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (src.numel() == 0) return;
      cuda::index_add_cuda<T, Idx>(out.data<T>(), idx, src.data<T>(), s.o, s.r, K, s.i, stream_);
    });
  });
}

void CudaBackend::gather(const Tensor& x, const Tensor& index, const Tensor& out) {
  cuda::check_device(*this, "gather", {&x, &index, &out});
  const cuda::ORI s = cuda::ori_of(x, "gather");
  const cuda::ORI t = cuda::ori_of(index, "gather");
  HH_CHECK(t.o == s.o && t.i == s.i, "gather: index (O,K,I) ", index.shape(), " does not match x (O,R,I) ", x.shape());
  HH_CHECK(out.numel() == index.numel(), "gather: output of shape ", out.shape(), " does not match index ",
           index.shape());
  HH_CHECK(out.is_contiguous() && out.dtype() == x.dtype(), "gather: output must be contiguous ", x.dtype());
  cuda::DeviceGuard guard(index_);
  cuda::dispatch_index(index.dtype(), "gather", [&](auto itag) {
    using Idx = typename decltype(itag)::type;
    const Idx* idx = index.data<Idx>();
    cuda::check_range_cuda(*this, idx, index.numel(), s.r, "gather");
    if (out.numel() == 0) return;
    cuda::dispatch_by_size(x.dtype(), "gather", [&](auto tag) {
      using U = typename decltype(tag)::type;
      cuda::gather_cuda<U, Idx>(static_cast<const U*>(x.raw_data()), idx, static_cast<U*>(out.raw_data()), t.o, s.r,
                                t.r, t.i, stream_);
    });
  });
}

void CudaBackend::scatter_add(const Tensor& out, const Tensor& index, const Tensor& src) {
  cuda::check_device(*this, "scatter_add", {&out, &index, &src});
  const cuda::ORI s = cuda::ori_of(out, "scatter_add");
  const cuda::ORI t = cuda::ori_of(index, "scatter_add");
  HH_CHECK(t.o == s.o && t.i == s.i, "scatter_add: index (O,K,I) ", index.shape(), " does not match out (O,R,I) ",
           out.shape());
  HH_CHECK(src.numel() == index.numel() && src.is_contiguous(), "scatter_add: source of shape ", src.shape(),
           " does not match index ", index.shape());
  HH_CHECK(src.dtype() == out.dtype(), "scatter_add: source dtype ", src.dtype(), " differs from out ", out.dtype());
  cuda::DeviceGuard guard(index_);
  cuda::dispatch_index(index.dtype(), "scatter_add", [&](auto itag) {
    using Idx = typename decltype(itag)::type;
    const Idx* idx = index.data<Idx>();
    cuda::check_range_cuda(*this, idx, index.numel(), s.r, "scatter_add");
    cuda::dispatch_accumulate(out.dtype(), "scatter_add", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (src.numel() == 0) return;
      cuda::scatter_add_cuda<T, Idx>(out.data<T>(), idx, src.data<T>(), t.o, s.r, t.r, t.i, stream_);
    });
  });
}

void CudaBackend::triangle(const Tensor& x, const Tensor& out, int64_t k, bool upper) {
  cuda::check_device(*this, "triangle", {&x, &out});
  const cuda::ORI s = cuda::ori_of(x, "triangle");
  HH_CHECK(out.shape() == x.shape() && out.is_contiguous() && out.dtype() == x.dtype(), "triangle: output ",
           out.shape(), " ", out.dtype(), " does not match input ", x.shape(), " ", x.dtype());
  if (x.numel() == 0) return;
  cuda::DeviceGuard guard(index_);
  // Beyond this range every k gives the same mask; clamping keeps j - i vs k free of overflow.
  const int64_t kk = std::min(std::max(k, -s.r - 1), s.i + 1);
  cuda::dispatch_by_size(x.dtype(), "triangle", [&](auto tag) {
    using U = typename decltype(tag)::type;
    cuda::triangle_cuda<U>(static_cast<const U*>(x.raw_data()), static_cast<U*>(out.raw_data()), s.o * s.r, s.r, s.i,
                           kk, upper, stream_);
  });
}

}  // namespace hh
