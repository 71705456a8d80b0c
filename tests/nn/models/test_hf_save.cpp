// save_hf_model: a converted model (feature maps in its attentions) written as an HF folder loads back
// into the same model (same logits, bit for bit), its HF weights keep HF's names and layouts, and
// bad folders fail clearly.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "autograd/ops.h"
#include "core/atomic_file.h"
#include "core/safetensors.h"
#include "nn/lora.h"
#include "nn/models/bert.h"
#include "nn/models/hf_save.h"
#include "nn/models/vit.h"

using namespace hh;
using namespace hh::nn;
namespace fs = std::filesystem;

namespace {
std::string fixture(const std::string& name) { return std::string(HH_SOURCE_DIR) + "/tests/fixtures/hf/" + name; }

fs::path temp_folder(const std::string& tag) {
  fs::path p = fs::temp_directory_path() / ("hh_hf_save_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

// The student of a conversion: `mixer` attention; its feature maps moved off their init so a
// reload that drew fresh ones would be caught.
std::shared_ptr<HFModel> student(const std::string& name, const std::string& mixer) {
  HFModelOptions o;
  o.mixer = nn::parse_mixer(mixer, "test");
  o.seed = 9;
  auto m = load_hf_model(fixture(name), o);
  Generator gen(4);
  NoGradGuard ng;
  for (auto& [pname, t] : m->named_parameters())
    if (pname.find(".feature_map.") != std::string::npos) copy_(m->parameter(pname), add(t, mul(randn(t.shape(), gen), 0.1)));
  return m;
}

// The model's output on a fixed input of its family.
Tensor run(HFModel& m) {
  NoGradGuard ng;
  Generator gen(2);
  if (auto* lm = dynamic_cast<CausalLM*>(&m)) return lm->forward(randint(0, 50, {2, 7}, gen));
  if (auto* bert = dynamic_cast<BertForSequenceClassification*>(&m))
    return bert->forward(randint(0, 50, {2, 7}, gen), Tensor(), Tensor());
  auto* vit = dynamic_cast<ViTForImageClassification*>(&m);
  REQUIRE(vit != nullptr);
  return vit->forward(randn({2, 3, 40, 40}, gen));
}
}  // namespace

TEST_CASE("save_hf_model: a converted model reloads with the same outputs and HF names/layouts") {
  for (const char* name :
       {"gpt2-tiny", "llama-tiny", "bert-tiny", "vit-tiny", "mistral-tiny", "qwen2-tiny", "qwen3-tiny"}) {
    CAPTURE(name);
    const std::string n = name;
    const std::string mixer = n == "llama-tiny" || n == "qwen3-tiny" ? "hedgehog" : n == "mistral-tiny" ? "hybrid-hedgehog" : "t2r";
    auto m = student(name, mixer);
    const fs::path out = temp_folder(name);
    save_hf_model(*m, out.string(), fixture(name));
    auto back = load_hf_model(out.string());  // the config's "hedgehog" section picks the mixer
    CHECK(nn::name(back->options().mixer) == mixer);
    CHECK(to_vector<float>(run(*back)) == to_vector<float>(run(*m)));
    {  // the folder's own map asked for by name runs it as saved; another map is refused, naming both
      HFModelOptions same;
      same.mixer = nn::parse_mixer(mixer, "test");
      CHECK(to_vector<float>(run(*load_hf_model(out.string(), same))) == to_vector<float>(run(*m)));
      HFModelOptions other;
      other.mixer = nn::parse_mixer("elu", "test");
      CHECK_THROWS_WITH_AS(load_hf_model(out.string(), other),
                           doctest::Contains(("converted to '" + mixer + "' attention").c_str()), Error);
    }
    // Every tensor of the source file is in the saved file under the same name, shape and values.
    SafeTensors saved = load_safetensors((out / "model.safetensors").string());
    SafeTensors source = read_hf_weights(fixture(name));
    int64_t maps = 0;
    for (const auto& [tname, t] : saved.tensors) maps += tname.find(".feature_map.") != std::string::npos;
    CHECK(maps > 0);
    for (const auto& kv : source.tensors) {
      const std::string& tname = kv.first;
      const Tensor& t = kv.second;
      if (tname.find(".attn.bias") != std::string::npos || tname.find("masked_bias") != std::string::npos) continue;
      std::string key = tname;
      if (!saved.tensors.count(key) && std::string(name) == "gpt2-tiny") key = "transformer." + tname;
      if (std::string(name) == "gpt2-tiny" && tname == "lm_head.weight") continue;  // tied to wte
      REQUIRE_MESSAGE(saved.tensors.count(key), tname, " missing from the saved file");
      CHECK_MESSAGE(saved.tensors.at(key).shape() == t.shape(), tname);
      CHECK_MESSAGE(to_vector<float>(saved.tensors.at(key)) == to_vector<float>(t), tname);
    }
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(out / "config.json"));
    CHECK(cfg["hedgehog"]["mixer"] == mixer);
    fs::remove_all(out);
  }
}

TEST_CASE("save_hf_model: refuses unmerged LoRA adapters; a bad hedgehog section names its key") {
  auto m = student("llama-tiny", "hedgehog");
  Generator gen(1);
  LoraConfig lc;
  apply_lora(*m, lc, {gen});
  const fs::path out = temp_folder("lora");
  CHECK_THROWS_WITH_AS(save_hf_model(*m, out.string(), fixture("llama-tiny")), doctest::Contains("merge them first"),
                       Error);
  merge_lora(*m);
  save_hf_model(*m, out.string(), fixture("llama-tiny"));
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(out / "config.json"));
  cfg["hedgehog"]["mixer"] = "nope";
  std::ofstream(out / "config.json") << cfg.dump();
  CHECK_THROWS_WITH_AS(load_hf_model(out.string()), doctest::Contains("mixer: unknown attention 'nope'"), Error);
  cfg["hedgehog"]["mixer"] = "hedgehog";
  cfg["hedgehog"]["form"] = "sideways";
  std::ofstream(out / "config.json") << cfg.dump();
  CHECK_THROWS_WITH_AS(load_hf_model(out.string()), doctest::Contains("form"), Error);
  fs::remove_all(out);
}

TEST_CASE("save_hf_model: weights carry checksums; a failed export (full disk) leaves the previous one as it was") {
  auto m = student("gpt2-tiny", "t2r");
  const fs::path out = temp_folder("atomic");
  save_hf_model(*m, out.string(), fixture("gpt2-tiny"));
  CHECK(load_safetensors((out / "model.safetensors").string()).checksummed);
  const auto snapshot = [&] {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::directory_iterator(out))
      files[e.path().filename().string()] = e.is_directory() ? std::string("<folder>") : read_file(e.path().string());
    return files;
  };
  const auto before = snapshot();
  REQUIRE(before.count("config.json") == 1);
  REQUIRE(before.count("model.safetensors") == 1);
  auto other = student("gpt2-tiny", "hedgehog");  // another export: every file would change
  int64_t total = 0;
  for (const auto& [name, bytes] : before) total += static_cast<int64_t>(bytes.size());
  for (int64_t limit : {int64_t{0}, int64_t{1000}, total / 2, total - 10}) {
    CAPTURE(limit);
    set_write_limit_for_tests(limit);
    CHECK_THROWS_WITH_AS(save_hf_model(*other, out.string(), fixture("gpt2-tiny")),
                         doctest::Contains("No space left on device"), Error);
    set_write_limit_for_tests(-1);
    CHECK(snapshot() == before);
  }
  save_hf_model(*other, out.string(), fixture("gpt2-tiny"));
  const auto after = snapshot();
  CHECK(after.size() == before.size());  // no stage left behind
  CHECK(after.at("model.safetensors") != before.at("model.safetensors"));
  CHECK(nn::name(load_hf_model(out.string())->options().mixer) == "hedgehog");
  fs::remove_all(out);
}

TEST_CASE("save_hf_model: an empty stage left by a dead export is removed by the next export, however young") {
  auto m = student("gpt2-tiny", "t2r");
  const fs::path out = temp_folder("stale_stage");
  save_hf_model(*m, out.string(), fixture("gpt2-tiny"));
  // A process that has ended: its pid names the stage it created just before it was killed.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  waitpid(child, nullptr, 0);
  const fs::path empty = out / (".hh-export." + std::to_string(child) + ".0");
  fs::create_directory(empty);  // as young as this process: temp_owner_gone alone would keep it
  save_hf_model(*m, out.string(), fixture("gpt2-tiny"));
  CHECK_FALSE(fs::exists(empty));
}
