// CPU elementwise kernels: unary (forward and fused backward, contiguous), binary arithmetic and
// comparisons (strided / broadcast operands), and where. The op and dtype are dispatched once per
// call to a loop instantiated for that functor and type, so inner loops are plain and vectorize.
#include <Eigen/Core>
#include <algorithm>
#include <type_traits>
#include <unsupported/Eigen/SpecialFunctions>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/strided.h"
#include "core/cpu/vec_math.h"
#include "core/unary_functors.h"

namespace hh {

namespace {

// ---------------------------------------------------------------------------------------------
// Unary: x, y, gy, gx contiguous, f32/f64.

// f32 fast paths for the transcendental ops that dominate training profiles: exp and the erf GELU
// through Eigen's vectorized exp/erf (within a few ulp of libm, which evaluates them one element at
// a time). Same formulas as the functors in core/unary_functors.h.
using vec::CMapF;
using vec::MapF;

// forward(x, y, n) when kFwd; backward(x, gy, gx, n) when kBwd.
template <class F>
struct VecF32 {
  static constexpr bool kFwd = false, kBwd = false;
};
template <>
struct VecF32<unary::Exp> {
  static constexpr bool kFwd = true, kBwd = false;  // the generic backward (gy * y) is one multiply
  static void forward(const float* x, float* y, int64_t n) { MapF(y, n) = vec::exp(CMapF(x, n)); }
};
template <>
struct VecF32<unary::GeluErf> {
  static constexpr bool kFwd = true, kBwd = true;
  static void forward(const float* x, float* y, int64_t n) {
    CMapF X(x, n);
    MapF(y, n) = 0.5f * X * (1.0f + (X * 0.70710678118654752f).erf());
  }
  static void backward(const float* x, const float* gy, float* gx, int64_t n) {
    CMapF X(x, n);
    MapF(gx, n) = CMapF(gy, n) * (0.5f * (1.0f + (X * 0.70710678118654752f).erf()) +
                                  X * 0.39894228040143267794f * vec::exp(-0.5f * X.square()));
  }
};

// Runs body(i0, len) over [0, n) in blocks, in parallel when n is large.
template <class Body>
void for_blocks(int64_t n, Body body) {
  constexpr int64_t kBlock = 4096;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t b = 0; b < blocks; ++b) body(b * kBlock, std::min(kBlock, n - b * kBlock));
}

template <class F, class T>
void unary_forward_loop(const T* x, T* y, int64_t n, const UnaryParams& p) {
  if constexpr (std::is_same_v<T, float> && VecF32<F>::kFwd) {
    for_blocks(n, [&](int64_t i, int64_t len) { VecF32<F>::forward(x + i, y + i, len); });
  } else {
#pragma omp parallel for if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) y[i] = F::fwd(x[i], p);
  }
}

template <class F, class T>
void unary_backward_loop(const T* x, const T* y, const T* gy, T* gx, int64_t n, const UnaryParams& p) {
  if constexpr (std::is_same_v<T, float> && VecF32<F>::kBwd) {
    for_blocks(n, [&](int64_t i, int64_t len) { VecF32<F>::backward(x + i, gy + i, gx + i, len); });
  } else {
#pragma omp parallel for if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) gx[i] = F::bwd(x[i], y[i], gy[i], p);
  }
}

void check_unary_operand(const char* what, const Tensor& t, const Tensor& like) {
  HH_CHECK(t.is_contiguous() && t.shape() == like.shape() && t.dtype() == like.dtype(), "cpu unary: ", what,
           " must be contiguous ", like.dtype(), " of shape ", like.shape(), ", got ", t.dtype(), " ", t.shape(),
           t.is_contiguous() ? "" : " (non-contiguous)");
}

// ---------------------------------------------------------------------------------------------
// Binary functors. Float maximum/minimum propagate NaN like torch; integer division truncates
// and gives 0 for a zero divisor instead of trapping; integer pow is exact (negative exponents
// give 0 unless |base| is 1).

template <class T>
T int_pow(T base, T e) {
  if (e < 0) return base == 1 ? T(1) : base == -1 ? (e % 2 ? T(-1) : T(1)) : T(0);
  using U = std::make_unsigned_t<T>;
  U result = 1, b = static_cast<U>(base);  // unsigned: overflow wraps instead of being UB
  for (T k = e; k > 0; k >>= 1) {
    if (k & 1) result *= b;
    b *= b;
  }
  return static_cast<T>(result);
}

struct AddF { template <class T> static T apply(T a, T b) { return static_cast<T>(a + b); } };
struct SubF { template <class T> static T apply(T a, T b) { return static_cast<T>(a - b); } };
struct MulF { template <class T> static T apply(T a, T b) { return static_cast<T>(a * b); } };
struct DivF {
  template <class T> static T apply(T a, T b) {
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
  template <class T> static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      return umath::pow(a, b);
    else
      return int_pow(a, b);
  }
};
template <class T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}
struct MaxF { template <class T> static T apply(T a, T b) { return (a > b || is_nan(a)) ? a : b; } };
struct MinF { template <class T> static T apply(T a, T b) { return (a < b || is_nan(a)) ? a : b; } };
struct EqF { template <class T> static bool apply(T a, T b) { return a == b; } };
struct NeF { template <class T> static bool apply(T a, T b) { return a != b; } };
struct LtF { template <class T> static bool apply(T a, T b) { return a < b; } };
struct LeF { template <class T> static bool apply(T a, T b) { return a <= b; } };
struct GtF { template <class T> static bool apply(T a, T b) { return a > b; } };
struct GeF { template <class T> static bool apply(T a, T b) { return a >= b; } };

// Runs f(ptrs, strides, n) over all elements of `loop` in row-major order, split into chunks of
// whole or partial runs so that even one long run (everything contiguous) uses every thread.
template <int N, class F>
void parallel_runs(const StridedLoop<N>& loop, F&& f) {
  const int64_t inner = loop.inner(), total = loop.outer() * inner;
  if (total == 0) return;
  constexpr int64_t kChunk = 16384;
  const int64_t nchunks = (total + kChunk - 1) / kChunk;
#pragma omp parallel for if (total > kParallelGrain)
  for (int64_t c = 0; c < nchunks; ++c) {
    int64_t pos = c * kChunk;
    const int64_t end = std::min(total, pos + kChunk);
    while (pos < end) {
      const int64_t o = pos / inner, i0 = pos % inner, len = std::min(inner - i0, end - pos);
      loop.run(o, [&](std::array<char*, N> p, const std::array<int64_t, N>& s, int64_t) {
        for (int k = 0; k < N; ++k) p[k] += i0 * s[k] * loop.itemsizes[k];
        f(p, s, len);
      });
      pos += len;
    }
  }
}

// out = Op(a, b); O is T for arithmetic, bool for comparisons.
template <class Op, class T, class O>
void binary_loop(const Tensor& a, const Tensor& b, const Tensor& out) {
  StridedLoop<3> loop({&out, &a, &b});
  parallel_runs(loop, [](const std::array<char*, 3>& p, const std::array<int64_t, 3>& s, int64_t n) {
    O* o = reinterpret_cast<O*>(p[0]);
    const T* x = reinterpret_cast<const T*>(p[1]);
    const T* y = reinterpret_cast<const T*>(p[2]);
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = Op::apply(x[i], y[i]);
    } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {  // tensor op scalar
      const T yv = y[0];
      for (int64_t i = 0; i < n; ++i) o[i] = Op::apply(x[i], yv);
    } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {  // scalar op tensor
      const T xv = x[0];
      for (int64_t i = 0; i < n; ++i) o[i] = Op::apply(xv, y[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * s[0]] = Op::apply(x[i * s[1]], y[i * s[2]]);
    }
  });
}

template <class T>
void binary_arith(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  switch (op) {
    case BinaryOp::add: return binary_loop<AddF, T, T>(a, b, out);
    case BinaryOp::sub: return binary_loop<SubF, T, T>(a, b, out);
    case BinaryOp::mul: return binary_loop<MulF, T, T>(a, b, out);
    case BinaryOp::div: return binary_loop<DivF, T, T>(a, b, out);
    case BinaryOp::pow: return binary_loop<PowF, T, T>(a, b, out);
    case BinaryOp::maximum: return binary_loop<MaxF, T, T>(a, b, out);
    case BinaryOp::minimum: return binary_loop<MinF, T, T>(a, b, out);
    default: fail("cpu binary: not an arithmetic op");
  }
}

template <class T>
void binary_compare(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  switch (op) {
    case BinaryOp::eq: return binary_loop<EqF, T, bool>(a, b, out);
    case BinaryOp::ne: return binary_loop<NeF, T, bool>(a, b, out);
    case BinaryOp::lt: return binary_loop<LtF, T, bool>(a, b, out);
    case BinaryOp::le: return binary_loop<LeF, T, bool>(a, b, out);
    case BinaryOp::gt: return binary_loop<GtF, T, bool>(a, b, out);
    case BinaryOp::ge: return binary_loop<GeF, T, bool>(a, b, out);
    default: fail("cpu binary: not a comparison");
  }
}

// out = cond ? a : b for any element type (selection only, so bf16/f16 need no cast).
template <class T>
void where_loop(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  StridedLoop<4> loop({&out, &cond, &a, &b});
  parallel_runs(loop, [](const std::array<char*, 4>& p, const std::array<int64_t, 4>& s, int64_t n) {
    T* o = reinterpret_cast<T*>(p[0]);
    const uint8_t* c = reinterpret_cast<const uint8_t*>(p[1]);  // bool storage, read as bytes
    const T* x = reinterpret_cast<const T*>(p[2]);
    const T* y = reinterpret_cast<const T*>(p[3]);
    if (s[0] == 1 && s[1] == 1 && s[2] == 1 && s[3] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? x[i] : y[i];
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * s[0]] = c[i * s[1]] ? x[i * s[2]] : y[i * s[3]];
    }
  });
}

}  // namespace

void CpuBackend::unary(UnaryOp op, const Tensor& x, const Tensor& y, const UnaryParams& p) {
  check_unary_operand("x", x, y);
  check_unary_operand("y", y, y);
  const int64_t n = x.numel();
  dispatch_float(x.dtype(), "cpu unary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_unary(op, [&](auto f) { unary_forward_loop<decltype(f)>(x.data<T>(), y.data<T>(), n, p); });
  });
}

void CpuBackend::unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy, const Tensor& gx,
                                const UnaryParams& p) {
  for (auto [what, t] : {std::pair<const char*, const Tensor*>{"x", &x}, {"y", &y}, {"gy", &gy}})
    check_unary_operand(what, *t, gx);
  check_unary_operand("gx", gx, gx);
  const int64_t n = gx.numel();
  dispatch_float(gx.dtype(), "cpu unary_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_unary(op, [&](auto f) {
      unary_backward_loop<decltype(f)>(x.data<T>(), y.data<T>(), gy.data<T>(), gx.data<T>(), n, p);
    });
  });
}

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  HH_CHECK(a.shape() == out.shape() && b.shape() == out.shape() && a.dtype() == b.dtype(),
           "cpu binary: operands ", a.dtype(), " ", a.shape(), " and ", b.dtype(), " ", b.shape(),
           " must have the output shape ", out.shape(), " and one dtype");
  if (is_comparison(op)) {
    HH_CHECK(out.dtype() == DType::boolean, "cpu binary: comparisons write bool, got ", out.dtype());
    switch (a.dtype()) {
      case DType::f32: return binary_compare<float>(op, a, b, out);
      case DType::f64: return binary_compare<double>(op, a, b, out);
      case DType::i32: return binary_compare<int32_t>(op, a, b, out);
      case DType::i64: return binary_compare<int64_t>(op, a, b, out);
      case DType::u8: return binary_compare<uint8_t>(op, a, b, out);
      case DType::boolean: return binary_compare<bool>(op, a, b, out);
      default: fail(str("cpu binary: comparison of ", a.dtype(), " tensors is not supported (cast to f32 first)"));
    }
  }
  HH_CHECK(out.dtype() == a.dtype(), "cpu binary: output dtype ", out.dtype(), " differs from inputs ", a.dtype());
  switch (a.dtype()) {
    case DType::f32: return binary_arith<float>(op, a, b, out);
    case DType::f64: return binary_arith<double>(op, a, b, out);
    case DType::i32: return binary_arith<int32_t>(op, a, b, out);
    case DType::i64: return binary_arith<int64_t>(op, a, b, out);
    default: fail(str("cpu binary: arithmetic on ", a.dtype(), " tensors is not supported"));
  }
}

void CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  HH_CHECK(cond.dtype() == DType::boolean, "cpu where: condition must be bool, got ", cond.dtype());
  HH_CHECK(cond.shape() == out.shape() && a.shape() == out.shape() && b.shape() == out.shape(),
           "cpu where: operands ", cond.shape(), ", ", a.shape(), ", ", b.shape(), " must have the output shape ",
           out.shape());
  HH_CHECK(a.dtype() == out.dtype() && b.dtype() == out.dtype(), "cpu where: values ", a.dtype(), " and ",
           b.dtype(), " must have the output dtype ", out.dtype());
  dispatch_all(out.dtype(), [&](auto tag) { where_loop<typename decltype(tag)::type>(cond, a, b, out); });
}

}  // namespace hh
