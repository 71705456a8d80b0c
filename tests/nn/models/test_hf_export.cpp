// A converted folder (Llama, Mistral, Qwen2, Qwen3, GPT-2; BERT and ViT) that loads in transformers
// (save_hf_model + modeling_hedgehog.py): the
// folder carries the embedded module and an auto_map, the engine's logits of the re-saved tiny
// models agree with what transformers computed on the same folders (tests/fixtures/hf/export/
// logits.safetensors, made by tools/make_hf_export_fixtures.py), and a map the module does not
// implement is refused. tools/check_hf_export.py runs transformers itself where it is installed
// (the CTest hf_export_transformers); this file checks the same agreement without python.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/atomic_file.h"
#include "core/safetensors.h"
#include "nn/models/hf_save.h"
#include "tests/temp_dir.h"

using namespace hh;
using namespace hh::nn;
namespace fs = std::filesystem;

namespace {
std::string source_dir() { return std::string(HH_SOURCE_DIR); }
std::string fixture(const std::string& name) { return source_dir() + "/tests/fixtures/hf/" + name; }
std::string logits_fixture() { return fixture("export/logits.safetensors"); }

// One exported model: a tiny fixture converted to `mixer` with these feature-map settings.
struct ExportCase {
  const char* label;  // folder and fixture-tensor name part
  const char* mixer;
  FeatureMapConfig fm;
  int64_t window = 64;
  int64_t kept_layer = -1;  // a layer kept as softmax (-1: none)
  bool quadratic = false;   // the quadratic linear form (encoders: else the non-causal one)
};

FeatureMapConfig fm_with(void (*set)(FeatureMapConfig&)) {
  FeatureMapConfig f;
  set(f);
  return f;
}

// Every map modeling_hedgehog.py implements, its options, and hybrids (window 4 < the 12 ids, so
// both the window and the linear part are used), one with a layer kept as softmax.
std::vector<ExportCase> export_cases() {
  return {
      {"elu", "elu", {}},
      {"relu", "relu", {}},
      {"performer", "performer", fm_with([](FeatureMapConfig& f) { f.feature_dim = 16; f.seed = 3; })},
      // cosformer with M fixed: hf_run (the CTest's engine side) decodes the prompt, which needs M.
      {"cosformer-m16", "cosformer", fm_with([](FeatureMapConfig& f) { f.cosformer_length = 16; })},
      {"exp-t2", "exp", fm_with([](FeatureMapConfig& f) { f.temperature = 2.0; })},
      {"taylor", "taylor", {}},
      {"taylor-packed", "taylor", fm_with([](FeatureMapConfig& f) { f.taylor_packed = true; })},
      {"t2r", "t2r", {}},
      {"t2r-hh-untied", "t2r-hh", fm_with([](FeatureMapConfig& f) { f.untied = true; })},
      {"hedgehog", "hedgehog", {}},
      {"hedgehog-joint-untied-f12", "hedgehog",
       fm_with([](FeatureMapConfig& f) { f.joint_softmax = true; f.untied = true; f.feature_dim = 12; })},
      {"hedgehog-exp", "hedgehog-exp", {}},
      {"hedgehog-untrained", "hedgehog-untrained", {}},
      {"hybrid-hedgehog-w4", "hybrid-hedgehog", {}, 4},
      {"hybrid-elu-w4", "hybrid-elu", {}, 4},
      {"hybrid-hedgehog-w4-kept0", "hybrid-hedgehog", {}, 4, 0},  // layer 0 kept as softmax
      {"hybrid-hedgehog-w4-affine", "hybrid-hedgehog", fm_with([](FeatureMapConfig& f) { f.hybrid_affine = true; }), 4},
  };
}

// Every family modeling_hedgehog.py subclasses, with its classes (config.json's auto_map).
struct Family {
  const char* fixture;
  const char* model_type;
  const char* config_class;
  const char* model_class;
};
const Family kFamilies[] = {
    {"llama-tiny", "hedgehog_llama", "HedgehogLlamaConfig", "HedgehogLlamaForCausalLM"},
    {"gpt2-tiny", "hedgehog_gpt2", "HedgehogGPT2Config", "HedgehogGPT2LMHeadModel"},
    {"mistral-tiny", "hedgehog_mistral", "HedgehogMistralConfig", "HedgehogMistralForCausalLM"},
    {"qwen2-tiny", "hedgehog_qwen2", "HedgehogQwen2Config", "HedgehogQwen2ForCausalLM"},
    {"qwen3-tiny", "hedgehog_qwen3", "HedgehogQwen3Config", "HedgehogQwen3ForCausalLM"},
};

// The cases each family is exported in: every map on Llama and GPT-2 (the maps are the same code
// for every family); on Mistral, Qwen2 and Qwen3 (their own attention classes: biases, q/k norms,
// sliding windows) a linear map, Hedgehog, and the hybrids with and without a kept softmax layer.
std::vector<ExportCase> cases_for(const std::string& family) {
  std::vector<ExportCase> all = export_cases();
  if (family == "llama-tiny" || family == "gpt2-tiny") return all;
  std::vector<ExportCase> some;
  for (const ExportCase& c : all)
    for (const char* label : {"elu", "hedgehog", "hybrid-hedgehog-w4", "hybrid-hedgehog-w4-kept0"})
      if (std::string(c.label) == label) some.push_back(c);
  return some;
}

// The ids every check runs (tools/check_hf_export.py's default).
Tensor export_ids() { return from_vector(std::vector<int64_t>{3, 14, 15, 9, 2, 6, 5, 35, 8, 9, 7, 9}, {1, 12}); }

// The converted model of `c` on `family`: feature-map weights (and window factors) moved off their
// init by a fixed draw, so an export that lost or reinitialized them would be caught.
std::shared_ptr<HFModel> converted(const std::string& family, const ExportCase& c) {
  HFModelOptions o;
  o.mixer = parse_mixer(c.mixer, "test");
  o.feature_map = c.fm;
  o.window = c.window;
  if (c.quadratic) o.form = LinearForm::quadratic;
  if (c.kept_layer >= 0) o.softmax_layers = {c.kept_layer};
  o.seed = 9;
  auto m = load_hf_model(fixture(family), o);
  Generator gen(4);
  NoGradGuard ng;
  for (auto& [name, t] : m->named_parameters())
    if (name.find(".feature_map.") != std::string::npos)
      copy_(m->parameter(name), add(t, mul(randn(t.shape(), gen), 0.3)));
  return m;
}

std::string fixture_key(const std::string& family, const ExportCase& c) { return family + "/" + c.label; }

// The encoders' folders: every map (no hybrids: causal only) on a BERT classifier with a tokenizer
// (tools/check_hf_export.py runs a padded batch through it) and on a ViT classifier, plus a bare
// BertModel (a sentence-transformers folder); cosformer with M = each row's length, a layer kept as
// softmax, the quadratic form.
struct EncoderFamily {
  const char* fixture;
  bool all_maps;
  bool keep_layer;  // a case with layer 0 kept as softmax (bert-tiny-tok has one layer only)
};
const EncoderFamily kEncoders[] = {{"bert-tiny-tok", true, false}, {"vit-tiny", true, true}, {"st-tiny-mean", false, true}};

std::vector<ExportCase> encoder_cases(bool all_maps, bool keep_layer) {
  std::vector<ExportCase> out;
  for (const ExportCase& c : export_cases())
    if (std::string(c.mixer).rfind("hybrid-", 0) != 0 && std::string(c.label) != "cosformer-m16" &&
        (all_maps || std::string(c.label) == "hedgehog" || std::string(c.label) == "exp-t2"))
      out.push_back(c);
  out.push_back({"cosformer", "cosformer", {}});
  if (keep_layer) out.push_back({"hedgehog-kept0", "hedgehog", {}, 64, 0});
  if (all_maps) out.push_back({"hedgehog-quadratic", "hedgehog", {}, 64, -1, true});
  return out;
}

// Saves every encoder case under `root` (<fixture>-<label>), each reloaded by the engine; the count.
size_t export_encoders(const fs::path& root) {
  size_t n = 0;
  for (const EncoderFamily& e : kEncoders)
    for (const ExportCase& c : encoder_cases(e.all_maps, e.keep_layer)) {
      const fs::path folder = root / (std::string(e.fixture) + "-" + c.label);
      save_hf_model(*converted(e.fixture, c), folder.string(), fixture(e.fixture));
      n += load_hf_model(folder.string()) != nullptr;
    }
  return n;
}

// Saves every case of every family under `root` (<family>-<label>), reloads each with the engine
// and returns its logits by fixture_key.
std::map<std::string, Tensor> export_all(const fs::path& root) {
  std::map<std::string, Tensor> out;
  for (const Family& f : kFamilies)
    for (const ExportCase& c : cases_for(f.fixture)) {
      const std::string family = f.fixture;
      const fs::path folder = root / (family + "-" + c.label);
      save_hf_model(*converted(family, c), folder.string(), fixture(family));
      auto lm = load_causal_lm(folder.string());
      NoGradGuard ng;
      out[fixture_key(family, c)] = lm->forward(export_ids());
    }
  return out;
}
}  // namespace

TEST_CASE("hf export: a converted decoder folder carries modeling_hedgehog.py and an auto_map") {
  test::TempDir dir("hf_export_files");
  ExportCase c{"hybrid-hedgehog", "hybrid-hedgehog", {}, 4};
  for (const Family& f : kFamilies) {
    const std::string family = f.fixture, stock = family.substr(0, family.find('-'));
    CAPTURE(family);
    const fs::path out = dir.path / family;
    save_hf_model(*converted(family, c), out.string(), fixture(family));
    const std::string py = read_file((out / "modeling_hedgehog.py").string());
    CHECK(py == read_file(source_dir() + "/nn/models/export/modeling_hedgehog.py"));  // the embedded text, whole
    nlohmann::json cfg = nlohmann::json::parse(read_file((out / "config.json").string()));
    CHECK(cfg["model_type"] == f.model_type);
    CHECK(cfg["auto_map"]["AutoModelForCausalLM"] == std::string("modeling_hedgehog.") + f.model_class);
    CHECK(cfg["auto_map"]["AutoConfig"] == std::string("modeling_hedgehog.") + f.config_class);
    CHECK(cfg["hedgehog"]["window"] == 4);
    // The classes auto_map names are in the module.
    for (const char* cls : {f.config_class, f.model_class})
      CHECK_MESSAGE(py.find(std::string("\nclass ") + cls + "(") != std::string::npos, cls);
    // Re-saving from the converted folder's own config keeps one auto_map; a softmax model saved
    // from it drops the keys (and the engine still reads a "hedgehog_<family>" model_type).
    auto back = load_hf_model(out.string());
    save_hf_model(*back, out.string(), out.string());
    CHECK(nlohmann::json::parse(read_file((out / "config.json").string()))["model_type"] == cfg["model_type"]);
    const std::string plain =
        config_with_hedgehog_section(read_file((out / "config.json").string()), "test", HFModelOptions{});
    nlohmann::json p = nlohmann::json::parse(plain);
    CHECK(p["model_type"] == stock);
    CHECK_FALSE(p.contains("auto_map"));
    CHECK_FALSE(p.contains("hedgehog"));
    {  // a softmax model saved over the folder takes the module away with the auto_map
      const fs::path again = dir.path / (std::string(family) + "-again");
      save_hf_model(*converted(family, c), again.string(), fixture(family));
      REQUIRE(fs::exists(again / "modeling_hedgehog.py"));
      save_hf_model(*load_hf_model(fixture(family)), again.string(), fixture(family));
      CHECK_FALSE(fs::exists(again / "modeling_hedgehog.py"));
      CHECK_FALSE(nlohmann::json::parse(read_file((again / "config.json").string())).contains("auto_map"));
    }
    nlohmann::json no_arch = cfg;
    no_arch.erase("architectures");
    std::ofstream(out / "config.json") << no_arch.dump();
    CHECK(load_hf_model(out.string())->family() == load_hf_model(fixture(family))->family());
  }
}

TEST_CASE("hf export: a converted BERT / ViT folder carries modeling_hedgehog.py and its head's auto_map") {
  struct Encoder {
    const char* fixture;
    const char* model_type;
    const char* config_class;
    std::map<std::string, std::string> classes;  // auto_map besides AutoConfig
  };
  const Encoder encoders[] = {
      {"bert-tiny", "hedgehog_bert", "HedgehogBertConfig",
       {{"AutoModel", "HedgehogBertModel"},
        {"AutoModelForSequenceClassification", "HedgehogBertForSequenceClassification"}}},
      {"st-tiny-mean", "hedgehog_bert", "HedgehogBertConfig", {{"AutoModel", "HedgehogBertModel"}}},
      {"vit-tiny", "hedgehog_vit", "HedgehogViTConfig",
       {{"AutoModel", "HedgehogViTModel"}, {"AutoModelForImageClassification", "HedgehogViTForImageClassification"}}},
  };
  const std::string py = read_file(source_dir() + "/nn/models/export/modeling_hedgehog.py");
  for (const Encoder& e : encoders) {
    CAPTURE(e.fixture);
    test::TempDir dir("hf_export_encoder");
    HFModelOptions o;
    o.mixer = parse_mixer("hedgehog", "test");
    auto m = load_hf_model(fixture(e.fixture), o);
    save_hf_model(*m, dir.path.string(), fixture(e.fixture));
    CHECK(read_file((dir.path / "modeling_hedgehog.py").string()) == py);
    nlohmann::json cfg = nlohmann::json::parse(read_file((dir.path / "config.json").string()));
    CHECK(cfg["model_type"] == e.model_type);
    CHECK(cfg["hedgehog"]["mixer"] == "hedgehog");
    CHECK(cfg["auto_map"].size() == e.classes.size() + 1);
    CHECK(cfg["auto_map"]["AutoConfig"] == std::string("modeling_hedgehog.") + e.config_class);
    CHECK_MESSAGE(py.find(std::string("\nclass ") + e.config_class + "(") != std::string::npos, e.config_class);
    for (const auto& entry : e.classes) {  // not a structured binding: clang 14 refuses one in CHECK_MESSAGE
      const std::string& cls = entry.second;
      CHECK(cfg["auto_map"][entry.first] == "modeling_hedgehog." + cls);
      CHECK_MESSAGE(py.find("\nclass " + cls + "(") != std::string::npos, cls);
    }
    // The engine reads its "hedgehog_<family>" folder back as the same model.
    auto back = load_hf_model(dir.path.string());
    CHECK(back->architecture() == m->architecture());
    CHECK(name(back->options().mixer) == "hedgehog");
    // A softmax model saved from the converted folder's config drops the keys.
    nlohmann::json p = nlohmann::json::parse(
        config_with_hedgehog_section(read_file((dir.path / "config.json").string()), "test", HFModelOptions{}));
    CHECK(p["model_type"] == std::string(e.model_type).substr(9));
    CHECK_FALSE(p.contains("auto_map"));
  }
}

TEST_CASE("hf export: a hybrid encoder folder gets no module (the sliding window is causal only)") {
  test::TempDir dir("hf_export_hybrid_bert");
  HFModelOptions o;
  o.mixer = parse_mixer("hybrid-hedgehog", "test");
  save_hf_model(*load_hf_model(fixture("bert-tiny"), o), dir.path.string(), fixture("bert-tiny"));
  CHECK_FALSE(fs::exists(dir.path / "modeling_hedgehog.py"));
  nlohmann::json cfg = nlohmann::json::parse(read_file((dir.path / "config.json").string()));
  CHECK(cfg["model_type"] == "hedgehog_bert");
  CHECK_FALSE(cfg.contains("auto_map"));
  CHECK(cfg["hedgehog"]["mixer"] == "hybrid-hedgehog");
}

TEST_CASE("hf export: a gated conversion gets its family's model_type but no module, so transformers refuses it") {
  // modeling_hedgehog.py has no gates: with an auto_map the folder would load and run ungated, and
  // with the stock model_type transformers would run it as softmax.
  for (const std::string family : {"mistral-tiny", "qwen2-tiny", "llama-tiny"}) {
    CAPTURE(family);
    test::TempDir dir("hf_export_gated");
    HFModelOptions o;
    o.mixer = parse_mixer("hedgehog", "test");
    o.gate = Gate::gla;
    auto m = load_causal_lm(fixture(family), o);
    save_hf_model(*m, dir.path.string(), fixture(family));
    CHECK_FALSE(fs::exists(dir.path / "modeling_hedgehog.py"));
    nlohmann::json cfg = nlohmann::json::parse(read_file((dir.path / "config.json").string()));
    const std::string stock = family.substr(0, family.find('-'));
    CHECK(cfg["model_type"] == "hedgehog_" + stock);
    CHECK_FALSE(cfg.contains("auto_map"));
    auto back = load_causal_lm(dir.path.string());  // the engine reads it (by "architectures")
    Tensor ids = from_vector(std::vector<int64_t>{3, 14, 15, 9, 2}, {1, 5});
    NoGradGuard ng;
    CHECK(allclose(back->forward(ids), m->forward(ids), 1e-6, 1e-6));
    // Saved again as softmax (a re-export of the teacher), the stock model_type comes back.
    HFModelOptions soft;
    test::TempDir again("hf_export_gated_soft");
    save_hf_model(*load_causal_lm(fixture(family), soft), again.path.string(), dir.path.string());
    nlohmann::json c2 = nlohmann::json::parse(read_file((again.path / "config.json").string()));
    CHECK(c2["model_type"] == stock);
  }
}

TEST_CASE("hf export: every feature map the engine has is one modeling_hedgehog.py implements") {
  const std::vector<std::string> maps =
      internal::exported_feature_maps(read_file(source_dir() + "/nn/models/export/modeling_hedgehog.py"));
  CHECK(maps == feature_map_names());
  // What the check reads: the FEATURE_MAPS line; a module without one, or a map missing, is refused.
  CHECK(internal::exported_feature_maps("x = 1\nFEATURE_MAPS = (\"elu\",\n  \"relu\")\n") ==
        std::vector<std::string>{"elu", "relu"});
  CHECK_THROWS_WITH_AS(internal::exported_feature_maps("import torch\n"), doctest::Contains("no FEATURE_MAPS"), Error);
  CHECK_THROWS_WITH_AS(internal::exported_feature_maps("\nFEATURE_MAPS = (\"elu\n"), doctest::Contains("FEATURE_MAPS"),
                       Error);
}

TEST_CASE("hf export: the engine's logits of the re-saved tiny models match transformers' (fixture)") {
  // tests/fixtures/hf/export/logits.safetensors holds what transformers computed, with
  // modeling_hedgehog.py, on these same folders (tools/make_hf_export_fixtures.py).
  const SafeTensors expected = load_safetensors(logits_fixture());
  test::TempDir dir("hf_export_logits");
  const std::map<std::string, Tensor> ours = export_all(dir.path);
  CHECK(ours.size() == expected.tensors.size());
  for (const auto& kv : ours) {  // clang 14 cannot capture a structured binding in doctest's macros
    const std::string& key = kv.first;
    const Tensor& logits = kv.second;
    CAPTURE(key);
    REQUIRE_MESSAGE(expected.tensors.count(key) == 1, key, " is not in ", logits_fixture(),
                    " (run tools/make_hf_export_fixtures.py)");
    const Tensor& ref = expected.tensors.at(key);
    REQUIRE(ref.shape() == logits.shape());
    const std::vector<double> a = to_vector<double>(logits), b = to_vector<double>(ref);
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    CHECK(worst <= 1e-4);  // tools/check_hf_export.py's tolerance
  }
}

// Writes the folders of the test above under $HH_HF_EXPORT_DIR for tools/check_hf_export.py and
// tools/make_hf_export_fixtures.py (skipped unless asked for: -tc='hf export: write*' --no-skip).
TEST_CASE("hf export: write the converted folders for the python check" * doctest::skip()) {
  const char* root = std::getenv("HH_HF_EXPORT_DIR");
  REQUIRE_MESSAGE(root != nullptr, "set HH_HF_EXPORT_DIR to the folder to write");
  fs::create_directories(root);
  size_t cases = 0, encoders = 0;
  for (const Family& f : kFamilies) cases += cases_for(f.fixture).size();
  CHECK(export_all(root).size() == cases);
  for (const EncoderFamily& e : kEncoders) encoders += encoder_cases(e.all_maps, e.keep_layer).size();
  CHECK(export_encoders(root) == encoders);
}
