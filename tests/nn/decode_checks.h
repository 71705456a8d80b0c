// Helpers of the mixer and model tests (tests/nn): the largest difference of two tensors, and a
// sequence run through the decoding path one token at a time, to compare with the forward.
#pragma once
#include <cstdint>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "nn/attention.h"
#include "nn/models/hf_model.h"

namespace hh::test {

// max |a - b| in f64, without gradients.
inline double max_diff(const Tensor& a, const Tensor& b) {
  NoGradGuard ng;
  return amax(abs(sub(a.to(DType::f64), b.to(DType::f64)))).item<double>();
}

// x (B,L,C) through attn.step token by token, from the cache given -> (B,L,C).
inline Tensor decode_each(nn::Attention& attn, const Tensor& x, nn::DecodeCache& cache) {
  std::vector<Tensor> ys;
  for (int64_t t = 0; t < x.size(1); ++t) ys.push_back(attn.step(slice(x, 1, t, t + 1), cache));
  return cat(ys, 1);
}

// ids (B,L) through lm.step token by token from a fresh decoding state -> logits (B,L,V).
inline Tensor decode_each(nn::CausalLM& lm, const Tensor& ids) {
  nn::DecodeState st = lm.start_decoding();
  std::vector<Tensor> steps;
  for (int64_t t = 0; t < ids.size(1); ++t) steps.push_back(lm.step(slice(ids, 1, t, t + 1), st));
  return cat(steps, 1);
}

}  // namespace hh::test
