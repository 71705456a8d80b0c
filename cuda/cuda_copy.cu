// CUDA fill and strided copy / cast for every dtype pair (bf16/f16 through core/dtype.h's
// conversions, the same code the CPU runs, so casts round identically).
#include <cmath>
#include <type_traits>

#include "cuda/cuda_common.cuh"

namespace hh {
namespace cuda {
namespace {

// The CPU's copy_typed rule: plain static_cast between arithmetic types (except to bool),
// through double otherwise (bool targets test != 0, 16-bit floats round to nearest even).
template <typename D, typename S>
__device__ __forceinline__ D convert(S x) {
  if constexpr (std::is_same_v<D, S>) {
    return x;
  } else if constexpr (std::is_arithmetic_v<D> && std::is_arithmetic_v<S> && !std::is_same_v<D, bool>) {
    return static_cast<D>(x);
  } else {
    return from_double<D>(to_double<S>(x));
  }
}

// ---- fill ----

template <typename T>
__global__ void fill_contiguous_kernel(T* out, int64_t n, T value) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = value;
}

template <typename T>
__global__ void fill_strided_kernel(T* out, OffsetCalc<1> calc, int64_t n, T value) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t off[1];
    calc.get(i, off);
    out[off[0]] = value;
  }
}

template <typename T>
void fill_cuda(T* out, const OffsetCalc<1>& calc, int64_t n, T value, cudaStream_t stream) {
  if (calc.contiguous())
    fill_contiguous_kernel<T><<<blocks_for(n), kBlock, 0, stream>>>(out, n, value);
  else
    fill_strided_kernel<T><<<blocks_for(n), kBlock, 0, stream>>>(out, calc, n, value);
  check_launch("fill");
}

// ---- copy / cast ----

template <typename D, typename S>
__global__ void copy_contiguous_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) dst[i] = convert<D, S>(src[i]);
}

template <typename D, typename S>
__global__ void copy_strided_kernel(D* dst, const S* src, OffsetCalc<2> calc, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t off[2];
    calc.get(i, off);
    dst[off[0]] = convert<D, S>(src[off[1]]);
  }
}

template <typename D, typename S>
void copy_cuda(D* dst, const S* src, const OffsetCalc<2>& calc, int64_t n, cudaStream_t stream) {
  if (calc.contiguous()) {
    if constexpr (std::is_same_v<D, S>) {
      HH_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(D), cudaMemcpyDeviceToDevice, stream),
                    "copy");
      return;
    }
    copy_contiguous_kernel<D, S><<<blocks_for(n), kBlock, 0, stream>>>(dst, src, n);
  } else {
    copy_strided_kernel<D, S><<<blocks_for(n), kBlock, 0, stream>>>(dst, src, calc, n);
  }
  check_launch("copy");
}

}  // namespace
}  // namespace cuda

void CudaBackend::fill(const Tensor& out, double value) {
  cuda::check_device(*this, "fill", {&out});
  const int64_t n = out.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(index_);
  const auto calc = cuda::make_offset_calc<1>({&out}, "fill");
  if (value == 0.0 && !std::signbit(value) && calc.contiguous()) {  // zero bits in every dtype
    HH_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, static_cast<size_t>(n) * itemsize(out.dtype()), stream_), "fill");
    return;
  }
  dispatch_all(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::fill_cuda<T>(static_cast<T*>(out.raw_data()), calc, n, from_double<T>(value), stream_);
  });
}

void CudaBackend::copy(const Tensor& dst, const Tensor& src) {
  cuda::check_device(*this, "copy", {&dst, &src});
  HH_CHECK(dst.shape() == src.shape(), "copy: shapes ", dst.shape(), " and ", src.shape(), " differ");
  const int64_t n = dst.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(index_);
  const auto calc = cuda::make_offset_calc<2>({&dst, &src}, "copy");
  dispatch_all(dst.dtype(), [&](auto dtag) {
    dispatch_all(src.dtype(), [&](auto stag) {
      using D = typename decltype(dtag)::type;
      using S = typename decltype(stag)::type;
      cuda::copy_cuda<D, S>(static_cast<D*>(dst.raw_data()), static_cast<const S*>(src.raw_data()), calc, n, stream_);
    });
  });
}

}  // namespace hh
