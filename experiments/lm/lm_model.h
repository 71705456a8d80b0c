// The decoder that train_lm trains from scratch: an HF GPT2LMHeadModel (learned positions) or
// LlamaForCausalLM (RoPE, RMSNorm, SwiGLU; tied embeddings), so a run exports as an HF folder that
// our importer and transformers both load, with any attention: softmax, or a feature map in any
// linear form (HFModelOptions). Sizes come from a preset or flags; the architecture from --arch.
//
// Presets (context = n_positions):
//   paper  REFERENCE.md §4, Table 7: 12 layers, 12 heads of 64, hidden 768, MLP 3072, context 1024
//          (GPT-2 small, 124M parameters with the GPT-2 vocabulary)
//   small  4 layers, 4 heads of 32, hidden 128, MLP 512, context 256: trains in minutes on 2 cores
//   tiny   2 layers, 2 heads of 16, hidden 32, MLP 128, context 64: seconds (tests)
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/models/hf_config.h"
#include "nn/models/hf_model.h"

namespace hh::train {

// GPT-2 learns a position table; Llama rotates q and k (RoPE), so what a head learns about relative
// offsets holds at every position, and copying from far back forms much sooner in a small model.
enum class LmArch { gpt2, llama };
const char* name(LmArch a);  // "gpt2", "llama"
// "gpt2" or "llama"; anything else is an error naming `flag` and the valid names.
LmArch parse_lm_arch(const std::string& text, const std::string& flag);

struct LmModelConfig {
  LmArch arch = LmArch::gpt2;
  int64_t vocab_size = 0;
  int64_t n_positions = 0;  // GPT-2: the position table's rows; Llama: max_position_embeddings
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_inner = 0;  // 0 = 4 * n_embd
  std::string activation = "gelu_new";  // GPT-2's MLP (Llama's is SwiGLU: silu)
  double rope_theta = 10000.0;           // Llama only
};

const std::vector<std::string>& lm_model_preset_names();
// The preset's sizes (vocab_size left 0: it comes from the data). Unknown names list the valid ones.
LmModelConfig lm_model_preset(const std::string& name);
// Checks every size (the error names the field) and returns the config.json text that transformers
// reads: GPT2Config (n_*, activation) or LlamaConfig (hidden_size, intermediate_size = n_inner,
// num_key_value_heads = n_head, rope_theta, tied embeddings), with eos/bos ids.
std::string lm_config_json(const LmModelConfig& c, int64_t eos_id);

// A freshly initialised model of lm_config_json's text, as transformers' _init_weights: GPT-2:
// Linear (Conv1D) and embedding weights N(0, 0.02), every c_proj weight N(0, 0.02 / sqrt(2 *
// n_layer)), biases 0, LayerNorm 1 and 0; Llama: every Linear and embedding weight N(0, 0.02),
// RMSNorm 1. Feature-map weights keep their own initialisation. Drawn from options.seed.
std::shared_ptr<nn::CausalLM> make_lm_model(const std::string& config_json, const nn::HFModelOptions& options);
// The model of lm_config_json's text with its weights allocated as `options` says (not initialised
// here): the architecture is the config's "architectures" entry.
std::shared_ptr<nn::CausalLM> build_lm_model(const nn::HFConfig& config, const nn::HFModelOptions& options);

// Parameters of the model (the tied embedding counted once).
int64_t count_parameters(const nn::Module& m);

}  // namespace hh::train
