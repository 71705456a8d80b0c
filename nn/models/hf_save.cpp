#include "nn/models/hf_save.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/atomic_file.h"
#include "core/safetensors.h"
#include "nn/models/hf_int8.h"
#include "nn/models/export/modeling_hedgehog_py.h"  // generated: kModelingHedgehogPy

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
                         "preprocessor_config.json", "added_tokens.json", "chat_template.jinja"};

// A converted folder loads in transformers through this module (trust_remote_code): its text is
// nn/models/export/modeling_hedgehog.py, embedded by the build.
constexpr const char* kModelingFile = "modeling_hedgehog.py";
constexpr const char* kModelTypePrefix = "hedgehog_";  // "hedgehog_llama": a converted folder's model_type

// The families modeling_hedgehog.py subclasses: model_type and the module's config class. An
// encoder (BERT, ViT) runs the non-causal linear attention, so its hybrid (sliding-window, causal
// only) folders get no module.
struct ExportFamily {
  const char* family;
  const char* config_class;
  bool encoder;
};
constexpr ExportFamily kExportFamilies[] = {
    {"llama", "HedgehogLlamaConfig", false}, {"mistral", "HedgehogMistralConfig", false},
    {"qwen2", "HedgehogQwen2Config", false}, {"qwen3", "HedgehogQwen3Config", false},
    {"gpt2", "HedgehogGPT2Config", false},   {"bert", "HedgehogBertConfig", true},
    {"vit", "HedgehogViTConfig", true},
};

// config.json's auto_map entries of a family's folder: the module's class for each transformers
// Auto class, by the folder's "architectures"[0] (null: every folder of the family).
struct ExportClass {
  const char* family;
  const char* architecture;
  const char* auto_class;
  const char* model_class;
};
constexpr ExportClass kExportClasses[] = {
    {"llama", nullptr, "AutoModelForCausalLM", "HedgehogLlamaForCausalLM"},
    {"mistral", nullptr, "AutoModelForCausalLM", "HedgehogMistralForCausalLM"},
    {"qwen2", nullptr, "AutoModelForCausalLM", "HedgehogQwen2ForCausalLM"},
    {"qwen3", nullptr, "AutoModelForCausalLM", "HedgehogQwen3ForCausalLM"},
    {"gpt2", nullptr, "AutoModelForCausalLM", "HedgehogGPT2LMHeadModel"},
    {"bert", nullptr, "AutoModel", "HedgehogBertModel"},  // the encoder of any BERT folder
    {"bert", "BertForSequenceClassification", "AutoModelForSequenceClassification",
     "HedgehogBertForSequenceClassification"},
    {"vit", nullptr, "AutoModel", "HedgehogViTModel"},
    {"vit", "ViTForImageClassification", "AutoModelForImageClassification", "HedgehogViTForImageClassification"},
};

// The transformers family whose classes modeling_hedgehog.py subclasses for this config (one of
// kExportFamilies), by model_type (a converted folder's "hedgehog_<family>" too); null for the
// others, whose converted folders load in the engine only.
const ExportFamily* export_family(const nlohmann::json& config) {
  const auto it = config.find("model_type");
  if (it == config.end() || !it->is_string()) return nullptr;
  std::string type = it->get<std::string>();
  if (type.rfind(kModelTypePrefix, 0) == 0) type = type.substr(std::string(kModelTypePrefix).size());
  for (const ExportFamily& f : kExportFamilies)
    if (type == f.family) return &f;
  return nullptr;
}

// config.json of a converted folder as transformers needs it to find modeling_hedgehog.py, or
// without those keys (a softmax model saved from a converted folder's config). A folder the module
// cannot run (module_file = false: gated, or a hybrid encoder) keeps its "hedgehog_<family>"
// model_type but gets no auto_map: transformers refuses it rather than run it otherwise.
void set_remote_code_keys(nlohmann::json& config, const ExportFamily* family, bool linear, bool module_file) {
  const std::string type = config.value("model_type", std::string());
  if (type.rfind(kModelTypePrefix, 0) == 0) config["model_type"] = type.substr(std::string(kModelTypePrefix).size());
  const std::string module = std::string(kModelingFile).substr(0, std::string(kModelingFile).find('.'));
  if (config.contains("auto_map") && config["auto_map"].is_object()) {  // ours only: other entries stay
    nlohmann::json& map = config["auto_map"];
    std::vector<std::string> ours;
    for (const auto& [key, value] : map.items())
      if (value.is_string() && value.get<std::string>().rfind(module + ".", 0) == 0) ours.push_back(key);
    for (const std::string& key : ours) map.erase(key);
    if (map.empty()) config.erase("auto_map");
  }
  if (!linear || !family) return;
  config["model_type"] = std::string(kModelTypePrefix) + family->family;
  if (!module_file) return;
  std::string arch;
  if (config.contains("architectures") && config["architectures"].is_array() && !config["architectures"].empty() &&
      config["architectures"][0].is_string())
    arch = config["architectures"][0].get<std::string>();
  config["auto_map"]["AutoConfig"] = module + "." + family->config_class;
  for (const ExportClass& c : kExportClasses)
    if (std::string(c.family) == family->family && (!c.architecture || arch == c.architecture))
      config["auto_map"][c.auto_class] = module + "." + c.model_class;
}

struct ExportConfig {
  std::string text;     // config.json
  bool python = false;  // the folder carries modeling_hedgehog.py
};

// format int8: a quantized folder (nn/models/hf_int8.h). transformers skips a quantization_config
// it does not know (a warning) and would read the int8 values as float weights, so the folder gets
// the "hedgehog_<family>" model_type and no auto_map or module: its Auto classes refuse it.
ExportConfig export_config(const std::string& config_json, const std::string& config_origin, const HFModelOptions& o,
                           WeightFormat format) {
  nlohmann::json config = nlohmann::json::parse(config_json, nullptr, false);
  HH_CHECK(config.is_object(), "save_hf_model: ", config_origin, " is not a JSON object");
  config.erase("hedgehog");
  if (o.new_head_labels > 0) {  // a base checkpoint given a fresh head: saved as the classifier it is
    config["architectures"] = {"BertForSequenceClassification"};
    config["num_labels"] = o.new_head_labels;
    config.erase("id2label");
    config.erase("label2id");
  }
  const ExportFamily* family = export_family(config);
  // No gates in the module, and no sliding window in an encoder (hybrid mixers are causal only).
  const bool int8 = format == WeightFormat::int8;
  const bool python = !int8 && o.mixer.is_linear() && family && o.gate == Gate::none &&
                      !(family->encoder && o.mixer.is_hybrid());
  if (python) {
    const std::vector<std::string> maps = internal::exported_feature_maps(internal::kModelingHedgehogPy);
    HH_CHECK(std::find(maps.begin(), maps.end(), o.mixer.feature_map()) != maps.end(), "save_hf_model: mixer '",
             name(o.mixer), "': feature map '", o.mixer.feature_map(), "' has no transformers implementation in ",
             kModelingFile, " (its FEATURE_MAPS), so the folder would not load outside the engine");
  }
  HH_CHECK(!int8 || family, "save_hf_model: ", config_origin, ": an int8 folder needs the model_type of a known family "
           "(its model_type becomes hedgehog_<family>, which transformers refuses)");
  set_remote_code_keys(config, family, o.mixer.is_linear() || int8, python);
  if (o.mixer.is_linear()) {
    const FeatureMapConfig& f = o.feature_map;
    config["hedgehog"] = {{"mixer", name(o.mixer)},
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
    if (o.mixer.is_hybrid()) config["hedgehog"]["window"] = o.window;  // only hybrids: other sections unchanged
    if (o.mixer.is_hybrid() && f.hybrid_affine) config["hedgehog"]["feature_map"]["hybrid_affine"] = true;
    if (!o.softmax_layers.empty()) config["hedgehog"]["softmax_layers"] = o.softmax_layers;
    if (o.gate != Gate::none) config["hedgehog"]["gate"] = name(o.gate);  // only gated mixers: others unchanged
    if (o.gate_output != GateOutput::normalizer) config["hedgehog"]["gate_output"] = name(o.gate_output);
  }
  return {config_with_stored_weights(config.dump(2) + "\n", config_origin, format), python};
}
}  // namespace

namespace internal {
std::vector<std::string> exported_feature_maps(const std::string& module_text) {
  const std::string key = "\nFEATURE_MAPS = (";
  const size_t start = module_text.find(key);
  HH_CHECK(start != std::string::npos, "save_hf_model: ", kModelingFile, " has no FEATURE_MAPS = (...) line");
  const size_t end = module_text.find(')', start);
  HH_CHECK(end != std::string::npos, "save_hf_model: ", kModelingFile, ": FEATURE_MAPS is not closed");
  std::vector<std::string> maps;
  for (size_t p = module_text.find('"', start); p < end; p = module_text.find('"', p + 1)) {
    const size_t q = module_text.find('"', p + 1);
    HH_CHECK(q < end, "save_hf_model: ", kModelingFile, ": FEATURE_MAPS has an unclosed string");
    maps.push_back(module_text.substr(p + 1, q - p - 1));
    p = q;
  }
  return maps;
}
}  // namespace internal

std::string config_with_hedgehog_section(const std::string& config_json, const std::string& config_origin,
                                         const HFModelOptions& o) {
  return export_config(config_json, config_origin, o, WeightFormat::f32).text;
}

void save_hf_model(const HFModel& model, const std::string& out_folder, const std::string& source_folder,
                   WeightFormat weights) {
  const std::string src_config = (std::filesystem::path(source_folder) / "config.json").string();
  save_hf_model(model, out_folder, read_file(src_config), src_config, source_folder, weights);
}

namespace {

constexpr const char* kStagePrefix = ".hh-export.";  // <out>/.hh-export.<pid>.<n>: an export being written

// Makes the renames into `dir` durable (EINVAL: a folder that cannot be fsynced, let be).
void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  HH_CHECK(fd >= 0, "save_hf_model: cannot open folder ", dir, " to fsync it: ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  HH_CHECK(rc == 0 || err == EINVAL, "save_hf_model: fsync of folder ", dir, " failed: ", std::strerror(err));
}

// Swaps the complete export in `stage` (config.json written last) into `out`: out/config.json is
// removed first (a folder without it is not a model), the other staged files are renamed in, then
// config.json. Every step can run again after a crash (a stage with config.json is rolled forward).
void commit_stage(const std::string& out, const std::string& stage) {
  namespace fs = std::filesystem;
  const std::string config = (fs::path(out) / "config.json").string();
  if (::unlink(config.c_str()) != 0 && errno != ENOENT)
    fail(str("save_hf_model: cannot remove the old ", config, ": ", std::strerror(errno)));
  std::error_code ec;
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(stage, ec)) {
    const std::string name = e.path().filename().string();
    if (name != "config.json" && name.find(".tmp.") == std::string::npos && e.is_regular_file(ec)) names.push_back(name);
  }
  HH_CHECK(!ec, "save_hf_model: cannot list ", stage, ": ", ec.message());
  for (const std::string& name : names) {
    const std::string from = (fs::path(stage) / name).string(), to = (fs::path(out) / name).string();
    if (::rename(from.c_str(), to.c_str()) != 0)
      fail(str("save_hf_model: cannot move ", from, " to ", to, ": ", std::strerror(errno)));
  }
  // An export without the transformers module (softmax, gated, a hybrid encoder) over one with it: the old
  // module goes, so the folder holds nothing its config.json does not name.
  if (std::find(names.begin(), names.end(), kModelingFile) == names.end()) {
    const std::string old_module = (fs::path(out) / kModelingFile).string();
    if (::unlink(old_module.c_str()) != 0 && errno != ENOENT)
      fail(str("save_hf_model: cannot remove the old ", old_module, ": ", std::strerror(errno)));
  }
  fsync_dir(out);
  const std::string staged_config = (fs::path(stage) / "config.json").string();
  if (::rename(staged_config.c_str(), config.c_str()) != 0)
    fail(str("save_hf_model: cannot move ", staged_config, " to ", config, ": ", std::strerror(errno)));
  fsync_dir(out);
  fs::remove_all(stage, ec);
}

// Stages of exports into `out` whose process died: a complete one (config.json) is rolled forward,
// an incomplete one removed (temp_owner_gone decides which are stale). Errors are ignored.
void recover_stages(const std::string& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> stages;
  for (const fs::directory_entry& e : fs::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kStagePrefix, 0) != 0 || !e.is_directory(ec) || e.is_symlink(ec)) continue;
    const std::string rest = name.substr(std::string(kStagePrefix).size());
    const size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string::npos || dot > 9 || rest.find_first_not_of("0123456789") != dot ||
        rest.find_first_not_of("0123456789", dot + 1) != std::string::npos)
      continue;
    const long long pid = std::stoll(rest.substr(0, dot));
    // An empty stage of a process that no longer exists is removed even when it is younger than
    // this process (temp_owner_gone keeps those, in case the pid was reused): a run killed just
    // after creating its stage, then resumed within the same second, left it behind.
    const bool empty_of_dead = pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH &&
                               fs::is_empty(e.path(), ec);
    if (empty_of_dead || temp_owner_gone(e.path().string(), pid)) stages.push_back(e.path());
  }
  std::sort(stages.begin(), stages.end());
  for (const fs::path& stage : stages) {
    try {
      if (fs::is_regular_file(stage / "config.json", ec)) commit_stage(out, stage.string());
    } catch (const Error&) {
    }
    fs::remove_all(stage, ec);
  }
}

}  // namespace

void save_hf_model(const HFModel& model, const std::string& out_folder, const std::string& config_json,
                   const std::string& config_origin, const std::string& files_folder, WeightFormat format) {
  namespace fs = std::filesystem;
  NamedTensors weights = model.hf_state_dict();
  for (const auto& [name, t] : weights)
    HH_CHECK(name.find(".lora_") == std::string::npos, "save_hf_model: the model still has LoRA adapters ('", name,
             "'); merge them first (merge_lora)");
  const ExportConfig config = export_config(config_json, config_origin, model.options(), format);
  // Every tensor as written (an int8 folder: the Linears' values and scales), checked before any file is.
  std::vector<std::pair<std::string, Tensor>> tensors;
  if (format == WeightFormat::int8) {
    tensors = int8_folder_tensors(model, std::move(weights));
  } else {
    for (auto& [name, t] : weights) tensors.emplace_back(name, t.to(Device::cpu()).contiguous());
  }
  ensure_writable_dir(out_folder);
  recover_stages(out_folder);
  // All or nothing: the files are written into a hidden stage folder inside out_folder (the same
  // file system) and swapped in only when all are complete; a failure (a full disk) removes the
  // stage and leaves a previous export in out_folder as it was.
  static std::atomic<int> counter{0};
  std::string stage;
  std::error_code ec;
  for (int attempt = 0; attempt < 100 && stage.empty(); ++attempt) {
    const fs::path p = fs::path(out_folder) / str(kStagePrefix, ::getpid(), ".", counter.fetch_add(1));
    if (fs::create_directory(p, ec)) stage = p.string();
    HH_CHECK(!ec, "save_hf_model: cannot create the folder ", p.string(), ": ", ec.message());
  }
  HH_CHECK(!stage.empty(), "save_hf_model: cannot create a unique stage folder in ", out_folder);
  try {
    for (const char* name : kCopied) {
      if (files_folder.empty()) break;
      const fs::path from = fs::path(files_folder) / name;
      if (fs::exists(from)) write_file_atomic((fs::path(stage) / name).string(), read_file(from.string()));
    }
    // With a checksum per tensor: hedgehog readers verify it (core/safetensors.h); others ignore it.
    save_safetensors((fs::path(stage) / "model.safetensors").string(), tensors, {{"format", "pt"}},
                     Checksums::xxh3);
    if (config.python)  // what transformers runs (config.json's auto_map names its classes)
      write_file_atomic((fs::path(stage) / kModelingFile).string(), internal::kModelingHedgehogPy);
    // config.json last: a folder with a config is a complete one.
    write_file_atomic((fs::path(stage) / "config.json").string(), config.text);
  } catch (...) {
    fs::remove_all(stage, ec);
    throw;
  }
  try {
    commit_stage(out_folder, stage);
  } catch (const Error& e) {  // the stage is complete: the next export into out_folder rolls it forward
    fail(str(e.what(), " (the complete export is in ", stage, "; saving into ", out_folder,
             " again finishes the swap)"));
  }
}

void apply_hedgehog_section(const HFConfig& config, HFModelOptions& options) {
  if (!config.has("hedgehog")) return;
  const HFConfig h = config.child("hedgehog");
  options.mixer = parse_mixer(h.get_string("mixer"), str("hf: ", h.origin(), ": mixer"));
  try {
    options.form = parse_linear_form(h.get_string("form", "chunked"));
  } catch (const Error& e) {
    fail(str("hf: ", h.origin(), ": form: ", e.what()));
  }
  options.chunk = h.get_int("chunk", options.chunk);
  HH_CHECK(options.chunk >= 1, "hf: ", h.origin(), ": chunk must be >= 1");
  options.eps = h.get_double("eps", options.eps);
  options.window = h.get_int("window", options.window);
  HH_CHECK(options.window >= 1, "hf: ", h.origin(), ": window must be >= 1");
  if (h.has("softmax_layers")) options.softmax_layers = h.get_ints("softmax_layers");  // checked by the family
  options.gate = parse_gate(h.get_string("gate", "none"), str("hf: ", h.origin(), ": gate"));
  options.gate_output =
      parse_gate_output(h.get_string("gate_output", "normalizer"), str("hf: ", h.origin(), ": gate_output"));
  HH_CHECK(options.gate_output == GateOutput::normalizer || options.gate != Gate::none, "hf: ", h.origin(),
           ": gate_output '", name(options.gate_output), "' needs a gate");
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
    fm.hybrid_affine = f.get_bool("hybrid_affine", fm.hybrid_affine);
    HH_CHECK(fm.feature_dim >= 0 && fm.redraw_interval >= 0 && fm.cosformer_length >= 0, "hf: ", f.origin(),
             ": feature_dim, redraw_interval and cosformer_length must be >= 0");
  }
}

}  // namespace hh::nn
