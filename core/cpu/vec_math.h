// Vectorized f32 transcendental helpers on contiguous arrays (Eigen packet math), shared by the
// elementwise and softmax kernels.
#pragma once
#include <Eigen/Core>
#include <algorithm>
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

// ---- Elementwise expressions blocked by index, never by address ----
//
// Eigen evaluates a dynamic-size expression into an unaligned destination by peeling its first
// elements, up to the first aligned one, through the scalar path (std::exp, a separate multiply and
// add) and the rest through packets (its own exp, fused multiply-adds): which elements are peeled
// depends on the address, so the same input gave different bits when a buffer lay at another
// offset (another heap layout, another machine). A fixed-size block of kBlock elements is
// evaluated from its first element in whole packets, aligned or not, with no peeling; blocked()
// runs an expression over such blocks and the last partial block through zero-padded copies, so
// every element takes the packet path wherever it lies.

// Elements per block: a whole number of f32 packets for SSE (4), AVX (8) and AVX-512 (16).
constexpr int64_t kBlock = 16;
using BlockF = Eigen::Array<float, kBlock, 1>;
using CBlockF = Eigen::Map<const BlockF>;  // unaligned (Map's default)
using MBlockF = Eigen::Map<BlockF>;

// For i in blocks of kBlock over [0, n): body(in, out) with in(k) a CBlockF over ins[k] + i and
// out(k) an MBlockF over outs[k] + i; body assigns every out(k) from in(...) expressions, e.g.
//   vec::blocked(n, {x}, {y}, [](const auto& in, const auto& out) { out(0) = vec::exp(in(0)); });
// Outputs may be inputs too (in place), as each block reads its inputs before it writes.
template <int NIn, int NOut, class Body>
void blocked(int64_t n, const float* const (&ins)[NIn], float* const (&outs)[NOut], const Body& body) {
  int64_t i = 0;
  const auto in = [&](int k) { return CBlockF(ins[k] + i); };
  const auto out = [&](int k) { return MBlockF(outs[k] + i); };
  for (; i + kBlock <= n; i += kBlock) body(in, out);
  const int64_t rest = n - i;
  if (rest == 0) return;
  alignas(64) float tin[NIn][kBlock] = {};
  alignas(64) float tout[NOut][kBlock] = {};
  for (int k = 0; k < NIn; ++k) std::copy(ins[k] + i, ins[k] + n, tin[k]);
  body([&](int k) { return CBlockF(tin[k]); }, [&](int k) { return MBlockF(tout[k]); });
  for (int k = 0; k < NOut; ++k) std::copy(tout[k], tout[k] + rest, outs[k] + i);
}

}  // namespace hh::vec
