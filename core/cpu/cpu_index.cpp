// CPU indexing kernels: index_select / index_add along one dim, gather / scatter_add with a full
// index tensor, and the triangle mask behind tril/triu. Layouts follow core/backend.h: tensors
// are contiguous and viewed as (O,R,I) = (outer, indexed dim, inner). Index tensors may be i32
// or i64; every index is range-checked before anything is written.
#include <algorithm>
#include <cstring>

#include "core/cpu/cpu_backend.h"

namespace hh {

namespace {

// Calls f(type_tag<Index>{}) for the index dtypes; `op` names the caller in the error.
template <typename F>
void dispatch_index(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::i32: f(type_tag<int32_t>{}); return;
    case DType::i64: f(type_tag<int64_t>{}); return;
    default: fail(str(op, ": index must be an i64 or i32 tensor, got ", dtype_name(t)));
  }
}

// Calls f(type_tag<T>{}) for the dtypes the accumulating kernels support.
template <typename F>
void dispatch_accumulate(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: f(type_tag<float>{}); return;
    case DType::f64: f(type_tag<double>{}); return;
    case DType::i32: f(type_tag<int32_t>{}); return;
    case DType::i64: f(type_tag<int64_t>{}); return;
    default: fail(str(op, ": expected a f32, f64, i32 or i64 tensor, got ", dtype_name(t)));
  }
}

// Throws naming `op`, the first bad value and the dim size unless every idx[0..n) is in [0, r).
template <typename Idx>
void check_range(const Idx* idx, int64_t n, int64_t r, const char* op) {
  int64_t bad = -1;
#pragma omp parallel for reduction(max : bad) if (n > kParallelGrain)
  for (int64_t k = 0; k < n; ++k) {
    int64_t v = static_cast<int64_t>(idx[k]);
    if (v < 0 || v >= r) bad = std::max(bad, k);
  }
  if (bad < 0) return;
  for (int64_t k = 0; k < n; ++k) {  // report the first offender, deterministically
    int64_t v = static_cast<int64_t>(idx[k]);
    if (v < 0 || v >= r) fail(str(op, ": index ", v, " is out of range for a dimension of size ", r));
  }
}

// (O,R,I) sizes of a contiguous 3-D view.
struct ORI {
  int64_t o, r, i;
};
ORI ori_of(const Tensor& t, const char* op) {
  HH_CHECK(t.dim() == 3, op, ": kernel expects an (O,R,I) tensor, got shape ", t.shape());
  HH_CHECK(t.is_contiguous(), op, ": kernel expects contiguous tensors");
  return {t.size(0), t.size(1), t.size(2)};
}

// Inner-dim tile for the race-free accumulate loops: each (o, tile) pair is owned by one thread.
constexpr int64_t kTile = 256;

}  // namespace

// out (O,K,I) = x (O,R,I)[:, index[k], :]
void CpuBackend::index_select(const Tensor& x, const Tensor& index, const Tensor& out) {
  const ORI s = ori_of(x, "index_select");
  const int64_t K = index.numel();
  HH_CHECK(out.numel() == s.o * K * s.i, "index_select: output of shape ", out.shape(), " does not match x ", x.shape(),
           " and ", K, " indices");
  HH_CHECK(index.is_contiguous(), "index_select: kernel expects a contiguous index");
  dispatch_index(index.dtype(), "index_select", [&](auto itag) {
    using Idx = typename decltype(itag)::type;
    const Idx* idx = index.data<Idx>();
    check_range(idx, K, s.r, "index_select");
    dispatch_all(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xp = static_cast<const T*>(x.raw_data());
      T* op = static_cast<T*>(out.raw_data());
      const int64_t rows = s.o * K, I = s.i, R = s.r;
#pragma omp parallel for if (rows * I > kParallelGrain)
      for (int64_t row = 0; row < rows; ++row) {
        const int64_t o = row / K, k = row % K;
        const T* src = xp + (o * R + static_cast<int64_t>(idx[k])) * I;
        T* dst = op + row * I;
        for (int64_t i = 0; i < I; ++i) dst[i] = src[i];
      }
    });
  });
}

// out (O,R,I)[:, index[k], :] += src (O,K,I); threads own disjoint (o, inner tile) blocks and walk
// k serially, so duplicate indices accumulate without races.
void CpuBackend::index_add(const Tensor& out, const Tensor& index, const Tensor& src) {
  const ORI s = ori_of(out, "index_add");
  const int64_t K = index.numel();
  HH_CHECK(src.numel() == s.o * K * s.i, "index_add: source of shape ", src.shape(), " does not match out ",
           out.shape(), " and ", K, " indices");
  HH_CHECK(src.dtype() == out.dtype(), "index_add: source dtype ", src.dtype(), " differs from out ", out.dtype());
  HH_CHECK(index.is_contiguous() && src.is_contiguous(), "index_add: kernel expects contiguous index and source");
  dispatch_index(index.dtype(), "index_add", [&](auto itag) {
    using Idx = typename decltype(itag)::type;
    const Idx* idx = index.data<Idx>();
    check_range(idx, K, s.r, "index_add");
    dispatch_accumulate(out.dtype(), "index_add", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* op = out.data<T>();
      const T* sp = src.data<T>();
      const int64_t I = s.i, R = s.r, tiles = (I + kTile - 1) / kTile, jobs = s.o * tiles;
#pragma omp parallel for if (s.o * K * I > kParallelGrain && jobs > 1)
      for (int64_t job = 0; job < jobs; ++job) {
        const int64_t o = job / tiles, i0 = (job % tiles) * kTile, i1 = std::min(I, i0 + kTile);
        for (int64_t k = 0; k < K; ++k) {
          T* dst = op + (o * R + static_cast<int64_t>(idx[k])) * I;
          const T* from = sp + (o * K + k) * I;
          for (int64_t i = i0; i < i1; ++i) dst[i] += from[i];
        }
      }
    });
  });
}

// out (O,K,I)[o,k,i] = x (O,R,I)[o, index[o,k,i], i]
void CpuBackend::gather(const Tensor& x, const Tensor& index, const Tensor& out) {
  const ORI s = ori_of(x, "gather");
  const ORI t = ori_of(index, "gather");
  HH_CHECK(t.o == s.o && t.i == s.i, "gather: index (O,K,I) ", index.shape(), " does not match x (O,R,I) ", x.shape());
  HH_CHECK(out.numel() == index.numel(), "gather: output of shape ", out.shape(), " does not match index ",
           index.shape());
  dispatch_index(index.dtype(), "gather", [&](auto itag) {
    using Idx = typename decltype(itag)::type;
    const Idx* idx = index.data<Idx>();
    check_range(idx, index.numel(), s.r, "gather");
    dispatch_all(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* xp = static_cast<const T*>(x.raw_data());
      T* op = static_cast<T*>(out.raw_data());
      const int64_t rows = t.o * t.r, K = t.r, R = s.r, I = s.i;
#pragma omp parallel for if (rows * I > kParallelGrain)
      for (int64_t row = 0; row < rows; ++row) {
        const int64_t o = row / K;
        const Idx* ir = idx + row * I;
        const T* xo = xp + o * R * I;
        T* dst = op + row * I;
        for (int64_t i = 0; i < I; ++i) dst[i] = xo[static_cast<int64_t>(ir[i]) * I + i];
      }
    });
  });
}

// out (O,R,I)[o, index[o,k,i], i] += src (O,K,I)[o,k,i]; race-free like index_add: a thread owns
// (o, inner tile) and walks k serially (different i never collide; same i is one thread).
void CpuBackend::scatter_add(const Tensor& out, const Tensor& index, const Tensor& src) {
  const ORI s = ori_of(out, "scatter_add");
  const ORI t = ori_of(index, "scatter_add");
  HH_CHECK(t.o == s.o && t.i == s.i, "scatter_add: index (O,K,I) ", index.shape(), " does not match out (O,R,I) ",
           out.shape());
  HH_CHECK(src.numel() == index.numel() && src.is_contiguous(), "scatter_add: source of shape ", src.shape(),
           " does not match index ", index.shape());
  HH_CHECK(src.dtype() == out.dtype(), "scatter_add: source dtype ", src.dtype(), " differs from out ", out.dtype());
  dispatch_index(index.dtype(), "scatter_add", [&](auto itag) {
    using Idx = typename decltype(itag)::type;
    const Idx* idx = index.data<Idx>();
    check_range(idx, index.numel(), s.r, "scatter_add");
    dispatch_accumulate(out.dtype(), "scatter_add", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* op = out.data<T>();
      const T* sp = src.data<T>();
      const int64_t K = t.r, R = s.r, I = s.i, tiles = (I + kTile - 1) / kTile, jobs = s.o * tiles;
#pragma omp parallel for if (index.numel() > kParallelGrain && jobs > 1)
      for (int64_t job = 0; job < jobs; ++job) {
        const int64_t o = job / tiles, i0 = (job % tiles) * kTile, i1 = std::min(I, i0 + kTile);
        T* dst = op + o * R * I;
        for (int64_t k = 0; k < K; ++k) {
          const Idx* ir = idx + (o * K + k) * I;
          const T* from = sp + (o * K + k) * I;
          for (int64_t i = i0; i < i1; ++i) dst[static_cast<int64_t>(ir[i]) * I + i] += from[i];
        }
      }
    });
  });
}

// out (Bt,M,N): row i keeps columns j with j - i <= k (lower) or j - i >= k (upper), zero elsewhere.
void CpuBackend::triangle(const Tensor& x, const Tensor& out, int64_t k, bool upper) {
  const ORI s = ori_of(x, "triangle");
  HH_CHECK(out.shape() == x.shape() && out.is_contiguous() && out.dtype() == x.dtype(), "triangle: output ",
           out.shape(), " ", out.dtype(), " does not match input ", x.shape(), " ", x.dtype());
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.raw_data());
    T* op = static_cast<T*>(out.raw_data());
    const T zero = from_double<T>(0.0);
    const int64_t M = s.r, N = s.i, rows = s.o * M;
    const int64_t kk = std::clamp<int64_t>(k, -M - 1, N + 1);  // beyond this every k gives the same mask
#pragma omp parallel for if (rows * N > kParallelGrain)
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t i = row % M;
      // Columns [keep0, keep1) are kept: lower keeps j <= i + k, upper keeps j >= i + k.
      const int64_t keep0 = upper ? std::clamp<int64_t>(i + kk, 0, N) : 0;
      const int64_t keep1 = upper ? N : std::clamp<int64_t>(i + kk + 1, 0, N);
      const T* src = xp + row * N;
      T* dst = op + row * N;
      for (int64_t j = 0; j < keep0; ++j) dst[j] = zero;
      for (int64_t j = keep0; j < keep1; ++j) dst[j] = src[j];
      for (int64_t j = keep1; j < N; ++j) dst[j] = zero;
    }
  });
}

}  // namespace hh
