// Llama from an HF folder: parity with transformers (sharded f32 with GQA, rope_theta 5e5 in
// "rope_parameters", untied head; f16 with a tied head and the transformers-4 "rope_theta"),
// greedy decoding with the KV cache, feature maps per query head in every causal form, and the
// configurations and files it refuses.
#include <doctest/doctest.h>

#include <filesystem>

#include "core/error.h"
#include "nn/feature_maps.h"
#include "nn/models/llama.h"
#include "tests/nn/models/decoder_test_util.h"
#include "tests/op_table.h"

using namespace hh;
using namespace hh::nn;
using hh::test::hf_fixture;
using hh::test::test_device;
using hh::test::hf_reference;
using hh::test::rel_err;

namespace {
HFModelOptions on_test_device() {
  HFModelOptions o;
  o.device = test_device();
  return o;
}
Tensor dev(const Tensor& t) { return t.to(test_device()); }
std::shared_ptr<LlamaForCausalLM> load_llama(const std::string& folder, const HFModelOptions& o) {
  auto m = std::dynamic_pointer_cast<LlamaForCausalLM>(load_hf_model(folder, o));
  REQUIRE(m);
  return m;
}
}  // namespace

TEST_CASE("Llama: logits and last hidden state match transformers (sharded GQA f32; tied f16)") {
  for (const char* name : {"llama-tiny", "llama-tiny-f16"}) {
    CAPTURE(name);
    auto lm = load_llama(hf_fixture(name), on_test_device());
    auto ref = hf_reference(name);
    CHECK(lm->family() == "llama");
    CHECK(lm->architecture() == "LlamaForCausalLM");
    Tensor ids = dev(ref.tensors.at("input_ids"));
    CHECK(rel_err(lm->forward(ids), ref.tensors.at("logits")) < 1e-4);
    CHECK(rel_err(lm->hidden(ids), ref.tensors.at("last_hidden_state")) < 1e-4);
  }
  auto gqa = load_llama(hf_fixture("llama-tiny"), on_test_device());
  CHECK(gqa->cfg.num_key_value_heads == 2);
  CHECK(gqa->cfg.rope.theta == 500000.0);
  CHECK(gqa->lm_head != nullptr);
  CHECK(gqa->model->layers->operator[](0)->self_attn->k_proj->weight.shape() == Shape{16, 32});
  auto tied = load_llama(hf_fixture("llama-tiny-f16"), on_test_device());
  CHECK(tied->cfg.rope.theta == 25000.0);
  CHECK(tied->cfg.rms_norm_eps == 1e-5);
  CHECK(tied->lm_head == nullptr);
}

TEST_CASE("Llama: greedy decoding with the KV cache reproduces transformers' generate()") {
  for (const char* name : {"llama-tiny", "llama-tiny-f16"}) {
    CAPTURE(name);
    auto lm = load_causal_lm(hf_fixture(name), on_test_device());
    auto ref = hf_reference(name);
    CHECK(hh::test::greedy_decode(*lm, dev(ref.tensors.at("prompt_ids")), 12) ==
          to_vector<int64_t>(ref.tensors.at("generated_ids")));
  }
}

TEST_CASE("Llama: step-by-step logits equal the full forward (RoPE offsets, GQA, softmax and a linear map)") {
  auto ref = hf_reference("llama-tiny");
  const Tensor ids = dev(ref.tensors.at("input_ids"));
  for (const char* mixer : {"softmax", "hedgehog"}) {
    CAPTURE(mixer);
    HFModelOptions o = on_test_device();
    o.mixer = nn::parse_mixer(mixer, "test");
    auto lm = load_causal_lm(hf_fixture("llama-tiny"), o);
    CHECK(rel_err(hh::test::stepwise_logits(*lm, ids), lm->forward(ids)) < 1e-5);
  }
}

TEST_CASE("Llama: every feature map in every causal form, one map per query head") {
  auto ref = hf_reference("llama-tiny");
  const Tensor ids = dev(ref.tensors.at("input_ids"));
  for (const auto& map : feature_map_names()) {
    CAPTURE(map);
    Tensor first;
    for (LinearForm form : {LinearForm::quadratic, LinearForm::chunked, LinearForm::recurrent}) {
      HFModelOptions o = on_test_device();
      o.mixer = nn::parse_mixer(map, "test");
      o.form = form;
      o.chunk = 4;
      auto lm = load_llama(hf_fixture("llama-tiny"), o);
      REQUIRE(lm->model->layers->operator[](0)->self_attn->feature_map);
      Tensor logits = lm->forward(ids);
      CHECK(logits.shape() == Shape{2, 11, 97});
      CHECK(hh::test::all_finite(logits));
      if (!first.defined())
        first = logits;
      else
        CHECK(rel_err(logits, first) < 1e-4);
    }
  }
  HFModelOptions o = on_test_device();
  o.mixer = nn::parse_mixer("hedgehog", "test");
  auto lm = load_llama(hf_fixture("llama-tiny"), o);
  TraceRequest tr;
  tr.weights = tr.teacher = true;
  lm->forward(ids, &tr);
  REQUIRE(tr.layers.size() == 2);
  CHECK(tr.layers[0].weights.shape() == Shape{2, 4, 11, 11});  // query heads, not KV heads
  CHECK(tr.layers[0].teacher.shape() == Shape{2, 4, 11, 11});
}

TEST_CASE("Llama: unsupported configurations are errors naming key and file") {
  struct Case {
    const char* fixture;
    const char* from;
    const char* to;
    const char* message;
  };
  for (const Case& c : {
           Case{"llama-tiny-f16", "\"rope_scaling\": null", "\"rope_scaling\": {\"type\": \"longrope\", \"factor\": 2.0}",
                "rope_scaling: type 'longrope' is not supported"},
           Case{"llama-tiny-f16", "\"rope_scaling\": null",
                "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}",
                "rope_scaling: missing key \"low_freq_factor\""},
           Case{"llama-tiny", "\"rope_type\": \"default\"", "\"rope_type\": \"proportional\"",
                "rope_parameters: rope_type 'proportional' is not supported (default, linear, dynamic, yarn, llama3)"},
           Case{"llama-tiny", "\"rope_theta\": 500000.0", "\"rope_theta\": \"big\"", "\"rope_theta\" must be a number"},
           Case{"llama-tiny", "\"silu\"", "\"tanh\"", "hidden_act 'tanh' is not supported"},
           Case{"llama-tiny", "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3",
                "num_attention_heads 4 is not a multiple of num_key_value_heads 3"},
           Case{"llama-tiny", "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 2.5",
                "\"num_hidden_layers\" must be an integer"},
           Case{"llama-tiny", "\"hidden_size\": 32,", "", "missing key \"hidden_size\""},
           Case{"llama-tiny", "\"attention_bias\": false", "\"attention_bias\": \"no\"",
                "\"attention_bias\" must be true or false"},
       }) {
    CAPTURE(c.to);
    hh::test::ScratchFolder dir(c.fixture);
    dir.replace("config.json", c.from, c.to);
    CHECK_THROWS_WITH_AS(load_hf_model(dir.path()), doctest::Contains(c.message), Error);
    CHECK_THROWS_WITH_AS(load_hf_model(dir.path()), doctest::Contains(dir.file("config.json").c_str()), Error);
  }
}

TEST_CASE("Llama: biases and a tied head follow config.json (the weights must then match)") {
  // attention_bias = true makes q/k/v/o_proj biases required weights: the folder lacks them.
  hh::test::ScratchFolder dir("llama-tiny");
  dir.replace("config.json", "\"attention_bias\": false", "\"attention_bias\": true");
  CHECK_THROWS_WITH_AS(load_hf_model(dir.path()), doctest::Contains("missing [model.layers.0.self_attn.q_proj.bias"),
                       Error);
  hh::test::ScratchFolder mlp("llama-tiny");
  mlp.replace("config.json", "\"mlp_bias\": false", "\"mlp_bias\": true");
  CHECK_THROWS_WITH_AS(load_hf_model(mlp.path()), doctest::Contains("model.layers.0.mlp.gate_proj.bias"), Error);
  // Tied: the stored lm_head is not a weight of the model (HF ties it to embed_tokens).
  hh::test::ScratchFolder tied("llama-tiny");
  tied.replace("config.json", "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true");
  auto lm = load_llama(tied.path(), on_test_device());
  CHECK(lm->lm_head == nullptr);
  // Untied without lm_head in the file: a missing weight.
  hh::test::ScratchFolder untied("llama-tiny-f16");
  untied.replace("config.json", "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false");
  CHECK_THROWS_WITH_AS(load_hf_model(untied.path()), doctest::Contains("missing [lm_head.weight]"), Error);
}

TEST_CASE("Llama: a missing shard, a wrong tensor shape and too long inputs are named") {
  {
    hh::test::ScratchFolder dir("llama-tiny");
    std::filesystem::remove(dir.file("model-00003-of-00005.safetensors"));
    CHECK_THROWS_WITH_AS(load_hf_model(dir.path()), doctest::Contains("model-00003-of-00005.safetensors"), Error);
  }
  {
    hh::test::ScratchFolder dir("llama-tiny");
    const std::string shard = dir.file("model-00001-of-00005.safetensors");
    auto st = load_safetensors(shard);
    REQUIRE(st.tensors.count("model.layers.0.self_attn.k_proj.weight"));
    std::vector<std::pair<std::string, Tensor>> out;
    for (const auto& name : st.order)
      out.emplace_back(name, name == "model.layers.0.self_attn.k_proj.weight" ? zeros({32, 32}) : st.tensors.at(name));
    save_safetensors(shard, out);
    CHECK_THROWS_WITH_AS(load_hf_model(dir.path()),
                         doctest::Contains("wrong shape for model.layers.0.self_attn.k_proj.weight (file (32, 32), "
                                           "model (16, 32))"),
                         Error);
  }
  auto lm = load_causal_lm(hf_fixture("llama-tiny"), on_test_device());
  CHECK_THROWS_WITH_AS(lm->forward(dev(zeros({1, 65}, DType::i64))),
                       doctest::Contains("65 positions exceed the model's limit of 64"), Error);
}
