// A prompt prefilled in segments that end at the multiples of a chunk size C (absolute positions)
// and the remainder, each segment from the state the previous one left (CausalLM::prefill from a
// started state). The segments depend only on the positions, so a run that resumes from a state
// saved at a boundary (serve/prefix_cache.h) computes exactly the floats of a run from the start:
// the same tokens, bit for bit. Also the deep copy and the byte size of a DecodeState.
#pragma once
#include <cstdint>
#include <functional>

#include "nn/models/hf_model.h"

namespace hh::nn {

// Called after each segment that ends at a multiple of the chunk: (state.pos, the state there).
using BoundaryHook = std::function<void(int64_t, const DecodeState&)>;

// ids (B,L) i64 at positions state.pos.. -> the last position's logits (B,1,V); state advances by
// L tokens. Segments end at the multiples of `chunk` (> 0) after state.pos and at state.pos + L.
// on_boundary (may be empty) sees the state at each multiple of `chunk` reached. No gradients.
Tensor prefill_segments(CausalLM& lm, const Tensor& ids, DecodeState& state, int64_t chunk,
                        const BoundaryHook& on_boundary = {});

// A copy that shares no storage with `state` (every tensor cloned): decoding may write into a
// state's tensors in place (the hybrid ring), so a saved state is copied in and out.
DecodeState clone_decode_state(const DecodeState& state);

// The bytes of every tensor a state holds (KV caches grow with the tokens; linear states do not).
int64_t held_state_bytes(const DecodeState& state);

}  // namespace hh::nn
