// Vectorized f32 transcendental helpers on contiguous arrays (Eigen packet math), shared by the
// elementwise and softmax kernels.
#pragma once
#include <Eigen/Core>
#include <cstdint>
#include <type_traits>

namespace hh::vec {

using ArrF = Eigen::Array<float, Eigen::Dynamic, 1>;
using CMapF = Eigen::Map<const ArrF>;
using MapF = Eigen::Map<ArrF>;

// exp of an Eigen f32 or f64 array expression, on Eigen's packet exp. Eigen's exp clamps its input
// (at about -88.38 for f32), so it returns a tiny nonzero value for -inf and other inputs far below
// it; inputs below `lo` (-88 for f32, -708 for f64: where exp is denormal or 0 anyway) become
// exactly 0. NaN stays NaN. The cut is a product with min(1, max(0, x - lo)·1e30), which is 0
// below lo and 1 above it (x - lo is then at least one ulp of lo, times 1e30 > 1): all packet
// ops. (x < lo).select(0, exp(x)) says the same, but Eigen 3.4 evaluates select() one element at
// a time through libm, which made it 7x slower: 13% of a GPT training step.
template <class Expr>
auto exp(const Expr& x) {
  using S = typename Expr::Scalar;
  const S lo = std::is_same<S, float>::value ? S(-88) : S(-708);
  return x.exp() * ((x - lo).max(S(0)) * S(1e30)).min(S(1));
}

}  // namespace hh::vec
