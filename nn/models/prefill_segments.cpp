#include "nn/models/prefill_segments.h"

#include <algorithm>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"

namespace hh::nn {

Tensor prefill_segments(CausalLM& lm, const Tensor& ids, DecodeState& state, int64_t chunk,
                        const BoundaryHook& on_boundary) {
  HH_CHECK(chunk > 0, "prefill_segments: chunk must be positive, got ", chunk);
  check_token_ids(ids, state.pos, lm.max_positions(), "prefill_segments");
  NoGradGuard ng;
  const int64_t L = ids.size(1);
  Tensor logits;
  for (int64_t at = 0; at < L;) {
    const int64_t next_boundary = (state.pos / chunk + 1) * chunk;  // absolute position
    const int64_t n = std::min(next_boundary - state.pos, L - at);
    logits = lm.prefill(slice(ids, 1, at, at + n), state);
    at += n;
    if (on_boundary && state.pos % chunk == 0) on_boundary(state.pos, state);
  }
  return logits;
}

namespace {
Tensor copy_of(const Tensor& t) { return t.defined() ? t.detach().clone() : Tensor(); }

int64_t bytes_of(const Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(itemsize(t.dtype())) : 0;
}

// f(tensor) for every tensor of one layer's cache (const or not).
template <class Cache, class F>
void for_each_tensor(Cache& c, F f) {
  for (auto* t : {&c.k, &c.v, &c.linear.S, &c.linear.z, &c.linear.gated.S, &c.linear.gated.z, &c.linear.delta.S,
                  &c.hybrid.k, &c.hybrid.v, &c.hybrid.pk, &c.hybrid.S, &c.hybrid.z})
    f(*t);
}
}  // namespace

DecodeState clone_decode_state(const DecodeState& state) {
  NoGradGuard ng;
  DecodeState out = state;  // the counters; the tensors below replaced by copies
  for (DecodeCache& c : out.layers) for_each_tensor(c, [](Tensor& t) { t = copy_of(t); });
  return out;
}

int64_t held_state_bytes(const DecodeState& state) {
  int64_t total = 0;
  for (const DecodeCache& c : state.layers) for_each_tensor(c, [&](const Tensor& t) { total += bytes_of(t); });
  return total;
}

}  // namespace hh::nn
