// What the conversion driver does for LLMs beyond the paper, on the committed gpt2-tiny fixture:
// kept softmax layers (the layer of highest transfer error goes back to softmax, its feature map
// gone, its attention the teacher's; saved in config.json, rebuilt on load, kept across a resume;
// bad layer numbers refused before any work), LoLCATs' MSE attention transfer, and logit
// distillation against the softmax teacher.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "data/text_corpus.h"
#include "experiments/convert/convert_lm.h"
#include "nn/diagnostics.h"
#include "nn/models/hf_model.h"
#include "nn/models/hf_save.h"
#include "tests/temp_dir.h"
#include "train/convert/convert.h"

using namespace hh;

namespace {

const std::string kGpt2Tiny = std::string(HH_SOURCE_DIR) + "/tests/fixtures/hf/gpt2-tiny";

std::shared_ptr<nn::CausalLM> load_student(const std::string& mixer) {
  nn::HFModelOptions o;
  o.mixer = nn::parse_mixer(mixer, "test");
  o.window = 4;
  o.seed = 3;
  return nn::load_causal_lm(kGpt2Tiny, o);
}

// gpt2-tiny (2 layers, vocab 101, 32 positions) on windows of a fixed pseudo-random id stream.
std::unique_ptr<train::LmConversionTask> tiny_task(const std::string& mixer,
                                                   std::shared_ptr<nn::CausalLM> teacher = nullptr) {
  std::vector<int32_t> ids;
  for (int i = 0; i < 600; ++i) ids.push_back(static_cast<int32_t>((i * 37 + (i / 7) * 11) % 101));
  const std::vector<int32_t> val(ids.begin(), ids.begin() + 120);
  auto tr = std::make_shared<const data::LmWindows>(data::lm_blocks(ids, 16));
  auto va = std::make_shared<const data::LmWindows>(data::lm_strided(val, 16, 8));
  train::LmTaskConfig c;
  c.batch = 8;
  c.teacher = std::move(teacher);
  return std::make_unique<train::LmConversionTask>(load_student(mixer), tr, va, va, c);
}

int64_t feature_map_tensors(const nn::Module& m, const std::string& prefix) {
  int64_t n = 0;
  for (const auto& kv : m.state_dict())
    if (kv.first.rfind(prefix, 0) == 0 && train::is_feature_map_param(kv.first)) ++n;
  return n;
}

}  // namespace

TEST_CASE("kept softmax layers: the layer of highest transfer error goes back to softmax and is saved as such") {
  auto task = tiny_task("hedgehog");
  train::ConvertConfig cfg;
  cfg.quiet = true;
  cfg.distill.epochs = 1;
  cfg.distill.softmax_layers = 1;
  cfg.finetune.epochs = 0;
  const train::ConvertResult r = train::convert(*task, cfg);
  REQUIRE(r.layer_error.size() == 2);
  const int64_t worst = r.layer_error[1] > r.layer_error[0] ? 1 : 0;
  REQUIRE(r.softmax_layers == std::vector<int64_t>{worst});
  auto& model = static_cast<nn::CausalLM&>(task->model());
  CHECK(model.options().softmax_layers == std::vector<int64_t>{worst});
  const std::string kept = "transformer.h." + std::to_string(worst) + ".";
  const std::string other = "transformer.h." + std::to_string(1 - worst) + ".";
  CHECK(feature_map_tensors(model, kept) == 0);
  CHECK(feature_map_tensors(model, other) == 2);
  // The kept layer's attention is the teacher's: its traced weights are the softmax ones.
  const train::Fidelity fd = train::measure_fidelity(*task, train::Split::val, 1, true);
  CHECK(fd.kl[static_cast<size_t>(worst * fd.heads)] < 1e-6);
  CHECK(fd.kl[static_cast<size_t>((1 - worst) * fd.heads)] > 1e-4);

  test::TempDir dir("kept_softmax");
  const std::string out = (dir.path / "student").string();
  nn::save_hf_model(model, out, kGpt2Tiny);
  std::ifstream in(out + "/config.json");
  const nlohmann::json config = nlohmann::json::parse(in);
  CHECK(config.at("hedgehog").at("softmax_layers") == nlohmann::json::array({worst}));
  std::shared_ptr<nn::CausalLM> back = nn::load_causal_lm(out);
  CHECK(back->options().softmax_layers == std::vector<int64_t>{worst});
  CHECK(feature_map_tensors(*back, kept) == 0);
  Tensor ids = arange(0, 12, 1, {DType::i64}).reshape({1, 12});
  NoGradGuard ng;
  model.eval();
  CHECK(allclose(back->forward(ids), model.forward(ids), 1e-6, 1e-6));
}

TEST_CASE("kept softmax layers: an explicit list, a resume after them, and bad layers refused before any work") {
  test::TempDir dir("kept_resume");
  train::ConvertConfig cfg;
  cfg.quiet = true;
  cfg.distill.epochs = 1;
  cfg.distill.softmax_layer_list = {0};
  cfg.finetune.epochs = 2;
  cfg.finetune.lr = 1e-3;
  cfg.checkpoint_path = (dir.path / "ck.safetensors").string();
  cfg.fingerprint = "kept";
  cfg.stop_after_epochs = 2;  // stage 1's epoch and the first finetuning epoch
  auto first = tiny_task("hedgehog");
  const train::ConvertResult a = train::convert(*first, cfg);
  REQUIRE(a.interrupted);
  CHECK(a.softmax_layers == std::vector<int64_t>{0});
  cfg.stop_after_epochs = 0;
  cfg.resume = true;
  auto second = tiny_task("hedgehog");  // a fresh model: the resume keeps layer 0 before loading
  const train::ConvertResult b = train::convert(*second, cfg);
  CHECK_FALSE(b.interrupted);
  CHECK(b.softmax_layers == std::vector<int64_t>{0});
  CHECK(feature_map_tensors(second->model(), "transformer.h.0.") == 0);
  CHECK(b.finetune.train_loss.size() == 2);

  train::ConvertConfig bad;
  bad.quiet = true;
  bad.distill.softmax_layers = 2;  // gpt2-tiny has 2 layers: keeping all is no conversion
  CHECK_THROWS_WITH(train::convert(*tiny_task("hedgehog"), bad), doctest::Contains("has 2 attention layers"));
  bad.distill.softmax_layers = 0;
  bad.distill.softmax_layer_list = {2};
  CHECK_THROWS_WITH(train::convert(*tiny_task("hedgehog"), bad), doctest::Contains("softmax layer 2 is not one of"));
  nn::HFModelOptions o;
  o.mixer = nn::parse_mixer("hedgehog", "test");
  o.softmax_layers = {1, 1};
  CHECK_THROWS_WITH(nn::load_causal_lm(kGpt2Tiny, o), doctest::Contains("named twice"));
  o.softmax_layers = {0};
  o.mixer = nn::Mixer::softmax();
  CHECK_THROWS_WITH(nn::load_causal_lm(kGpt2Tiny, o), doctest::Contains("needs a linear or hybrid mixer"));
}

TEST_CASE("attention transfer by output MSE (LoLCATs) trains a hybrid's maps and window factors, nothing else") {
  auto task = tiny_task("hybrid-hedgehog");
  std::map<std::string, std::vector<float>> before;
  for (const auto& kv : task->model().state_dict()) before[kv.first] = to_vector<float>(kv.second);
  train::ConvertConfig cfg;
  cfg.quiet = true;
  cfg.distill.epochs = 2;
  cfg.distill.lr = 1e-2;
  cfg.distill.loss = nn::transfer_options(nn::Transfer::mse, 1.0);
  cfg.finetune.epochs = 0;
  const train::ConvertResult r = train::convert(*task, cfg);
  REQUIRE(r.distill.val.size() == 2);
  CHECK(r.distill.val[1] < r.distill.val[0]);
  REQUIRE(r.layer_error.size() == 2);
  for (double e : r.layer_error) CHECK(std::isfinite(e));
  int changed = 0;
  for (const auto& kv : task->model().state_dict()) {
    const bool same = to_vector<float>(kv.second) == before[kv.first];
    if (train::is_feature_map_param(kv.first)) changed += !same;
    else CHECK_MESSAGE(same, kv.first);
  }
  CHECK(changed == 6);  // map weight, bias and window factor in each of the 2 layers
}

TEST_CASE("logit distillation: the loss is T^2 KL over the kept positions, and the stage lowers the validation KL") {
  Generator g(4);
  Tensor t = randn({2, 3, 7}, g), st = randn({2, 3, 7}, g);
  CHECK(nn::logit_distillation_loss(t, t, 2.0).item<double>() == doctest::Approx(0.0).epsilon(1e-7));
  // By hand, in double: T^2 * mean over kept rows of sum p (log p - log q), p, q at temperature T.
  const double T = 2.0;
  const auto tv = to_vector<float>(t), sv = to_vector<float>(st);
  Tensor mask = ones({2, 3}, {DType::boolean});
  {
    NoGradGuard ng;
    copy_(select(select(mask, 0, 1), 0, 2), zeros({}, {DType::boolean}));
  }
  double want = 0;
  for (int row = 0; row < 6; ++row) {
    if (row == 5) continue;  // masked
    double mt = -1e300, ms = -1e300, zt = 0, zs = 0;
    for (int v = 0; v < 7; ++v) mt = std::max(mt, tv[row * 7 + v] / T), ms = std::max(ms, sv[row * 7 + v] / T);
    for (int v = 0; v < 7; ++v) zt += std::exp(tv[row * 7 + v] / T - mt), zs += std::exp(sv[row * 7 + v] / T - ms);
    for (int v = 0; v < 7; ++v) {
      const double lp = tv[row * 7 + v] / T - mt - std::log(zt), lq = sv[row * 7 + v] / T - ms - std::log(zs);
      want += std::exp(lp) * (lp - lq);
    }
  }
  want = T * T * want / 5;
  CHECK(nn::logit_distillation_loss(t, st, T, mask).item<double>() == doctest::Approx(want).epsilon(1e-5));
  CHECK_THROWS_WITH(nn::logit_distillation_loss(t, st, 0.0), doctest::Contains("temperature must be > 0"));

  auto teacher = load_student("softmax");
  auto task = tiny_task("hedgehog", teacher);
  train::ConvertConfig cfg;
  cfg.quiet = true;
  cfg.distill.epochs = 1;
  cfg.logits.tokens = 642;  // 37 windows of 16 in 5 batches: 118.4 tokens a batch, so 6 steps
  cfg.logits.lr = 3e-4;
  cfg.finetune.epochs = 0;
  const train::ConvertResult r = train::convert(*task, cfg);
  CHECK(r.logits.steps == 6);
  REQUIRE(r.logits.val.size() == 2);  // at the first epoch's end and after the last step
  const double kl_before = [&] {
    auto fresh = tiny_task("hedgehog", teacher);
    NoGradGuard ng;
    double total = 0;
    for (int64_t i = 0; i < fresh->batches(train::Split::val); ++i)
      total += fresh->logit_loss(train::Split::val, i, 1.0).item<double>();
    return total / static_cast<double>(fresh->batches(train::Split::val));
  }();
  MESSAGE("validation KL: untrained swap ", kl_before, ", after logit distillation ", r.logits.val.back());
  CHECK(r.logits.val.back() < r.logits.val.front());
  CHECK(r.logits.val.back() < kl_before);
  REQUIRE_FALSE(r.logit_distilled.empty());
  CHECK(std::isfinite(r.logit_distilled[0].second));
  // A task without a teacher is refused at the stage.
  cfg.distill.epochs = 0;
  CHECK_THROWS_WITH(train::convert(*tiny_task("hedgehog"), cfg), doctest::Contains("needs the softmax teacher"));
}
