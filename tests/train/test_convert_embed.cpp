// The label-free embedding conversion task (experiments/convert/convert_embed): the text splits,
// the fidelity metrics against hand-computed cases, the teacher scoring itself perfectly, and a
// short conversion of the tiny sentence-transformers fixture that moves the student toward it.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "experiments/convert/convert_embed.h"
#include "nn/mixer.h"
#include "tests/op_table.h"
#include "tests/temp_dir.h"

using namespace hh;

namespace {

const std::string kModel = std::string(HH_SOURCE_DIR) + "/tests/fixtures/hf/st-tiny-mean";
const std::string kCorpus = std::string(HH_SOURCE_DIR) + "/tests/fixtures/tokenizers/corpus.txt";

}  // namespace

TEST_CASE("convert embed: fidelity metrics on hand-made embeddings") {
  Tensor t = from_vector(std::vector<double>{1, 0, 0, 1, 1, 1, -1, 0.2}, {4, 2}, DType::f64);
  train::EmbeddingFidelity same = train::embedding_fidelity(t, t);
  CHECK(std::fabs(same.mean_cosine - 1) < 1e-12);
  CHECK(std::fabs(same.spearman - 1) < 1e-12);
  CHECK(same.nn_agreement == 1.0);
  // A student that scales each vector keeps every cosine: the same figures.
  Tensor scaled = mul(t, from_vector(std::vector<double>{2, 3, 0.5, 7}, {4, 1}, DType::f64));
  CHECK(std::fabs(train::embedding_fidelity(scaled, t).mean_cosine - 1) < 1e-12);
  // Rows 0 and 1 swapped: cosines 0, 0, 1, 1 -> 0.5; row 2's neighbour changes from 0 or 1 ...
  Tensor swapped = from_vector(std::vector<double>{0, 1, 1, 0, 1, 1, -1, 0.2}, {4, 2}, DType::f64);
  train::EmbeddingFidelity f = train::embedding_fidelity(swapped, t);
  CHECK(std::fabs(f.mean_cosine - 0.5) < 1e-12);
  CHECK(f.nn_agreement < 1.0);
  hh::test::check_throws([&] { train::embedding_fidelity(t, ones({3, 2}, {DType::f64})); }, {"embedding_fidelity", "(4, 2)"});
}

TEST_CASE("convert embed: texts split without overlap, empty lines skipped, errors name the file") {
  hh::test::TempDir d("embed_texts");
  std::string text;
  for (int i = 0; i < 30; ++i) text += "text number " + std::to_string(i) + (i % 7 == 0 ? "\n\n" : "\n");
  const std::string path = d.write("texts.txt", text);
  auto model = nn::load_hf_model(kModel);
  auto tok = data::load_tokenizer(kModel);
  train::EmbedDataConfig dc;
  dc.max_length = 16;
  dc.val_fraction = 0.2;
  dc.test_fraction = 0.1;
  const train::EmbedData e = train::load_embed_texts(path, *tok, dc);
  CHECK(e.empty_lines == 5);
  CHECK(e.train.size() + e.val.size() + e.test.size() == 30);
  CHECK(e.val.size() == 6);
  CHECK(e.test.size() == 3);
  std::set<std::vector<int32_t>> seen;
  for (const train::GlueRows* r : {&e.train, &e.val, &e.test})
    for (const auto& ids : r->ids) CHECK(seen.insert(ids).second);  // every text once
  dc.max_texts = 2;
  hh::test::check_throws([&] { train::load_embed_texts(path, *tok, dc); }, {path, "too few"});
  hh::test::check_throws([&] { train::load_embed_texts(d.file("missing.txt"), *tok, dc); }, {"missing.txt"});
  hh::test::check_throws([] { train::parse_embed_loss("l1", "--embed-loss"); }, {"--embed-loss", "l1", "cosine or mse"});
}

TEST_CASE("convert embed: the teacher scores 1 against itself; a converted student learns the teacher's embeddings") {
  auto tok = data::load_tokenizer(kModel);
  train::EmbedDataConfig dc;
  dc.max_length = 24;
  dc.max_texts = 120;
  auto data = std::make_shared<train::EmbedData>(train::load_embed_texts(kCorpus, *tok, dc));
  train::EmbedTaskConfig tc;
  tc.batch = 8;
  tc.embedding = nn::read_embedding_config(kModel);
  std::shared_ptr<nn::HFModel> teacher = nn::load_hf_model(kModel);
  train::teacher_embeddings(*data, *teacher, tc);
  std::shared_ptr<const train::EmbedData> shared = data;
  train::EmbeddingConversionTask self(teacher, shared, tc);
  const train::Metrics m = self.evaluate(train::Split::test);
  REQUIRE(m.size() == 3);
  CHECK(m[0].first == "cosine");
  CHECK(std::fabs(m[0].second - 1) < 1e-6);
  CHECK(std::fabs(m[1].second - 1) < 1e-6);
  CHECK(m[2].second == 1.0);

  nn::HFModelOptions o;
  o.mixer = nn::parse_mixer("elu", "test");
  std::shared_ptr<nn::HFModel> student = nn::load_hf_model(kModel, o);
  train::EmbeddingConversionTask task(student, shared, tc);
  const double before = task.evaluate(train::Split::val)[0].second;
  train::ConvertConfig cfg;
  cfg.distill.epochs = 0;
  cfg.finetune.epochs = 2;
  cfg.finetune.lr = 3e-3;
  cfg.quiet = true;
  const train::ConvertResult r = train::convert(task, cfg);
  const double after = task.evaluate(train::Split::val)[0].second;
  CHECK(before < 0.999);
  CHECK(after > before);  // stage 2 moves the student's embeddings toward the teacher's
  CHECK(r.finetune.steps > 0);
}
