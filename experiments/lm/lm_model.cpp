#include "experiments/lm/lm_model.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "autograd/ops/elementwise.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "nn/models/hf_config.h"

namespace hh::train {

const std::vector<std::string>& lm_model_preset_names() {
  static const std::vector<std::string> names = {"paper", "small", "tiny"};
  return names;
}

LmModelConfig lm_model_preset(const std::string& name) {
  LmModelConfig c;
  if (name == "paper") {
    c.n_layer = 12, c.n_head = 12, c.n_embd = 768, c.n_positions = 1024;
  } else if (name == "small") {
    c.n_layer = 4, c.n_head = 4, c.n_embd = 128, c.n_positions = 256;
  } else if (name == "tiny") {
    c.n_layer = 2, c.n_head = 2, c.n_embd = 32, c.n_positions = 64;
  } else {
    std::string valid;
    for (const auto& n : lm_model_preset_names()) valid += (valid.empty() ? "" : ", ") + n;
    fail(str("unknown model preset '", name, "' (valid: ", valid, ")"));
  }
  c.n_inner = 4 * c.n_embd;
  return c;
}

std::string gpt2_config_json(const LmModelConfig& c, int64_t eos_id) {
  HH_CHECK(c.vocab_size >= 2, "model: vocab_size must be >= 2, got ", c.vocab_size);
  HH_CHECK(c.n_positions >= 2, "model: n_positions (context) must be >= 2, got ", c.n_positions);
  HH_CHECK(c.n_layer >= 1, "model: n_layer must be >= 1, got ", c.n_layer);
  HH_CHECK(c.n_head >= 1, "model: n_head must be >= 1, got ", c.n_head);
  HH_CHECK(c.n_embd >= 1 && c.n_embd % c.n_head == 0, "model: n_embd (", c.n_embd,
           ") must be a positive multiple of n_head (", c.n_head, ")");
  HH_CHECK(c.n_inner >= 0, "model: n_inner must be >= 0, got ", c.n_inner);
  nlohmann::json j = {{"architectures", {"GPT2LMHeadModel"}},
                      {"model_type", "gpt2"},
                      {"vocab_size", c.vocab_size},
                      {"n_positions", c.n_positions},
                      {"n_ctx", c.n_positions},
                      {"n_embd", c.n_embd},
                      {"n_layer", c.n_layer},
                      {"n_head", c.n_head},
                      {"n_inner", c.n_inner > 0 ? c.n_inner : 4 * c.n_embd},
                      {"activation_function", c.activation},
                      {"layer_norm_epsilon", 1e-5},
                      {"resid_pdrop", 0.0},
                      {"embd_pdrop", 0.0},
                      {"attn_pdrop", 0.0},
                      {"tie_word_embeddings", true},
                      {"torch_dtype", "float32"}};
  if (eos_id >= 0) j["eos_token_id"] = j["bos_token_id"] = eos_id;
  return j.dump(2) + "\n";
}

namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
}  // namespace

std::shared_ptr<nn::GPT2LMHeadModel> make_lm_model(const std::string& config_json, const nn::HFModelOptions& options) {
  const nn::HFConfig config = nn::HFConfig::parse(config_json, "train_lm model config");
  auto model = std::make_shared<nn::GPT2LMHeadModel>(config, options);
  Generator gen(options.seed ^ 0x9e3779b97f4a7c15ULL);  // the feature maps drew from options.seed
  const double std_proj = 0.02 / std::sqrt(2.0 * static_cast<double>(model->cfg.n_layer));
  NoGradGuard no_grad;
  for (auto& [name, p] : model->named_parameters()) {
    if (name.find(".feature_map.") != std::string::npos) continue;
    if (name.find(".ln_") != std::string::npos) continue;  // LayerNorm: ones and zeros from construction
    if (ends_with(name, ".bias")) {
      copy_(p, zeros(p.shape(), {p.dtype(), p.device()}));
    } else {
      const double s = ends_with(name, "c_proj.weight") ? std_proj : 0.02;
      copy_(p, mul(randn(p.shape(), gen, {p.dtype(), Device::cpu()}), s).to(p.device()));
    }
  }
  return model;
}

int64_t count_parameters(const nn::Module& m) {
  int64_t n = 0;
  for (const auto& [name, p] : m.named_parameters()) n += p.numel();
  return n;
}

}  // namespace hh::train
