// What the conversion driver does for LLMs beyond the paper, on the committed gpt2-tiny fixture:
// kept softmax layers (the layer of highest transfer error goes back to softmax, its feature map
// gone, its attention the teacher's; saved in config.json, rebuilt on load, kept across a resume;
// bad layer numbers refused before any work), LoLCATs' MSE attention transfer, and logit
// distillation against the softmax teacher, on the fly or from the cached top-k of its logits.
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

namespace {
// (loss, d loss / d student) of the cached top-k loss, the student (N,V) a fresh leaf.
std::pair<double, std::vector<double>> topk_loss_and_grad(const Tensor& teacher, const Tensor& student, int64_t k,
                                                          double T) {
  const train::TopkLogits c = train::topk_logits(teacher, k, T);
  Tensor s = student.detach().clone().requires_grad_(true);
  Tensor loss = nn::topk_logit_distillation_loss(c.values, c.indices, c.lse, s, T);
  loss.backward();
  return {loss.item<double>(), to_vector<double>(s.grad())};
}

// The bucketed KL by hand, in double: the top-k of the teacher (its ids from topk_logits) plus
// one bucket of the rest, both distributions at temperature T; T^2 times the mean over rows.
double bucketed_kl(const std::vector<float>& t, const std::vector<float>& s, const std::vector<int32_t>& ids,
                   int64_t N, int64_t V, int64_t k, double T) {
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    double zt = 0, zs = 0;
    for (int64_t v = 0; v < V; ++v) zt += std::exp(t[n * V + v] / T), zs += std::exp(s[n * V + v] / T);
    double pt = 0, qt = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t v = ids[n * k + j];
      const double p = std::exp(t[n * V + v] / T) / zt, q = std::exp(s[n * V + v] / T) / zs;
      total += p * std::log(p / q);
      pt += p, qt += q;
    }
    if (k < V) total += (1 - pt) * std::log((1 - pt) / (1 - qt));
  }
  return T * T * total / static_cast<double>(N);
}
}  // namespace

TEST_CASE("top-k logit distillation: K = V is the on-the-fly loss and gradient; fewer K a smaller KL, by hand") {
  Generator g(11);
  const int64_t N = 12, V = 37;
  Tensor t = mul(randn({N, V}, g), 3.0), s = mul(randn({N, V}, g), 3.0);
  for (double T : {1.0, 2.5}) {
    // The top-k are the K largest, descending, and lse is the log-partition at T.
    const train::TopkLogits c = train::topk_logits(t, 5, T);
    const auto tv = to_vector<float>(t), cv = to_vector<float>(c.values);
    const auto ci = to_vector<int32_t>(c.indices);
    const auto lse = to_vector<double>(c.lse);
    for (int64_t n = 0; n < N; ++n) {
      std::vector<float> row(tv.begin() + n * V, tv.begin() + (n + 1) * V);
      std::sort(row.rbegin(), row.rend());
      double z = 0;
      for (float x : row) z += std::exp(x / T);
      CHECK(lse[static_cast<size_t>(n)] == doctest::Approx(std::log(z)).epsilon(1e-12));
      for (int64_t j = 0; j < 5; ++j) {
        CHECK(cv[static_cast<size_t>(n * 5 + j)] == row[static_cast<size_t>(j)]);
        CHECK(tv[static_cast<size_t>(n * V + ci[static_cast<size_t>(n * 5 + j)])] == row[static_cast<size_t>(j)]);
      }
    }
    // K = V: the same loss (<= 1e-6 relative) and gradient as logit_distillation_loss.
    const auto cached = topk_loss_and_grad(t, s, V, T);
    Tensor leaf = s.detach().clone().requires_grad_(true);
    Tensor full = nn::logit_distillation_loss(t, leaf, T);
    full.backward();
    const double want = full.item<double>();
    CHECK(cached.first == doctest::Approx(want).epsilon(1e-6));
    const auto gw = to_vector<double>(leaf.grad());
    double gmax = 0, gdiff = 0;
    for (size_t i = 0; i < gw.size(); ++i)
      gmax = std::max(gmax, std::abs(gw[i])), gdiff = std::max(gdiff, std::abs(gw[i] - cached.second[i]));
    CHECK(gmax > 1e-3);
    CHECK(gdiff <= 1e-5 * gmax);  // f32 sums over V in another order
    // K < V: the KL of the K + 1 buckets, by hand; it grows with K (each partition refines the one
    // before: data processing) and stays <= the full KL, which K = V - 1 reaches again (a bucket of
    // one token is that token).
    double prev = 0;
    for (int64_t k : {1, 2, 5, 20, 36}) {
      const train::TopkLogits ck = train::topk_logits(t, k, T);
      const auto got = topk_loss_and_grad(t, s, k, T);
      CHECK(got.first == doctest::Approx(bucketed_kl(tv, to_vector<float>(s), to_vector<int32_t>(ck.indices), N, V, k, T))
                             .epsilon(1e-5));
      CHECK(got.first >= prev - 1e-6);  // 1e-6: f32 rounding of nearly equal sums
      CHECK(got.first <= want + 1e-6);
      if (k <= 20) CHECK(got.first < want - 1e-4);  // a bucket of >= 17 tokens loses their own KL
      if (k == 36) CHECK(got.first == doctest::Approx(want).epsilon(1e-5));
      prev = got.first;
    }
  }
  // K < V: the gradient is the loss's, by central differences (f32: h = 1e-2, 2e-3 of the largest).
  const int64_t k = 4;
  const auto got = topk_loss_and_grad(t, s, k, 1.5);
  const train::TopkLogits c = train::topk_logits(t, k, 1.5);
  double gmax = 0;
  for (double v : got.second) gmax = std::max(gmax, std::abs(v));
  auto sv = to_vector<float>(s);
  for (int64_t at : {0, 5, 40, 100, 443}) {
    auto loss_at = [&](float d) {
      auto w = sv;
      w[static_cast<size_t>(at)] += d;
      NoGradGuard ng;
      return nn::topk_logit_distillation_loss(c.values, c.indices, c.lse, from_vector(w, {N, V}), 1.5).item<double>();
    };
    const double fd = (loss_at(1e-2f) - loss_at(-1e-2f)) / 2e-2;
    CHECK(std::abs(fd - got.second[static_cast<size_t>(at)]) <= 2e-3 * gmax);
  }
  // Ties go to the lower id; a NaN, +inf or all -inf row is refused.
  Tensor tied = from_vector(std::vector<float>{1, 3, 3, 2, 3, 0, -INFINITY, 5, 5, 5}, {2, 5});
  CHECK(to_vector<int32_t>(train::topk_logits(tied, 2, 1.0).indices) == std::vector<int32_t>{1, 2, 2, 3});
  CHECK(to_vector<int32_t>(train::topk_logits(tied, 4, 1.0).indices) == std::vector<int32_t>{1, 2, 4, 3, 2, 3, 4, 0});
  for (float v : {NAN, INFINITY})
    CHECK_THROWS_WITH(train::topk_logits(from_vector(std::vector<float>{0, 1, v, 0, 1, 2}, {3, 2}), 1, 1.0),
                      doctest::Contains("logits at position 1 are not finite"));
  CHECK_THROWS_WITH(train::topk_logits(full({2, 3}, -INFINITY), 1, 1.0),
                    doctest::Contains("logits at position 0 are not finite"));
  // Bad input.
  CHECK_THROWS_WITH(train::topk_logits(t, V + 1, 1.0), doctest::Contains("K must be in 1..37"));
  CHECK_THROWS_WITH(train::topk_logits(t, 0, 1.0), doctest::Contains("K must be in 1..37"));
  CHECK_THROWS_WITH(nn::topk_logit_distillation_loss(c.values, c.indices, c.lse, s, 0.0),
                    doctest::Contains("temperature must be > 0"));
  CHECK_THROWS_WITH(nn::topk_logit_distillation_loss(c.values, c.indices, c.lse, slice(s, 0, 0, 3), 1.0),
                    doctest::Contains("expected values and indices (N,K)"));
}

TEST_CASE("top-k logit cache shards: matched to their batch and fingerprint, damaged or other ones not reused") {
  test::TempDir dir("logit_shards");
  Generator g(2);
  train::TopkLogits t = train::topk_logits(randn({6, 20}, g), 3, 1.0);
  t.batch = 77;
  const train::LogitShards shards((dir.path / "cache").string(), "train", train::logit_cache_fingerprint("a", 3, 1.0));
  CHECK_FALSE(shards.valid(0, 77));
  CHECK(shards.put(0, t) == 6 * 3 * 8 + 6 * 8);
  CHECK(shards.valid(0, 77));
  CHECK_FALSE(shards.valid(0, 78));  // another batch
  const train::TopkLogits back = shards.get(0, 77, Device::cpu());
  CHECK(to_vector<float>(back.values) == to_vector<float>(t.values));
  CHECK(to_vector<int32_t>(back.indices) == to_vector<int32_t>(t.indices));
  CHECK(to_vector<double>(back.lse) == to_vector<double>(t.lse));
  CHECK_THROWS_WITH(shards.get(0, 78, Device::cpu()), doctest::Contains("of another batch"));
  CHECK_THROWS_WITH(shards.get(1, 77, Device::cpu()), doctest::Contains("is missing"));
  for (const auto& fp : {train::logit_cache_fingerprint("a", 4, 1.0), train::logit_cache_fingerprint("a", 3, 2.0),
                         train::logit_cache_fingerprint("b", 3, 1.0)}) {
    const train::LogitShards other((dir.path / "cache").string(), "train", fp);
    CHECK_FALSE(other.valid(0, 77));
    CHECK_THROWS_WITH(other.get(0, 77, Device::cpu()), doctest::Contains("another teacher, data, K or temperature"));
  }
  // A flipped byte in the data: the shard's checksum no longer matches.
  {
    std::fstream f(shards.path(0), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-3, std::ios::end);
    const char c = static_cast<char>(f.get());
    f.seekp(-3, std::ios::end);
    f.put(static_cast<char>(c ^ 1));
  }
  CHECK_FALSE(shards.valid(0, 77));
  shards.remove(1);
  CHECK_FALSE(std::filesystem::exists(shards.path(0)));
}

TEST_CASE("logit distillation with the top-k cache: K = V trains the on-the-fly student; resume reuses the shards") {
  auto teacher = load_student("softmax");
  train::ConvertConfig cfg;
  cfg.quiet = true;
  cfg.distill.epochs = 0;
  cfg.logits.tokens = 642;  // 6 steps of 5 batches: the 6th is batch 0 of epoch 1, in another order
  cfg.logits.lr = 3e-4;
  cfg.finetune.epochs = 0;
  cfg.fingerprint = "cache";
  auto fly = tiny_task("hedgehog", teacher);
  const train::ConvertResult a = train::convert(*fly, cfg);

  test::TempDir dir("logit_cache");
  cfg.logits.cache = train::LogitCache::topk;
  cfg.logits.topk = 101;  // gpt2-tiny's vocabulary: no bucket
  cfg.logits.cache_folder = (dir.path / "cache").string();
  auto cached = tiny_task("hedgehog", teacher);
  const train::ConvertResult b = train::convert(*cached, cfg);
  const int64_t val = cached->batches(train::Split::val);
  CHECK(b.logit_shards_written == 6 + val);
  CHECK(b.logit_shards_reused == 0);
  CHECK(b.logit_cache_bytes > 0);
  CHECK_FALSE(std::filesystem::exists(cfg.logits.cache_folder));  // removed once the stage finished
  CHECK(b.logits.steps == 6);
  REQUIRE(b.logits.val.size() == a.logits.val.size());
  for (size_t i = 0; i < a.logits.val.size(); ++i)
    CHECK(b.logits.val[i] == doctest::Approx(a.logits.val[i]).epsilon(1e-5));
  // The same student: AdamW on gradients equal up to f32 rounding.
  double diff = 0, moved = 0;
  auto start = tiny_task("hedgehog")->model().state_dict();
  std::map<std::string, Tensor> init(start.begin(), start.end());
  auto cs = cached->model().state_dict();
  std::map<std::string, Tensor> mine(cs.begin(), cs.end());
  for (const auto& kv : fly->model().state_dict()) {
    const auto x = to_vector<float>(kv.second), y = to_vector<float>(mine.at(kv.first)),
               x0 = to_vector<float>(init.at(kv.first));
    for (size_t i = 0; i < x.size(); ++i)
      diff = std::max(diff, static_cast<double>(std::abs(x[i] - y[i]))),
      moved = std::max(moved, static_cast<double>(std::abs(x[i] - x0[i])));
  }
  MESSAGE("largest weight change by the stage ", moved, ", largest difference cached vs on the fly ", diff);
  CHECK(moved > 1e-4);
  CHECK(diff <= 1e-2 * moved);  // AdamW divides by sqrt(v): tiny gradients' f32 rounding moves a weight by up to lr

  // Interrupted after the stage's first epoch, then resumed: every shard reused, none rebuilt.
  cfg.logits.topk = 16;
  cfg.checkpoint_path = (dir.path / "ck.safetensors").string();
  cfg.stop_after_epochs = 1;
  const train::ConvertResult c = train::convert(*tiny_task("hedgehog", teacher), cfg);
  REQUIRE(c.interrupted);
  CHECK(c.logit_shards_written == 6 + val);
  cfg.stop_after_epochs = 0;
  cfg.resume = true;
  auto resumed = tiny_task("hedgehog", teacher);
  const train::ConvertResult d = train::convert(*resumed, cfg);
  CHECK_FALSE(d.interrupted);
  CHECK(d.logit_shards_written == 0);
  CHECK(d.logit_shards_reused == 6 + val);
  CHECK(d.logits.steps == 6);
  REQUIRE(d.logits.val.size() == 2);  // the evaluation before the interruption, kept, and the last
  CHECK(d.logits.val.front() == c.logits.val.front());
  CHECK(std::isfinite(d.logits.val.back()));

  // Shards of another K (a stage interrupted with K = 16, a fresh run with K = 8) are rebuilt.
  cfg.resume = false;
  cfg.stop_after_epochs = 1;
  REQUIRE(train::convert(*tiny_task("hedgehog", teacher), cfg).interrupted);
  cfg.logits.topk = 8;
  cfg.stop_after_epochs = 0;
  const train::ConvertResult e = train::convert(*tiny_task("hedgehog", teacher), cfg);
  CHECK(e.logit_shards_written == 6 + val);
  CHECK(e.logit_shards_reused == 0);

  // Bad settings, before any work.
  cfg.logits.topk = 0;
  CHECK_THROWS_WITH(train::convert(*tiny_task("hedgehog", teacher), cfg), doctest::Contains("top-k must be >= 1"));
  cfg.logits.topk = 102;
  CHECK_THROWS_WITH(train::convert(*tiny_task("hedgehog", teacher), cfg),
                    doctest::Contains("top-k 102 exceeds the vocabulary of 101"));
  cfg.logits.topk = 8;
  cfg.logits.cache_folder.clear();
  CHECK_THROWS_WITH(train::convert(*tiny_task("hedgehog", teacher), cfg), doctest::Contains("needs a folder"));
}
