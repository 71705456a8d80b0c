// Gated linear mixers in the Llama family (nn/models/llama.h: Llama, Mistral, Qwen3 fixtures):
// decay, gla and liger students run and decode like their forward; Liger's gate reads the key
// projection before RoPE, repeated to the query heads, and adds no weights; a gated student
// saves and reloads its gate (engine-only: no transformers module); kept softmax layers of a gated
// student are ungated.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "nn/gate.h"
#include "nn/models/hf_model.h"
#include "nn/models/hf_save.h"
#include "nn/models/llama.h"
#include "nn/rope.h"
#include "tests/nn/decode_checks.h"

using namespace hh;
using namespace hh::nn;
using namespace hh::test;
namespace fs = std::filesystem;

namespace {

std::string fixture(const std::string& name) { return std::string(HH_SOURCE_DIR) + "/tests/fixtures/hf/" + name; }

std::shared_ptr<LlamaForCausalLM> gated_student(const std::string& folder, Gate gate,
                                                std::vector<int64_t> softmax_layers = {}) {
  HFModelOptions o;
  o.mixer = parse_mixer("hedgehog", "test");
  o.gate = gate;
  o.chunk = 4;
  o.seed = 5;
  o.softmax_layers = std::move(softmax_layers);
  auto m = std::dynamic_pointer_cast<LlamaForCausalLM>(load_hf_model(folder, o));
  REQUIRE(m != nullptr);
  return m;
}

int64_t count_params(Module& m) {
  int64_t n = 0;
  for (const auto& kv : m.named_parameters()) n += kv.second.numel();
  return n;
}

// Logits of the whole sequence, and of the same tokens decoded one at a time.
void check_decodes_like_forward(LlamaForCausalLM& lm, const Tensor& ids) {
  NoGradGuard ng;
  Tensor logits = lm.forward(ids);
  CHECK(std::isfinite(sum(logits).item<double>()));
  DecodeState st = lm.start_decoding();
  std::vector<Tensor> steps;
  for (int64_t t = 0; t < ids.size(1); ++t) steps.push_back(lm.step(slice(ids, 1, t, t + 1), st));
  CHECK(max_diff(cat(steps, 1), logits) < 1e-4);
}

}  // namespace

TEST_CASE("gated llama: decay, gla and liger students of Llama, Mistral and Qwen3 decode like their forward") {
  Generator gen(2);
  const Tensor ids = randint(0, 97, {2, 11}, gen);
  for (const char* family : {"llama-tiny", "mistral-tiny", "qwen3-tiny"}) {
    const int64_t plain = count_params(*gated_student(fixture(family), Gate::none));
    for (Gate gate : {Gate::decay, Gate::gla, Gate::liger}) {
      const std::string gate_name = name(gate);  // CAPTURE keeps a reference: no temporary
      CAPTURE(family);
      CAPTURE(gate_name);
      auto lm = gated_student(fixture(family), gate);
      CHECK(lm->options().gate == gate);
      check_decodes_like_forward(*lm, ids);
      // Liger and RetNet's decay add no weights; GLA adds its gate projection under feature_map.
      if (gate == Gate::gla) {
        CHECK(count_params(*lm) > plain);
      } else {
        CHECK(count_params(*lm) == plain);
      }
    }
  }
}

TEST_CASE("gated llama: Liger's gate reads k_proj before RoPE, repeated to the query heads") {
  auto lm = gated_student(fixture("llama-tiny"), Gate::liger);  // 4 query heads, 2 kv heads, head_dim 8
  LlamaAttention& a = *(*lm->model->layers)[0]->self_attn;
  Generator gen(4);
  const Tensor x = randn({2, 7, 32}, gen);
  NoGradGuard ng;
  Tensor q, k, v, k_raw;
  a.project(x, 3, q, k, v, &k_raw);
  REQUIRE(k_raw.shape() == k.shape());
  // The key projection by hand: (B,L,2·8) -> (B,2,L,8), query head h reads kv head h / 2.
  Tensor kp = transpose(reshape(a.k_proj->forward(x), {2, 7, 2, 8}), 1, 2);
  for (int64_t h = 0; h < 4; ++h)
    CHECK(max_diff(slice(k_raw, 1, h, h + 1), slice(kp, 1, h / 2, h / 2 + 1)) == 0.0);
  CHECK(max_diff(apply_rope(k_raw, 3, lm->cfg.rope), k) < 1e-6);
  // The attention's forward gates with that key, not the rotated one (which gives another output).
  Tensor q0, k0, v0, k0_raw;
  a.project(x, 0, q0, k0, v0, &k0_raw);
  Tensor y = a.forward(x, nullptr);
  CHECK(max_diff(y, a.merge(a.mixer.forward(q0, k0, v0, Tensor(), nullptr, GateInput{x, k0_raw}))) < 1e-6);
  CHECK(max_diff(y, a.merge(a.mixer.forward(q0, k0, v0, Tensor(), nullptr, GateInput{x, k0}))) > 1e-4);
}

TEST_CASE("gated llama: a liger student saves config.json hedgehog.gate and reloads to the same logits") {
  const std::string src = fixture("llama-tiny");
  auto lm = gated_student(src, Gate::liger);
  Generator gen(6);
  const Tensor ids = randint(0, 97, {1, 9}, gen);
  NoGradGuard ng;
  const Tensor logits = lm->forward(ids);
  const fs::path out = fs::temp_directory_path() / ("hh_gated_llama_" + std::to_string(::getpid()));
  fs::remove_all(out);
  save_hf_model(*lm, out.string(), src);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(out / "config.json"));
  CHECK(cfg["hedgehog"]["gate"] == "liger");
  // modeling_hedgehog.py has no gates: no module and no auto_map, so transformers refuses the
  // folder (model_type hedgehog_llama) instead of running it ungated.
  CHECK(cfg["model_type"] == "hedgehog_llama");
  CHECK_FALSE(cfg.contains("auto_map"));
  CHECK_FALSE(fs::exists(out / "modeling_hedgehog.py"));
  auto back = load_hf_model(out.string());
  CHECK(back->options().gate == Gate::liger);
  CHECK(to_vector<float>(dynamic_cast<CausalLM&>(*back).forward(ids)) == to_vector<float>(logits));
  fs::remove_all(out);
}

TEST_CASE("gated llama: kept softmax layers of a gated student are ungated, built or kept after") {
  Generator gen(8);
  const Tensor ids = randint(0, 97, {1, 8}, gen);
  auto built = gated_student(fixture("llama-tiny"), Gate::gla, {1});
  CHECK((*built->model->layers)[1]->self_attn->mixer.cfg.gate == Gate::none);
  CHECK((*built->model->layers)[0]->self_attn->mixer.cfg.gate == Gate::gla);
  check_decodes_like_forward(*built, ids);
  auto kept = gated_student(fixture("llama-tiny"), Gate::liger);
  kept->keep_softmax({0});
  CHECK((*kept->model->layers)[0]->self_attn->feature_map == nullptr);
  CHECK((*kept->model->layers)[0]->self_attn->mixer.cfg.gate == Gate::none);
  check_decodes_like_forward(*kept, ids);
}
