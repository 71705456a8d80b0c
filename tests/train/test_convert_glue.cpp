// GLUE as a ConversionTask (experiments/convert/convert_glue): tokenization and padded batches with their masks,
// the metrics evaluate() reports against task_metrics on the model's own predictions computed one
// row at a time (no padding), STS-B's regression loss, the num_labels check, bad data, and a
// one-epoch conversion whose stage 1 changes only the feature maps. On the tiny BERT fixtures
// (tests/fixtures/hf/bert-tiny-tok, tests/fixtures/glue; tools/make_glue_fixtures.py wrote them).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "nn/models/hf_model.h"
#include "nn/models/hf_save.h"
#include "experiments/convert/convert_glue.h"
#include "train/task_metrics.h"

using namespace hh;
namespace fs = std::filesystem;

namespace {

const std::string kHf = std::string(HH_SOURCE_DIR) + "/tests/fixtures/hf/bert-tiny-tok";
const std::string kStsbModel = std::string(HH_SOURCE_DIR) + "/tests/fixtures/glue/bert-tiny-stsb";
std::string glue_dir(const std::string& task) { return std::string(HH_SOURCE_DIR) + "/tests/fixtures/glue/" + task; }

std::shared_ptr<nn::BertForSequenceClassification> bert(const std::string& folder, const std::string& mixer = "softmax",
                                                        uint64_t seed = 3) {
  nn::HFModelOptions o;
  o.mixer = nn::parse_mixer(mixer, "test");
  o.seed = seed;
  auto m = std::dynamic_pointer_cast<nn::BertForSequenceClassification>(nn::load_hf_model(folder, o));
  REQUIRE(m != nullptr);
  return m;
}

std::shared_ptr<const train::GlueData> glue(const std::string& task, const std::string& model_dir,
                                            train::GlueDataConfig c = {}) {
  auto tok = data::load_tokenizer(model_dir);
  return std::make_shared<const train::GlueData>(train::load_glue_data(data::glue_task(task), glue_dir(task), *tok, c));
}

// The model's predictions one row at a time (a batch of one: no padding, no mask), as class ids
// or STS-B scores: what evaluate() must agree with.
std::vector<double> predict_unbatched(nn::BertForSequenceClassification& m, const train::GlueRows& rows,
                                      bool regression) {
  NoGradGuard ng;
  m.eval();
  std::vector<double> out;
  for (int64_t i = 0; i < rows.size(); ++i) {
    const auto& ids = rows.ids[static_cast<size_t>(i)];
    const auto& types = rows.types[static_cast<size_t>(i)];
    const int64_t L = static_cast<int64_t>(ids.size());
    Tensor x = from_vector(std::vector<int64_t>(ids.begin(), ids.end()), {1, L});
    Tensor t = from_vector(std::vector<int64_t>(types.begin(), types.end()), {1, L});
    std::vector<float> logits = to_vector<float>(m.forward(x, t, Tensor()));
    if (regression) {
      out.push_back(logits[0]);
    } else {
      size_t best = 0;
      for (size_t c = 1; c < logits.size(); ++c)
        if (logits[c] > logits[best]) best = c;
      out.push_back(static_cast<double>(best));
    }
  }
  return out;
}

std::map<std::string, std::vector<float>> values(const nn::Module& m) {
  std::map<std::string, std::vector<float>> v;
  for (auto& [name, t] : m.state_dict()) v[name] = to_vector<float>(t);
  return v;
}

}  // namespace

TEST_CASE("convert_glue: rows are tokenized once; batches pad to their longest row with a mask") {
  train::GlueDataConfig c;
  c.val_fraction = 0.25;
  auto d = glue("CoLA", kHf, c);
  CHECK(d->train.size() == 36);  // 48 rows, a quarter held out
  CHECK(d->val.size() == 12);
  CHECK(d->test.size() == 16);   // dev.tsv
  auto tok = data::load_tokenizer(kHf);
  for (const auto& ids : d->test.ids) {
    CHECK(ids.front() == tok->cls_id());
    CHECK(ids.back() == tok->sep_id());
  }
  train::GlueConversionTask task(bert(kHf), d, {5, 0, Device::cpu()});
  CHECK(task.batches(train::Split::test) == 4);  // 16 rows in batches of 5: the last has 1
  for (int64_t i = 0; i < task.batches(train::Split::test); ++i) {
    train::GlueBatch b = task.batch(train::Split::test, i);
    const int64_t B = b.input_ids.size(0), L = b.input_ids.size(1);
    CHECK(B == (i < 3 ? 5 : 1));
    std::vector<int64_t> ids = to_vector<int64_t>(b.input_ids), mask = to_vector<int64_t>(b.attention_mask);
    std::vector<int64_t> types = to_vector<int64_t>(b.token_type_ids);
    int64_t longest = 0, real = 0;
    for (int64_t r = 0; r < B; ++r) {
      const auto& row = d->test.ids[static_cast<size_t>(i * 5 + r)];
      const int64_t n = static_cast<int64_t>(row.size());
      longest = std::max(longest, n);
      for (int64_t j = 0; j < L; ++j) {
        const size_t k = static_cast<size_t>(r * L + j);
        CHECK(mask[k] == (j < n ? 1 : 0));
        CHECK(ids[k] == (j < n ? row[static_cast<size_t>(j)] : tok->pad_id()));
        CHECK(types[k] == 0);  // one sentence per row
      }
      real += n;
    }
    CHECK(L == longest);
    CHECK(b.tokens == real);
    CHECK(task.tokens(train::Split::test, i) == real);
  }
}

TEST_CASE("convert_glue: pair tasks put both sentences in one row with token types; truncation to max length") {
  train::GlueDataConfig c;
  c.max_length = 12;
  c.val_fraction = 0;
  auto d = glue("MRPC", kHf, c);
  CHECK(d->val.size() == d->test.size());  // validation is dev when nothing is held out
  auto tok = data::load_tokenizer(kHf);
  for (size_t i = 0; i < d->test.ids.size(); ++i) {
    const auto& ids = d->test.ids[i];
    const auto& types = d->test.types[i];
    CHECK(ids.size() == 12);  // every MRPC fixture pair is longer than 12 tokens
    int seps = 0;
    for (size_t j = 0; j < ids.size(); ++j) {
      CHECK(types[j] == (seps >= 1 ? 1 : 0));  // the first [SEP] closes segment 0
      seps += ids[j] == tok->sep_id();
    }
    CHECK(seps == 2);
  }
}

TEST_CASE("convert_glue: evaluate() equals task_metrics on the model's own predictions, row by row") {
  SUBCASE("CoLA: Matthews correlation") {
    auto d = glue("CoLA", kHf);
    auto m = bert(kHf);
    train::GlueConversionTask task(m, d, {4, 0, Device::cpu()});
    train::Metrics got = task.evaluate(train::Split::test);
    REQUIRE(got.size() == 1);
    CHECK(got[0].first == "mcc");
    const std::vector<double> pred = predict_unbatched(*m, d->test, false);
    std::vector<int64_t> p(pred.begin(), pred.end());
    CHECK(got[0].second == doctest::Approx(train::matthews_corrcoef(p, d->test.labels)).epsilon(1e-12));
  }
  SUBCASE("MRPC: F1 first, then accuracy; a linear student too") {
    auto d = glue("MRPC", kHf);
    for (const std::string mixer : {"softmax", "hedgehog"}) {
      auto m = bert(kHf, mixer);
      train::GlueConversionTask task(m, d, {3, 0, Device::cpu()});
      train::Metrics got = task.evaluate(train::Split::test);
      REQUIRE(got.size() == 2);
      CHECK(got[0].first == "f1");
      CHECK(got[1].first == "accuracy");
      const std::vector<double> pred = predict_unbatched(*m, d->test, false);
      std::vector<int64_t> p(pred.begin(), pred.end());
      CHECK(got[0].second == doctest::Approx(train::f1_binary(p, d->test.labels)).epsilon(1e-12));
      CHECK(got[1].second == doctest::Approx(train::accuracy(p, d->test.labels)).epsilon(1e-12));
    }
  }
  SUBCASE("MNLI: matched accuracy, then the mismatched dev file's") {
    const std::string model = std::string(HH_SOURCE_DIR) + "/tests/fixtures/glue/bert-tiny-mnli";
    auto d = glue("MNLI", model);
    REQUIRE(d->test.size() == 12);  // dev_matched.tsv
    REQUIRE(d->test_mismatched.size() == 9);
    auto m = bert(model, "hedgehog");
    train::GlueConversionTask task(m, d, {5, 0, Device::cpu()});
    train::Metrics got = task.evaluate(train::Split::test);
    REQUIRE(got.size() == 2);
    CHECK(got[0].first == "accuracy");
    CHECK(got[1].first == "accuracy_mismatched");
    std::vector<double> pred = predict_unbatched(*m, d->test, false);
    CHECK(got[0].second == doctest::Approx(train::accuracy({pred.begin(), pred.end()}, d->test.labels)).epsilon(1e-12));
    pred = predict_unbatched(*m, d->test_mismatched, false);
    CHECK(got[1].second ==
          doctest::Approx(train::accuracy({pred.begin(), pred.end()}, d->test_mismatched.labels)).epsilon(1e-12));
    CHECK(task.evaluate(train::Split::val).size() == 1);  // validation: matched only
  }
  SUBCASE("STS-B: Pearson and Spearman of the one output; the loss is the MSE to the scores") {
    auto d = glue("STS-B", kStsbModel);
    auto m = bert(kStsbModel);
    train::GlueConversionTask task(m, d, {4, 0, Device::cpu()});
    train::Metrics got = task.evaluate(train::Split::test);
    REQUIRE(got.size() == 2);
    CHECK(got[0].first == "pearson");
    CHECK(got[1].first == "spearman");
    const std::vector<double> pred = predict_unbatched(*m, d->test, true);
    CHECK(got[0].second == doctest::Approx(train::pearson(pred, d->test.scores)).epsilon(1e-5));
    CHECK(got[1].second == doctest::Approx(train::spearman(pred, d->test.scores)).epsilon(1e-5));
    // Batch 0 of the test split holds rows 0..3.
    double mse = 0;
    for (size_t i = 0; i < 4; ++i) mse += (pred[i] - d->test.scores[i]) * (pred[i] - d->test.scores[i]);
    NoGradGuard ng;
    CHECK(task.loss(train::Split::test, 0, nullptr).item<double>() == doctest::Approx(mse / 4).epsilon(1e-4));
  }
}

TEST_CASE("convert_glue: a model whose num_labels does not fit the task, and bad data, are clear errors") {
  auto d = glue("STS-B", kStsbModel);
  CHECK_THROWS_WITH_AS(train::GlueConversionTask(bert(kHf), d, {}),
                       doctest::Contains("has num_labels = 2 but GLUE STS-B needs 1"), Error);
  CHECK_THROWS_WITH_AS(train::check_model_for_task(*bert(kHf), data::glue_task("CoLA"), 65),
                       doctest::Contains("max length 65 exceeds the model's 64 positions"), Error);
  auto tok = data::load_tokenizer(kHf);
  const fs::path dir = fs::temp_directory_path() / ("hh_convert_glue_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "train.tsv") << "src\t1\t\tA fine sentence.\nsrc\t7\t\tA bad label.\n";
  std::ofstream(dir / "dev.tsv") << "src\t1\t\tA fine sentence.\n";
  CHECK_THROWS_WITH_AS(train::load_glue_data(data::glue_task("CoLA"), dir.string(), *tok, {}),
                       doctest::Contains(((dir / "train.tsv").string() + ":2").c_str()), Error);
  std::ofstream(dir / "train.tsv") << "src\t1\t\tA fine sentence.\n";
  train::GlueDataConfig c;
  c.val_fraction = 0.5;
  CHECK_THROWS_WITH_AS(train::load_glue_data(data::glue_task("CoLA"), dir.string(), *tok, c),
                       doctest::Contains("too few to hold out"), Error);
  fs::remove(dir / "dev.tsv");
  CHECK_THROWS_WITH_AS(train::load_glue_data(data::glue_task("CoLA"), dir.string(), *tok, {}),
                       doctest::Contains("dev.tsv"), Error);
  fs::remove_all(dir);
}

TEST_CASE("convert_glue: one epoch of conversion; stage 1 changes only the feature maps") {
  auto d = glue("CoLA", kHf);
  auto m = bert(kHf, "hedgehog");
  train::GlueConversionTask task(m, d, {8, 0, Device::cpu()});
  const auto before = values(*m);
  train::ConvertConfig cfg;
  cfg.quiet = true;
  cfg.distill.epochs = 1;
  cfg.finetune.epochs = 0;
  train::ConvertResult r = train::convert(task, cfg);
  CHECK(r.distill.steps == task.batches(train::Split::train));
  CHECK(r.distill.tokens == d->train.tokens());
  CHECK(r.distill.val.size() == 1);
  CHECK(r.distilled.size() == 1);
  const auto after = values(*m);
  int changed = 0, maps = 0;
  for (const auto& kv : before) {
    const std::string& name = kv.first;
    if (train::is_feature_map_param(name)) {
      ++maps;
      changed += kv.second != after.at(name);
    } else {
      CHECK_MESSAGE(kv.second == after.at(name), name, " changed in stage 1");  // bit-equal
    }
  }
  CHECK(maps > 0);
  CHECK(changed == maps);
  // Stage 2 (one epoch, every weight) then moves the rest.
  cfg.distill.epochs = 0;
  cfg.finetune.epochs = 1;
  cfg.finetune.lr = 1e-3;
  r = train::convert(task, cfg);
  CHECK(r.finetune.steps == task.batches(train::Split::train));
  CHECK(values(*m).at("classifier.weight") != after.at("classifier.weight"));
  // What convert_bert --save writes loads back as the same student: the same predictions and metric.
  const fs::path dir = fs::temp_directory_path() / ("hh_convert_glue_save_" + std::to_string(::getpid()));
  nn::save_hf_model(*m, dir.string(), kHf);
  auto reloaded = std::dynamic_pointer_cast<nn::BertForSequenceClassification>(nn::load_hf_model(dir.string()));
  REQUIRE(reloaded != nullptr);
  CHECK(nn::name(reloaded->options().mixer) == "hedgehog");
  train::GlueConversionTask again(reloaded, d, {8, 0, Device::cpu()});
  CHECK(again.predict(train::Split::test) == task.predict(train::Split::test));
  CHECK(again.evaluate(train::Split::test) == task.evaluate(train::Split::test));
  fs::remove_all(dir);
}
