// CUDA reductions over the middle axis of a contiguous (O,R,I) view (sum, mean, max, min, prod,
// first-index argmax/argmin, NaN wins like the CPU) and inclusive cumulative sums along R.
// f32 accumulates in double and integers in int64, as on the CPU.
//
// reduce: I == 1 gives each row blockDim.x threads (warp/block reduction); I > 1 gives a block
// 32 columns x 8 row-lanes (coalesced along I). When O (x column tiles) is too small to fill the
// GPU, R is split into chunks whose partials a second kernel combines in chunk order.
#include <type_traits>

#include "cuda/cuda_common.cuh"

namespace hh {
namespace cuda {
namespace {

template <typename T>
using AccOf = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

enum Kind : int { kSum, kProd, kMax, kMin };
constexpr int64_t kNone = INT64_MAX;  // index of an empty partial

template <typename A>
struct Partial {
  A v;
  int64_t i;  // position along R (max/min); kNone for an empty partial
};

template <typename A>
__device__ __forceinline__ Partial<A> shfl_xor(Partial<A> p, int o) {
  return {__shfl_xor_sync(0xffffffffu, p.v, o), __shfl_xor_sync(0xffffffffu, p.i, o)};
}

template <typename A>
__device__ __forceinline__ bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>)
    return v != v;
  else
    return false;
}

// The CPU's selection order as a total order: any NaN beats a number, then the larger (max) or
// smaller (min) value, then the smaller index. Being a total order, the result does not depend
// on the combination order.
template <int K, typename A>
__device__ __forceinline__ Partial<A> combine(Partial<A> a, Partial<A> b) {
  if constexpr (K == kSum) {
    return {a.v + b.v, 0};
  } else if constexpr (K == kProd) {
    return {a.v * b.v, 0};
  } else {
    if (b.i == kNone) return a;
    if (a.i == kNone) return b;
    const bool an = is_nan(a.v), bn = is_nan(b.v);
    bool take_b;
    if (an || bn)
      take_b = bn && (!an || b.i < a.i);
    else if (a.v == b.v)
      take_b = b.i < a.i;
    else
      take_b = K == kMax ? b.v > a.v : b.v < a.v;
    return take_b ? b : a;
  }
}

template <int K, typename A>
__device__ __forceinline__ Partial<A> empty_partial() {
  if constexpr (K == kProd) return {A(1), 0};
  if constexpr (K == kSum) return {A(0), 0};
  return {A(0), kNone};
}

template <int K, typename A>
__device__ __forceinline__ Partial<A> warp_combine(Partial<A> p) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) p = combine<K>(p, shfl_xor(p, o));
  return p;
}

// Writes a finished (o, i) result: mean divides by R, values are cast back to T.
template <typename T, typename A>
__device__ __forceinline__ void write_result(Partial<A> p, int64_t at, bool mean, int64_t R, T* values,
                                             int64_t* indices) {
  A v = p.v;
  if constexpr (std::is_floating_point_v<A>) {
    if (mean) v /= static_cast<A>(R);
  }
  values[at] = static_cast<T>(v);
  if (indices) indices[at] = p.i;
}

// I == 1: task t = (o, chunk c) reduces x[o, c*chunk : (c+1)*chunk) with blockDim.x threads.
template <typename T, int K>
__global__ void __launch_bounds__(kMaxRowThreads)
    reduce_rows_kernel(const T* x, int64_t O, int64_t R, int64_t chunk, int64_t nchunks, bool mean,
                       Partial<AccOf<T>>* partials, T* values, int64_t* indices) {
  using A = AccOf<T>;
  __shared__ Partial<A> smem[32];
  const int64_t tasks = O * nchunks;
  for (int64_t t0 = static_cast<int64_t>(blockIdx.x) * blockDim.y; t0 < tasks;
       t0 += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t t = t0 + threadIdx.y;
    const bool valid = t < tasks;
    const int64_t o = valid ? t / nchunks : 0, c = valid ? t % nchunks : 0;
    const int64_t r0 = c * chunk, r1 = valid ? min(R, r0 + chunk) : 0;
    const T* row = x + o * R;
    Partial<A> p = empty_partial<K, A>();
    for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x)
      p = combine<K>(p, Partial<A>{static_cast<A>(row[r]), r});
    p = warp_combine<K>(p);
    if (blockDim.x > 32) {
      const int warps = blockDim.x / 32, base = threadIdx.y * warps;
      __syncthreads();
      if (threadIdx.x % 32 == 0) smem[base + threadIdx.x / 32] = p;
      __syncthreads();
      p = smem[base];
      for (int j = 1; j < warps; ++j) p = combine<K>(p, smem[base + j]);
    }
    if (valid && threadIdx.x == 0) {
      if (nchunks == 1)
        write_result(p, o, mean, R, values, indices);
      else
        partials[t] = p;
    }
  }
}

constexpr int kColTile = 32, kColLanes = 8;

// I > 1: task = (o, chunk c, tile of 32 columns); 8 lanes of threadIdx.y split the chunk's rows.
template <typename T, int K>
__global__ void reduce_cols_kernel(const T* x, int64_t O, int64_t R, int64_t I, int64_t chunk, int64_t nchunks,
                                   bool mean, Partial<AccOf<T>>* partials, T* values, int64_t* indices) {
  using A = AccOf<T>;
  __shared__ Partial<A> smem[kColLanes][kColTile];
  const int64_t tiles = (I + kColTile - 1) / kColTile, tasks = O * nchunks * tiles;
  for (int64_t t = blockIdx.x; t < tasks; t += gridDim.x) {
    const int64_t o = t / (nchunks * tiles), c = (t / tiles) % nchunks, tile = t % tiles;
    const int64_t i = tile * kColTile + threadIdx.x;
    const int64_t r0 = c * chunk, r1 = min(R, r0 + chunk);
    Partial<A> p = empty_partial<K, A>();
    if (i < I) {
      const T* col = x + o * R * I + i;
      for (int64_t r = r0 + threadIdx.y; r < r1; r += kColLanes)
        p = combine<K>(p, Partial<A>{static_cast<A>(col[r * I]), r});
    }
    __syncthreads();  // the previous task may still read smem
    smem[threadIdx.y][threadIdx.x] = p;
    __syncthreads();
    if (threadIdx.y == 0 && i < I) {
      for (int j = 1; j < kColLanes; ++j) p = combine<K>(p, smem[j][threadIdx.x]);
      if (nchunks == 1)
        write_result(p, o * I + i, mean, R, values, indices);
      else
        partials[(o * nchunks + c) * I + i] = p;
    }
  }
}

// Combines the chunk partials (O, nchunks, I) in chunk order.
template <typename T, int K>
__global__ void reduce_finalize_kernel(const Partial<AccOf<T>>* partials, int64_t O, int64_t I, int64_t nchunks,
                                       int64_t R, bool mean, T* values, int64_t* indices) {
  for (int64_t oi = global_thread(); oi < O * I; oi += grid_threads()) {
    const int64_t o = oi / I, i = oi % I;
    const Partial<AccOf<T>>* p = partials + o * nchunks * I + i;
    Partial<AccOf<T>> acc = p[0];
    for (int64_t c = 1; c < nchunks; ++c) acc = combine<K>(acc, p[c * I]);
    write_result(acc, oi, mean, R, values, indices);
  }
}

template <typename T, int K>
void reduce_cuda(CudaBackend& b, const T* x, int64_t O, int64_t R, int64_t I, bool mean, T* values, int64_t* indices) {
  using P = Partial<AccOf<T>>;
  cudaStream_t stream = b.stream();
  // Split R when the natural tasks (rows, or 32-column tiles) are too few to fill the GPU.
  constexpr int64_t kWantTasks = 1024;
  const int64_t tiles = I == 1 ? 1 : (I + kColTile - 1) / kColTile;
  const int64_t base = O * tiles;
  const int64_t min_chunk = I == 1 ? 8192 : 256;  // elements (rows) or rows (columns) per chunk
  int64_t nchunks = 1;
  if (base < kWantTasks && R > 2 * min_chunk)
    nchunks = std::min((R + min_chunk - 1) / min_chunk, (kWantTasks + base - 1) / base);
  const int64_t chunk = (R + nchunks - 1) / nchunks;
  nchunks = R == 0 ? 1 : (R + chunk - 1) / chunk;
  std::shared_ptr<void> buf;
  P* partials = nullptr;
  if (nchunks > 1) {
    buf = b.allocate(static_cast<size_t>(O * nchunks * I) * sizeof(P));
    partials = static_cast<P*>(buf.get());
  }
  if (I == 1) {
    const RowLaunch l = row_launch(O * nchunks, chunk, 512);
    reduce_rows_kernel<T, K><<<l.grid, l.block, 0, stream>>>(x, O, R, chunk, nchunks, mean, partials, values, indices);
  } else {
    const int64_t tasks = O * nchunks * tiles;
    reduce_cols_kernel<T, K>
        <<<static_cast<unsigned>(std::min(tasks, kMaxGrid)), dim3(kColTile, kColLanes), 0, stream>>>(
            x, O, R, I, chunk, nchunks, mean, partials, values, indices);
  }
  check_launch("reduce");
  if (nchunks > 1) {
    reduce_finalize_kernel<T, K>
        <<<blocks_for(O * I), kBlock, 0, stream>>>(partials, O, I, nchunks, R, mean, values, indices);
    check_launch("reduce");
  }
}

// ---- cumsum ----

// I == 1: each row gets blockDim.x threads that scan chunks of blockDim.x * kItems elements,
// carrying the running total from chunk to chunk.
constexpr int kItems = 4;

template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads) cumsum_rows_kernel(const T* x, T* out, int64_t O, int64_t R) {
  using A = AccOf<T>;
  __shared__ A smem[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  for (int64_t o0 = static_cast<int64_t>(blockIdx.x) * blockDim.y; o0 < O;
       o0 += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t o = o0 + threadIdx.y;
    const bool valid = o < O;
    const T* row = x + (valid ? o : 0) * R;
    T* dst = out + (valid ? o : 0) * R;
    A carry = 0;
    for (int64_t c0 = 0; c0 < R; c0 += static_cast<int64_t>(blockDim.x) * kItems) {
      const int64_t j0 = c0 + static_cast<int64_t>(threadIdx.x) * kItems;
      A v[kItems];
      A local = 0;
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        local += (valid && j0 + k < R) ? static_cast<A>(row[j0 + k]) : A(0);
        v[k] = local;
      }
      // Exclusive prefix of the thread totals across the row's threads.
      A inc = local;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const A n = __shfl_up_sync(0xffffffffu, inc, d);
        if (lane >= d) inc += n;
      }
      A excl = __shfl_up_sync(0xffffffffu, inc, 1);
      if (lane == 0) excl = 0;
      A total = __shfl_sync(0xffffffffu, inc, 31);
      if (warps > 1) {
        const int base = threadIdx.y * warps;
        __syncthreads();
        if (lane == 31) smem[base + warp] = inc;
        __syncthreads();
        A before = 0;
        total = 0;
        for (int w = 0; w < warps; ++w) {
          if (w < warp) before += smem[base + w];
          total += smem[base + w];
        }
        excl += before;
      }
      const A offset = carry + excl;
      if (valid) {
#pragma unroll
        for (int k = 0; k < kItems; ++k)
          if (j0 + k < R) dst[j0 + k] = static_cast<T>(offset + v[k]);
      }
      carry += total;
    }
  }
}

// I > 1: one thread per (o, i) column walks R (coalesced along i).
template <typename T>
__global__ void cumsum_cols_kernel(const T* x, T* out, int64_t O, int64_t R, int64_t I) {
  using A = AccOf<T>;
  for (int64_t oi = global_thread(); oi < O * I; oi += grid_threads()) {
    const int64_t o = oi / I, i = oi % I;
    const T* col = x + o * R * I + i;
    T* dst = out + o * R * I + i;
    A s = 0;
    for (int64_t r = 0; r < R; ++r) {
      s += static_cast<A>(col[r * I]);
      dst[r * I] = static_cast<T>(s);
    }
  }
}

template <typename T>
void cumsum_cuda(const T* x, T* out, int64_t O, int64_t R, int64_t I, cudaStream_t stream) {
  if (I == 1) {
    const RowLaunch l = row_launch(O, (R + kItems - 1) / kItems, 256);
    cumsum_rows_kernel<T><<<l.grid, l.block, 0, stream>>>(x, out, O, R);
  } else {
    cumsum_cols_kernel<T><<<blocks_for(O * I), kBlock, 0, stream>>>(x, out, O, R, I);
  }
  check_launch("cumsum");
}

// f32/f64/i32/i64, as the CPU.
template <typename F>
void dispatch_reduce(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32:
      return f(type_tag<float>{});
    case DType::f64:
      return f(type_tag<double>{});
    case DType::i32:
      return f(type_tag<int32_t>{});
    case DType::i64:
      return f(type_tag<int64_t>{});
    default:
      fail(str(op, ": expected a f32, f64, i32 or i64 tensor, got ", dtype_name(t)));
  }
}

void check_layout(const Tensor& x, const Tensor& out, const Shape& want, const char* op) {
  HH_CHECK(x.dim() == 3 && x.is_contiguous(), op, ": expected a contiguous (O,R,I) input, got shape ", x.shape());
  HH_CHECK(out.is_contiguous() && out.numel() == numel_of(want) && out.dtype() == x.dtype(), op, ": output of shape ",
           out.shape(), " and dtype ", out.dtype(), " does not match ", want, " ", x.dtype());
}

}  // namespace
}  // namespace cuda

void CudaBackend::reduce(ReduceOp op, const Tensor& x, const Tensor& values, const Tensor& indices) {
  cuda::check_device(*this, "reduce", {&x, &values, &indices});
  cuda::check_layout(x, values, {x.size(0), x.size(2)}, "reduce");
  if (indices.defined())
    HH_CHECK(indices.dtype() == DType::i64 && indices.is_contiguous() && indices.numel() == values.numel(),
             "reduce: indices must be a contiguous i64 tensor of ", values.numel(), " elements");
  HH_CHECK(!indices.defined() || op == ReduceOp::max || op == ReduceOp::min,
           "reduce: indices are only produced by max and min");
  HH_CHECK(is_floating(x.dtype()) || op != ReduceOp::mean, "reduce: mean needs a floating tensor, got ", x.dtype());
  const int64_t O = x.size(0), R = x.size(1), I = x.size(2);
  HH_CHECK(!(op == ReduceOp::max || op == ReduceOp::min) || R > 0, "reduce: max/min over an empty dimension of ",
           x.shape());
  if (O * I == 0) return;
  cuda::DeviceGuard guard(index_);
  int64_t* ip = indices.defined() ? indices.data<int64_t>() : nullptr;
  cuda::dispatch_reduce(x.dtype(), "reduce", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = x.data<T>();
    T* vp = values.data<T>();
    switch (op) {
      case ReduceOp::sum:
        return cuda::reduce_cuda<T, cuda::kSum>(*this, xp, O, R, I, false, vp, nullptr);
      case ReduceOp::mean:
        return cuda::reduce_cuda<T, cuda::kSum>(*this, xp, O, R, I, true, vp, nullptr);
      case ReduceOp::prod:
        return cuda::reduce_cuda<T, cuda::kProd>(*this, xp, O, R, I, false, vp, nullptr);
      case ReduceOp::max:
        return cuda::reduce_cuda<T, cuda::kMax>(*this, xp, O, R, I, false, vp, ip);
      case ReduceOp::min:
        return cuda::reduce_cuda<T, cuda::kMin>(*this, xp, O, R, I, false, vp, ip);
    }
  });
}

void CudaBackend::cumsum(const Tensor& x, const Tensor& out) {
  cuda::check_device(*this, "cumsum", {&x, &out});
  cuda::check_layout(x, out, x.shape(), "cumsum");
  if (x.numel() == 0) return;
  cuda::DeviceGuard guard(index_);
  cuda::dispatch_reduce(x.dtype(), "cumsum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::cumsum_cuda<T>(x.data<T>(), out.data<T>(), x.size(0), x.size(1), x.size(2), stream_);
  });
}

}  // namespace hh
