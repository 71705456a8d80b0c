#include "nn/models/hf_save.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/safetensors.h"

namespace hh::nn {

namespace {
const char* form_name(LinearForm f) {
  switch (f) {
    case LinearForm::quadratic: return "quadratic";
    case LinearForm::chunked: return "chunked";
    case LinearForm::noncausal: return "noncausal";
    case LinearForm::recurrent: return "recurrent";
  }
  return "chunked";
}

// Files of a model folder besides config.json and the weights that a converted folder keeps.
const char* kCopied[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                         "merges.txt", "vocab.txt", "tokenizer.model", "generation_config.json",
                         "preprocessor_config.json", "added_tokens.json"};
}  // namespace

std::string config_with_hedgehog_section(const std::string& config_json, const std::string& config_origin,
                                        const HFModelOptions& o) {
  nlohmann::json config = nlohmann::json::parse(config_json, nullptr, false);
  HH_CHECK(config.is_object(), "save_hf_model: ", config_origin, " is not a JSON object");
  config.erase("hedgehog");
  if (o.mixer != "softmax") {
    const FeatureMapConfig& f = o.feature_map;
    config["hedgehog"] = {{"mixer", o.mixer},
                          {"form", form_name(o.form)},
                          {"chunk", o.chunk},
                          {"eps", o.eps},
                          {"feature_map",
                           {{"feature_dim", f.feature_dim},
                            {"temperature", f.temperature},
                            {"redraw_interval", f.redraw_interval},
                            {"joint_softmax", f.joint_softmax},
                            {"untied", f.untied},
                            {"taylor_packed", f.taylor_packed},
                            {"cosformer_length", f.cosformer_length},
                            {"seed", f.seed}}}};
  }
  return config.dump(2) + "\n";
}

void save_hf_model(const HFModel& model, const std::string& out_folder, const std::string& source_folder) {
  const std::string src_config = (std::filesystem::path(source_folder) / "config.json").string();
  save_hf_model(model, out_folder, read_file(src_config), src_config, source_folder);
}

void save_hf_model(const HFModel& model, const std::string& out_folder, const std::string& config_json,
                   const std::string& config_origin, const std::string& files_folder) {
  namespace fs = std::filesystem;
  NamedTensors weights = model.hf_state_dict();
  for (const auto& [name, t] : weights)
    HH_CHECK(name.find(".lora_") == std::string::npos, "save_hf_model: the model still has LoRA adapters ('", name,
             "'); merge them first (merge_lora)");
  const std::string config = config_with_hedgehog_section(config_json, config_origin, model.options());
  ensure_writable_dir(out_folder);
  for (const char* name : kCopied) {
    if (files_folder.empty()) break;
    const fs::path from = fs::path(files_folder) / name;
    if (fs::exists(from)) write_file_atomic((fs::path(out_folder) / name).string(), read_file(from.string()));
  }
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, t] : weights) tensors.emplace_back(name, t.to(Device::cpu()).contiguous());
  // With a checksum per tensor: hedgehog readers verify it (core/safetensors.h); others ignore it.
  save_safetensors((fs::path(out_folder) / "model.safetensors").string(), tensors, {{"format", "pt"}},
                   Checksums::xxh3);
  // config.json last: a folder with a config is a complete one.
  write_file_atomic((fs::path(out_folder) / "config.json").string(), config);
}

void apply_hedgehog_section(const HFConfig& config, HFModelOptions& options) {
  if (!config.has("hedgehog")) return;
  const HFConfig h = config.child("hedgehog");
  options.mixer = h.get_string("mixer");
  HH_CHECK(options.mixer == "softmax" || is_feature_map_name(options.mixer), "hf: ", h.origin(), ": mixer '",
           options.mixer, "' is not a feature map");
  try {
    options.form = parse_linear_form(h.get_string("form", "chunked"));
  } catch (const Error& e) {
    fail(str("hf: ", h.origin(), ": form: ", e.what()));
  }
  options.chunk = h.get_int("chunk", options.chunk);
  HH_CHECK(options.chunk >= 1, "hf: ", h.origin(), ": chunk must be >= 1");
  options.eps = h.get_double("eps", options.eps);
  if (h.has("feature_map")) {
    const HFConfig f = h.child("feature_map");
    FeatureMapConfig& fm = options.feature_map;
    fm.feature_dim = f.get_int("feature_dim", fm.feature_dim);
    fm.temperature = f.get_double("temperature", fm.temperature);
    fm.redraw_interval = f.get_int("redraw_interval", fm.redraw_interval);
    fm.joint_softmax = f.get_bool("joint_softmax", fm.joint_softmax);
    fm.untied = f.get_bool("untied", fm.untied);
    fm.taylor_packed = f.get_bool("taylor_packed", fm.taylor_packed);
    fm.cosformer_length = f.get_int("cosformer_length", fm.cosformer_length);
    fm.seed = static_cast<uint64_t>(f.get_int("seed", static_cast<int64_t>(fm.seed)));
    HH_CHECK(fm.feature_dim >= 0 && fm.redraw_interval >= 0 && fm.cosformer_length >= 0, "hf: ", f.origin(),
             ": feature_dim, redraw_interval and cosformer_length must be >= 0");
  }
}

}  // namespace hh::nn
