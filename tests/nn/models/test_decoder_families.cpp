// Mistral, Qwen2 and Qwen3 from HF folders (the Llama decoder with typed options): parity with
// transformers 5.24 (tools/make_hf_fixtures.py: mistral-tiny with sliding_window 5, qwen2-tiny with
// q/k/v biases, a tied head and a sliding layer 1, qwen3-tiny with q_norm/k_norm and head_dim 12),
// KV-cache decoding beyond the window, the mixer swap of a conversion, the Qwen2 tokenizer, and the
// configurations each family refuses.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/safetensors.h"
#include "data/tokenizer.h"
#include "nn/models/llama.h"
#include "tests/nn/models/decoder_test_util.h"
#include "tests/op_table.h"

using namespace hh;
using namespace hh::nn;
using hh::test::hf_fixture;
using hh::test::hf_reference;
using hh::test::rel_err;
using hh::test::test_device;

namespace {
const char* const kFamilies[] = {"mistral-tiny", "qwen2-tiny", "qwen3-tiny"};

HFModelOptions on_test_device(const std::string& mixer = "softmax") {
  HFModelOptions o;
  o.device = test_device();
  o.mixer = parse_mixer(mixer, "test");
  return o;
}
Tensor dev(const Tensor& t) { return t.to(test_device()); }
std::shared_ptr<LlamaForCausalLM> load_decoder(const std::string& folder, const HFModelOptions& o = on_test_device()) {
  auto m = std::dynamic_pointer_cast<LlamaForCausalLM>(load_hf_model(folder, o));
  REQUIRE(m);
  return m;
}
const LlamaAttention& attention(const LlamaForCausalLM& m, size_t layer) { return *(*m.model->layers)[layer]->self_attn; }
}  // namespace

TEST_CASE("decoder families: logits and last hidden state match transformers (Mistral, Qwen2, Qwen3)") {
  for (const char* name : kFamilies) {
    CAPTURE(name);
    auto lm = load_decoder(hf_fixture(name));
    auto ref = hf_reference(name);
    CHECK(lm->family() == "llama");
    Tensor ids = dev(ref.tensors.at("input_ids"));
    CHECK(rel_err(lm->forward(ids), ref.tensors.at("logits")) < 1e-4);
    CHECK(rel_err(lm->hidden(ids), ref.tensors.at("last_hidden_state")) < 1e-4);
  }
  auto mistral = load_decoder(hf_fixture("mistral-tiny"));
  CHECK(mistral->architecture() == "MistralForCausalLM");
  CHECK(mistral->cfg.layer_window == std::vector<int64_t>{5, 5});
  CHECK_FALSE(attention(*mistral, 0).q_proj->bias.defined());
  auto qwen2 = load_decoder(hf_fixture("qwen2-tiny"));
  CHECK(qwen2->architecture() == "Qwen2ForCausalLM");
  CHECK(qwen2->cfg.layer_window == std::vector<int64_t>{0, 4});  // layer_types: full, sliding
  CHECK(qwen2->cfg.rope.theta == 1000000.0);
  CHECK(qwen2->lm_head == nullptr);
  CHECK(attention(*qwen2, 0).q_proj->bias.defined());
  CHECK(attention(*qwen2, 0).v_proj->bias.defined());
  CHECK_FALSE(attention(*qwen2, 0).o_proj->bias.defined());  // q/k/v only
  auto qwen3 = load_decoder(hf_fixture("qwen3-tiny"));
  CHECK(qwen3->architecture() == "Qwen3ForCausalLM");
  CHECK(qwen3->cfg.head_dim == 12);  // not hidden_size / num_attention_heads = 8
  CHECK(qwen3->cfg.rope.theta == 20000.0);
  REQUIRE(attention(*qwen3, 0).q_norm);
  CHECK(attention(*qwen3, 0).k_norm->weight.shape() == Shape{12});
  CHECK(attention(*qwen3, 0).q_proj->weight.shape() == Shape{48, 32});
  CHECK(qwen3->cfg.layer_window == std::vector<int64_t>{0, 0});
}

TEST_CASE("decoder families: logits at a 1,024-token context, batch 8, match transformers (real_size fixtures)") {
  // tools/make_real_size_fixtures.py: 2 layers, hidden 32, (8,1024) random ids; the reference holds
  // transformers' f32 logits at 17 positions (the first, then every 64th). Mistral slides a window of
  // 300. Measured on the CPU (AVX2, 2 threads): 5.0e-7 to 1.7e-6 (qwen3-1k).
  for (const std::string name : {"gpt2-1k", "llama-1k", "mistral-1k", "qwen2-1k", "qwen3-1k"}) {
    CAPTURE(name);
    const std::string folder = std::string(HH_SOURCE_DIR) + "/tests/fixtures/real_size/" + name;
    const SafeTensors ref = load_safetensors(folder + "/reference.safetensors");
    auto lm = load_causal_lm(folder, on_test_device());
    NoGradGuard ng;
    const Tensor logits = lm->forward(dev(ref.tensors.at("input_ids")));
    const Tensor at = index_select(logits, 1, dev(ref.tensors.at("positions")));
    const double err = rel_err(at, ref.tensors.at("logits"));
    MESSAGE(name, ": logits relative error ", err);
    CHECK(err < 1e-5);
  }
}

TEST_CASE("decoder families: the sliding window changes the result (the fixtures test it)") {
  auto ref = hf_reference("mistral-tiny");
  const Tensor ids = dev(ref.tensors.at("input_ids"));  // 11 tokens, window 5
  hh::test::ScratchFolder full("mistral-tiny");
  full.replace("config.json", "\"sliding_window\": 5", "\"sliding_window\": null");
  auto lm = load_decoder(full.path());
  CHECK(lm->cfg.layer_window == std::vector<int64_t>{0, 0});
  CHECK(rel_err(lm->forward(ids), ref.tensors.at("logits")) > 1e-2);
  // Without the key, MistralConfig's default 4096: no effect on 11 tokens.
  hh::test::ScratchFolder absent("mistral-tiny");
  absent.replace("config.json", "\"sliding_window\": 5,", "");
  CHECK(load_decoder(absent.path())->cfg.layer_window == std::vector<int64_t>{4096, 4096});

  auto qref = hf_reference("qwen2-tiny");
  const Tensor qids = dev(qref.tensors.at("input_ids"));
  // Without layer_types, max_window_layers picks the sliding layers: the same model here.
  hh::test::ScratchFolder by_count("qwen2-tiny");
  by_count.replace("config.json", "\"layer_types\": [\n    \"full_attention\",\n    \"sliding_attention\"\n  ],", "");
  auto q = load_decoder(by_count.path());
  CHECK(q->cfg.layer_window == std::vector<int64_t>{0, 4});
  CHECK(rel_err(q->forward(qids), qref.tensors.at("logits")) < 1e-4);
  // use_sliding_window false: plain causal attention on every layer, whatever sliding_window says.
  by_count.replace("config.json", "\"use_sliding_window\": true", "\"use_sliding_window\": false");
  auto plain = load_decoder(by_count.path());
  CHECK(plain->cfg.layer_window == std::vector<int64_t>{0, 0});
  CHECK(rel_err(plain->forward(qids), qref.tensors.at("logits")) > 1e-2);
}

TEST_CASE("decoder families: greedy decoding with the KV cache reproduces transformers' generate()") {
  // mistral-tiny: a 5-token prompt and 12 new tokens, so most steps attend past the window of 5.
  for (const char* name : kFamilies) {
    CAPTURE(name);
    auto lm = load_causal_lm(hf_fixture(name), on_test_device());
    auto ref = hf_reference(name);
    CHECK(hh::test::greedy_decode(*lm, dev(ref.tensors.at("prompt_ids")), 12) ==
          to_vector<int64_t>(ref.tensors.at("generated_ids")));
  }
}

TEST_CASE("decoder families: step-by-step logits equal the full forward (softmax beyond the window, linear maps)") {
  for (const char* name : kFamilies) {
    auto ref = hf_reference(name);
    const Tensor ids = dev(ref.tensors.at("input_ids"));
    for (const char* mixer : {"softmax", "hedgehog", "hybrid-hedgehog"}) {
      CAPTURE(name);
      CAPTURE(mixer);
      auto lm = load_causal_lm(hf_fixture(name), on_test_device(mixer));
      CHECK(rel_err(hh::test::stepwise_logits(*lm, ids), lm->forward(ids)) < 1e-5);
    }
  }
  // The sliding window bounds the softmax KV cache: W keys per layer, whatever the position.
  auto lm = load_decoder(hf_fixture("mistral-tiny"));
  DecodeState state = lm->start_decoding();
  for (int64_t t = 0; t < 9; ++t) lm->step(full({1, 1}, 3.0, {DType::i64, test_device()}), state);
  CHECK(state.layers[0].k.size(2) == 5);
  CHECK(state.layers[0].evicted == 4);
  CHECK(state.layers[0].pos() == 9);
}

TEST_CASE("decoder families: a linear mixer replaces each attention; the softmax teacher keeps the window") {
  for (const char* name : kFamilies) {
    CAPTURE(name);
    auto lm = load_decoder(hf_fixture(name), on_test_device("hedgehog"));
    REQUIRE(attention(*lm, 1).feature_map);
    TraceRequest tr;
    tr.weights = tr.teacher = true;
    const Tensor ids = dev(hf_reference(name).tensors.at("input_ids"));
    lm->forward(ids, &tr);
    REQUIRE(tr.layers.size() == 2);
    CHECK(tr.layers[1].weights.shape() == Shape{2, 4, 11, 11});  // query heads
    // The teacher of a sliding layer puts no weight on keys W or more positions back.
    const auto teacher = to_vector<float>(tr.layers[1].teacher);  // (B,H,L,L), row 10 of head 0, batch 0
    const int64_t W = lm->cfg.layer_window[1] > 0 ? lm->cfg.layer_window[1] : 11;
    for (int64_t j = 0; j < 11; ++j) {
      CAPTURE(j);
      const float w = teacher[static_cast<size_t>(10 * 11 + j)];
      if (j <= 10 - W)
        CHECK(w == 0.0f);
      else
        CHECK(w > 0.0f);
    }
  }
}

TEST_CASE("decoder families: the Qwen2 tokenizer.json in the folder gives transformers' ids") {
  const auto tok = data::load_tokenizer(hf_fixture("qwen2-tiny"));
  std::ifstream in(hf_fixture("qwen2-tiny") + "/expected.json");
  const nlohmann::json want = nlohmann::json::parse(in);
  const std::vector<int32_t> ids = tok->encode(want["text"].get<std::string>());
  CHECK(ids == want["ids"].get<std::vector<int32_t>>());
  CHECK(tok->decode(ids) == want["text"].get<std::string>());
}

TEST_CASE("decoder families: Qwen3 reads attention_bias; rope_parameters' rope_theta wins, as transformers 5") {
  hh::test::ScratchFolder bias("qwen3-tiny");
  bias.replace("config.json", "\"attention_bias\": false", "\"attention_bias\": true");
  CHECK_THROWS_WITH_AS(load_hf_model(bias.path()), doctest::Contains("model.layers.0.self_attn.o_proj.bias"), Error);
  hh::test::ScratchFolder theta("qwen3-tiny");
  theta.replace("config.json", "\"head_dim\": 12,", "\"head_dim\": 12, \"rope_theta\": 5.0,");
  auto lm = load_decoder(theta.path());
  CHECK(lm->cfg.rope.theta == 20000.0);
  // No head_dim: Qwen3Config's default 128, not hidden_size / num_attention_heads.
  nlohmann::json cfg = nlohmann::json::parse(theta.read("config.json"));
  cfg.erase("head_dim");
  CHECK(LlamaConfig::from_hf(HFConfig::parse(cfg.dump(), "qwen3.json"), DecoderFamily::qwen3).head_dim == 128);
  CHECK(LlamaConfig::from_hf(HFConfig::parse(cfg.dump(), "qwen3.json"), DecoderFamily::mistral).head_dim == 8);
  auto ref = hf_reference("qwen3-tiny");
  CHECK(rel_err(lm->forward(dev(ref.tensors.at("input_ids"))), ref.tensors.at("logits")) < 1e-4);
}

TEST_CASE("decoder families: bad configuration values are errors naming key and file") {
  struct Case {
    const char* fixture;
    const char* from;
    const char* to;
    const char* message;
  };
  const char* layer_types = "\"layer_types\": [\n    \"full_attention\",\n    \"sliding_attention\"\n  ]";
  for (const Case& c : {
           Case{"mistral-tiny", "\"sliding_window\": 5", "\"sliding_window\": 0",
                "sliding_window must be positive (null = no window), got 0"},
           Case{"mistral-tiny", "\"sliding_window\": 5", "\"sliding_window\": -3", "sliding_window must be positive"},
           Case{"mistral-tiny", "\"sliding_window\": 5", "\"sliding_window\": \"wide\"", "\"sliding_window\" must be"},
           Case{"qwen2-tiny", "\"sliding_window\": 4", "\"sliding_window\": 0", "sliding_window must be positive"},
           Case{"qwen2-tiny", "\"use_sliding_window\": true", "\"use_sliding_window\": false",
                "layer_types[1] is sliding_attention but there is no window"},
           Case{"qwen2-tiny", layer_types, "\"layer_types\": [\"full_attention\"]",
                "layer_types has 1 entries for num_hidden_layers 2"},
           Case{"qwen2-tiny", layer_types, "\"layer_types\": [\"full_attention\", \"chunked_attention\"]",
                "layer_types[1] 'chunked_attention' is not supported"},
           Case{"qwen2-tiny", "\"rope_type\": \"default\"", "\"rope_type\": \"longrope\"",
                "rope_parameters: rope_type 'longrope' is not supported"},
           Case{"qwen3-tiny", "\"head_dim\": 12", "\"head_dim\": 7", "head_dim must be positive and even, got 7"},
           Case{"qwen3-tiny", "\"head_dim\": 12", "\"head_dim\": 0", "head_dim must be positive and even, got 0"},
           Case{"qwen3-tiny", "\"head_dim\": 12", "\"head_dim\": 12, \"partial_rotary_factor\": 0.5",
                "partial_rotary_factor other than 1 is not supported"},
           Case{"mistral-tiny", "\"num_attention_heads\": 4", "\"num_attention_heads\": 6",
                "hidden_size 32 is not a multiple of num_attention_heads 6 (and no head_dim is given)"},
           Case{"qwen3-tiny", "\"rope_parameters\": {",
                "\"rope_parameters\": {\"sliding_attention\": {\"rope_theta\": 10.0},",
                "RoPE parameters per layer type (\"sliding_attention\") are not supported"},
       }) {
    CAPTURE(c.to);
    hh::test::ScratchFolder dir(c.fixture);
    dir.replace("config.json", c.from, c.to);
    if (std::string(c.message).find("num_attention_heads 6") != std::string::npos)
      dir.replace("config.json", "\"head_dim\": 8,", "");  // MistralConfig wrote hidden_size / heads
    CHECK_THROWS_WITH_AS(load_hf_model(dir.path()), doctest::Contains(c.message), Error);
    CHECK_THROWS_WITH_AS(load_hf_model(dir.path()), doctest::Contains(dir.file("config.json").c_str()), Error);
  }
  // A head_dim that is valid but not the weights' is caught by the weights' shapes.
  hh::test::ScratchFolder dir("qwen3-tiny");
  dir.replace("config.json", "\"head_dim\": 12", "\"head_dim\": 8");
  CHECK_THROWS_WITH_AS(load_hf_model(dir.path()), doctest::Contains("self_attn"), Error);
}
