// CPU reductions over the middle axis of a contiguous (O,R,I) view (sum, mean, max, min, prod,
// with first-index argmax/argmin) and inclusive cumulative sums along R.
//
// Work is split into tasks of (o, chunk of R, block of I). Each task writes one partial per
// column; partials are combined in R order, so results do not depend on the thread count.
// f32 is accumulated in double; integers in int64.
#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/rowsum.h"
#include "core/cpu_isa.h"

namespace hh {

double rowsum::sum_f32(const float* p, int64_t n) {
  double lane[kLanes] = {};
  const int64_t whole = n / kLanes * kLanes;
  BlockFn blocks = nullptr;
  if (cpu_isa() >= CpuIsa::avx512) blocks = avx512_blocks();
  if (blocks == nullptr && cpu_isa() >= CpuIsa::avx2) blocks = avx2_blocks();
  if (blocks != nullptr) {
    blocks(p, whole, lane);
  } else {
    for (int64_t i = 0; i < whole; i += kLanes)
      for (int64_t j = 0; j < kLanes; ++j) lane[j] += static_cast<double>(p[i + j]);
  }
  for (int64_t i = whole; i < n; ++i) lane[i - whole] += static_cast<double>(p[i]);
  double s = 0;
  for (int64_t j = 0; j < kLanes; ++j) s += lane[j];
  return s;
}

namespace {

template <typename T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

constexpr int64_t kColBlock = 256;     // columns of I per task: their accumulators stay in L1
constexpr int64_t kChunkElems = 32768;  // elements per task when R is split across threads
constexpr int64_t kFewTasks = 64;       // split R only when O x I-blocks gives fewer tasks

template <typename A>
inline bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>)
    return v != v;
  else
    return false;
}

// Whether v (at a later index) replaces best: strictly better, or the first NaN (NaN sticks).
template <bool IsMax, typename A>
inline bool takes(A v, A best) {
  bool strict = IsMax ? v > best : v < best;
  if constexpr (std::is_floating_point_v<A>) return strict | ((v != v) & (best == best));
  return strict;
}

// One row p[0..n) of the I == 1 case (n >= 1 for max/min). idx is r0 + position when wanted.
template <typename T>
void row_partial(ReduceOp op, const T* p, int64_t n, int64_t r0, bool want_idx, Acc<T>& val, int64_t& idx) {
  using A = Acc<T>;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::mean: {
      if constexpr (std::is_same_v<T, float>) {  // the fixed-order, multi-accumulator sum
        val = rowsum::sum_f32(p, n);
        return;
      }
      A s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t r = 0; r < n; ++r) s += static_cast<A>(p[r]);
      val = s;
      return;
    }
    case ReduceOp::prod: {
      A s = 1;
#pragma omp simd reduction(* : s)
      for (int64_t r = 0; r < n; ++r) s *= static_cast<A>(p[r]);
      val = s;
      return;
    }
    case ReduceOp::max:
    case ReduceOp::min: {
      const bool is_max = op == ReduceOp::max;
      if (!want_idx) {  // values only: a vectorizable min/max plus a NaN flag
        A m = static_cast<A>(p[0]);
        int any_nan = 0;
        if (is_max) {
#pragma omp simd reduction(max : m) reduction(| : any_nan)
          for (int64_t r = 0; r < n; ++r) {
            A v = static_cast<A>(p[r]);
            m = v > m ? v : m;
            any_nan |= is_nan(v);
          }
        } else {
#pragma omp simd reduction(min : m) reduction(| : any_nan)
          for (int64_t r = 0; r < n; ++r) {
            A v = static_cast<A>(p[r]);
            m = v < m ? v : m;
            any_nan |= is_nan(v);
          }
        }
        if constexpr (std::is_floating_point_v<A>)
          if (any_nan) m = std::numeric_limits<A>::quiet_NaN();
        val = m;
        idx = r0;
        return;
      }
      A best = static_cast<A>(p[0]);
      int64_t bi = 0;
      for (int64_t r = 1; r < n; ++r) {
        if (is_nan(best)) break;
        A v = static_cast<A>(p[r]);
        if (is_max ? takes<true>(v, best) : takes<false>(v, best)) {
          best = v;
          bi = r;
        }
      }
      val = best;
      idx = r0 + bi;
      return;
    }
  }
}

// Rows [r0, r1) of columns [0, n) starting at x (row stride I). acc/ix get one partial per column.
template <typename T>
void col_partial(ReduceOp op, const T* x, int64_t I, int64_t r0, int64_t r1, int64_t n, bool want_idx,
                 Acc<T>* acc, int64_t* ix) {
  using A = Acc<T>;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::mean:
    case ReduceOp::prod: {
      const A init = op == ReduceOp::prod ? A(1) : A(0);
      for (int64_t i = 0; i < n; ++i) acc[i] = init;
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = x + r * I;
        if (op == ReduceOp::prod) {
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) acc[i] *= static_cast<A>(row[i]);
        } else {
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) acc[i] += static_cast<A>(row[i]);
        }
      }
      return;
    }
    case ReduceOp::max:
    case ReduceOp::min: {
      const T* first = x + r0 * I;
      for (int64_t i = 0; i < n; ++i) {
        acc[i] = static_cast<A>(first[i]);
        if (want_idx) ix[i] = r0;
      }
      const bool is_max = op == ReduceOp::max;
      for (int64_t r = r0 + 1; r < r1; ++r) {
        const T* row = x + r * I;
        if (want_idx) {
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) {
            A v = static_cast<A>(row[i]);
            bool t = is_max ? takes<true>(v, acc[i]) : takes<false>(v, acc[i]);
            acc[i] = t ? v : acc[i];
            ix[i] = t ? r : ix[i];
          }
        } else {
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) {
            A v = static_cast<A>(row[i]);
            bool t = is_max ? takes<true>(v, acc[i]) : takes<false>(v, acc[i]);
            acc[i] = t ? v : acc[i];
          }
        }
      }
      return;
    }
  }
}

// Combines partial b (later in R) into a.
template <typename A>
inline void combine(ReduceOp op, A& a, int64_t& ai, A b, int64_t bi) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::mean: a += b; return;
    case ReduceOp::prod: a *= b; return;
    case ReduceOp::max:
      if (takes<true>(b, a)) a = b, ai = bi;
      return;
    case ReduceOp::min:
      if (takes<false>(b, a)) a = b, ai = bi;
      return;
  }
}

template <typename T>
void reduce_typed(ReduceOp op, const Tensor& x, const Tensor& values, const Tensor& indices) {
  using A = Acc<T>;
  const int64_t O = x.size(0), R = x.size(1), I = x.size(2);
  const bool extremum = op == ReduceOp::max || op == ReduceOp::min;
  const bool want_idx = indices.defined();
  HH_CHECK(!extremum || R > 0, "reduce: max/min over an empty dimension of ", x.shape());
  if (O * I == 0) return;
  const T* xp = x.data<T>();
  T* vp = values.data<T>();
  int64_t* ip = want_idx ? indices.data<int64_t>() : nullptr;

  const int64_t ncols = std::min(I, kColBlock);
  const int64_t iblocks = (I + kColBlock - 1) / kColBlock;
  // Rows per task: a chunk of R when R is split, all of R otherwise (one task then covers every row).
  const int64_t split_rows = std::max<int64_t>(16, kChunkElems / ncols);
  const bool split = O * iblocks < kFewTasks && R > split_rows;
  const int64_t rchunk = split ? split_rows : R;
  const int64_t nchunks = split ? (R + rchunk - 1) / rchunk : 1;
  const int64_t ntasks = O * nchunks * iblocks;
  // Partials: (O, nchunks, I).
  std::vector<A> pv(static_cast<size_t>(O * nchunks * I));
  std::vector<int64_t> pi(want_idx ? pv.size() : 0);

#pragma omp parallel for if (x.numel() > kParallelGrain) schedule(static)
  for (int64_t t = 0; t < ntasks; ++t) {
    const int64_t o = t / (nchunks * iblocks), rem = t % (nchunks * iblocks);
    const int64_t c = rem / iblocks, b = rem % iblocks;
    const int64_t r0 = c * rchunk, r1 = std::min(R, r0 + rchunk);
    const int64_t i0 = b * kColBlock, n = std::min(I - i0, kColBlock);
    const int64_t at = (o * nchunks + c) * I + i0;
    const T* base = xp + o * R * I + i0;
    if (I == 1) {
      int64_t idx = 0;
      row_partial<T>(op, base + r0, r1 - r0, r0, want_idx, pv[static_cast<size_t>(at)], idx);
      if (want_idx) pi[static_cast<size_t>(at)] = idx;
    } else {
      col_partial<T>(op, base, I, r0, r1, n, want_idx, pv.data() + at, want_idx ? pi.data() + at : nullptr);
    }
  }

  const int64_t nout = O * I;
#pragma omp parallel for if (nout * nchunks > kParallelGrain)
  for (int64_t oi = 0; oi < nout; ++oi) {
    const int64_t o = oi / I, i = oi % I;
    size_t at = static_cast<size_t>(o * nchunks * I + i);
    A v = pv[at];
    int64_t vi = want_idx ? pi[at] : 0;
    for (int64_t c = 1; c < nchunks; ++c) {
      at += static_cast<size_t>(I);
      combine(op, v, vi, pv[at], want_idx ? pi[at] : 0);
    }
    if constexpr (std::is_floating_point_v<A>) {
      if (op == ReduceOp::mean) v /= static_cast<A>(R);
    }
    vp[oi] = static_cast<T>(v);
    if (want_idx) ip[oi] = vi;
  }
}

template <typename T>
void cumsum_typed(const Tensor& x, const Tensor& out) {
  using A = Acc<T>;
  const int64_t O = x.size(0), R = x.size(1), I = x.size(2);
  const T* xp = x.data<T>();
  T* yp = out.data<T>();
  if (I == 1) {
#pragma omp parallel for if (x.numel() > kParallelGrain)
    for (int64_t o = 0; o < O; ++o) {
      const T* p = xp + o * R;
      T* q = yp + o * R;
      A s = 0;
      for (int64_t r = 0; r < R; ++r) {
        s += static_cast<A>(p[r]);
        q[r] = static_cast<T>(s);
      }
    }
    return;
  }
  const int64_t iblocks = (I + kColBlock - 1) / kColBlock;
#pragma omp parallel for if (x.numel() > kParallelGrain)
  for (int64_t t = 0; t < O * iblocks; ++t) {
    const int64_t o = t / iblocks, i0 = (t % iblocks) * kColBlock, n = std::min(I - i0, kColBlock);
    A acc[kColBlock];
    for (int64_t i = 0; i < n; ++i) acc[i] = 0;
    for (int64_t r = 0; r < R; ++r) {
      const T* row = xp + (o * R + r) * I + i0;
      T* dst = yp + (o * R + r) * I + i0;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        acc[i] += static_cast<A>(row[i]);
        dst[i] = static_cast<T>(acc[i]);
      }
    }
  }
}

// f32/f64/i32/i64 dispatch for the reduction kernels.
template <typename F>
void dispatch_reduce(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return f(type_tag<float>{});
    case DType::f64: return f(type_tag<double>{});
    case DType::i32: return f(type_tag<int32_t>{});
    case DType::i64: return f(type_tag<int64_t>{});
    default: fail(str(op, ": expected a f32, f64, i32 or i64 tensor, got ", dtype_name(t)));
  }
}

void check_layout(const Tensor& x, const Tensor& out, const Shape& want, const char* op) {
  HH_CHECK(x.dim() == 3 && x.is_contiguous(), op, ": expected a contiguous (O,R,I) input, got shape ", x.shape());
  HH_CHECK(out.is_contiguous() && out.numel() == numel_of(want) && out.dtype() == x.dtype(), op, ": output of shape ",
           out.shape(), " and dtype ", out.dtype(), " does not match ", want, " ", x.dtype());
}

}  // namespace

void CpuBackend::reduce(ReduceOp op, const Tensor& x, const Tensor& values, const Tensor& indices) {
  check_layout(x, values, {x.size(0), x.size(2)}, "reduce");
  if (indices.defined())
    HH_CHECK(indices.dtype() == DType::i64 && indices.is_contiguous() && indices.numel() == values.numel(),
             "reduce: indices must be a contiguous i64 tensor of ", values.numel(), " elements");
  HH_CHECK(!indices.defined() || op == ReduceOp::max || op == ReduceOp::min,
           "reduce: indices are only produced by max and min");
  HH_CHECK(is_floating(x.dtype()) || op != ReduceOp::mean, "reduce: mean needs a floating tensor, got ", x.dtype());
  dispatch_reduce(x.dtype(), "reduce", [&](auto tag) {
    reduce_typed<typename decltype(tag)::type>(op, x, values, indices);
  });
}

void CpuBackend::cumsum(const Tensor& x, const Tensor& out) {
  check_layout(x, out, x.shape(), "cumsum");
  if (x.numel() == 0) return;
  dispatch_reduce(x.dtype(), "cumsum", [&](auto tag) { cumsum_typed<typename decltype(tag)::type>(x, out); });
}

}  // namespace hh
