// Shared pieces of the CUDA kernels: launch sizes, the strided offset calculator for elementwise
// kernels (up to 8 dims after merging, passed by value), warp/row reductions, and the
// device-side "first bad index" record used for range checks. Included by the .cu files only.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <utility>

#include "core/cpu/strided.h"
#include "core/tensor.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_check.h"

namespace hh::cuda {

constexpr int kBlock = 256;            // threads per block of the 1-D elementwise kernels
constexpr int kMaxDims = 8;            // dims an OffsetCalc holds after merging
constexpr int64_t kMaxGrid = 1 << 20;  // grid-stride loops cover the rest

inline unsigned blocks_for(int64_t n, int threads = kBlock) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(b, kMaxGrid)));
}

// Throws naming `op` when the last launch failed (bad configuration, missing kernel image).
inline void check_launch(const char* op) { HH_CUDA_CHECK(cudaGetLastError(), op); }

// Throws when a defined tensor is not on b's device (a kernel would fault on its pointer).
inline void check_device(const CudaBackend& b, const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined())
      HH_CHECK(t->device() == b.device(), op, ": got a tensor on ", t->device(), " on the ", b.device(), " backend");
}

// Every defined tensor of `ts` contiguous, of x's dtype, with the element count given beside it.
inline void check_operands(const char* op, const Tensor& x,
                           std::initializer_list<std::pair<const Tensor*, int64_t>> ts) {
  for (const auto& [t, numel] : ts) {
    if (!t->defined()) continue;
    HH_CHECK(t->is_contiguous() && t->dtype() == x.dtype() && t->numel() == numel, op, ": expected a contiguous ",
             x.dtype(), " tensor of ", numel, " elements, got ", t->shape(), " ", t->dtype());
  }
}

// A kernel argument for an optional tensor: its data, or null when it is undefined.
template <typename T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// Grid-stride loop index helpers.
__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }
// Row-per-threadIdx.y kernels (row_launch below) without block-wide synchronization.
__device__ __forceinline__ int64_t first_row() { return static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; }
__device__ __forceinline__ int64_t row_step() { return static_cast<int64_t>(gridDim.x) * blockDim.y; }

// ---- strided offsets ----
// Element offsets of N same-shaped strided operands for a row-major linear index. Dims are
// stored innermost first; sizes and strides are in elements.
template <int N>
struct OffsetCalc {
  int ndim = 0;
  bool small = true;  // the element count fits in 32 bits: cheaper index arithmetic
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims][N] = {};

  __device__ __forceinline__ void get(int64_t linear, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    if (small) {
      uint32_t l = static_cast<uint32_t>(linear);
#pragma unroll
      for (int d = 0; d < kMaxDims; ++d) {
        if (d == ndim) break;
        const uint32_t s = static_cast<uint32_t>(sizes[d]);
        const uint32_t i = l % s;
        l /= s;
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += static_cast<int64_t>(i) * strides[d][k];
      }
    } else {
      int64_t l = linear;
#pragma unroll
      for (int d = 0; d < kMaxDims; ++d) {
        if (d == ndim) break;
        const int64_t i = l % sizes[d];
        l /= sizes[d];
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += i * strides[d][k];
      }
    }
  }
  // True when every operand is contiguous (one merged dim of unit strides).
  bool contiguous() const {
    if (ndim != 1) return false;
    for (int k = 0; k < N; ++k)
      if (strides[0][k] != 1) return false;
    return true;
  }
};

// Merges dims the way the CPU's StridedLoop does (size-1 dims dropped, dims contiguous in every
// operand fused), then stores them innermost first. Throws naming `op` past kMaxDims dims.
template <int N>
OffsetCalc<N> make_offset_calc(const std::array<const Tensor*, N>& ts, const char* op) {
  StridedLoop<N> loop(ts);
  OffsetCalc<N> c;
  const int nd = static_cast<int>(loop.shape.size());
  HH_CHECK(nd <= kMaxDims, op, ": the CUDA kernel handles at most ", kMaxDims, " non-mergeable dims, got shape ",
           ts[0]->shape(), " with strides ", ts[0]->strides(), " (make the operands contiguous first)");
  c.ndim = nd;
  for (int d = 0; d < nd; ++d) {
    c.sizes[d] = loop.shape[static_cast<size_t>(nd - 1 - d)];
    for (int k = 0; k < N; ++k) c.strides[d][k] = loop.strides[static_cast<size_t>(k)][static_cast<size_t>(nd - 1 - d)];
  }
  c.small = ts[0]->numel() < (int64_t(1) << 31);
  return c;
}

// ---- reductions over the threads of one row ----

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {  // NaN-propagating
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return (a > b || a != a) ? a : b;
  }
};

template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Reduces v over threadIdx.x (blockDim.x a power of two, 32 to 1024; threadIdx.y picks the row);
// every thread of the row gets the result, combined in a fixed order. `smem` holds 32 values.
// Every thread of the block must call it (it may synchronize the block).
template <typename T, typename Op>
__device__ __forceinline__ T row_reduce(T v, Op op, T* smem) {
  v = warp_reduce(v, op);
  if (blockDim.x <= 32) return v;
  const int warps = blockDim.x / 32, base = threadIdx.y * warps;
  __syncthreads();  // a previous call may still be reading smem
  if (threadIdx.x % 32 == 0) smem[base + threadIdx.x / 32] = v;
  __syncthreads();
  T r = smem[base];
  for (int j = 1; j < warps; ++j) r = op(r, smem[base + j]);
  return r;
}

// Block shape for kernels that give each row (of `cols` elements) blockDim.x threads and each
// block blockDim.y rows: about 4+ elements per thread, 256 to kMaxRowThreads threads per block.
// Row kernels declare __launch_bounds__(kMaxRowThreads) so they never need too many registers.
constexpr int kMaxRowThreads = 512;
struct RowLaunch {
  dim3 block;
  unsigned grid;
};
inline RowLaunch row_launch(int64_t rows, int64_t cols, int max_tx = kMaxRowThreads) {
  int tx = 32;
  while (tx < max_tx && static_cast<int64_t>(tx) * 4 < cols) tx *= 2;
  const int ty = std::max(1, kBlock / tx);
  const int64_t g = std::max<int64_t>(1, std::min((rows + ty - 1) / ty, kMaxGrid));
  return {dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty)), static_cast<unsigned>(g)};
}

// Rows of a contiguous tensor viewed as (N, R): R is the last dim (1 for a 0-d tensor).
struct Rows {
  int64_t n = 0, r = 0;
};
inline Rows rows_of(const Tensor& t) {
  Rows s;
  s.r = t.dim() == 0 ? 1 : t.shape().back();
  s.n = t.dim() <= 1 ? 1 : numel_of(Shape(t.shape().begin(), t.shape().end() - 1));
  return s;
}

template <typename T>
__device__ __forceinline__ T infinity() {
  return static_cast<T>(__longlong_as_double(0x7ff0000000000000ll));
}

// ---- range checks ----
// Kernels call flag_bad(pos, p) for a bad position p; the host then reads the smallest one, which
// is the first offender in the CPU's scan order.
__device__ __forceinline__ void flag_bad(unsigned long long* pos, int64_t p) {
  atomicMin(pos, static_cast<unsigned long long>(p));
}

class BadPosition {
 public:
  explicit BadPosition(CudaBackend& b) : b_(b), buf_(b.allocate(sizeof(unsigned long long))) {
    HH_CUDA_CHECK(cudaMemsetAsync(ptr(), 0xff, sizeof(unsigned long long), b.stream()), "range check");
  }
  unsigned long long* ptr() const { return static_cast<unsigned long long*>(buf_.get()); }
  // The smallest flagged position, or -1; waits for the stream.
  int64_t first() const {
    unsigned long long h = 0;
    b_.copy_to_host(&h, ptr(), sizeof h);
    return h == ~0ull ? -1 : static_cast<int64_t>(h);
  }

 private:
  CudaBackend& b_;
  std::shared_ptr<void> buf_;
};

// Reads one element of device memory (error paths only).
template <typename T>
T read_device(CudaBackend& b, const T* p) {
  T h{};
  b.copy_to_host(&h, p, sizeof(T));
  return h;
}

}  // namespace hh::cuda
