#include "nn/models/hf_weights.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/torch_bin.h"
#include "nn/gate.h"
#include "nn/layers.h"
#include "nn/models/hf_int8.h"

namespace hh::nn {

HFModelOptions layer_options(const HFModelOptions& o, int64_t layer) {
  HFModelOptions lo = o;
  lo.softmax_layers.clear();
  for (int64_t l : o.softmax_layers)
    if (l == layer) {  // a kept softmax layer has no state to gate
      lo.mixer = Mixer{};
      lo.gate = Gate::none;
      lo.gate_output = GateOutput::normalizer;
    }
  return lo;
}

void check_softmax_layers(const HFModelOptions& o, int64_t layers, const std::string& where) {
  if (o.softmax_layers.empty()) return;
  HH_CHECK(o.mixer.is_linear(), where, ": softmax_layers needs a linear or hybrid mixer (the model is softmax already)");
  std::set<int64_t> seen;
  for (int64_t l : o.softmax_layers) {
    HH_CHECK(l >= 0 && l < layers, where, ": softmax layer ", l, " is not one of the model's ", layers,
             " layers (0 to ", layers - 1, ")");
    HH_CHECK(seen.insert(l).second, where, ": softmax layer ", l, " is named twice");
  }
}

SafeTensors read_hf_weights(const std::string& folder) {
  namespace fs = std::filesystem;
  const fs::path dir(folder), single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(single, ec)) return load_safetensors(single.string());
  if (fs::exists(index, ec)) return load_safetensors_sharded(index.string());
  // PyTorch checkpoints (core/torch_bin.h) only when there is no safetensors file, as transformers.
  const fs::path bin = dir / "pytorch_model.bin", bin_index = dir / "pytorch_model.bin.index.json";
  if (fs::exists(bin, ec)) return load_torch_bin(bin.string());
  if (fs::exists(bin_index, ec)) return load_torch_bin_sharded(bin_index.string());
  HH_CHECK(fs::is_directory(dir, ec), "hf: ", folder, " is not a folder");
  fail(str("hf: ", folder, " has neither model.safetensors nor model.safetensors.index.json (nor pytorch_model.bin "
           "or pytorch_model.bin.index.json)"));
}

namespace {
std::string join(const std::vector<std::string>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return os.str();
}
bool is_new_weight(const std::string& name) { return name.find(".feature_map.") != std::string::npos; }
}  // namespace

void load_hf_weights(Module& model, const SafeTensors& weights, const std::string& origin, const HFRename& rename,
                     const HFTransform& transform, const std::function<bool(const std::string&)>& fresh) {
  std::map<std::string, Tensor> state;
  std::map<std::string, std::string> source;  // model name -> file name
  std::map<std::string, Shape> file_shape;    // model name -> shape as stored (before the transform)
  // A quantized folder's I8 weights and their scales (nn/models/hf_int8.h), all checked first.
  const std::map<std::string, FileInt8Weight> int8 = find_int8_weights(weights, origin);
  std::set<std::string> scale_names;
  for (const auto& [file_name, w] : int8) scale_names.insert(w.scale_name);
  std::map<std::string, Linear*> linears;  // "<module>.weight" -> its Linear
  if (!int8.empty())
    for (auto& [mname, mod] : model.named_modules())
      if (auto* lin = dynamic_cast<Linear*>(mod.get())) linears.emplace(mname + ".weight", lin);
  std::map<std::string, const FileInt8Weight*> int8_of;  // model name -> its file int8 weight
  for (const auto& [file_name, t] : weights.tensors) {
    if (scale_names.count(file_name)) continue;
    std::string name = rename ? rename(file_name) : file_name;
    if (name.empty()) continue;
    auto [it, fresh] = source.emplace(name, file_name);
    HH_CHECK(fresh, "hf: ", origin, ": tensors '", it->second, "' and '", file_name, "' both load into '", name, "'");
    if (const auto q = int8.find(file_name); q != int8.end()) {
      // Stored in the Linear's own layout (out, in): no transform. The f32 weight holds q · s.
      HH_CHECK(linears.count(name), "hf: ", hf_weights_file(origin), ": int8 weight '", file_name, "' loads into '",
               name, "', which is not the weight of a Linear (only Linears are stored in int8)");
      const Linear& lin = *linears.at(name);
      HH_CHECK(t.shape() == Shape({lin.out_features, lin.in_features}), "hf: ", hf_weights_file(origin),
               ": int8 weight '", file_name, "' has shape ", t.shape(), " but the Linear '", name, "' is (",
               lin.out_features, ", ", lin.in_features, ") (int8 weights are stored (out, in))");
      file_shape[name] = t.shape();
      state[name] = dequantize_int8(q->second);
      int8_of[name] = &q->second;
      continue;
    }
    // Every weight must be finite, as a resumed checkpoint's (train/checkpoint.h): a file holding
    // NaN or infinity (damaged, or saved from a diverged run) would run and print garbage as a
    // result. This reads each tensor as stored once (on the CPU the pages of the mapped file;
    // README "Running an HF model" gives the cost at load).
    const int64_t bad_at = first_non_finite(t);
    HH_CHECK(bad_at < 0, "hf: ", origin, ": tensor '", file_name, "' holds a non-finite value (", non_finite_text(t, bad_at),
             " at element ", bad_at, "): the file is damaged or was saved from a diverged run");
    file_shape[name] = t.shape();
    state[name] = transform ? transform(name, t) : t;
  }
  std::set<std::string> mine;
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [name, t] : model.state_dict()) {
    mine.insert(name);
    auto it = state.find(name);
    if (it == state.end()) {
      if (!is_new_weight(name) && !(fresh && fresh(name))) missing.push_back(name);
    } else if (it->second.shape() != t.shape()) {
      const Shape& stored = file_shape[name];
      const std::string as_loaded = stored == it->second.shape() ? "" : str(", loaded as ", it->second.shape());
      mismatched.push_back(str(source[name], " (file ", stored, as_loaded, ", model ", t.shape(), ")"));
    }
  }
  for (const auto& [name, t] : state)
    if (!mine.count(name)) unexpected.push_back(source[name]);
  HH_CHECK(missing.empty() && unexpected.empty(), "hf: ", origin, ": weights do not match the model: missing [",
           join(missing), "], unexpected [", join(unexpected), "]");
  HH_CHECK(mismatched.empty(), "hf: ", origin, ": wrong shape for ", join(mismatched));
  // A floating weight is read from a floating tensor only: integer or boolean data in its place is
  // a broken or foreign file, never cast. F64 is read as the model's dtype, which is said once.
  std::vector<std::string> wrong_dtype;
  bool narrowed_f64 = false;
  for (const auto& [name, t] : model.state_dict()) {
    auto it = state.find(name);
    if (it == state.end() || !is_floating(t.dtype())) continue;
    const DType d = it->second.dtype();
    if (!is_floating(d)) wrong_dtype.push_back(str(source[name], " (", dtype_name(d), ")"));
    narrowed_f64 = narrowed_f64 || (d == DType::f64 && t.dtype() != DType::f64);
  }
  HH_CHECK(wrong_dtype.empty(), "hf: ", origin, ": weights that must be floating point hold integer or boolean data: ",
           join(wrong_dtype));
  if (narrowed_f64) std::fprintf(stderr, "note: hf: %s: F64 weights are read as the model's dtype\n", origin.c_str());
  // A parameter whose file tensor already has its dtype, device and a contiguous layout takes that
  // tensor as is (on the CPU a view of the mapped file: no copy, pages read on first use); the rest
  // are copied and cast by load_state_dict.
  std::map<std::string, Tensor> rest;
  for (const auto& [name, current] : model.named_parameters()) {
    auto it = state.find(name);
    if (it == state.end()) continue;
    const Tensor& t = it->second;
    if (t.dtype() == current.dtype() && t.device() == current.device() && t.is_contiguous()) {
      Tensor& slot = model.parameter(name);
      const bool rg = slot.requires_grad();
      slot = t.detach();
      slot.requires_grad_(rg);
    } else {
      rest.emplace(name, t);
    }
    state.erase(it);
  }
  for (auto& kv : state) rest.emplace(kv.first, kv.second);  // buffers
  model.load_state_dict(rest, /*strict=*/false);
  // The int8 weights as stored, installed for the loaded f32 weights (never re-quantized).
  for (const auto& [name, w] : int8_of) {
    Linear& lin = *linears.at(name);
    lin.weight_format = WeightFormat::int8;
    lin.weight_cache.install(lin.weight, prepare_file_int8(*w));
  }
}

}  // namespace hh::nn
