// Comparing two decoding states part by part (tests of prefill and of the prefix state cache).
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>

#include "autograd/ops.h"
#include "nn/models/hf_model.h"

namespace hh::test {

// max |a - b| / max |b| of two state tensors (both undefined: 0); shapes must agree.
inline double state_err(const Tensor& a, const Tensor& b, const char* what) {
  CAPTURE(what);
  REQUIRE(a.defined() == b.defined());
  if (!a.defined()) return 0.0;
  REQUIRE(a.shape() == b.shape());
  const double scale = amax(abs(b.to(DType::f64))).item<double>();
  return amax(abs(sub(a.to(DType::f64), b.to(DType::f64)))).item<double>() / std::max(scale, 1e-30);
}

// Every part of two decoding states, layer by layer: the largest relative difference.
inline double decode_state_err(const nn::DecodeState& a, const nn::DecodeState& b) {
  REQUIRE(a.pos == b.pos);
  REQUIRE(a.layers.size() == b.layers.size());
  double err = 0.0;
  for (size_t i = 0; i < a.layers.size(); ++i) {
    const nn::DecodeCache &x = a.layers[i], &y = b.layers[i];
    CAPTURE(i);
    CHECK(x.pos() == y.pos());
    CHECK(x.evicted == y.evicted);
    CHECK(x.linear.pos == y.linear.pos);
    CHECK(x.linear.gated.tokens == y.linear.gated.tokens);
    CHECK(x.linear.delta.tokens == y.linear.delta.tokens);
    CHECK(x.hybrid.tokens == y.hybrid.tokens);
    CHECK(x.hybrid.window == y.hybrid.window);
    for (double e : {state_err(x.k, y.k, "k"), state_err(x.v, y.v, "v"), state_err(x.linear.S, y.linear.S, "S"),
                     state_err(x.linear.z, y.linear.z, "z"), state_err(x.linear.gated.S, y.linear.gated.S, "gated S"),
                     state_err(x.linear.gated.z, y.linear.gated.z, "gated z"),
                     state_err(x.linear.delta.S, y.linear.delta.S, "delta S"),
                     state_err(x.hybrid.k, y.hybrid.k, "ring k"), state_err(x.hybrid.v, y.hybrid.v, "ring v"),
                     state_err(x.hybrid.pk, y.hybrid.pk, "ring pk"), state_err(x.hybrid.S, y.hybrid.S, "hybrid S"),
                     state_err(x.hybrid.z, y.hybrid.z, "hybrid z")})
      err = std::max(err, e);
  }
  return err;
}


}  // namespace hh::test
