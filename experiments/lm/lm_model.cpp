#include "experiments/lm/lm_model.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "autograd/ops/elementwise.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "nn/models/gpt2.h"
#include "nn/models/hf_config.h"
#include "nn/models/llama.h"

namespace hh::train {

const char* name(LmArch a) { return a == LmArch::llama ? "llama" : "gpt2"; }

LmArch parse_lm_arch(const std::string& text, const std::string& flag) {
  if (text == "gpt2") return LmArch::gpt2;
  if (text == "llama") return LmArch::llama;
  fail(str(flag, ": unknown architecture '", text, "' (valid: gpt2, llama)"));
}

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

std::string lm_config_json(const LmModelConfig& c, int64_t eos_id) {
  HH_CHECK(c.vocab_size >= 2, "model: vocab_size must be >= 2, got ", c.vocab_size);
  HH_CHECK(c.n_positions >= 2, "model: n_positions (context) must be >= 2, got ", c.n_positions);
  HH_CHECK(c.n_layer >= 1, "model: n_layer must be >= 1, got ", c.n_layer);
  HH_CHECK(c.n_head >= 1, "model: n_head must be >= 1, got ", c.n_head);
  HH_CHECK(c.n_embd >= 1 && c.n_embd % c.n_head == 0, "model: n_embd (", c.n_embd,
           ") must be a positive multiple of n_head (", c.n_head, ")");
  HH_CHECK(c.n_inner >= 0, "model: n_inner must be >= 0, got ", c.n_inner);
  const int64_t inner = c.n_inner > 0 ? c.n_inner : 4 * c.n_embd;
  nlohmann::json j;
  if (c.arch == LmArch::llama) {
    HH_CHECK((c.n_embd / c.n_head) % 2 == 0, "model: RoPE needs an even head size, got n_embd / n_head = ",
             c.n_embd / c.n_head);
    HH_CHECK(std::isfinite(c.rope_theta) && c.rope_theta > 1.0, "model: rope_theta must be > 1, got ", c.rope_theta);
    j = {{"architectures", {"LlamaForCausalLM"}},
         {"model_type", "llama"},
         {"vocab_size", c.vocab_size},
         {"max_position_embeddings", c.n_positions},
         {"hidden_size", c.n_embd},
         {"intermediate_size", inner},
         {"num_hidden_layers", c.n_layer},
         {"num_attention_heads", c.n_head},
         {"num_key_value_heads", c.n_head},
         {"head_dim", c.n_embd / c.n_head},
         {"hidden_act", "silu"},
         {"rms_norm_eps", 1e-5},
         {"rope_theta", c.rope_theta},
         {"attention_bias", false},
         {"mlp_bias", false},
         {"attention_dropout", 0.0},
         {"initializer_range", 0.02},
         {"tie_word_embeddings", true},
         {"torch_dtype", "float32"}};
  } else {
    j = {{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"vocab_size", c.vocab_size},
         {"n_positions", c.n_positions},
         {"n_ctx", c.n_positions},
         {"n_embd", c.n_embd},
         {"n_layer", c.n_layer},
         {"n_head", c.n_head},
         {"n_inner", inner},
         {"activation_function", c.activation},
         {"layer_norm_epsilon", 1e-5},
         {"resid_pdrop", 0.0},
         {"embd_pdrop", 0.0},
         {"attn_pdrop", 0.0},
         {"tie_word_embeddings", true},
         {"torch_dtype", "float32"}};
  }
  if (eos_id >= 0) j["eos_token_id"] = j["bos_token_id"] = eos_id;
  return j.dump(2) + "\n";
}

namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
}  // namespace

std::shared_ptr<nn::CausalLM> build_lm_model(const nn::HFConfig& config, const nn::HFModelOptions& options) {
  const auto archs = config.get_strings("architectures");
  HH_CHECK(archs.size() == 1 && (archs[0] == "GPT2LMHeadModel" || archs[0] == "LlamaForCausalLM"), config.origin(),
           ": a train_lm model is a GPT2LMHeadModel or a LlamaForCausalLM");
  if (archs[0] == "LlamaForCausalLM") return std::make_shared<nn::LlamaForCausalLM>(config, options);
  return std::make_shared<nn::GPT2LMHeadModel>(config, options);
}

std::shared_ptr<nn::CausalLM> make_lm_model(const std::string& config_json, const nn::HFModelOptions& options) {
  const nn::HFConfig config = nn::HFConfig::parse(config_json, "train_lm model config");
  auto model = build_lm_model(config, options);
  const bool llama = std::dynamic_pointer_cast<nn::LlamaForCausalLM>(model) != nullptr;
  Generator gen(options.seed ^ 0x9e3779b97f4a7c15ULL);  // the feature maps drew from options.seed
  const double std_proj = llama ? 0.02 : 0.02 / std::sqrt(2.0 * static_cast<double>(model->num_layers()));
  NoGradGuard no_grad;
  for (auto& [name, p] : model->named_parameters()) {
    if (name.find(".feature_map.") != std::string::npos) continue;
    // Norms: ones (and zeros) from construction. GPT-2's are ln_1, ln_2, ln_f; Llama's *_layernorm, norm.
    if (name.find(llama ? "norm." : ".ln_") != std::string::npos) continue;
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
