// CUDA binary arithmetic / comparisons and where, on strided operands (stride 0 = broadcast)
// with a contiguous output. Same functor semantics as core/cpu/cpu_elementwise.cpp: float
// maximum/minimum propagate NaN, integer division truncates and gives 0 for a zero divisor,
// integer pow is exact.
#include <type_traits>

#include "core/unary_functors.h"
#include "cuda/cuda_common.cuh"

namespace hh {
namespace cuda {
namespace {

template <class T>
__device__ __forceinline__ T int_pow(T base, T e) {
  if (e < 0) return base == 1 ? T(1) : base == -1 ? (e % 2 ? T(-1) : T(1)) : T(0);
  using U = std::make_unsigned_t<T>;
  U result = 1, b = static_cast<U>(base);  // unsigned: overflow wraps instead of being UB
  for (T k = e; k > 0; k >>= 1) {
    if (k & 1) result *= b;
    b *= b;
  }
  return static_cast<T>(result);
}

template <class T>
__device__ __forceinline__ bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

struct AddF { template <class T> __device__ static T apply(T a, T b) { return static_cast<T>(a + b); } };
struct SubF { template <class T> __device__ static T apply(T a, T b) { return static_cast<T>(a - b); } };
struct MulF { template <class T> __device__ static T apply(T a, T b) { return static_cast<T>(a * b); } };
struct DivF {
  template <class T> __device__ static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return a / b;
    } else {
      if (b == 0) return T(0);
      if (b == -1) return static_cast<T>(0 - static_cast<std::make_unsigned_t<T>>(a));  // no INT_MIN / -1 trap
      return static_cast<T>(a / b);
    }
  }
};
struct PowF {
  template <class T> __device__ static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      return umath::pow(a, b);
    else
      return int_pow(a, b);
  }
};
struct MaxF { template <class T> __device__ static T apply(T a, T b) { return (a > b || is_nan(a)) ? a : b; } };
struct MinF { template <class T> __device__ static T apply(T a, T b) { return (a < b || is_nan(a)) ? a : b; } };
struct EqF { template <class T> __device__ static bool apply(T a, T b) { return a == b; } };
struct NeF { template <class T> __device__ static bool apply(T a, T b) { return a != b; } };
struct LtF { template <class T> __device__ static bool apply(T a, T b) { return a < b; } };
struct LeF { template <class T> __device__ static bool apply(T a, T b) { return a <= b; } };
struct GtF { template <class T> __device__ static bool apply(T a, T b) { return a > b; } };
struct GeF { template <class T> __device__ static bool apply(T a, T b) { return a >= b; } };

// Operand layout, decided once per launch: the common cases skip the offset arithmetic.
enum class Layout : int { contiguous, a_scalar, b_scalar, strided };

Layout layout_of(const OffsetCalc<3>& c) {
  if (c.ndim == 1 && c.strides[0][0] == 1) {
    const int64_t sa = c.strides[0][1], sb = c.strides[0][2];
    if (sa == 1 && sb == 1) return Layout::contiguous;
    if (sa == 0 && sb == 1) return Layout::a_scalar;
    if (sa == 1 && sb == 0) return Layout::b_scalar;
  }
  return Layout::strided;
}

// out (contiguous) = Op(a, b); O is T for arithmetic, bool for comparisons.
template <class Op, typename T, typename O>
__global__ void binary_kernel(const T* a, const T* b, O* out, OffsetCalc<3> calc, Layout layout, int64_t n) {
  const int64_t start = global_thread(), step = grid_threads();
  switch (layout) {
    case Layout::contiguous:
      for (int64_t i = start; i < n; i += step) out[i] = Op::apply(a[i], b[i]);
      return;
    case Layout::a_scalar: {
      const T av = a[0];
      for (int64_t i = start; i < n; i += step) out[i] = Op::apply(av, b[i]);
      return;
    }
    case Layout::b_scalar: {
      const T bv = b[0];
      for (int64_t i = start; i < n; i += step) out[i] = Op::apply(a[i], bv);
      return;
    }
    case Layout::strided:
      for (int64_t i = start; i < n; i += step) {
        int64_t off[3];
        calc.get(i, off);
        out[i] = Op::apply(a[off[1]], b[off[2]]);
      }
      return;
  }
}

template <class Op, typename T, typename O>
void binary_cuda(const T* a, const T* b, O* out, const OffsetCalc<3>& calc, int64_t n, cudaStream_t stream) {
  binary_kernel<Op, T, O><<<blocks_for(n), kBlock, 0, stream>>>(a, b, out, calc, layout_of(calc), n);
  check_launch("binary");
}

template <typename T>
void binary_arith(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, const OffsetCalc<3>& calc,
                  cudaStream_t s) {
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  const int64_t n = out.numel();
  switch (op) {
    case BinaryOp::add: return binary_cuda<AddF>(pa, pb, po, calc, n, s);
    case BinaryOp::sub: return binary_cuda<SubF>(pa, pb, po, calc, n, s);
    case BinaryOp::mul: return binary_cuda<MulF>(pa, pb, po, calc, n, s);
    case BinaryOp::div: return binary_cuda<DivF>(pa, pb, po, calc, n, s);
    case BinaryOp::pow: return binary_cuda<PowF>(pa, pb, po, calc, n, s);
    case BinaryOp::maximum: return binary_cuda<MaxF>(pa, pb, po, calc, n, s);
    case BinaryOp::minimum: return binary_cuda<MinF>(pa, pb, po, calc, n, s);
    default: fail("cuda binary: not an arithmetic op");
  }
}

template <typename T>
void binary_compare(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, const OffsetCalc<3>& calc,
                    cudaStream_t s) {
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  bool* po = static_cast<bool*>(out.raw_data());
  const int64_t n = out.numel();
  switch (op) {
    case BinaryOp::eq: return binary_cuda<EqF>(pa, pb, po, calc, n, s);
    case BinaryOp::ne: return binary_cuda<NeF>(pa, pb, po, calc, n, s);
    case BinaryOp::lt: return binary_cuda<LtF>(pa, pb, po, calc, n, s);
    case BinaryOp::le: return binary_cuda<LeF>(pa, pb, po, calc, n, s);
    case BinaryOp::gt: return binary_cuda<GtF>(pa, pb, po, calc, n, s);
    case BinaryOp::ge: return binary_cuda<GeF>(pa, pb, po, calc, n, s);
    default: fail("cuda binary: not a comparison");
  }
}

// ---- where: a selection, so only the element size matters (U is an unsigned of that size) ----

template <typename U>
__global__ void where_kernel(const uint8_t* cond, const U* a, const U* b, U* out, OffsetCalc<4> calc, bool contiguous,
                             int64_t n) {
  const int64_t start = global_thread(), step = grid_threads();
  if (contiguous) {
    for (int64_t i = start; i < n; i += step) out[i] = cond[i] ? a[i] : b[i];
    return;
  }
  for (int64_t i = start; i < n; i += step) {
    int64_t off[4];
    calc.get(i, off);
    out[i] = cond[off[1]] ? a[off[2]] : b[off[3]];
  }
}

template <typename U>
void where_cuda(const uint8_t* cond, const U* a, const U* b, U* out, const OffsetCalc<4>& calc, int64_t n,
                cudaStream_t stream) {
  where_kernel<U><<<blocks_for(n), kBlock, 0, stream>>>(cond, a, b, out, calc, calc.contiguous(), n);
  check_launch("where");
}

}  // namespace
}  // namespace cuda

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  cuda::check_device(*this, "binary", {&a, &b, &out});
  HH_CHECK(a.shape() == out.shape() && b.shape() == out.shape() && a.dtype() == b.dtype(),
           "cuda binary: operands ", a.dtype(), " ", a.shape(), " and ", b.dtype(), " ", b.shape(),
           " must have the output shape ", out.shape(), " and one dtype");
  HH_CHECK(out.is_contiguous(), "cuda binary: output must be contiguous, got strides ", out.strides());
  if (out.numel() == 0) return;
  cuda::DeviceGuard guard(index_);
  const auto calc = cuda::make_offset_calc<3>({&out, &a, &b}, "binary");
  if (is_comparison(op)) {
    HH_CHECK(out.dtype() == DType::boolean, "cuda binary: comparisons write bool, got ", out.dtype());
    switch (a.dtype()) {
      case DType::f32: return cuda::binary_compare<float>(op, a, b, out, calc, stream_);
      case DType::f64: return cuda::binary_compare<double>(op, a, b, out, calc, stream_);
      case DType::i32: return cuda::binary_compare<int32_t>(op, a, b, out, calc, stream_);
      case DType::i64: return cuda::binary_compare<int64_t>(op, a, b, out, calc, stream_);
      case DType::u8: return cuda::binary_compare<uint8_t>(op, a, b, out, calc, stream_);
      case DType::boolean: return cuda::binary_compare<bool>(op, a, b, out, calc, stream_);
      default: fail(str("cuda binary: comparison of ", a.dtype(), " tensors is not supported (cast to f32 first)"));
    }
  }
  HH_CHECK(out.dtype() == a.dtype(), "cuda binary: output dtype ", out.dtype(), " differs from inputs ", a.dtype());
  switch (a.dtype()) {
    case DType::f32: return cuda::binary_arith<float>(op, a, b, out, calc, stream_);
    case DType::f64: return cuda::binary_arith<double>(op, a, b, out, calc, stream_);
    case DType::i32: return cuda::binary_arith<int32_t>(op, a, b, out, calc, stream_);
    case DType::i64: return cuda::binary_arith<int64_t>(op, a, b, out, calc, stream_);
    default: fail(str("cuda binary: arithmetic on ", a.dtype(), " tensors is not supported"));
  }
}

void CudaBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  cuda::check_device(*this, "where", {&cond, &a, &b, &out});
  HH_CHECK(cond.dtype() == DType::boolean, "cuda where: condition must be bool, got ", cond.dtype());
  HH_CHECK(cond.shape() == out.shape() && a.shape() == out.shape() && b.shape() == out.shape(),
           "cuda where: operands ", cond.shape(), ", ", a.shape(), ", ", b.shape(), " must have the output shape ",
           out.shape());
  HH_CHECK(a.dtype() == out.dtype() && b.dtype() == out.dtype(), "cuda where: values ", a.dtype(), " and ",
           b.dtype(), " must have the output dtype ", out.dtype());
  HH_CHECK(out.is_contiguous(), "cuda where: output must be contiguous, got strides ", out.strides());
  const int64_t n = out.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(index_);
  const auto calc = cuda::make_offset_calc<4>({&out, &cond, &a, &b}, "where");
  const auto* c = static_cast<const uint8_t*>(cond.raw_data());
  auto run = [&](auto tag) {
    using U = typename decltype(tag)::type;
    cuda::where_cuda<U>(c, static_cast<const U*>(a.raw_data()), static_cast<const U*>(b.raw_data()),
                        static_cast<U*>(out.raw_data()), calc, n, stream_);
  };
  switch (itemsize(out.dtype())) {
    case 1: return run(type_tag<uint8_t>{});
    case 2: return run(type_tag<uint16_t>{});
    case 4: return run(type_tag<uint32_t>{});
    case 8: return run(type_tag<uint64_t>{});
    default: fail(str("cuda where: unsupported element size for ", out.dtype()));
  }
}

}  // namespace hh
