// RoPE scaling in the HF decoders (nn/rope.h, read by nn/models/llama.cpp): llama3, linear, dynamic
// (NTK) and yarn against transformers 5.24 (tools/make_hf_fixtures.py, rope()): the inverse
// frequencies and attention scaling of ROPE_INIT_FUNCTIONS for many parameter sets, and five tiny
// models (llama3 and yarn on Llama, dynamic on Qwen2, linear on Mistral, yarn on Qwen3; two of them
// in the transformers-4 spelling) whose logits, token-by-token KV-cache logits and 20 greedy tokens
// must match; students decode like their forward under every scaling; a converted Llama folder
// keeps its RoPE parameters (modeling_hedgehog.py uses transformers' rotary embedding on them); bad
// values are named.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "nn/gate.h"
#include "nn/models/hf_save.h"
#include "nn/models/llama.h"
#include "nn/rope.h"
#include "tests/nn/models/decoder_test_util.h"
#include "tests/op_table.h"
#include "tests/temp_dir.h"

using namespace hh;
using namespace hh::nn;
using hh::test::hf_fixture;
using hh::test::hf_reference;
using hh::test::rel_err;
using hh::test::test_device;

namespace {
struct RopeFixture {
  const char* name;
  RopeType type;
  const char* dict;  // the config.json key holding the RoPE parameters
};
const RopeFixture kFixtures[] = {
    {"llama-tiny-llama3", RopeType::llama3, "rope_parameters"},
    {"llama-tiny-yarn", RopeType::yarn, "rope_scaling"},  // transformers 4: "type", top-level rope_theta
    {"qwen2-tiny-dynamic", RopeType::dynamic, "rope_parameters"},
    {"mistral-tiny-linear", RopeType::linear, "rope_scaling"},
    {"qwen3-tiny-yarn", RopeType::yarn, "rope_parameters"},
};

HFModelOptions with_mixer(const std::string& mixer = "softmax", Gate gate = Gate::none) {
  HFModelOptions o;
  o.device = test_device();
  o.mixer = parse_mixer(mixer, "test");
  o.gate = gate;
  o.chunk = 4;  // several chunks in the chunked linear form
  return o;
}
Tensor dev(const Tensor& t) { return t.to(test_device()); }
std::shared_ptr<LlamaForCausalLM> load_decoder(const std::string& folder, const HFModelOptions& o = with_mixer()) {
  auto m = std::dynamic_pointer_cast<LlamaForCausalLM>(load_hf_model(folder, o));
  REQUIRE(m);
  return m;
}
nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}
}  // namespace

TEST_CASE("decoder RoPE scaling: inverse frequencies and attention scaling match transformers (rope_inv_freq.json)") {
  const nlohmann::json all = read_json(hf_fixture("rope_inv_freq.json"));
  REQUIRE(all["cases"].size() >= 10);
  double worst = 0;
  for (const auto& c : all["cases"]) {
    CAPTURE(c["rope_parameters"].dump());
    CAPTURE(c["seq_len"].get<int64_t>());
    const int64_t D = c["head_dim"].get<int64_t>(), M = c["max_position_embeddings"].get<int64_t>();
    const nlohmann::json config = {{"vocab_size", 11}, {"hidden_size", 2 * D}, {"intermediate_size", 8},
                                   {"num_hidden_layers", 1}, {"num_attention_heads", 2}, {"head_dim", D},
                                   {"max_position_embeddings", M}, {"rope_parameters", c["rope_parameters"]}};
    const LlamaConfig lc = LlamaConfig::from_hf(HFConfig::parse(config.dump(), "rope_inv_freq.json"));
    CHECK(rope_type_name(lc.rope.type) == c["rope_parameters"]["rope_type"].get<std::string>());
    // seq_len 0: transformers' value at init (no length given; dynamic then uses max_position_embeddings).
    const int64_t seq_len = c["seq_len"].get<int64_t>() > 0 ? c["seq_len"].get<int64_t>() : M;
    const std::vector<float> ours = rope_inv_freq(lc.rope, D, seq_len);
    const auto want = c["inv_freq"].get<std::vector<double>>();
    REQUIRE(ours.size() == want.size());
    for (size_t j = 0; j < ours.size(); ++j) worst = std::max(worst, std::abs(ours[j] - want[j]) / want[j]);
    CHECK(lc.rope.attention_factor == doctest::Approx(c["attention_scaling"].get<double>()).epsilon(1e-12));
  }
  MESSAGE("inverse frequencies: worst relative difference ", worst);
  CHECK(worst < 3e-7);  // f32 as transformers; pow may differ by an ulp
}

TEST_CASE("decoder RoPE scaling: logits, KV-cache logits and 20 greedy tokens match transformers") {
  for (const RopeFixture& f : kFixtures) {
    CAPTURE(f.name);
    auto lm = load_decoder(hf_fixture(f.name));
    const SafeTensors ref = hf_reference(f.name);
    CHECK(lm->cfg.rope.type == f.type);
    CHECK(lm->cfg.rope.theta == 10000.0);
    const Tensor ids = dev(ref.tensors.at("input_ids"));
    const Tensor logits = lm->forward(ids), steps = hh::test::stepwise_logits(*lm, ids);
    const double forward_err = rel_err(logits, ref.tensors.at("logits"));
    const double step_err = rel_err(steps, ref.tensors.at("step_logits"));
    MESSAGE(std::string(f.name), ": logits ", forward_err, ", KV-cache logits ", step_err, " relative to transformers");
    CHECK(forward_err < 1e-5);
    CHECK(step_err < 1e-5);
    CHECK(rel_err(lm->hidden(ids), ref.tensors.at("last_hidden_state")) < 1e-5);
    CHECK(hh::test::greedy_decode(*lm, dev(ref.tensors.at("prompt_ids")), 20) ==
          to_vector<int64_t>(ref.tensors.at("generated_ids")));
    if (f.type == RopeType::dynamic) {
      // Past max_position_embeddings a forward rotates every position with the frequencies of its
      // whole length, a decoding step with those of the length so far (and cached keys keep theirs),
      // as in transformers: the two differ, each matching its transformers counterpart above.
      CHECK(ids.size(1) > lm->cfg.max_position_embeddings);
      CHECK(rel_err(steps, logits) > 1e-3);
    } else {
      CHECK(rel_err(steps, logits) < 1e-5);  // the KV-cache step equals the forward
    }
  }
}

TEST_CASE("decoder RoPE scaling: the scaling matters (the same weights with default RoPE disagree)") {
  for (const RopeFixture& f : kFixtures) {
    CAPTURE(f.name);
    hh::test::ScratchFolder dir(f.name);
    nlohmann::json config = nlohmann::json::parse(dir.read("config.json"));
    nlohmann::json& rope = config[f.dict];
    rope[rope.contains("rope_type") ? "rope_type" : "type"] = "default";
    const SafeTensors ref = hf_reference(f.name);
    // Default RoPE accepts max_position_embeddings positions only (which changes nothing else).
    if (f.type == RopeType::dynamic) config["max_position_embeddings"] = ref.tensors.at("input_ids").size(1);
    dir.write("config.json", config.dump());
    auto plain = load_decoder(dir.path());
    CHECK(plain->cfg.rope.type == RopeType::plain);
    CHECK(rel_err(plain->forward(dev(ref.tensors.at("input_ids"))), ref.tensors.at("logits")) > 1e-2);
  }
}

TEST_CASE("decoder RoPE scaling: both config spellings read the same (rope_parameters; rope_scaling + rope_theta)") {
  for (const RopeFixture& f : kFixtures) {
    CAPTURE(f.name);
    hh::test::ScratchFolder dir(f.name);
    nlohmann::json config = nlohmann::json::parse(dir.read("config.json"));
    nlohmann::json rope = config[f.dict];
    config.erase(f.dict);
    if (std::string(f.dict) == "rope_parameters") {  // -> transformers 4: top-level theta, "type"
      config["rope_theta"] = rope["rope_theta"];
      rope.erase("rope_theta");
      rope["type"] = rope["rope_type"];
      rope.erase("rope_type");
      config["rope_scaling"] = rope;
    } else {  // -> transformers 5: one dict with rope_theta and rope_type
      rope["rope_theta"] = config["rope_theta"];
      config.erase("rope_theta");
      config["rope_parameters"] = rope;
    }
    dir.write("config.json", config.dump());
    auto other = load_decoder(dir.path()), lm = load_decoder(hf_fixture(f.name));
    CHECK(other->cfg.rope.type == lm->cfg.rope.type);
    CHECK(other->cfg.rope.factor == lm->cfg.rope.factor);
    CHECK(other->cfg.rope.attention_factor == lm->cfg.rope.attention_factor);
    const Tensor ids = dev(hf_reference(f.name).tensors.at("input_ids"));
    CHECK(rel_err(other->forward(ids), lm->forward(ids)) == 0.0);
  }
}

TEST_CASE("decoder RoPE scaling: linear, hybrid and gated students decode like their forward") {
  // The students read q and k after RoPE (LlamaAttention::project), so every form sees the scaling.
  // Dynamic is compared within max_position_embeddings, where a forward and decoding agree.
  struct Student {
    const char* mixer;
    Gate gate;
  };
  for (const RopeFixture& f : kFixtures) {
    const Tensor all = dev(hf_reference(f.name).tensors.at("input_ids"));
    for (const Student& s : {Student{"hedgehog", Gate::none}, Student{"hybrid-hedgehog", Gate::none},
                             Student{"hedgehog", Gate::gla}, Student{"hedgehog", Gate::liger}}) {
      CAPTURE(f.name);
      CAPTURE(s.mixer);
      CAPTURE(name(s.gate));
      auto lm = load_decoder(hf_fixture(f.name), with_mixer(s.mixer, s.gate));
      const Tensor ids = f.type == RopeType::dynamic ? slice(all, 1, 0, lm->cfg.max_position_embeddings) : all;
      CHECK(rel_err(hh::test::stepwise_logits(*lm, ids), lm->forward(ids)) < 1e-5);
    }
  }
}

TEST_CASE("decoder RoPE scaling: dynamic accepts factor x max_position_embeddings positions") {
  auto lm = load_decoder(hf_fixture("qwen2-tiny-dynamic"));
  CHECK(lm->cfg.max_position_embeddings == 32);
  CHECK(lm->max_positions() == 64);  // factor 2
  CHECK(lm->forward(dev(zeros({1, 64}, DType::i64))).shape() == Shape{1, 64, 97});
  CHECK_THROWS_WITH_AS(lm->forward(dev(zeros({1, 65}, DType::i64))),
                       doctest::Contains("65 positions exceed the model's limit of 64"), Error);
  // Others keep max_position_embeddings (their config's is already the extended context).
  CHECK(load_decoder(hf_fixture("llama-tiny-llama3"))->max_positions() == 256);
}

TEST_CASE("decoder RoPE scaling: unknown types and bad parameters are errors naming key, value and file") {
  struct Case {
    const char* fixture;
    const char* from;
    const char* to;
    const char* message;
  };
  for (const Case& c : {
           Case{"llama-tiny-llama3", "\"rope_type\": \"llama3\"", "\"rope_type\": \"longrope\"",
                "rope_parameters: rope_type 'longrope' is not supported (default, linear, dynamic, yarn, llama3)"},
           Case{"mistral-tiny-linear", "\"type\": \"linear\"", "\"type\": \"su\"",
                "rope_scaling: type 'su' is not supported"},
           Case{"mistral-tiny-linear", "\"factor\": 2.0,", "", "rope_scaling: missing key \"factor\""},
           Case{"qwen2-tiny-dynamic", "\"factor\": 2.0", "\"factor\": 0.0", "rope_parameters: factor must be positive"},
           Case{"qwen2-tiny-dynamic", "\"factor\": 2.0", "\"factor\": \"two\"", "\"factor\" must be a number"},
           Case{"llama-tiny-llama3", "\"low_freq_factor\": 1.0,", "", "missing key \"low_freq_factor\""},
           Case{"llama-tiny-llama3", "\"low_freq_factor\": 1.0", "\"low_freq_factor\": 4.0",
                "high_freq_factor must differ from low_freq_factor"},
           Case{"qwen3-tiny-yarn", "\"original_max_position_embeddings\": 32", "\"original_max_position_embeddings\": 0",
                "original_max_position_embeddings must be positive"},
           Case{"llama-tiny-yarn", "\"truncate\": false", "\"truncate\": \"no\"", "\"truncate\" must be true or false"},
       }) {
    CAPTURE(c.to);
    hh::test::ScratchFolder dir(c.fixture);
    dir.replace("config.json", c.from, c.to);
    CHECK_THROWS_WITH_AS(load_hf_model(dir.path()), doctest::Contains(c.message), Error);
    CHECK_THROWS_WITH_AS(load_hf_model(dir.path()), doctest::Contains(dir.file("config.json").c_str()), Error);
  }
}

namespace {
// A converted (hybrid) student of a Llama RoPE fixture, saved as a folder transformers can load
// with trust_remote_code: its config.json keeps the RoPE parameters as they were.
const char* const kLlamaFixtures[] = {"llama-tiny-llama3", "llama-tiny-yarn"};
void save_student(const std::string& fixture, const std::string& folder) {
  auto lm = load_decoder(hf_fixture(fixture), with_mixer("hybrid-hedgehog"));
  save_hf_model(*lm, folder, hf_fixture(fixture));
}
}  // namespace

TEST_CASE("decoder RoPE scaling: a converted Llama folder keeps its RoPE (config.json and the engine's reload)") {
  for (const char* fixture : kLlamaFixtures) {
    CAPTURE(fixture);
    test::TempDir dir("rope_export");
    const std::string folder = (dir.path / "model").string();
    save_student(fixture, folder);
    const nlohmann::json before = read_json(hf_fixture(fixture) + "/config.json");
    const nlohmann::json after = read_json(folder + "/config.json");
    for (const char* key : {"rope_parameters", "rope_scaling", "rope_theta", "max_position_embeddings"}) {
      CAPTURE(key);
      CHECK(after.value(key, nlohmann::json()) == before.value(key, nlohmann::json()));
    }
    CHECK(std::filesystem::exists(folder + "/modeling_hedgehog.py"));
    auto student = load_decoder(hf_fixture(fixture), with_mixer("hybrid-hedgehog"));
    auto reloaded = load_decoder(folder, with_mixer());  // the folder's own hedgehog section
    CHECK(reloaded->cfg.rope.type == student->cfg.rope.type);
    const Tensor ids = dev(hf_reference(fixture).tensors.at("input_ids"));
    CHECK(rel_err(reloaded->forward(ids), student->forward(ids)) < 1e-6);
  }
}

// Writes the converted folders above under $HH_HF_EXPORT_DIR for tools/check_hf_export.py
// (skipped unless asked for: -tc='decoder RoPE scaling: write*' --no-skip).
TEST_CASE("decoder RoPE scaling: write converted Llama folders for the python check" * doctest::skip()) {
  const char* root = std::getenv("HH_HF_EXPORT_DIR");
  REQUIRE_MESSAGE(root != nullptr, "set HH_HF_EXPORT_DIR to the folder to write");
  for (const char* fixture : kLlamaFixtures) save_student(fixture, std::string(root) + "/" + fixture);
}
