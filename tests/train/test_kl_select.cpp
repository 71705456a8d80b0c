// KL-guided choice of the layers a conversion keeps as softmax (train/convert/layer_select.h,
// issue 34): on a tiny 4-layer Llama teacher whose layer 2 carries the next-token prediction (its
// attention sharpened and its output scaled up, the others' scaled down) and whose layer 1 has the
// sharpest attention but almost no say in the output, KL selection keeps layer 2 where transfer
// error keeps layer 1; the score is the KL drop of restoring the layer (the kept student measures
// the KL scored for it); restoring is undone bit for bit; the choice reproduces and survives a
// resume; evenly spread layers; bad choices refused before any work.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "data/text_corpus.h"
#include "experiments/convert/convert_lm.h"
#include "nn/models/hf_config.h"
#include "nn/models/llama.h"
#include "tests/temp_dir.h"
#include "train/convert/convert.h"
#include "train/convert/layer_select.h"

using namespace hh;

namespace {

constexpr int64_t kLayers = 4;
constexpr int64_t kDominant = 2;  // the layer that carries the prediction
constexpr int64_t kSharp = 1;     // the sharpest attention, nearly no say in the output

nn::HFConfig tiny_llama_config() {
  return nn::HFConfig::parse(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
      "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 4, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 8, "hidden_act": "silu", "max_position_embeddings": 64,
      "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": false, "vocab_size": 97})",
                             "test: tiny llama");
}

void scale(nn::Module& m, const std::string& name, double factor) {
  NoGradGuard ng;
  Tensor& p = m.parameter(name);
  copy_(p, mul(p, factor));
}

// The teacher: random weights, then layer kDominant's attention sharpened (q, k x3) and its output
// scaled up (o x4), layer kSharp's attention much sharper (q, k x6) but its output scaled down to
// nearly nothing (o x0.02), the other layers' outputs scaled down (o x0.3).
std::shared_ptr<nn::CausalLM> make_teacher() {
  nn::HFModelOptions o;
  o.mixer = nn::Mixer::softmax();
  o.seed = 7;
  auto t = std::make_shared<nn::LlamaForCausalLM>(tiny_llama_config(), o);
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string at = "model.layers." + std::to_string(l) + ".self_attn.";
    const double qk = l == kDominant ? 3.0 : l == kSharp ? 6.0 : 1.0;
    scale(*t, at + "q_proj.weight", qk);
    scale(*t, at + "k_proj.weight", qk);
    scale(*t, at + "o_proj.weight", l == kDominant ? 4.0 : l == kSharp ? 0.02 : 0.3);
  }
  t->eval();
  return t;
}

// A Hedgehog student of the teacher: its weights, new feature maps.
std::shared_ptr<nn::CausalLM> make_student(const nn::CausalLM& teacher) {
  nn::HFModelOptions o;
  o.mixer = nn::parse_mixer("hedgehog", "test");
  o.chunk = 8;
  o.seed = 3;
  auto s = std::make_shared<nn::LlamaForCausalLM>(tiny_llama_config(), o);
  train::load_teacher_weights(*s, teacher);
  return s;
}

std::unique_ptr<train::LmConversionTask> make_task(const std::shared_ptr<nn::CausalLM>& teacher, bool with_teacher = true) {
  std::vector<int32_t> ids;
  for (int i = 0; i < 700; ++i) ids.push_back(static_cast<int32_t>((i * 37 + (i / 5) * 11 + (i * i) % 13) % 97));
  const std::vector<int32_t> val(ids.begin() + 500, ids.end());
  auto tr = std::make_shared<const data::LmWindows>(data::lm_blocks(std::vector<int32_t>(ids.begin(), ids.begin() + 500), 24));
  auto va = std::make_shared<const data::LmWindows>(data::lm_strided(val, 24, 12));
  train::LmTaskConfig c;
  c.batch = 8;
  if (with_teacher) c.teacher = teacher;
  return std::make_unique<train::LmConversionTask>(make_student(*teacher), tr, va, va, c);
}

train::ConvertConfig select_config(train::SoftmaxLayerChoice choice) {
  train::ConvertConfig cfg;
  cfg.quiet = true;
  cfg.distill.epochs = 1;
  cfg.distill.lr = 1e-2;
  cfg.distill.loss.kl = true;  // the transfer error is the attention KL (soft cross-entropy adds the entropy)
  cfg.distill.softmax_layers = 1;
  cfg.distill.softmax_choice = choice;
  cfg.finetune.epochs = 0;
  return cfg;
}

}  // namespace

TEST_CASE("kl select: the layer whose attention carries the prediction is kept, where transfer error keeps another") {
  auto teacher = make_teacher();
  auto task = make_task(teacher);
  const train::ConvertResult r = train::convert(*task, select_config(train::SoftmaxLayerChoice::kl));
  REQUIRE(r.layer_score.size() == static_cast<size_t>(kLayers));
  REQUIRE(r.layer_kl.size() == static_cast<size_t>(kLayers));
  std::string scores;
  for (int64_t l = 0; l < kLayers; ++l) scores += str(" ", l, ": ", r.layer_score[static_cast<size_t>(l)]);
  MESSAGE("all-linear KL ", r.kl_all_linear, "; KL drop per layer:", scores, "; transfer error ",
          r.layer_error[0], " ", r.layer_error[1], " ", r.layer_error[2], " ", r.layer_error[3]);
  CHECK(r.softmax_choice == "kl");
  CHECK(r.softmax_layers == std::vector<int64_t>{kDominant});
  for (int64_t l = 0; l < kLayers; ++l) {
    CHECK(r.layer_score[static_cast<size_t>(l)] == doctest::Approx(r.kl_all_linear - r.layer_kl[static_cast<size_t>(l)]));
    if (l != kDominant) CHECK(r.layer_score[static_cast<size_t>(l)] < 0.5 * r.layer_score[kDominant]);
  }
  CHECK(r.layer_score[kDominant] > 0);
  // The kept student is the student scored for its layer: its validation KL is that layer's.
  CHECK(train::validation_kl(*task, 0) == doctest::Approx(r.layer_kl[kDominant]).epsilon(1e-6));
  auto& lm = static_cast<nn::CausalLM&>(task->model());
  CHECK(lm.options().softmax_layers == std::vector<int64_t>{kDominant});

  // Transfer error (attention KL, stage 1's loss per layer) keeps the sharp layer instead.
  auto other = make_task(teacher);
  const train::ConvertResult t = train::convert(*other, select_config(train::SoftmaxLayerChoice::transfer));
  CHECK(t.softmax_choice == "transfer");
  CHECK(t.softmax_layers == std::vector<int64_t>{kSharp});
  CHECK(t.layer_score.empty());

  // The same run again: the same choice and the same scores, bit for bit.
  auto again = make_task(teacher);
  const train::ConvertResult b = train::convert(*again, select_config(train::SoftmaxLayerChoice::kl));
  CHECK(b.softmax_layers == r.softmax_layers);
  CHECK(b.layer_kl == r.layer_kl);
  CHECK(b.kl_all_linear == r.kl_all_linear);
}

TEST_CASE("kl select: restoring a layer to softmax is undone bit for bit, and is the teacher's attention there") {
  auto teacher = make_teacher();
  auto task = make_task(teacher);
  auto& lm = static_cast<nn::CausalLM&>(task->model());
  Tensor ids = arange(0, 20, 1, {DType::i64}).reshape({1, 20});
  NoGradGuard ng;
  lm.eval();
  const Tensor before = lm.forward(ids);
  Tensor restored;
  {
    train::SoftmaxRestore all0(lm, 0), all1(lm, 1), all2(lm, 2), all3(lm, 3);
    restored = lm.forward(ids);  // every layer restored: the teacher itself
  }
  CHECK(allclose(restored, teacher->forward(ids), 1e-5, 1e-5));
  CHECK_FALSE(allclose(before, restored, 1e-3, 1e-3));
  CHECK(to_vector<float>(lm.forward(ids)) == to_vector<float>(before));
  CHECK_THROWS_WITH(train::SoftmaxRestore(lm, kLayers), doctest::Contains("layer 4 is not one of the model's 4"));
}

TEST_CASE("kl select: with a short logit stage per candidate, the weights are put back after each") {
  auto teacher = make_teacher();
  auto task = make_task(teacher);
  train::ConvertConfig cfg = select_config(train::SoftmaxLayerChoice::kl);
  cfg.distill.kl_select_finetune = 3;
  cfg.distill.kl_select_batches = 1;
  cfg.logits.lr = 1e-4;
  const train::ConvertResult r = train::convert(*task, cfg);
  CHECK(r.softmax_layers == std::vector<int64_t>{kDominant});
  REQUIRE(r.layer_kl.size() == static_cast<size_t>(kLayers));
  // Every weight outside the feature maps is still the teacher's.
  std::map<std::string, Tensor> want;
  for (const auto& [name, t] : teacher->state_dict()) want[name] = t;
  for (const auto& entry : task->model().state_dict()) {  // no structured binding: clang 14 and CHECK_MESSAGE
    const std::string& name = entry.first;
    if (!train::is_feature_map_param(name))
      CHECK_MESSAGE(to_vector<float>(entry.second) == to_vector<float>(want.at(name)), name);
  }
  // A candidate trained: its KL after the steps is below the untrained one's.
  auto plain = make_task(teacher);
  cfg.distill.kl_select_finetune = 0;
  const train::ConvertResult p = train::convert(*plain, cfg);
  CHECK(r.kl_all_linear < p.kl_all_linear);
}

TEST_CASE("kl select: the choice survives a resume after it; evenly spread layers; bad choices refused before any work") {
  auto teacher = make_teacher();
  test::TempDir dir("kl_select");
  train::ConvertConfig cfg = select_config(train::SoftmaxLayerChoice::kl);
  cfg.finetune.epochs = 2;
  cfg.finetune.lr = 1e-3;
  cfg.checkpoint_path = (dir.path / "ck.safetensors").string();
  cfg.fingerprint = "kl";
  cfg.stop_after_epochs = 2;  // stage 1's epoch and the first finetuning epoch
  const train::ConvertResult a = train::convert(*make_task(teacher), cfg);
  REQUIRE(a.interrupted);
  CHECK(a.softmax_layers == std::vector<int64_t>{kDominant});
  cfg.stop_after_epochs = 0;
  cfg.resume = true;
  auto second = make_task(teacher);
  const train::ConvertResult b = train::convert(*second, cfg);
  CHECK_FALSE(b.interrupted);
  CHECK(b.softmax_layers == a.softmax_layers);
  CHECK(b.softmax_choice == "kl");
  CHECK(b.layer_score == a.layer_score);
  CHECK(static_cast<nn::CausalLM&>(second->model()).options().softmax_layers == a.softmax_layers);

  // every: floor(i * L / K).
  CHECK(train::evenly_spread_layers(28, 7) == std::vector<int64_t>{0, 4, 8, 12, 16, 20, 24});
  CHECK(train::evenly_spread_layers(4, 2) == std::vector<int64_t>{0, 2});
  CHECK(train::evenly_spread_layers(5, 2) == std::vector<int64_t>{0, 2});
  CHECK(train::evenly_spread_layers(12, 3) == std::vector<int64_t>{0, 4, 8});
  train::ConvertConfig every = select_config(train::SoftmaxLayerChoice::every);
  every.distill.softmax_layers = 2;
  const train::ConvertResult e = train::convert(*make_task(teacher), every);
  CHECK(e.softmax_layers == std::vector<int64_t>{0, 2});
  CHECK(e.softmax_choice == "every");
  // Ties go to the lower layer; a non-finite score chooses nothing.
  CHECK(train::top_scoring_layers({0.5, 1.0, 1.0, 0.2}, 1, "score") == std::vector<int64_t>{1});
  CHECK_THROWS_WITH(train::top_scoring_layers({0.5, std::nan("")}, 1, "KL drop"),
                    doctest::Contains("the KL drop of layer 1 is nan"));

  CHECK(train::parse_softmax_layer_choice("every") == train::SoftmaxLayerChoice::every);
  CHECK_THROWS_WITH(train::parse_softmax_layer_choice("foo"),
                    doctest::Contains("unknown layer selection method 'foo' (kl, transfer or every)"));
  // Refused before any work (convert checks them before stage 1).
  train::ConvertConfig bad = select_config(train::SoftmaxLayerChoice::kl);
  CHECK_THROWS_WITH(train::convert(*make_task(teacher, false), bad), doctest::Contains("needs a causal LM student and its softmax teacher"));
  bad.distill.softmax_layers = kLayers;
  CHECK_THROWS_WITH(train::convert(*make_task(teacher), bad), doctest::Contains("has 4 attention layers"));
  bad.distill.softmax_layers = 0;
  bad.distill.softmax_layer_list = {1};
  CHECK_THROWS_WITH(train::convert(*make_task(teacher), bad), doctest::Contains("chosen by hand, not by kl"));
  bad.distill.softmax_layer_list = {};
  bad.distill.softmax_layers = 1;
  bad.distill.kl_select_batches = -1;
  CHECK_THROWS_WITH(train::convert(*make_task(teacher), bad), doctest::Contains("kl_select_batches"));
}
