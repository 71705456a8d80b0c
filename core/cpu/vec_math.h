// Vectorized f32 transcendental helpers on contiguous arrays (Eigen packet math), shared by the
// elementwise and softmax kernels.
#pragma once
#include <Eigen/Core>
#include <cstdint>

namespace hh::vec {

using ArrF = Eigen::Array<float, Eigen::Dynamic, 1>;
using CMapF = Eigen::Map<const ArrF>;
using MapF = Eigen::Map<ArrF>;

// exp of an Eigen f32 array expression. Eigen's exp clamps its input at about -88.38, so it
// returns a tiny nonzero value for -inf and other inputs far below it; those become exactly 0
// (as libm's are, or denormal). NaN stays NaN.
template <class Expr>
auto exp(const Expr& x) {
  return (x < -88.0f).select(0.0f, x.exp());
}

}  // namespace hh::vec
