#include "nn/models/hf_int8.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "nn/layers.h"

namespace hh::nn {

namespace {
constexpr const char* kQuantKey = "quantization_config";
constexpr const char* kWeightSuffix = ".weight";

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The int8 weight a Linear or tied head multiplies by (its installed or prepared one), or its f32
// weight quantized now when it runs in f32 (its cache is left as it is).
std::shared_ptr<const PreparedWeight> int8_of(const Tensor& weight, WeightFormat format, WeightCache& cache) {
  return format == WeightFormat::int8 ? cache.get(weight, WeightFormat::int8)
                                      : prepare_weight(weight, WeightFormat::int8);
}
}  // namespace

WeightFormat hf_stored_weights(const HFConfig& config) {
  if (!config.has(kQuantKey)) return WeightFormat::f32;
  const HFConfig q = config.child(kQuantKey);
  const std::string method = q.get_string("quant_method");
  HH_CHECK(method == kInt8QuantMethod, "hf: ", q.origin(), ": quant_method '", method,
           "' is not one the engine reads (it reads '", kInt8QuantMethod,
           "', written by hf_run --save-quantized); load the original f32 folder instead");
  const int64_t bits = q.get_int("bits");
  HH_CHECK(bits == 8, "hf: ", q.origin(), ": bits ", bits, " (", kInt8QuantMethod, " is 8-bit)");
  return WeightFormat::int8;
}

WeightFormat hf_folder_stored_weights(const std::string& folder) {
  return hf_stored_weights(HFConfig::load((std::filesystem::path(folder) / "config.json").string()));
}

WeightFormat folder_weights(const std::string& folder, WeightFormat asked, bool given, const std::string& flag) {
  if (hf_folder_stored_weights(folder) == WeightFormat::f32) return asked;
  HH_CHECK(!given || asked == WeightFormat::int8, flag, " ", weight_format_name(asked), ": ", folder,
           " holds int8 weights (config.json: quantization_config '", kInt8QuantMethod,
           "'), which load as int8 only (their f32 originals are not in the folder); leave out ", flag,
           " or load the original f32 folder");
  return WeightFormat::int8;
}

std::string config_with_stored_weights(const std::string& config_json, const std::string& origin,
                                       WeightFormat format) {
  nlohmann::json config = nlohmann::json::parse(config_json, nullptr, false);
  HH_CHECK(config.is_object(), "save_hf_model: ", origin, " is not a JSON object");
  if (config.contains(kQuantKey)) {
    const nlohmann::json& q = config[kQuantKey];
    const bool ours = q.is_object() && q.contains("quant_method") && q["quant_method"] == kInt8QuantMethod;
    HH_CHECK(ours || q.is_null(), "save_hf_model: ", origin, ": ", kQuantKey,
             " names another quantization; its weights cannot be written as this model's");
    config.erase(kQuantKey);
  }
  if (format == WeightFormat::int8)
    config[kQuantKey] = {{"quant_method", kInt8QuantMethod},
                         {"bits", 8},
                         {"scheme", "symmetric per output channel"},
                         {"weight_dtype", "int8"},
                         {"values", "[-127, 127]"},
                         {"modules", "every Linear (embeddings, norms, biases and a tied LM head stay as stored)"},
                         {"layout", "<name>.weight I8 (out, in); <name>.weight_scale F32 (out); weight = values * scale"}};
  return config.dump(2) + "\n";
}

std::vector<std::pair<std::string, Tensor>> int8_folder_tensors(const Module& model, NamedTensors hf_tensors) {
  std::map<std::string, const Linear*> linears;  // "<module>.weight" -> its Linear
  for (const auto& [name, mod] : model.named_modules())
    if (const auto* lin = dynamic_cast<const Linear*>(mod.get())) linears.emplace(name + kWeightSuffix, lin);
  std::set<std::string> given;
  for (const auto& [name, t] : hf_tensors) given.insert(name);
  for (const auto& [name, lin] : linears)
    HH_CHECK(given.count(name), "save_hf_model: the Linear '", name.substr(0, name.size() - std::strlen(kWeightSuffix)),
             "' has no weight among the model's HF tensors, so it cannot be written quantized");
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, t] : hf_tensors) {
    const auto it = linears.find(name);
    if (it == linears.end()) {
      out.emplace_back(name, t.to(Device::cpu()).contiguous());
      continue;
    }
    const Linear& lin = *it->second;
    HH_CHECK(lin.weight.device().is_cpu() && lin.weight.dtype() == DType::f32, "save_hf_model: int8 weights are written "
             "from a model on the CPU in f32; '", name, "' is ", lin.weight.device(), ", ", lin.weight.dtype());
    std::shared_ptr<const PreparedWeight> p;
    try {
      p = int8_of(lin.weight, lin.weight_format, lin.weight_cache);
    } catch (const Error& e) {
      fail(str("save_hf_model: ", name, ": ", e.what()));
    }
    const int64_t n = p->out_features, k = p->in_features;
    Tensor values = empty({n, k}, {DType::i8, Device::cpu()});  // (out, in)
    const std::vector<int8_t> v = int8_values(*p);
    std::memcpy(values.data<int8_t>(), v.data(), v.size());
    Tensor scales = empty({n}, {DType::f32, Device::cpu()});  // (out)
    std::memcpy(scales.data<float>(), p->scales.data(), static_cast<size_t>(n) * sizeof(float));
    out.emplace_back(name, values);
    out.emplace_back(name + kInt8ScaleSuffix, scales);
  }
  return out;
}

std::string hf_weights_file(const std::string& folder) {
  std::error_code ec;
  const std::filesystem::path single = std::filesystem::path(folder) / "model.safetensors";
  return std::filesystem::is_regular_file(single, ec) ? single.string() : folder;
}

std::map<std::string, FileInt8Weight> find_int8_weights(const SafeTensors& weights, const std::string& folder) {
  const std::string origin = hf_weights_file(folder);
  std::map<std::string, FileInt8Weight> found;
  for (const auto& [name, t] : weights.tensors) {
    if (t.dtype() != DType::i8) continue;
    HH_CHECK(ends_with(name, kWeightSuffix), "hf: ", origin, ": tensor '", name,
             "' is I8, which only a Linear's quantized weight ('<name>.weight') may be");
    HH_CHECK(t.dim() == 2 && t.size(0) > 0 && t.size(1) > 0, "hf: ", origin, ": int8 weight '", name,
             "' has shape ", t.shape(), " (expected (out, in), both > 0)");
    const Tensor values = t.to(Device::cpu()).contiguous();
    const int8_t* v = values.data<int8_t>();
    for (int64_t i = 0; i < values.numel(); ++i)
      HH_CHECK(v[i] != -128, "hf: ", origin, ": int8 weight '", name, "' holds -128 at element ", i,
               " (values are in [-127, 127])");
    const std::string scale_name = name + kInt8ScaleSuffix;
    const auto s = weights.tensors.find(scale_name);
    HH_CHECK(s != weights.tensors.end(), "hf: ", origin, ": int8 weight '", name, "' has no scale tensor '",
             scale_name, "'");
    const Tensor& st = s->second;
    HH_CHECK(st.dtype() == DType::f32, "hf: ", origin, ": scale tensor '", scale_name, "' is ", st.dtype(),
             " (expected F32)");
    HH_CHECK(st.dim() == 1 && st.size(0) == t.size(0), "hf: ", origin, ": scale tensor '", scale_name, "' has shape ",
             st.shape(), " (expected (", t.size(0), "): one scale per output row of '", name, "' ", t.shape(), ")");
    const Tensor scales = st.to(Device::cpu()).contiguous();
    const float* sv = scales.data<float>();
    for (int64_t i = 0; i < scales.numel(); ++i)
      HH_CHECK(std::isfinite(sv[i]) && sv[i] > 0.0f, "hf: ", origin, ": scale tensor '", scale_name, "' holds ", sv[i],
               " at element ", i, " (every scale must be finite and > 0)");
    found.emplace(name, FileInt8Weight{values, scales, scale_name});
  }
  for (const auto& [name, t] : weights.tensors) {
    if (!ends_with(name, std::string(kWeightSuffix) + kInt8ScaleSuffix)) continue;
    const std::string weight_name = name.substr(0, name.size() - std::strlen(kInt8ScaleSuffix));
    HH_CHECK(found.count(weight_name), "hf: ", origin, ": scale tensor '", name, "' belongs to no I8 weight ('",
             weight_name, "' is ", weights.tensors.count(weight_name) ? dtype_name(weights.tensors.at(weight_name).dtype())
                                                                     : "absent", ")");
  }
  return found;
}

Tensor dequantize_int8(const FileInt8Weight& w) {
  const int64_t n = w.values.size(0), k = w.values.size(1);
  Tensor out = empty({n, k}, {DType::f32, Device::cpu()});  // (out, in)
  const int8_t* v = w.values.data<int8_t>();
  const float* s = w.scales.data<float>();
  float* o = out.data<float>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) o[r * k + c] = static_cast<float>(v[r * k + c]) * s[r];
  return out;
}

std::shared_ptr<const PreparedWeight> prepare_file_int8(const FileInt8Weight& w) {
  const int64_t n = w.values.size(0), k = w.values.size(1);
  const int8_t* v = w.values.data<int8_t>();
  const float* s = w.scales.data<float>();
  return prepare_int8(std::vector<int8_t>(v, v + n * k), std::vector<float>(s, s + n), n, k);
}

int64_t count_installed_int8(Module& model) {
  int64_t n = 0;
  for (auto& [name, mod] : model.named_modules())
    if (auto* lin = dynamic_cast<Linear*>(mod.get()); lin && lin->weight_cache.installed_for(lin->weight)) ++n;
  return n;
}

}  // namespace hh::nn
