// Quantized HF folders (nn/models/hf_int8.h, issue 37 item 2): a model loaded with int8 weights,
// saved by save_hf_model(..., int8) and loaded back gives the same int8 values and scales in every
// Linear and bit-identical logits (GPT-2, a sharded Llama with an untied head, BERT), also on every
// CPU ISA path (an installed weight is re-packed, never re-quantized); the folder's files; and each
// hostile input (scales NaN, infinite, zero, negative, of the wrong shape or dtype, missing; an I8
// weight of the wrong shape or out of range; an unknown quant_method; a config and weights that
// disagree; --weights f32 for an int8 folder) an error naming the file and the tensor or key.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "nn/layers.h"
#include "nn/models/bert.h"
#include "nn/models/hf_int8.h"
#include "nn/models/hf_model.h"
#include "nn/models/hf_save.h"
#include "tests/error_of.h"
#include "tests/isa_scope.h"
#include "tests/nn/models/decoder_test_util.h"
#include "tests/op_table.h"
#include "tests/temp_dir.h"

using namespace hh;
using namespace hh::nn;
using hh::test::error_of;
using hh::test::hf_fixture;
using hh::test::hf_reference;
namespace fs = std::filesystem;

namespace {

HFModelOptions int8_options() {
  HFModelOptions o;
  o.weights = WeightFormat::int8;
  return o;
}

std::map<std::string, Linear*> linears_of(Module& m) {
  std::map<std::string, Linear*> out;
  for (auto& [name, mod] : m.named_modules())
    if (auto* lin = dynamic_cast<Linear*>(mod.get())) out.emplace(name, lin);
  return out;
}

// The int8 values and scales a Linear multiplies by.
struct Int8Of {
  std::vector<int8_t> values;
  std::vector<float> scales;
};
Int8Of int8_of(Linear& lin) {
  const auto p = lin.weight_cache.get(lin.weight, WeightFormat::int8);
  return {int8_values(*p), std::vector<float>(p->scales.begin(), p->scales.begin() + p->out_features)};
}

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(read_file(p.string())); }

// The logits of a fixture's reference input: decoders' forward, BERT's classifier.
std::vector<float> logits_of(HFModel& m, const std::string& fixture) {
  const SafeTensors r = hf_reference(fixture);
  if (auto* lm = dynamic_cast<CausalLM*>(&m)) return to_vector<float>(lm->forward(r.tensors.at("input_ids")));
  auto* bert = dynamic_cast<BertForSequenceClassification*>(&m);
  REQUIRE(bert != nullptr);
  return to_vector<float>(bert->forward(r.tensors.at("input_ids"), r.tensors.at("token_type_ids"),
                                        r.tensors.at("attention_mask")));
}

// A decoder's logits through prefill and three steps (the decoding path's products).
std::vector<float> decoded_logits(CausalLM& lm) {
  DecodeState st = lm.start_decoding();
  std::vector<float> out = to_vector<float>(lm.prefill(from_vector(std::vector<int64_t>{3, 1, 4, 1}, {1, 4}, {DType::i64}), st));
  for (int64_t id : {5, 9, 2}) {
    const auto l = to_vector<float>(lm.step(from_vector(std::vector<int64_t>{id}, {1, 1}, {DType::i64}), st));
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

// A copy of a folder's files into a fresh folder under `dir`.
std::string copy_folder(const std::string& from, const hh::test::TempDir& dir, const std::string& name) {
  const fs::path to = dir.path / name;
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from)) fs::copy_file(e.path(), to / e.path().filename());
  return to.string();
}

// Rewrites folder/model.safetensors with what `edit` leaves in the list.
void edit_weights(const std::string& folder, const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
  const std::string file = folder + "/model.safetensors";
  const SafeTensors st = load_safetensors(file);
  std::vector<std::pair<std::string, Tensor>> list;
  for (const auto& n : st.order) list.emplace_back(n, st.tensors.at(n).contiguous());
  edit(list);
  save_safetensors(file, list);
}
Tensor& tensor_named(std::vector<std::pair<std::string, Tensor>>& list, const std::string& name) {
  for (auto& [n, t] : list)
    if (n == name) return t;
  FAIL("no tensor " << name);
  throw Error("unreachable");
}
void edit_config(const std::string& folder, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json c = read_json(fs::path(folder) / "config.json");
  edit(c);
  write_file_atomic(folder + "/config.json", c.dump(2));
}

}  // namespace

TEST_CASE("int8 folder: GPT-2, a sharded Llama and BERT round-trip: the same int8 values and scales, "
          "bit-identical logits") {
  if (!hh::test::test_device().is_cpu()) return;  // int8 weights are CPU only
  NoGradGuard ng;
  hh::test::TempDir dir("int8_folder");
  for (const std::string fixture : {"gpt2-tiny", "llama-tiny", "bert-tiny"}) {
    INFO("fixture " << fixture);
    const std::string out = (dir.path / fixture).string();
    auto at_load = load_hf_model(hf_fixture(fixture), int8_options());
    save_hf_model(*at_load, out, hf_fixture(fixture), WeightFormat::int8);

    // The folder: config.json with the quantization_config and a model_type transformers refuses,
    // generation_config.json as it was, no transformers module, I8 weights (out, in) + F32 scales.
    const nlohmann::json config = read_json(fs::path(out) / "config.json");
    REQUIRE(config.contains("quantization_config"));
    CHECK(config["quantization_config"]["quant_method"] == "hedgehog_int8");
    CHECK(config["quantization_config"]["bits"] == 8);
    CHECK(config["model_type"].get<std::string>().rfind("hedgehog_", 0) == 0);
    CHECK_FALSE(config.contains("auto_map"));
    CHECK_FALSE(fs::exists(fs::path(out) / "modeling_hedgehog.py"));
    if (fs::exists(fs::path(hf_fixture(fixture)) / "generation_config.json"))
      CHECK(read_file(out + "/generation_config.json") == read_file(hf_fixture(fixture) + "/generation_config.json"));
    const SafeTensors file = load_safetensors(out + "/model.safetensors");
    const auto lin_at_load = linears_of(*at_load);
    REQUIRE(lin_at_load.size() >= 8);
    for (const auto& entry : lin_at_load) {  // (no structured binding: clang 14 refuses one in INFO)
      const std::string& name = entry.first;
      const auto& lin = entry.second;
      INFO("linear " << name);
      const Tensor& q = file.tensors.at(name + ".weight");
      const Tensor& s = file.tensors.at(name + ".weight_scale");
      CHECK(q.dtype() == DType::i8);
      CHECK(q.shape() == Shape{lin->out_features, lin->in_features});  // (out, in), GPT-2's Conv1D too
      CHECK(s.dtype() == DType::f32);
      CHECK(s.shape() == Shape{lin->out_features});
      const Int8Of want = int8_of(*lin);
      std::vector<int8_t> got(want.values.size());
      std::memcpy(got.data(), q.data<int8_t>(), got.size());
      CHECK(got == want.values);
      CHECK(to_vector<float>(s) == want.scales);
    }
    // The other tensors as the f32 folder holds them (an embedding, a norm).
    const SafeTensors src = read_hf_weights(hf_fixture(fixture));
    int64_t same = 0;
    for (const auto& [name, t] : file.tensors)
      if (src.tensors.count(name) && t.dtype() == DType::f32 && src.tensors.at(name).shape() == t.shape())
        same += to_vector<float>(t) == to_vector<float>(src.tensors.at(name).to(DType::f32));
    CHECK(same >= 3);

    // Loaded with the default options: int8, every Linear's stored weight installed, equal values.
    auto loaded = load_hf_model(out);
    CHECK(loaded->options().weights == WeightFormat::int8);
    CHECK(count_installed_int8(*loaded) == static_cast<int64_t>(lin_at_load.size()));
    const auto lin_loaded = linears_of(*loaded);
    REQUIRE(lin_loaded.size() == lin_at_load.size());
    for (const auto& entry : lin_loaded) {
      const std::string& name = entry.first;
      const auto& lin = entry.second;
      INFO("linear " << name);
      CHECK(lin->weight_format == WeightFormat::int8);
      const Int8Of a = int8_of(*lin_at_load.at(name)), b = int8_of(*lin);
      CHECK(a.values == b.values);
      CHECK(a.scales == b.scales);
      // The f32 weight holds the dequantized values.
      const auto w = to_vector<float>(lin->weight);
      const int64_t k = lin->in_features;
      CHECK(w[static_cast<size_t>(k + 1)] == static_cast<float>(b.values[static_cast<size_t>(k + 1)]) * b.scales[1]);
    }
    CHECK(logits_of(*loaded, fixture) == logits_of(*at_load, fixture));
    if (auto* lm = dynamic_cast<CausalLM*>(loaded.get()))
      CHECK(decoded_logits(*lm) == decoded_logits(*dynamic_cast<CausalLM*>(at_load.get())));
    // Nothing was quantized again: the installed weights are still the ones handed out.
    CHECK(count_installed_int8(*loaded) == static_cast<int64_t>(lin_at_load.size()));

    // Saved again as int8: the same bytes of weights; as f32: an ordinary folder again.
    const std::string again = (dir.path / (fixture + "-again")).string();
    save_hf_model(*loaded, again, out, WeightFormat::int8);
    CHECK(read_file(again + "/model.safetensors") == read_file(out + "/model.safetensors"));
    const std::string f32 = (dir.path / (fixture + "-f32")).string();
    save_hf_model(*loaded, f32, out);
    const nlohmann::json f32_config = read_json(fs::path(f32) / "config.json");
    CHECK_FALSE(f32_config.contains("quantization_config"));
    CHECK(f32_config["model_type"] == read_json(fs::path(hf_fixture(fixture)) / "config.json")["model_type"]);
    auto back = load_hf_model(f32);
    CHECK(back->options().weights == WeightFormat::f32);
    CHECK(count_installed_int8(*back) == 0);
  }
}

TEST_CASE("int8 folder: an installed weight is re-packed on every CPU ISA path, never re-quantized") {
  if (!hh::test::test_device().is_cpu()) return;
  NoGradGuard ng;
  hh::test::IsaScope scope;
  hh::test::TempDir dir("int8_isa");
  const std::string out = (dir.path / "gpt2").string();
  auto at_load = load_hf_model(hf_fixture("gpt2-tiny"), int8_options());
  save_hf_model(*at_load, out, hf_fixture("gpt2-tiny"), WeightFormat::int8);
  auto loaded = load_hf_model(out);
  for (CpuIsa isa : hh::test::supported_isas()) {
    INFO("isa " << cpu_isa_name(isa));
    set_cpu_isa(isa);
    CHECK(logits_of(*loaded, "gpt2-tiny") == logits_of(*at_load, "gpt2-tiny"));
    for (const auto& [name, lin] : linears_of(*loaded)) {
      CHECK(lin->weight_cache.installed_for(lin->weight));
      CHECK(lin->weight_cache.get(lin->weight, WeightFormat::int8)->isa == isa);
    }
  }
  // set_weight_format(int8) keeps the installed weights; f32 drops them (the f32 weight is q · s).
  set_weight_format(*loaded, WeightFormat::int8);
  CHECK(count_installed_int8(*loaded) == static_cast<int64_t>(linears_of(*loaded).size()));
  set_weight_format(*loaded, WeightFormat::f32);
  CHECK(count_installed_int8(*loaded) == 0);
  // A write to a weight drops its installed form: the new values are quantized.
  set_weight_format(*loaded, WeightFormat::int8);
  auto lins = linears_of(*loaded);
  Linear& first = *lins.begin()->second;
  copy_(first.weight, mul(first.weight, 2.0));
  CHECK_FALSE(first.weight_cache.installed_for(first.weight));
}

TEST_CASE("int8 folder: hostile scales and weights are errors naming the file and the tensor") {
  if (!hh::test::test_device().is_cpu()) return;
  hh::test::TempDir dir("int8_hostile");
  const std::string good = (dir.path / "good").string();
  save_hf_model(*load_hf_model(hf_fixture("gpt2-tiny"), int8_options()), good, hf_fixture("gpt2-tiny"),
                WeightFormat::int8);
  const std::string key = "transformer.h.0.attn.c_attn.weight", scale = key + "_scale";
  int case_no = 0;
  // One broken copy of the good folder per case: `edit` breaks it, the load must fail naming `fragments`.
  const auto broken = [&](const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit,
                          std::vector<std::string> fragments) {
    const std::string folder = copy_folder(good, dir, "case" + std::to_string(case_no++));
    edit_weights(folder, edit);
    fragments.push_back(folder + "/model.safetensors");
    error_of([&] { load_hf_model(folder); }, fragments);
  };
  const auto set_scale = [&](float v) {
    return [&, v](std::vector<std::pair<std::string, Tensor>>& list) {
      Tensor s = tensor_named(list, scale).clone();
      s.data<float>()[3] = v;
      tensor_named(list, scale) = s;
    };
  };
  broken(set_scale(std::numeric_limits<float>::quiet_NaN()), {"scale tensor '" + scale + "'", "nan at element 3", "finite and > 0"});
  broken(set_scale(std::numeric_limits<float>::infinity()), {"scale tensor '" + scale + "'", "inf at element 3"});
  broken(set_scale(0.0f), {"scale tensor '" + scale + "'", "holds 0 at element 3"});
  broken(set_scale(-0.5f), {"scale tensor '" + scale + "'", "holds -0.5 at element 3"});
  broken([&](auto& list) { tensor_named(list, scale) = slice(tensor_named(list, scale), 0, 0, 119).contiguous(); },
         {"scale tensor '" + scale + "' has shape", "expected (120)"});
  broken([&](auto& list) { tensor_named(list, scale) = reshape(tensor_named(list, scale), {120, 1}); },
         {"scale tensor '" + scale + "' has shape"});
  broken([&](auto& list) { tensor_named(list, scale) = tensor_named(list, scale).to(DType::f16); },
         {"scale tensor '" + scale + "' is f16 (expected F32)"});
  broken([&](auto& list) { tensor_named(list, scale) = tensor_named(list, scale).to(DType::i8); },
         {"scale tensor '" + scale + "' is i8 (expected F32)"});
  broken([&](auto& list) {
    list.erase(std::remove_if(list.begin(), list.end(), [&](const auto& kv) { return kv.first == scale; }), list.end());
  }, {"int8 weight '" + key + "' has no scale tensor '" + scale + "'"});
  // The I8 weight stored (in, out), with scales to match: the Linear is (out, in).
  broken([&](auto& list) {
    tensor_named(list, key) = transpose(tensor_named(list, key), 0, 1).contiguous();
    tensor_named(list, scale) = ones({40}, {DType::f32});
  }, {"int8 weight '" + key + "' has shape (40, 120) but the Linear", "(120, 40)"});
  broken([&](auto& list) {
    Tensor q = tensor_named(list, key).clone();
    q.data<int8_t>()[7] = -128;
    tensor_named(list, key) = q;
  }, {"int8 weight '" + key + "' holds -128 at element 7"});
  broken([&](auto& list) { tensor_named(list, key) = reshape(tensor_named(list, key), {120 * 40}); },
         {"int8 weight '" + key + "' has shape"});
  // The weight in F32 beside a scale: the scale belongs to nothing.
  broken([&](auto& list) { tensor_named(list, key) = tensor_named(list, key).to(DType::f32); },
         {"scale tensor '" + scale + "' belongs to no I8 weight", "is f32"});
  // I8 for a tensor that is no Linear's weight (the token embedding).
  broken([&](auto& list) {
    Tensor& wte = tensor_named(list, "transformer.wte.weight");
    const int64_t rows = wte.size(0);
    wte = zeros(wte.shape(), {DType::i8});
    list.emplace_back("transformer.wte.weight_scale", ones({rows}, {DType::f32}));
  }, {"int8 weight 'transformer.wte.weight'", "not the weight of a Linear"});
  broken([&](auto& list) { list.emplace_back("transformer.h.0.attn.extra", ones({1}, {DType::i8})); },
         {"tensor 'transformer.h.0.attn.extra' is I8"});
}

TEST_CASE("int8 folder: config.json and the weights must agree; an unknown quant_method is refused") {
  if (!hh::test::test_device().is_cpu()) return;
  hh::test::TempDir dir("int8_config");
  const std::string good = (dir.path / "good").string();
  save_hf_model(*load_hf_model(hf_fixture("gpt2-tiny"), int8_options()), good, hf_fixture("gpt2-tiny"),
                WeightFormat::int8);
  int case_no = 0;
  const auto broken = [&](const std::string& from, const std::function<void(nlohmann::json&)>& edit,
                          std::vector<std::string> fragments) {
    const std::string folder = copy_folder(from, dir, "case" + std::to_string(case_no++));
    edit_config(folder, edit);
    fragments.push_back(folder + "/config.json");
    error_of([&] { load_hf_model(folder); }, fragments);
  };
  broken(good, [](auto& c) { c["quantization_config"]["quant_method"] = "gptq"; },
         {"quantization_config", "quant_method 'gptq' is not one the engine reads"});
  broken(good, [](auto& c) { c["quantization_config"]["bits"] = 4; }, {"quantization_config", "bits 4"});
  broken(good, [](auto& c) { c["quantization_config"].erase("quant_method"); }, {"quant_method"});
  broken(good, [](auto& c) { c["quantization_config"] = "int8"; }, {"quantization_config"});
  // I8 weights without the quantization_config, and the config without I8 weights.
  {
    const std::string folder = copy_folder(good, dir, "no-config");
    edit_config(folder, [](auto& c) { c.erase("quantization_config"); });
    error_of([&] { load_hf_model(folder); }, {folder, "no quantization_config"});
  }
  {
    const std::string folder = copy_folder(hf_fixture("gpt2-tiny"), dir, "f32-declared");
    edit_config(folder, [](auto& c) { c["quantization_config"] = {{"quant_method", "hedgehog_int8"}, {"bits", 8}}; });
    error_of([&] { load_hf_model(folder); }, {folder, "hold no I8 Linear weight"});
  }
  // f32 asked for explicitly (an app's --weights f32) is refused, saying why; by default it is int8.
  error_of([&] { folder_weights(good, WeightFormat::f32, true, "--weights"); },
               {"--weights f32", good, "holds int8 weights", "load as int8 only"});
  CHECK(folder_weights(good, WeightFormat::f32, false, "--weights") == WeightFormat::int8);
  CHECK(folder_weights(hf_fixture("gpt2-tiny"), WeightFormat::f32, true, "--weights") == WeightFormat::f32);
  // Another dtype than f32 is refused before the weights are read.
  HFModelOptions bf16;
  bf16.dtype = DType::bf16;
  error_of([&] { load_hf_model(good, bf16); }, {good, "holds int8 weights", "CPU in f32"});
  // Saving int8 over a config of another quantization is refused.
  error_of([&] { config_with_stored_weights(R"({"quantization_config": {"quant_method": "awq"}})", "cfg",
                                                WeightFormat::int8); },
               {"cfg", "quantization_config names another quantization"});
}

TEST_CASE("int8 folder: stored scales are used as stored, even one that quantizing q · s would not give back") {
  if (!hh::test::test_device().is_cpu()) return;
  NoGradGuard ng;
  hh::test::TempDir dir("int8_exact");
  const std::string folder = (dir.path / "q").string();
  save_hf_model(*load_hf_model(hf_fixture("gpt2-tiny"), int8_options()), folder, hf_fixture("gpt2-tiny"),
                WeightFormat::int8);
  // A scale s with fl(fl(127 · s) / 127) != s: the row's values dequantized and quantized again
  // (what a loader that re-quantized the f32 weight would do) give another scale.
  float s = 0.01f;
  while (static_cast<float>(static_cast<float>(127.0f * s) / 127.0f) == s) s = std::nextafter(s, 1.0f);
  const std::string key = "transformer.h.1.mlp.c_fc.weight";
  edit_weights(folder, [&](auto& list) {
    Tensor scales = tensor_named(list, key + "_scale").clone();
    scales.data<float>()[2] = s;
    tensor_named(list, key + "_scale") = scales;
  });
  const SafeTensors file = load_safetensors(folder + "/model.safetensors");
  const Tensor& q = file.tensors.at(key);
  std::vector<int8_t> stored(static_cast<size_t>(q.numel()));
  std::memcpy(stored.data(), q.data<int8_t>(), stored.size());
  auto loaded = load_hf_model(folder);
  Linear& lin = *linears_of(*loaded).at("transformer.h.1.mlp.c_fc");
  const Int8Of got = int8_of(lin);
  CHECK(got.values == stored);
  CHECK(got.scales == to_vector<float>(file.tensors.at(key + "_scale")));
  CHECK(got.scales[2] == s);
  // What quantizing the loaded f32 weight gives instead: a different scale for that row.
  std::vector<int8_t> requantized_values;
  std::vector<float> requantized_scales;
  quantize_per_channel(lin.weight.data<float>(), lin.out_features, lin.in_features, requantized_values,
                       requantized_scales);
  CHECK(requantized_scales[2] != s);
}
