// Walks the elements of same-shaped strided tensors in row-major order, one innermost run at a
// time, so kernels get a tight loop with a constant stride per operand (0 for broadcast).
// Dimensions that are contiguous in every operand are merged first.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace hh {

template <int N>
struct StridedLoop {
  Shape shape;                                   // merged shape
  std::array<Strides, N> strides;                // per operand, merged, in elements
  std::array<char*, N> base;                     // byte pointers at element 0
  std::array<int64_t, N> itemsizes;

  explicit StridedLoop(const std::array<const Tensor*, N>& ts) {
    const Shape& s = ts[0]->shape();
    for (int k = 0; k < N; ++k) {
      base[k] = static_cast<char*>(ts[k]->raw_data());
      itemsizes[k] = static_cast<int64_t>(itemsize(ts[k]->dtype()));
    }
    // Drop size-1 dims, then merge dim i into i+1 when every operand is contiguous across them.
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == 1) continue;
      bool merge = !shape.empty();
      for (int k = 0; k < N && merge; ++k) merge = strides[k].back() == ts[k]->strides()[i] * s[i];
      if (merge) {
        shape.back() *= s[i];
        for (int k = 0; k < N; ++k) strides[k].back() = ts[k]->strides()[i];
      } else {
        shape.push_back(s[i]);
        for (int k = 0; k < N; ++k) strides[k].push_back(ts[k]->strides()[i]);
      }
    }
    if (shape.empty()) {
      shape.push_back(1);
      for (int k = 0; k < N; ++k) strides[k].push_back(0);
    }
  }

  int64_t inner() const { return shape.back(); }
  int64_t outer() const { return shape.back() == 0 ? 0 : numel_of(shape) / shape.back(); }  // no runs when empty

  // Calls f(ptrs, inner_strides, n) for outer run `o` (0 <= o < outer()).
  template <typename F>
  void run(int64_t o, F&& f) const {
    std::array<char*, N> p = base;
    int64_t rem = o;
    for (size_t d = shape.size() - 1; d-- > 0;) {
      int64_t i = rem % shape[d];
      rem /= shape[d];
      for (int k = 0; k < N; ++k) p[k] += i * strides[k][d] * itemsizes[k];
    }
    std::array<int64_t, N> inner_strides;
    for (int k = 0; k < N; ++k) inner_strides[k] = strides[k].back();
    f(p, inner_strides, shape.back());
  }
};

}  // namespace hh
