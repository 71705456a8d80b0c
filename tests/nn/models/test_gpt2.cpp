// GPT-2 from an HF folder: parity with transformers (f32 and bf16 weights), greedy decoding with
// the KV cache, every feature map in every causal form, the Conv1D/prefix/lm_head loading rules,
// and the configurations it refuses.
#include <doctest/doctest.h>

#include "core/error.h"
#include "nn/feature_maps.h"
#include "nn/models/gpt2.h"
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
}  // namespace

TEST_CASE("GPT-2: logits and last hidden state match transformers (f32 and bf16 weights)") {
  for (const char* name : {"gpt2-tiny", "gpt2-tiny-bf16"}) {
    CAPTURE(name);
    auto lm = load_causal_lm(hf_fixture(name), on_test_device());
    auto ref = hf_reference(name);
    CHECK(lm->family() == "gpt2");
    CHECK(lm->vocab_size() == 101);
    CHECK(lm->max_positions() == 32);
    CHECK_FALSE(lm->is_training());
    Tensor ids = dev(ref.tensors.at("input_ids"));
    CHECK(rel_err(lm->forward(ids), ref.tensors.at("logits")) < 1e-4);
    CHECK(rel_err(lm->hidden(ids), ref.tensors.at("last_hidden_state")) < 1e-4);
  }
}

TEST_CASE("GPT-2: greedy decoding with the KV cache reproduces transformers' generate()") {
  auto lm = load_causal_lm(hf_fixture("gpt2-tiny"), on_test_device());
  auto ref = hf_reference("gpt2-tiny");
  const Tensor prompt = dev(ref.tensors.at("prompt_ids"));
  CHECK(hh::test::greedy_decode(*lm, prompt, 12) == to_vector<int64_t>(ref.tensors.at("generated_ids")));
}

TEST_CASE("GPT-2: step-by-step logits equal the full forward (softmax KV cache and a linear map's state)") {
  auto ref = hf_reference("gpt2-tiny");
  const Tensor ids = dev(ref.tensors.at("input_ids"));
  for (const char* mixer : {"softmax", "hedgehog"}) {
    CAPTURE(mixer);
    HFModelOptions o = on_test_device();
    o.mixer = nn::parse_mixer(mixer, "test");
    auto lm = load_causal_lm(hf_fixture("gpt2-tiny"), o);
    CHECK(rel_err(hh::test::stepwise_logits(*lm, ids), lm->forward(ids)) < 1e-5);
  }
}

TEST_CASE("GPT-2: every feature map in every causal form (shapes, finite, forms agree, traces)") {
  auto ref = hf_reference("gpt2-tiny");
  const Tensor ids = dev(ref.tensors.at("input_ids"));
  for (const auto& map : feature_map_names()) {
    CAPTURE(map);
    Tensor first;
    for (LinearForm form : {LinearForm::quadratic, LinearForm::chunked, LinearForm::recurrent}) {
      HFModelOptions o = on_test_device();
      o.mixer = nn::parse_mixer(map, "test");
      o.form = form;
      o.chunk = 4;  // several chunks over the 9 tokens
      auto lm = std::dynamic_pointer_cast<GPT2LMHeadModel>(load_hf_model(hf_fixture("gpt2-tiny"), o));
      REQUIRE(lm);
      // The new weights sit under each attention's "feature_map" child (HF names + ".feature_map.").
      bool registered = false;
      for (const auto& [n, m] : lm->named_modules()) registered |= n == "transformer.h.1.attn.feature_map";
      CHECK(registered);
      Tensor logits = lm->forward(ids);
      CHECK(logits.shape() == Shape{2, 9, 101});
      CHECK(hh::test::all_finite(logits));
      if (!first.defined())
        first = logits;
      else
        CHECK(rel_err(logits, first) < 1e-4);
    }
  }
  // Traces for distillation: one entry per layer with (B,H,L,L) weights and the softmax teacher.
  HFModelOptions o = on_test_device();
  o.mixer = nn::parse_mixer("hedgehog", "test");
  auto lm = load_causal_lm(hf_fixture("gpt2-tiny"), o);
  TraceRequest tr;
  tr.weights = tr.teacher = true;
  lm->forward(ids, &tr);
  REQUIRE(tr.layers.size() == 2);
  CHECK(tr.layers[1].weights.shape() == Shape{2, 5, 9, 9});
  CHECK(tr.layers[1].teacher.shape() == Shape{2, 5, 9, 9});
}

TEST_CASE("GPT-2: files without the transformer. prefix, with a stored lm_head and attn.bias load the same") {
  hh::test::ScratchFolder dir("gpt2-tiny");
  auto st = load_safetensors(dir.file("model.safetensors"));
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& name : st.order) {
    const Tensor& t = st.tensors.at(name);
    out.emplace_back(name.substr(std::string("transformer.").size()), t);  // GPT-2's original hub layout
    if (name == "transformer.wte.weight") out.emplace_back("lm_head.weight", t);
    if (name == "transformer.h.0.ln_1.weight") out.emplace_back("h.0.attn.bias", ones({1, 1, 32, 32}));
  }
  save_safetensors(dir.file("model.safetensors"), out);
  auto lm = load_causal_lm(dir.path(), on_test_device());
  auto ref = hf_reference("gpt2-tiny");
  CHECK(rel_err(lm->forward(dev(ref.tensors.at("input_ids"))), ref.tensors.at("logits")) < 1e-4);
}

TEST_CASE("GPT-2: bad input and unsupported configurations are named") {
  auto lm = load_causal_lm(hf_fixture("gpt2-tiny"), on_test_device());
  CHECK_THROWS_WITH_AS(lm->forward(dev(zeros({1, 33}, DType::i64))),
                       doctest::Contains("33 positions exceed the model's limit of 32"), Error);
  CHECK_THROWS_WITH_AS(lm->forward(dev(zeros({1, 4}, DType::f32))), doctest::Contains("token ids must be i64"), Error);
  CHECK_THROWS_WITH_AS(lm->forward(dev(zeros({4}, DType::i64))), doctest::Contains("expected token ids (B,L)"), Error);
  CHECK_THROWS_WITH_AS(lm->forward(dev(full({1, 2}, 101, DType::i64))), doctest::Contains("out of range"), Error);
  DecodeState s = lm->start_decoding();
  for (int i = 0; i < 32; ++i) lm->step(dev(zeros({1, 1}, DType::i64)), s);
  CHECK_THROWS_WITH_AS(lm->step(dev(zeros({1, 1}, DType::i64)), s), doctest::Contains("33 positions exceed"), Error);
  CHECK_THROWS_WITH_AS(lm->step(dev(zeros({1, 2}, DType::i64)), s), doctest::Contains("expected ids (B,1)"), Error);

  struct Case {
    const char* from;
    const char* to;
    const char* message;
  };
  for (const Case& c : {
           Case{"\"scale_attn_by_inverse_layer_idx\": false", "\"scale_attn_by_inverse_layer_idx\": true",
                "scale_attn_by_inverse_layer_idx = true is not supported"},
           Case{"\"reorder_and_upcast_attn\": false", "\"reorder_and_upcast_attn\": true",
                "reorder_and_upcast_attn = true is not supported"},
           Case{"\"scale_attn_weights\": true", "\"scale_attn_weights\": false", "scale_attn_weights = false"},
           Case{"\"add_cross_attention\": false", "\"add_cross_attention\": true", "add_cross_attention"},
           Case{"\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false", "tie_word_embeddings = false"},
           Case{"\"gelu_new\"", "\"quick_gelu\"", "activation_function 'quick_gelu' is not supported"},
           Case{"\"gelu_new\"", "7", "\"activation_function\" must be a string"},
           Case{"\"n_head\": 5", "\"n_head\": 3", "n_embd 40 is not a multiple of n_head 3"},
           Case{"\"n_positions\": 32,", "", "missing key \"n_positions\""},
       }) {
    CAPTURE(c.to);
    hh::test::ScratchFolder dir("gpt2-tiny");
    dir.replace("config.json", c.from, c.to);
    CHECK_THROWS_WITH_AS(load_hf_model(dir.path()), doctest::Contains(c.message), Error);
    CHECK_THROWS_WITH_AS(load_hf_model(dir.path()), doctest::Contains(dir.file("config.json").c_str()), Error);
  }
}

TEST_CASE("GPT-2: a Conv1D weight of the wrong shape is named with both shapes") {
  hh::test::ScratchFolder dir("gpt2-tiny");
  auto st = load_safetensors(dir.file("model.safetensors"));
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& name : st.order)
    out.emplace_back(name, name == "transformer.h.1.mlp.c_fc.weight" ? zeros({40, 150}) : st.tensors.at(name));
  save_safetensors(dir.file("model.safetensors"), out);
  CHECK_THROWS_WITH_AS(load_hf_model(dir.path()),
                       doctest::Contains("wrong shape for transformer.h.1.mlp.c_fc.weight (file (40, 150), loaded as "
                                         "(150, 40), model (160, 40))"),
                       Error);
}
