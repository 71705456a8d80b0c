// BERT from an HF folder: parity with transformers on the bert-tiny fixture (token types, a padded
// attention mask), HF names, old gamma/beta files, bare BertModel files, every feature map, and
// bad input naming the culprit.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>

#include "core/error.h"
#include "nn/models/bert.h"
#include "nn/models/hf_model.h"
#include "tests/nn/models/hf_fixture.h"
#include "tests/op_table.h"

using namespace hh;
using namespace hh::nn;
using hh::test::enc::FixtureCopy;
using hh::test::enc::hf_fixture;
using hh::test::enc::rel_error;

namespace {

struct BertRef {
  Tensor ids, types, mask, logits, hidden;
};

BertRef bert_ref(Device d) {
  SafeTensors r = load_safetensors(hf_fixture("bert-tiny") + "/reference.safetensors", d);
  return {r.tensors.at("input_ids"), r.tensors.at("token_type_ids"), r.tensors.at("attention_mask"),
          r.tensors.at("logits"), r.tensors.at("last_hidden_state")};
}

HFModelOptions on_test_device() {
  HFModelOptions o;
  o.device = hh::test::test_device();
  return o;
}

std::shared_ptr<BertForSequenceClassification> load_classifier(const std::string& folder, const HFModelOptions& o) {
  auto m = std::dynamic_pointer_cast<BertForSequenceClassification>(load_hf_model(folder, o));
  REQUIRE(m != nullptr);
  return m;
}

}  // namespace

TEST_CASE("bert: logits and encoder output match transformers (token types, padded mask)") {
  const HFModelOptions o = on_test_device();
  auto m = load_classifier(hf_fixture("bert-tiny"), o);
  const BertRef r = bert_ref(o.device);
  Tensor hidden;
  Tensor logits = m->forward(r.ids, r.types, r.mask, nullptr, &hidden);
  CHECK(logits.shape() == Shape({2, 3}));
  CHECK(logits.device() == o.device);
  // Every position, the padded ones of row 1 included (transformers computes them too).
  CHECK(rel_error(hidden, r.hidden) < 1e-4);
  CHECK(rel_error(logits, r.logits) < 1e-4);
  // The padding matters: without the mask row 1 changes.
  Tensor unmasked = m->forward(r.ids, r.types, Tensor());
  CHECK(rel_error(select(unmasked, 0, 1), select(r.logits, 0, 1)) > 1e-3);
  CHECK(rel_error(select(unmasked, 0, 0), select(r.logits, 0, 0)) < 1e-4);
}

TEST_CASE("bert: parameters carry transformers' names") {
  auto m = load_classifier(hf_fixture("bert-tiny"), HFModelOptions{});
  for (const char* n : {"bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight",
                        "bert.embeddings.token_type_embeddings.weight", "bert.embeddings.LayerNorm.weight",
                        "bert.encoder.layer.1.attention.self.query.weight", "bert.encoder.layer.0.attention.self.value.bias",
                        "bert.encoder.layer.0.attention.output.dense.weight",
                        "bert.encoder.layer.0.attention.output.LayerNorm.bias",
                        "bert.encoder.layer.1.intermediate.dense.weight", "bert.encoder.layer.1.output.dense.bias",
                        "bert.encoder.layer.1.output.LayerNorm.weight", "bert.pooler.dense.weight", "classifier.weight"})
    CHECK_NOTHROW(m->parameter(n));
  CHECK(m->parameter("classifier.weight").shape() == Shape({3, 32}));  // num_labels from id2label
}

TEST_CASE("bert: old LayerNorm.gamma/beta names and bare BertModel files load") {
  const BertRef r = bert_ref(Device::cpu());
  SUBCASE("gamma/beta") {
    FixtureCopy f("bert-tiny");
    f.edit_weights([](auto& list) {
      for (auto& [n, t] : list) {
        if (n.size() > 17 && n.compare(n.size() - 17, 17, ".LayerNorm.weight") == 0) n = n.substr(0, n.size() - 6) + "gamma";
        if (n.size() > 15 && n.compare(n.size() - 15, 15, ".LayerNorm.bias") == 0) n = n.substr(0, n.size() - 4) + "beta";
      }
    });
    CHECK(load_safetensors(f.file("model.safetensors")).tensors.count("bert.embeddings.LayerNorm.gamma") == 1);
    auto m = load_classifier(f.str(), HFModelOptions{});
    CHECK(rel_error(m->forward(r.ids, r.types, r.mask), r.logits) < 1e-4);
  }
  SUBCASE("bare BertModel (no bert. prefix, no classifier, an old position_ids buffer)") {
    FixtureCopy f("bert-tiny");
    f.edit_weights([](auto& list) {
      std::vector<std::pair<std::string, Tensor>> kept;
      for (auto& [n, t] : list)
        if (n.rfind("bert.", 0) == 0) kept.emplace_back(n.substr(5), t);
      kept.emplace_back("embeddings.position_ids", reshape(arange(64, {DType::i64}), {1, 64}));
      list = kept;
    });
    auto j = f.config();
    j["architectures"] = {"BertModel"};
    f.write_config(j);
    auto m = std::dynamic_pointer_cast<BertModel>(load_hf_model(f.str(), HFModelOptions{}));
    REQUIRE(m != nullptr);
    REQUIRE(m->pooler != nullptr);
    CHECK(rel_error(m->forward(r.ids, r.types, r.mask), r.hidden) < 1e-4);
  }
}

TEST_CASE("bert: every feature map in every non-causal form; traces for distillation") {
  const BertRef r = bert_ref(Device::cpu());
  for (const std::string& fm : feature_map_names()) {
    CAPTURE(fm);
    HFModelOptions o = on_test_device();
    o.mixer = nn::parse_mixer(fm, "test");
    o.seed = 3;
    o.form = LinearForm::quadratic;
    auto quad = load_classifier(hf_fixture("bert-tiny"), o);
    o.form = LinearForm::noncausal;
    auto lin = load_classifier(hf_fixture("bert-tiny"), o);
    o.form = LinearForm::chunked;  // an encoder runs the chunked request non-causally
    auto chunked = load_classifier(hf_fixture("bert-tiny"), o);
    // The new feature-map weights exist and were not in the file.
    int64_t new_weights = 0;
    for (const auto& [n, t] : quad->named_parameters())
      new_weights += n.rfind("bert.encoder.layer.1.attention.self.feature_map.", 0) == 0;
    CHECK((new_weights > 0) == quad->bert->encoder->layer->operator[](1)->attention->self->feature_map->trainable());
    const BertRef rd = bert_ref(o.device);
    Tensor hq, hl;
    Tensor a = quad->forward(rd.ids, rd.types, rd.mask, nullptr, &hq);
    Tensor b = lin->forward(rd.ids, rd.types, rd.mask, nullptr, &hl);
    Tensor c = chunked->forward(rd.ids, rd.types, rd.mask);
    CHECK(a.shape() == Shape({2, 3}));
    CHECK(hq.shape() == Shape({2, 7, 32}));
    CHECK(hh::test::enc::all_finite(a));
    CHECK(rel_error(b, a) < 1e-4);
    CHECK(rel_error(hl, hq) < 1e-4);
    CHECK(rel_error(c, b) < 1e-6);
    TraceRequest tr;
    tr.weights = tr.teacher = true;
    lin->forward(rd.ids, rd.types, rd.mask, &tr);
    REQUIRE(tr.layers.size() == 2);
    CHECK(tr.layers[0].weights.shape() == Shape({2, 4, 7, 7}));
    CHECK(tr.layers[1].teacher.shape() == Shape({2, 4, 7, 7}));
    // Padded keys get no weight, in the student and in the softmax teacher.
    Tensor w = tr.layers[0].weights.to(Device::cpu()), t = tr.layers[0].teacher.to(Device::cpu());
    CHECK(sum(slice(select(w, 0, 1), -1, 5, 7)).item<double>() == 0.0);
    CHECK(sum(slice(select(t, 0, 1), -1, 5, 7)).item<double>() == 0.0);
  }
}

TEST_CASE("bert: softmax weights trace sums to one over real keys") {
  auto m = load_classifier(hf_fixture("bert-tiny"), HFModelOptions{});
  const BertRef r = bert_ref(Device::cpu());
  TraceRequest tr;
  tr.weights = true;
  CHECK(rel_error(m->forward(r.ids, r.types, r.mask, &tr), r.logits) < 1e-4);
  REQUIRE(tr.layers.size() == 2);
  Tensor rows = sum(tr.layers[1].weights, {-1});
  CHECK(rel_error(rows, ones({2, 4, 7})) < 1e-5);
}

TEST_CASE("bert: bad input names the culprit") {
  const BertRef r = bert_ref(Device::cpu());
  auto config_error = [](const std::string& key, const nlohmann::json& value, const std::string& expected) {
    CAPTURE(key);
    FixtureCopy f("bert-tiny");
    auto j = f.config();
    if (value.is_discarded())
      j.erase(key);
    else
      j[key] = value;
    f.write_config(j);
    CHECK_THROWS_WITH_AS(load_hf_model(f.str(), HFModelOptions{}), doctest::Contains(expected.c_str()), hh::Error);
  };
  const nlohmann::json removed = nlohmann::json(nlohmann::json::value_t::discarded);
  config_error("hidden_size", removed, "missing key \"hidden_size\"");
  config_error("num_attention_heads", "4", "\"num_attention_heads\" must be an integer");
  config_error("position_embedding_type", "relative_key", "\"position_embedding_type\" = \"relative_key\" is not supported");
  config_error("hidden_act", "gelu_fancy", "hidden_act 'gelu_fancy' is not supported");
  config_error("architectures", {"BertForQuestionAnswering"}, "unsupported architecture BertForQuestionAnswering");
  config_error("num_attention_heads", 5, "not a multiple of \"num_attention_heads\"");
  config_error("is_decoder", true, "\"is_decoder\"");
  config_error("model_type", "gpt2", "is not a BERT model");

  SUBCASE("missing tensor") {
    FixtureCopy f("bert-tiny");
    f.edit_weights([](auto& list) {
      list.erase(std::remove_if(list.begin(), list.end(), [](const auto& p) { return p.first == "bert.pooler.dense.bias"; }),
                 list.end());
    });
    CHECK_THROWS_WITH_AS(load_hf_model(f.str(), HFModelOptions{}), doctest::Contains("missing [bert.pooler.dense.bias]"),
                         hh::Error);
  }
  SUBCASE("wrong tensor shape") {
    FixtureCopy f("bert-tiny");
    f.edit_weights([](auto& list) {
      for (auto& [n, t] : list)
        if (n == "bert.encoder.layer.1.intermediate.dense.weight") t = zeros({36, 32});
    });
    CHECK_THROWS_WITH_AS(load_hf_model(f.str(), HFModelOptions{}),
                         doctest::Contains("wrong shape for bert.encoder.layer.1.intermediate.dense.weight"), hh::Error);
  }
  SUBCASE("no weight file") {
    FixtureCopy f("bert-tiny");
    std::filesystem::remove(f.file("model.safetensors"));
    CHECK_THROWS_WITH_AS(load_hf_model(f.str(), HFModelOptions{}), doctest::Contains("neither model.safetensors"), hh::Error);
  }
  SUBCASE("inputs") {
    auto m = load_classifier(hf_fixture("bert-tiny"), HFModelOptions{});
    Tensor long_ids = zeros({1, 65}, {DType::i64});
    CHECK_THROWS_WITH_AS(m->forward(long_ids, Tensor(), Tensor()),
                         doctest::Contains("bert: 65 positions exceed the model's limit of 64"), hh::Error);
    Tensor bad_types = full({2, 7}, 2.0, {DType::i64});
    CHECK_THROWS_WITH_AS(m->forward(r.ids, bad_types, r.mask), doctest::Contains("token_type_ids must lie in [0, 2)"),
                         hh::Error);
    Tensor bad_ids = full({2, 7}, 99.0, {DType::i64});
    CHECK_THROWS_WITH_AS(m->forward(bad_ids, r.types, r.mask), doctest::Contains("input_ids must lie in [0, 99)"),
                         hh::Error);
    CHECK_THROWS_WITH_AS(m->forward(r.ids, r.types, ones({2, 6}, {DType::i64})),
                         doctest::Contains("attention_mask (2, 6) does not match"), hh::Error);
  }
}

TEST_CASE("bert: bf16 parameters (options.dtype) run and stay near the f32 reference") {
  HFModelOptions o = on_test_device();
  o.dtype = DType::bf16;
  auto m = load_classifier(hf_fixture("bert-tiny"), o);
  CHECK(m->parameter("bert.encoder.layer.0.attention.self.query.weight").dtype() == DType::bf16);
  const BertRef r = bert_ref(o.device);
  Tensor logits = m->forward(r.ids, r.types, r.mask);
  CHECK(logits.dtype() == DType::bf16);
  // bf16 keeps 8 significant bits (relative rounding 2^-9 ~ 2e-3 per value and per op), so this is
  // a check that nothing breaks in bf16, not a parity target (the f32 test above is).
  CHECK(rel_error(logits, r.logits) < 5e-2);
}

TEST_CASE("bert: the loaded HF weights are not drawn; the first layer's feature map is the first draw of options.seed") {
  // Nothing draws from the Generator before layer 0's feature map (the HF weights are allocated as
  // zeros and then loaded), so it equals a feature map drawn alone from Generator(seed).
  HFModelOptions o;
  o.mixer = nn::parse_mixer("t2r", "test");  // drawn from the Generator (hedgehog starts at the identity)
  o.seed = 11;
  auto m = load_classifier(hf_fixture("bert-tiny"), o);
  Generator gen(o.seed);
  auto alone = make_mixer_feature_map(o.mixer, o.feature_map, 4, 8, Init{gen});
  const NamedTensors mine = m->bert->encoder->layer->operator[](0)->attention->self->feature_map->named_parameters();
  const NamedTensors want = alone->named_parameters();
  REQUIRE(mine.size() == want.size());
  REQUIRE(!mine.empty());
  for (size_t i = 0; i < mine.size(); ++i) {
    CAPTURE(mine[i].first);
    CHECK(mine[i].first == want[i].first);
    CHECK(rel_error(mine[i].second, want[i].second) == 0.0);
  }
}
