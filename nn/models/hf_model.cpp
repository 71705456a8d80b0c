#include "nn/models/hf_model.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <utility>

#include "autograd/ops.h"
#include "core/error.h"
#include "nn/gate.h"
#include "nn/models/hf_int8.h"
#include "nn/models/hf_save.h"

namespace hh::nn {

Activation hf_activation(const HFConfig& config, const std::string& key, const std::string& def) {
  const std::string name = config.get_string(key, def);
  try {
    return parse_activation(name);
  } catch (const Error&) {
    fail(str("hf: ", config.origin(), ": ", key, " '", name,
             "' is not supported (supported: gelu, gelu_new, gelu_pytorch_tanh, relu, silu, swish)"));
  }
}

void check_token_ids(const Tensor& ids, int64_t pos, int64_t max_positions, const std::string& who) {
  HH_CHECK(ids.defined(), who, ": token ids are an undefined tensor");
  HH_CHECK(ids.dtype() == DType::i64, who, ": token ids must be i64, got ", ids.dtype());
  HH_CHECK(ids.dim() == 2 && ids.size(0) > 0 && ids.size(1) > 0, who, ": expected token ids (B,L) with B, L >= 1, got ",
           ids.shape());
  HH_CHECK(max_positions < 0 || pos + ids.size(1) <= max_positions, who, ": ", pos + ids.size(1),
           " positions exceed the model's limit of ", max_positions);
}

Tensor CausalLM::prefill(const Tensor& ids, DecodeState& state) {
  check_token_ids(ids, state.pos, max_positions(), "prefill");
  Tensor logits;
  for (int64_t t = 0; t < ids.size(1); ++t) logits = step(slice(ids, 1, t, t + 1), state);
  return logits;
}

size_t decode_state_bytes(const DecodeState& probe, int64_t tokens) {
  const auto bytes = [](const Tensor& t) {
    return t.defined() ? static_cast<size_t>(t.numel()) * itemsize(t.dtype()) : size_t{0};
  };
  const auto per_slot = [&](const Tensor& ring, std::initializer_list<const Tensor*> all) {
    if (!ring.defined() || ring.size(2) == 0) return 0.0;
    size_t b = 0;
    for (const Tensor* t : all) b += bytes(*t);
    return static_cast<double>(b) / static_cast<double>(ring.size(2));
  };
  double total = 0;
  for (const DecodeCache& c : probe.layers) {
    total += per_slot(c.k, {&c.k, &c.v}) * static_cast<double>(tokens);
    const HybridDecodeState& h = c.hybrid;
    total += per_slot(h.k, {&h.k, &h.v, &h.pk}) * static_cast<double>(std::min(tokens, h.window));
    for (const Tensor* t : {&h.S, &h.z, &c.linear.S, &c.linear.z, &c.linear.gated.S, &c.linear.gated.z,
                            &c.linear.delta.S})
      total += static_cast<double>(bytes(*t));
  }
  return static_cast<size_t>(total);
}

Tensor CausalLM::step_many(const Tensor& ids, const std::vector<DecodeState*>& states) {
  check_step_rows(ids, states, max_positions(), "step_many");
  std::vector<Tensor> rows;
  for (size_t i = 0; i < states.size(); ++i) {
    const int64_t r = static_cast<int64_t>(i);
    rows.push_back(step(slice(ids, 0, r, r + 1), *states[i]));
  }
  return cat(rows, 0);
}

void check_step_rows(const Tensor& ids, const std::vector<DecodeState*>& states, int64_t max_positions,
                     const std::string& who) {
  HH_CHECK(ids.defined() && ids.dim() == 2 && ids.size(1) == 1, who, ": expected ids (N,1), got ",
           ids.defined() ? str(ids.shape()) : std::string("an undefined tensor"));
  HH_CHECK(ids.size(0) == static_cast<int64_t>(states.size()), who, ": ", ids.size(0), " rows of ids for ",
           states.size(), " decode states");
  for (size_t i = 0; i < states.size(); ++i) {
    HH_CHECK(states[i] != nullptr, who, ": decode state ", i, " is null");
    const int64_t r = static_cast<int64_t>(i);
    check_token_ids(slice(ids, 0, r, r + 1), states[i]->pos, max_positions, who);
  }
}

namespace {
using Factory = std::function<std::shared_ptr<HFModel>(const HFConfig&, const HFModelOptions&, const std::string&)>;
struct Family {
  const char* architecture;
  const char* model_type;  // the "model_type" that falls back to this architecture ("" = none)
  Factory make;
};
const std::vector<Family>& families() {
  static const std::vector<Family> table = {
      {"GPT2LMHeadModel", "gpt2", make_gpt2},
      {"LlamaForCausalLM", "llama", make_llama},
      {"MistralForCausalLM", "mistral", make_mistral},
      {"Qwen2ForCausalLM", "qwen2", make_qwen2},
      {"Qwen3ForCausalLM", "qwen3", make_qwen3},
      {"BertForSequenceClassification", "", make_bert},
      {"BertModel", "bert", make_bert},
      {"BertForMaskedLM", "", make_bert},      // loaded as its BertModel (the MLM head is dropped)
      {"BertForPreTraining", "", make_bert},
      {"ViTForImageClassification", "", make_vit},
      {"ViTModel", "vit", make_vit},
  };
  return table;
}
}  // namespace

std::vector<std::string> supported_hf_architectures() {
  std::vector<std::string> out;
  for (const auto& f : families()) out.emplace_back(f.architecture);
  return out;
}

std::shared_ptr<HFModel> load_hf_model(const std::string& folder, const HFModelOptions& options) {
  const std::string path = (std::filesystem::path(folder) / "config.json").string();
  const HFConfig config = HFConfig::load(path);
  std::string arch;
  const Family* chosen = nullptr;
  if (config.has("architectures")) {
    const auto archs = config.get_strings("architectures");
    HH_CHECK(!archs.empty(), "hf: ", path, ": \"architectures\" is empty");
    arch = archs[0];
    for (const auto& f : families())
      if (arch == f.architecture) chosen = &f;
  } else {
    std::string type = config.get_string("model_type");
    arch = "model_type '" + type + "'";
    // A converted folder's "hedgehog_<family>" (save_hf_model: for transformers' auto_map) is its family.
    if (type.rfind("hedgehog_", 0) == 0) type = type.substr(9);
    for (const auto& f : families())
      if (type == f.model_type) chosen = &f;
  }
  if (!chosen) {
    std::string list;
    for (const auto& a : supported_hf_architectures()) list += (list.empty() ? "" : ", ") + a;
    fail(str("hf: ", path, ": unsupported architecture ", arch, " (supported: ", list, ")"));
  }
  HFModelOptions build = options;
  // A converted folder (save_hf_model) names its attention in config.json's "hedgehog" section and
  // holds that map's weights: it runs as saved. Another map asked for explicitly would meet
  // weights it has no slot for, so it is refused, saying what the folder holds.
  if (config.has("hedgehog")) {
    HFModelOptions saved = options;
    apply_hedgehog_section(config, saved);
    HH_CHECK(options.mixer.is_softmax() || options.mixer == saved.mixer, "hf: ", folder,
             ": the folder holds a model converted to '", name(saved.mixer), "' attention (config.json: ",
             "hedgehog.mixer); it runs with its own map (leave out the mixer option), and another map needs the ",
             "original softmax model, not '", name(options.mixer), "'");
    build = saved;
  }
  // A quantized folder (nn/models/hf_int8.h) runs in int8: its stored values and scales, as loaded.
  const WeightFormat stored = hf_stored_weights(config);
  HH_CHECK(stored == WeightFormat::f32 || (options.device.is_cpu() && options.dtype == DType::f32), "hf: ", folder,
           ": the folder holds int8 weights (config.json: quantization_config), which run on the CPU in f32 (asked for ",
           options.device, ", ", options.dtype, "); load the original f32 folder for another device or dtype");
  HH_CHECK(options.weights == WeightFormat::f32 || (options.device.is_cpu() && options.dtype == DType::f32),
           "hf: ", weight_format_name(options.weights), " weights run on the CPU in f32 (asked for ",
           options.device, ", ", options.dtype, ")");
  HH_CHECK(stored == WeightFormat::f32 || options.weights == WeightFormat::f32 || options.weights == stored, "hf: ",
           folder, " holds int8 weights (config.json: quantization_config), which load as int8 only, not ",
           weight_format_name(options.weights));
  const WeightFormat weights = stored == WeightFormat::int8 ? WeightFormat::int8 : options.weights;
  build.weights = weights;
  build.draw_weights = false;  // every HF weight is loaded right after construction
  std::shared_ptr<HFModel> model = chosen->make(config, build, folder);
  const int64_t installed = count_installed_int8(*model);
  HH_CHECK(stored == WeightFormat::int8 || installed == 0, "hf: ", folder, ": the weights hold ", installed,
           " int8 (I8) Linear weights but config.json has no quantization_config (quant_method '", kInt8QuantMethod,
           "'): the folder is incomplete or damaged");
  HH_CHECK(stored == WeightFormat::f32 || installed > 0, "hf: ", folder, ": config.json's quantization_config says '",
           kInt8QuantMethod, "' but the weights hold no I8 Linear weight: the folder is incomplete or damaged");
  model->to(options.device);
  model->to(options.dtype);
  model->eval();
  if (weights != WeightFormat::f32 || options.prepare_weights) set_weight_format(*model, weights);
  return model;
}

void HFModel::keep_softmax(const std::vector<int64_t>& layers) {
  std::vector<AttentionSite> sites = attention_sites();
  HFModelOptions next = options_;
  next.softmax_layers.insert(next.softmax_layers.end(), layers.begin(), layers.end());
  check_softmax_layers(next, static_cast<int64_t>(sites.size()), str(family_, ": keep_softmax"));
  for (int64_t l : layers) {
    AttentionSite& s = sites[static_cast<size_t>(l)];
    s.owner->unregister_module("feature_map");
    *s.feature_map = nullptr;
    MixerConfig mc = s.mixer->cfg;
    mc.mixer = Mixer::softmax();
    mc.gate = Gate::none;  // a softmax layer has no state to gate
    mc.gate_output = GateOutput::normalizer;
    *s.mixer = AttentionMixer(mc, nullptr);
  }
  std::sort(next.softmax_layers.begin(), next.softmax_layers.end());
  options_ = std::move(next);
}

std::shared_ptr<CausalLM> load_causal_lm(const std::string& folder, const HFModelOptions& options) {
  std::shared_ptr<HFModel> model = load_hf_model(folder, options);
  auto lm = std::dynamic_pointer_cast<CausalLM>(model);
  HH_CHECK(lm != nullptr, "hf: ", folder, ": ", model->architecture(), " is not a causal language model");
  return lm;
}

}  // namespace hh::nn
