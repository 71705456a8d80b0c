// Rotary position embedding, half-split layout (HF Llama/GPT-NeoX): element j rotates with
// j + D/2 by angle pos·θ_j, θ_j = theta^(-2j/D).
// The HF decoders' RoPE variants (transformers' modeling_rope_utils.py, ROPE_INIT_FUNCTIONS) change
// only the inverse frequencies θ_j and scale cos/sin: a RopeScaling, parsed once from config.json
// (nn/models/llama.cpp), says which.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace hh::nn {

// x (B,H,L,D) at positions pos_offset .. pos_offset+L-1.
Tensor apply_rope(const Tensor& x, int64_t pos_offset = 0, double theta = 10000.0);

// config.json's rope_type: "default", "linear", "dynamic" (NTK), "yarn", "llama3".
enum class RopeType { plain, linear, dynamic, yarn, llama3 };
const char* rope_type_name(RopeType t);  // the config.json spelling ("default" for plain)

struct RopeScaling {
  RopeType type = RopeType::plain;
  double theta = 10000.0;  // rope_theta
  double factor = 1.0;     // linear, dynamic, yarn, llama3
  // dynamic: max_position_embeddings, the length beyond which the base grows with the sequence.
  int64_t max_positions = 0;
  // yarn, llama3: original_max_position_embeddings (the pretraining context).
  int64_t original_max_positions = 0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  double beta_fast = 32.0, beta_slow = 1.0;              // yarn
  bool truncate = true;                                  // yarn: round the correction range outwards
  double attention_factor = 1.0;  // multiplies cos and sin (yarn: given, or from factor and mscale)
};

// The inverse frequencies θ_j (head_dim/2 of them) as transformers computes them, in f32 (its
// buffer's dtype). seq_len (dynamic only): the current sequence length, last position + 1; at or
// below max_positions dynamic is the plain rotation.
std::vector<float> rope_inv_freq(const RopeScaling& r, int64_t head_dim, int64_t seq_len);

// x (B,H,L,D) at positions pos_offset .. pos_offset+L-1 under r: angles pos·θ_j and cos/sin scaled
// by r.attention_factor, in f32 as transformers' rotary embedding. Dynamic reads the sequence length
// pos_offset + L: a forward over L tokens rotates every position with the frequencies of length L
// (as transformers' forward), a decoding step at position p with those of length p + 1 (as
// transformers' cached decoding one token at a time), and keys already cached keep their rotation.
Tensor apply_rope(const Tensor& x, int64_t pos_offset, const RopeScaling& r);

}  // namespace hh::nn
