// Elementwise ops: unary math and activations, binary arithmetic with broadcasting (and scalar
// variants), comparisons, where and masked_fill. Float ops run in f32/f64.
#pragma once
#include <string>

#include "core/tensor.h"

namespace hh {

Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor square(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor elu(const Tensor& x, double alpha = 1.0);
// approximate: "none" (erf) or "tanh", as torch.nn.functional.gelu.
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor silu(const Tensor& x);
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor clamp(const Tensor& x, double lo, double hi);
Tensor pow(const Tensor& x, double exponent);
Tensor pow(double base, const Tensor& x);
Tensor sign(const Tensor& x);  // not differentiable (zero gradient)

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor sub(double a, const Tensor& b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor div(double a, const Tensor& b);
Tensor maximum(const Tensor& a, double b);
Tensor minimum(const Tensor& a, double b);

// Comparisons return bool tensors and are not differentiable.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);  // broadcasts all three
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(double a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
inline Tensor operator/(double a, const Tensor& b) { return div(a, b); }

}  // namespace hh
