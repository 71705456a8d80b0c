// Unary elementwise functors: one struct per UnaryOp with the forward value and the fused
// derivative, shared by the CPU loops (core/cpu/cpu_elementwise.cpp) and the CUDA kernels, so
// both backends compute the same formulas. Each functor has
//   template <class T> static T fwd(T x, const UnaryParams& p);            // y = f(x)
//   template <class T> static T bwd(T x, T y, T gy, const UnaryParams& p); // gx = gy * f'(x)
//   static constexpr bool kUsesX, kUsesY;  // which of x, y bwd reads (the others may be anything)
// T is float or double. visit_unary(op, f) calls f(Functor{}) on the host, outside any loop.
#pragma once
#include <math.h>  // ::expf, ::erff, ... in the global namespace (host and CUDA)

#include <cmath>

#include "core/backend.h"
#include "core/dtype.h"

namespace hh {

// Overloads that pick the float or double libm function explicitly (host and CUDA device).
namespace umath {
HH_HOST_DEVICE inline float exp(float x) { return ::expf(x); }
HH_HOST_DEVICE inline double exp(double x) { return ::exp(x); }
HH_HOST_DEVICE inline float expm1(float x) { return ::expm1f(x); }
HH_HOST_DEVICE inline double expm1(double x) { return ::expm1(x); }
HH_HOST_DEVICE inline float log(float x) { return ::logf(x); }
HH_HOST_DEVICE inline double log(double x) { return ::log(x); }
HH_HOST_DEVICE inline float log1p(float x) { return ::log1pf(x); }
HH_HOST_DEVICE inline double log1p(double x) { return ::log1p(x); }
HH_HOST_DEVICE inline float sqrt(float x) { return ::sqrtf(x); }
HH_HOST_DEVICE inline double sqrt(double x) { return ::sqrt(x); }
HH_HOST_DEVICE inline float sin(float x) { return ::sinf(x); }
HH_HOST_DEVICE inline double sin(double x) { return ::sin(x); }
HH_HOST_DEVICE inline float cos(float x) { return ::cosf(x); }
HH_HOST_DEVICE inline double cos(double x) { return ::cos(x); }
HH_HOST_DEVICE inline float tanh(float x) { return ::tanhf(x); }
HH_HOST_DEVICE inline double tanh(double x) { return ::tanh(x); }
HH_HOST_DEVICE inline float erf(float x) { return ::erff(x); }
HH_HOST_DEVICE inline double erf(double x) { return ::erf(x); }
HH_HOST_DEVICE inline float fabs(float x) { return ::fabsf(x); }
HH_HOST_DEVICE inline double fabs(double x) { return ::fabs(x); }
HH_HOST_DEVICE inline float pow(float x, float e) { return ::powf(x, e); }
HH_HOST_DEVICE inline double pow(double x, double e) { return ::pow(x, e); }
}  // namespace umath

namespace unary {

// Numerically stable logistic function: exp(-|x|) never overflows.
template <class T>
HH_HOST_DEVICE inline T stable_sigmoid(T x) {
  T e = umath::exp(-umath::fabs(x));
  T r = T(1) / (T(1) + e);
  return x >= T(0) ? r : e * r;
}

template <class T>
HH_HOST_DEVICE inline T sign_of(T x) {
  return static_cast<T>((T(0) < x) - (x < T(0)));
}

struct Neg {
  static constexpr bool kUsesX = false, kUsesY = false;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams&) { return -x; }
  template <class T> HH_HOST_DEVICE static T bwd(T, T, T gy, const UnaryParams&) { return -gy; }
};

struct Abs {  // gradient sign(x), 0 at 0 (as torch)
  static constexpr bool kUsesX = true, kUsesY = false;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams&) { return umath::fabs(x); }
  template <class T> HH_HOST_DEVICE static T bwd(T x, T, T gy, const UnaryParams&) { return gy * sign_of(x); }
};

struct Exp {
  static constexpr bool kUsesX = false, kUsesY = true;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams&) { return umath::exp(x); }
  template <class T> HH_HOST_DEVICE static T bwd(T, T y, T gy, const UnaryParams&) { return gy * y; }
};

struct Log {
  static constexpr bool kUsesX = true, kUsesY = false;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams&) { return umath::log(x); }
  template <class T> HH_HOST_DEVICE static T bwd(T x, T, T gy, const UnaryParams&) { return gy / x; }
};

struct Log1p {  // log1p keeps precision for |x| << 1
  static constexpr bool kUsesX = true, kUsesY = false;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams&) { return umath::log1p(x); }
  template <class T> HH_HOST_DEVICE static T bwd(T x, T, T gy, const UnaryParams&) { return gy / (T(1) + x); }
};

struct Sqrt {
  static constexpr bool kUsesX = false, kUsesY = true;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams&) { return umath::sqrt(x); }
  template <class T> HH_HOST_DEVICE static T bwd(T, T y, T gy, const UnaryParams&) { return gy / (T(2) * y); }
};

struct Rsqrt {  // y = x^(-1/2), dy/dx = -y^3 / 2
  static constexpr bool kUsesX = false, kUsesY = true;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams&) { return T(1) / umath::sqrt(x); }
  template <class T> HH_HOST_DEVICE static T bwd(T, T y, T gy, const UnaryParams&) {
    return gy * T(-0.5) * y * y * y;
  }
};

struct Square {
  static constexpr bool kUsesX = true, kUsesY = false;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams&) { return x * x; }
  template <class T> HH_HOST_DEVICE static T bwd(T x, T, T gy, const UnaryParams&) { return gy * T(2) * x; }
};

struct Sin {
  static constexpr bool kUsesX = true, kUsesY = false;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams&) { return umath::sin(x); }
  template <class T> HH_HOST_DEVICE static T bwd(T x, T, T gy, const UnaryParams&) { return gy * umath::cos(x); }
};

struct Cos {
  static constexpr bool kUsesX = true, kUsesY = false;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams&) { return umath::cos(x); }
  template <class T> HH_HOST_DEVICE static T bwd(T x, T, T gy, const UnaryParams&) { return -gy * umath::sin(x); }
};

struct Tanh {
  static constexpr bool kUsesX = false, kUsesY = true;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams&) { return umath::tanh(x); }
  template <class T> HH_HOST_DEVICE static T bwd(T, T y, T gy, const UnaryParams&) { return gy * (T(1) - y * y); }
};

struct Sigmoid {
  static constexpr bool kUsesX = false, kUsesY = true;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams&) { return stable_sigmoid(x); }
  template <class T> HH_HOST_DEVICE static T bwd(T, T y, T gy, const UnaryParams&) { return gy * y * (T(1) - y); }
};

struct Relu {  // NaN propagates; gradient 0 at x <= 0
  static constexpr bool kUsesX = true, kUsesY = false;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams&) { return x < T(0) ? T(0) : x; }
  template <class T> HH_HOST_DEVICE static T bwd(T x, T, T gy, const UnaryParams&) { return x > T(0) ? gy : T(0); }
};

struct Elu {  // p.a = alpha: x > 0 ? x : alpha * (exp(x) - 1)
  static constexpr bool kUsesX = true, kUsesY = false;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams& p) {
    return x > T(0) ? x : static_cast<T>(p.a) * umath::expm1(x);
  }
  template <class T> HH_HOST_DEVICE static T bwd(T x, T, T gy, const UnaryParams& p) {
    return x > T(0) ? gy : gy * static_cast<T>(p.a) * umath::exp(x);
  }
};

struct GeluErf {  // x * Phi(x), Phi the standard normal CDF
  static constexpr bool kUsesX = true, kUsesY = false;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams&) {
    return T(0.5) * x * (T(1) + umath::erf(x * T(0.70710678118654752440)));
  }
  template <class T> HH_HOST_DEVICE static T bwd(T x, T, T gy, const UnaryParams&) {
    T cdf = T(0.5) * (T(1) + umath::erf(x * T(0.70710678118654752440)));
    T pdf = T(0.39894228040143267794) * umath::exp(T(-0.5) * x * x);
    return gy * (cdf + x * pdf);
  }
};

struct GeluTanh {  // PyTorch's approximate="tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  static constexpr bool kUsesX = true, kUsesY = false;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams&) {
    T inner = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
    return T(0.5) * x * (T(1) + umath::tanh(inner));
  }
  template <class T> HH_HOST_DEVICE static T bwd(T x, T, T gy, const UnaryParams&) {
    T inner = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
    T t = umath::tanh(inner);
    T dinner = T(0.79788456080286535588) * (T(1) + T(3 * 0.044715) * x * x);
    return gy * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * dinner);
  }
};

struct Silu {  // x * sigmoid(x)
  static constexpr bool kUsesX = true, kUsesY = false;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams&) { return x * stable_sigmoid(x); }
  template <class T> HH_HOST_DEVICE static T bwd(T x, T, T gy, const UnaryParams&) {
    T s = stable_sigmoid(x);
    return gy * s * (T(1) + x * (T(1) - s));
  }
};

// p.a = beta, p.b = threshold: log(1 + exp(beta x)) / beta, and x itself where beta x > threshold
// (as torch). max(z,0) + log1p(exp(-|z|)) is the overflow-free form of log(1 + exp(z)).
struct Softplus {
  static constexpr bool kUsesX = true, kUsesY = false;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams& p) {
    T beta = static_cast<T>(p.a), z = beta * x;
    if (z > static_cast<T>(p.b)) return x;
    return ((z > T(0) ? z : T(0)) + umath::log1p(umath::exp(-umath::fabs(z)))) / beta;
  }
  template <class T> HH_HOST_DEVICE static T bwd(T x, T, T gy, const UnaryParams& p) {
    T z = static_cast<T>(p.a) * x;
    return z > static_cast<T>(p.b) ? gy : gy * stable_sigmoid(z);
  }
};

struct Clamp {  // p.a = lo, p.b = hi; NaN propagates; gradient 1 on [lo, hi], 0 outside
  static constexpr bool kUsesX = true, kUsesY = false;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams& p) {
    T lo = static_cast<T>(p.a), hi = static_cast<T>(p.b);
    return x < lo ? lo : (x > hi ? hi : x);
  }
  template <class T> HH_HOST_DEVICE static T bwd(T x, T, T gy, const UnaryParams& p) {
    return ((x >= static_cast<T>(p.a)) & (x <= static_cast<T>(p.b))) ? gy : T(0);  // & keeps it branch-free
  }
};

struct PowScalar {  // p.a = exponent; exponent 0 has gradient 0 everywhere (as torch)
  static constexpr bool kUsesX = true, kUsesY = false;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams& p) {
    return umath::pow(x, static_cast<T>(p.a));
  }
  template <class T> HH_HOST_DEVICE static T bwd(T x, T, T gy, const UnaryParams& p) {
    T e = static_cast<T>(p.a);
    return e == T(0) ? T(0) : gy * e * umath::pow(x, e - T(1));
  }
};

struct AddScalar {  // p.a = the scalar
  static constexpr bool kUsesX = false, kUsesY = false;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams& p) { return x + static_cast<T>(p.a); }
  template <class T> HH_HOST_DEVICE static T bwd(T, T, T gy, const UnaryParams&) { return gy; }
};

struct MulScalar {  // p.a = the scalar
  static constexpr bool kUsesX = false, kUsesY = false;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams& p) { return x * static_cast<T>(p.a); }
  template <class T> HH_HOST_DEVICE static T bwd(T, T, T gy, const UnaryParams& p) {
    return gy * static_cast<T>(p.a);
  }
};

struct RdivScalar {  // p.a = the numerator: a / x
  static constexpr bool kUsesX = true, kUsesY = false;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams& p) { return static_cast<T>(p.a) / x; }
  template <class T> HH_HOST_DEVICE static T bwd(T x, T, T gy, const UnaryParams& p) {
    return -gy * static_cast<T>(p.a) / (x * x);
  }
};

struct Sign {  // -1, 0, 1; zero gradient
  static constexpr bool kUsesX = false, kUsesY = false;
  template <class T> HH_HOST_DEVICE static T fwd(T x, const UnaryParams&) { return sign_of(x); }
  template <class T> HH_HOST_DEVICE static T bwd(T, T, T, const UnaryParams&) { return T(0); }
};

}  // namespace unary

// Calls f(Functor{}) for `op` (host side: one switch per kernel launch, never per element).
template <class F>
void visit_unary(UnaryOp op, F&& f) {
  using namespace unary;
  switch (op) {
    case UnaryOp::neg: return f(Neg{});
    case UnaryOp::abs: return f(Abs{});
    case UnaryOp::exp: return f(Exp{});
    case UnaryOp::log: return f(Log{});
    case UnaryOp::log1p: return f(Log1p{});
    case UnaryOp::sqrt: return f(Sqrt{});
    case UnaryOp::rsqrt: return f(Rsqrt{});
    case UnaryOp::square: return f(Square{});
    case UnaryOp::sin: return f(Sin{});
    case UnaryOp::cos: return f(Cos{});
    case UnaryOp::tanh: return f(Tanh{});
    case UnaryOp::sigmoid: return f(Sigmoid{});
    case UnaryOp::relu: return f(Relu{});
    case UnaryOp::elu: return f(Elu{});
    case UnaryOp::gelu_erf: return f(GeluErf{});
    case UnaryOp::gelu_tanh: return f(GeluTanh{});
    case UnaryOp::silu: return f(Silu{});
    case UnaryOp::softplus: return f(Softplus{});
    case UnaryOp::clamp: return f(Clamp{});
    case UnaryOp::pow_scalar: return f(PowScalar{});
    case UnaryOp::add_scalar: return f(AddScalar{});
    case UnaryOp::mul_scalar: return f(MulScalar{});
    case UnaryOp::rdiv_scalar: return f(RdivScalar{});
    case UnaryOp::sign: return f(Sign{});
  }
  fail("visit_unary: unknown UnaryOp");
}

// Which saved tensors the backward of `op` reads, so an op saves only those.
struct UnaryUses {
  bool x = false, y = false;
};
inline UnaryUses unary_uses(UnaryOp op) {
  UnaryUses u;
  visit_unary(op, [&](auto f) {
    using F = decltype(f);
    u = UnaryUses{F::kUsesX, F::kUsesY};
  });
  return u;
}

}  // namespace hh
