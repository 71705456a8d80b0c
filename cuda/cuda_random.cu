// CUDA Philox random fills with the CPU's stream layout (core/philox.h PhiloxLayout and
// core/cpu/cpu_copy.cpp CpuBackend::random): the same (seed, offset) gives the same numbers.
// One thread per 128-bit Philox block for uniform and randint; normal calls philox_normal_at
// per element, the very function the CPU calls.
#include "core/philox.h"
#include "cuda/cuda_common.cuh"

namespace hh {
namespace cuda {
namespace {

// Uniform f32 in (lo, lo+span]: 4 values per block. fmaf is what the CPU's -march=native build
// compiles `lo + span * u` to; for rand() (lo 0, span 1) every build gives u itself.
__global__ void uniform_f32_kernel(float* out, int64_t n, uint64_t seed, uint64_t offset, float lo, float span) {
  const int64_t blocks = (n + 3) / 4;
  for (int64_t b = global_thread(); b < blocks; b += grid_threads()) {
    const Philox4 r = philox4x32_10(offset + static_cast<uint64_t>(b), 0, seed);
    const int64_t i0 = b * 4;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (i0 + j < n) out[i0 + j] = fmaf(span, philox_uniform(r.v[j]), lo);
  }
}

// Uniform f64: 2 values per block, 53 bits each.
__global__ void uniform_f64_kernel(double* out, int64_t n, uint64_t seed, uint64_t offset, double lo, double span) {
  const int64_t blocks = (n + 1) / 2;
  for (int64_t b = global_thread(); b < blocks; b += grid_threads()) {
    const Philox4 r = philox4x32_10(offset + static_cast<uint64_t>(b), 0, seed);
    const int64_t i0 = b * 2;
    out[i0] = fma(span, philox_uniform53(r.v[0], r.v[1]), lo);
    if (i0 + 1 < n) out[i0 + 1] = fma(span, philox_uniform53(r.v[2], r.v[3]), lo);
  }
}

template <typename T>
__global__ void normal_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, double mean, double std) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    out[i] = static_cast<T>(fma(std, philox_normal_at(seed, offset, i), mean));
}

// randint in [lo, lo + range): one word per value, 4 per block.
template <typename T>
__global__ void randint_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, int64_t lo, uint64_t range) {
  const int64_t blocks = (n + 3) / 4;
  for (int64_t b = global_thread(); b < blocks; b += grid_threads()) {
    const Philox4 r = philox4x32_10(offset + static_cast<uint64_t>(b), 0, seed);
    const int64_t i0 = b * 4;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (i0 + j < n) out[i0 + j] = static_cast<T>(lo + static_cast<int64_t>(static_cast<uint64_t>(r.v[j]) % range));
  }
}

void uniform_f32_cuda(float* out, int64_t n, uint64_t seed, uint64_t offset, float lo, float span,
                      cudaStream_t stream) {
  uniform_f32_kernel<<<blocks_for((n + 3) / 4), kBlock, 0, stream>>>(out, n, seed, offset, lo, span);
  check_launch("random uniform");
}

void uniform_f64_cuda(double* out, int64_t n, uint64_t seed, uint64_t offset, double lo, double span,
                      cudaStream_t stream) {
  uniform_f64_kernel<<<blocks_for((n + 1) / 2), kBlock, 0, stream>>>(out, n, seed, offset, lo, span);
  check_launch("random uniform");
}

template <typename T>
void normal_cuda(T* out, int64_t n, uint64_t seed, uint64_t offset, double mean, double std, cudaStream_t stream) {
  normal_kernel<T><<<blocks_for(n), kBlock, 0, stream>>>(out, n, seed, offset, mean, std);
  check_launch("random normal");
}

template <typename T>
void randint_cuda(T* out, int64_t n, uint64_t seed, uint64_t offset, int64_t lo, uint64_t range, cudaStream_t stream) {
  randint_kernel<T><<<blocks_for((n + 3) / 4), kBlock, 0, stream>>>(out, n, seed, offset, lo, range);
  check_launch("random randint");
}

}  // namespace
}  // namespace cuda

void CudaBackend::random(const Tensor& out, const RandomParams& p) {
  cuda::check_device(*this, "random", {&out});
  HH_CHECK(out.is_contiguous(), "random: output must be contiguous, got strides ", out.strides());
  const int64_t n = out.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(index_);
  // The seed and offset are kernel arguments fixed at capture: every replay of a CUDA graph would
  // draw the same numbers (a dropout mask that never changes), so draws inside a capture are refused
  // until the generator keeps its offset in device memory.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cuda::check_cuda(cudaStreamIsCapturing(stream_, &capture), "random", "cudaStreamIsCapturing");
  HH_CHECK(capture == cudaStreamCaptureStatusNone,
           "random: a draw inside a CUDA graph capture would repeat the same numbers on every replay; draw outside "
           "the captured work (or use dropout 0)");
  switch (p.kind) {
    case RandomKind::uniform:
      if (out.dtype() == DType::f32) {
        cuda::uniform_f32_cuda(out.data<float>(), n, p.seed, p.offset, static_cast<float>(p.a),
                               static_cast<float>(p.b - p.a), stream_);
      } else {
        HH_CHECK(out.dtype() == DType::f64, "random uniform: f32 or f64 output expected, got ", out.dtype());
        cuda::uniform_f64_cuda(out.data<double>(), n, p.seed, p.offset, p.a, p.b - p.a, stream_);
      }
      return;
    case RandomKind::normal:
      dispatch_float(out.dtype(), "random normal", [&](auto tag) {
        using T = typename decltype(tag)::type;
        cuda::normal_cuda<T>(out.data<T>(), n, p.seed, p.offset, p.a, p.b, stream_);
      });
      return;
    case RandomKind::randint: {
      const int64_t lo = static_cast<int64_t>(p.a);
      const uint64_t range = static_cast<uint64_t>(static_cast<int64_t>(p.b) - lo);
      HH_CHECK(range > 0, "random randint: empty range [", p.a, ", ", p.b, ")");
      if (out.dtype() == DType::i64) {
        cuda::randint_cuda<int64_t>(out.data<int64_t>(), n, p.seed, p.offset, lo, range, stream_);
      } else {
        HH_CHECK(out.dtype() == DType::i32, "random randint: i32 or i64 output expected, got ", out.dtype());
        cuda::randint_cuda<int32_t>(out.data<int32_t>(), n, p.seed, p.offset, lo, range, stream_);
      }
      return;
    }
  }
  fail("random: unknown RandomKind");
}

}  // namespace hh
