// The GPT-2-style decoder that train_lm trains from scratch: an HF GPT2LMHeadModel (so a run exports
// as an HF folder that our importer and transformers both load), with any attention: softmax, or a
// feature map in any linear form (HFModelOptions). Sizes come from a preset or flags.
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

#include "nn/models/gpt2.h"

namespace hh::train {

struct LmModelConfig {
  int64_t vocab_size = 0;
  int64_t n_positions = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_inner = 0;  // 0 = 4 * n_embd
  std::string activation = "gelu_new";
};

const std::vector<std::string>& lm_model_preset_names();
// The preset's sizes (vocab_size left 0: it comes from the data). Unknown names list the valid ones.
LmModelConfig lm_model_preset(const std::string& name);
// Checks every size (the error names the field) and returns the GPT-2 config.json text that
// transformers' GPT2Config reads (architectures, model_type, n_*, activation, eos/bos ids).
std::string gpt2_config_json(const LmModelConfig& c, int64_t eos_id);

// A freshly initialised model, as transformers' GPT2PreTrainedModel._init_weights: Linear (Conv1D)
// and embedding weights N(0, 0.02), every c_proj weight N(0, 0.02 / sqrt(2 * n_layer)), biases 0,
// LayerNorm 1 and 0. Feature-map weights keep their own initialisation. Drawn from options.seed.
std::shared_ptr<nn::GPT2LMHeadModel> make_lm_model(const std::string& config_json, const nn::HFModelOptions& options);

// Parameters of the model (the tied embedding counted once).
int64_t count_parameters(const nn::Module& m);

}  // namespace hh::train
