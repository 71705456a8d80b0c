// Long Range Arena models and training (issue 12): padded batches give the unpadded results for
// every attention, the two-tower head, a tiny run that learns, resume = uninterrupted, the
// Table 6 report.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "nn/feature_maps.h"
#include "experiments/lra/lra_classifier.h"
#include "tests/temp_dir.h"
#include "experiments/lra/lra_experiment.h"
#include "experiments/lra/lra_report.h"

using namespace hh;

namespace {

std::vector<std::string> every_attention() {
  std::vector<std::string> names{"softmax"};
  for (const auto& n : nn::feature_map_names()) names.push_back(n);
  return names;
}

nn::LraModelConfig small_model(const std::string& attention, bool two_documents) {
  nn::LraModelConfig c;
  c.vocab = 30;
  c.classes = 3;
  c.max_len = 16;
  c.two_documents = two_documents;
  c.dim = 16;
  c.mlp_hidden = 24;
  c.heads = 2;
  c.head_dim = 8;
  c.layers = 2;
  c.dropout = 0.1;  // off in eval mode
  c.attention = nn::parse_mixer(attention, "test");
  c.feature_map.feature_dim = attention == "performer" ? 32 : 0;
  c.seed = 3;
  return c;
}

std::vector<int32_t> random_row(Generator& g, int64_t len, int64_t vocab) {
  std::vector<int32_t> r;
  for (int64_t i = 0; i < len; ++i) r.push_back(static_cast<int32_t>(g.next_int(1, vocab)));
  return r;
}

// max |a - b| over a row, relative to the row's largest |b|.
double row_error(const std::vector<double>& a, const std::vector<double>& b) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return err / std::max(scale, 1e-30);
}

// Row i of a padded batch against the same row run alone (unpadded, no mask) for `attention`.
// The padding id's embedding is made large so that a padded key that leaks into a softmax, a
// linear state, a normalizer or a key-side stabilizer shows far above rounding.
double worst_padding_error(const std::string& attention, bool two_documents) {
  Generator init(11);
  nn::LraClassifier model(small_model(attention, two_documents), {init, Device::cpu()});
  model.eval();
  {
    NoGradGuard ng;
    Tensor& table = model.encoder->embed->weight;
    auto w = to_vector<double>(table);
    for (int64_t j = 0; j < 16; ++j) w[static_cast<size_t>(j)] = 3.0 * ((j % 3) - 1.0) + 0.5;
    copy_(table, from_vector(w, table.shape()));
  }
  Generator g(5);
  const std::vector<int64_t> lens{3, 16, 7, 1}, lens2{9, 2, 16, 5};
  std::vector<std::vector<int32_t>> a, b;
  for (size_t i = 0; i < lens.size(); ++i) {
    a.push_back(random_row(g, lens[i], 30));
    b.push_back(random_row(g, lens2[i], 30));
  }
  std::vector<const std::vector<int32_t>*> pa, pb;
  for (size_t i = 0; i < a.size(); ++i) {
    pa.push_back(&a[i]);
    pb.push_back(&b[i]);
  }
  NoGradGuard ng;
  Tensor ids, mask, ids2, mask2;
  nn::pad_batch(pa, ids, mask);
  if (two_documents) nn::pad_batch(pb, ids2, mask2);
  Tensor batched = model.forward(ids, mask, ids2, mask2);  // (B,classes)
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    Tensor one = from_vector(std::vector<int64_t>(a[i].begin(), a[i].end()), {1, lens[i]});
    Tensor one2 = two_documents ? from_vector(std::vector<int64_t>(b[i].begin(), b[i].end()), {1, lens2[i]}) : Tensor();
    Tensor alone = model.forward(one, Tensor(), one2, Tensor());
    worst = std::max(worst, row_error(to_vector<double>(select(batched, 0, static_cast<int64_t>(i))),
                                      to_vector<double>(select(alone, 0, 0))));
  }
  return worst;
}

// A trivially learnable task in the LRA data layout: label 1 when the tokens come from the
// upper half of the vocabulary, 0 from the lower half; lengths vary, so batches are padded.
data::LraSplit halves_split(int64_t n, uint64_t seed) {
  data::LraSplit s;
  s.task = data::LraTask::pathfinder;
  Generator g(seed);
  for (int64_t i = 0; i < n; ++i) {
    data::LraExample e;
    e.label = static_cast<int32_t>(g.next_int(0, 2));
    const int64_t len = g.next_int(4, 24);
    for (int64_t t = 0; t < len; ++t)
      e.tokens.push_back(static_cast<int32_t>(e.label ? g.next_int(129, 257) : g.next_int(1, 129)));
    s.examples.push_back(e);
  }
  return s;
}

train::LraData halves_data() { return {halves_split(256, 1), halves_split(64, 2), halves_split(64, 3)}; }

train::LraRunConfig tiny_config(const std::string& attention) {
  train::LraRunConfig rc;
  rc.task = data::LraTask::pathfinder;
  rc.model = small_model(attention, false);
  rc.max_len = 32;
  rc.batch = 16;
  rc.steps = 60;
  rc.warmup = 6;
  rc.lr = 3e-3;
  rc.eval_every = 20;
  rc.patience = 5;
  rc.quiet = true;
  return rc;
}

}  // namespace

TEST_CASE("lra model: a padded batch gives the unpadded logits for every attention") {
  // Tolerance: 1e-5 of the row's largest logit. The padded and unpadded runs differ only in the
  // order of f32 sums (different lengths, masked vs fused softmax); measured errors are ~1e-7.
  for (const std::string& attention : every_attention()) {
    for (bool two : {false, true}) {
      const double err = worst_padding_error(attention, two);
      CHECK_MESSAGE(err < 1e-5, attention, std::string(two ? " (two-tower)" : ""), ": padded vs unpadded relative error ", err);
    }
  }
}

TEST_CASE("lra model: the two-tower head sees [x1, x2, x1*x2, x1-x2] of one shared encoder") {
  Generator init(1);
  nn::LraClassifier model(small_model("hedgehog", true), {init, Device::cpu()});
  REQUIRE(model.head1);
  CHECK(model.head1->in_features == 4 * 16);
  CHECK(model.head2->out_features == 3);
  CHECK(!model.encoder->classifier);
  // One encoder: swapping the documents changes only the sign of x1 - x2, so the features differ
  // and so (in general) do the logits; the same document twice gives x1 - x2 = 0.
  model.eval();
  NoGradGuard ng;
  Tensor ids = from_vector(std::vector<int64_t>{1, 2, 3, 4}, {1, 4});
  Tensor mask = from_vector(std::vector<double>{1, 1, 1, 1}, {1, 4}, {DType::boolean});
  Tensor same = model.forward(ids, mask, ids, mask);
  CHECK(same.size(0) == 1);
  CHECK(same.size(1) == 3);
  CHECK_THROWS(model.forward(ids, mask));  // the second document is required
}

TEST_CASE("lra training: a tiny run learns an easy padded task far above chance") {
  train::LraData data = halves_data();
  for (const char* attention : {"softmax", "hedgehog"}) {
    train::LraRunResult r = train::run_lra(data, tiny_config(attention));
    CHECK(r.status == "ok");
    CHECK_MESSAGE(r.test_accuracy >= 0.9, attention, ": test accuracy ", r.test_accuracy, " (chance 0.5)");
    CHECK(r.eval_steps == std::vector<int64_t>{20, 40, 60});
    CHECK(r.steps == 60);
    CHECK(r.val_acc.size() == 3);
    CHECK(r.steps_per_second > 0);
  }
}

TEST_CASE("lra training: a resumed run equals an uninterrupted one (dropout on)") {
  train::LraData data = halves_data();
  test::TempDir dir("lra_resume");
  train::LraRunConfig rc = tiny_config("performer");  // performer: its redraw state is resumed too
  rc.model.feature_map.redraw_interval = 7;
  rc.steps = 50;
  train::LraRunResult whole = train::run_lra(data, rc);

  rc.checkpoint_path = dir.file("run.ckpt");
  rc.log_path = dir.file("log.jsonl");
  rc.stop_after_steps = 27;  // between evaluations
  train::LraRunResult first = train::run_lra(data, rc);
  CHECK(first.status == "interrupted at step 27");
  rc.stop_after_steps = 0;
  rc.resume = true;
  train::LraRunResult rest = train::run_lra(data, rc);
  CHECK(rest.status == "ok");
  CHECK(rest.steps == whole.steps);
  CHECK(rest.train_loss == whole.train_loss);  // bit for bit
  CHECK(rest.val_acc == whole.val_acc);
  CHECK(rest.test_accuracy == whole.test_accuracy);
  CHECK(rest.best_step == whole.best_step);
  std::ifstream log(dir.file("log.jsonl"));
  int lines = 0;
  for (std::string line; std::getline(log, line);) ++lines;
  CHECK(lines == 3);  // evaluations at 20, 40, 50: one line each, across the two processes

  // Another configuration refuses the checkpoint.
  rc.lr *= 2;
  CHECK_THROWS_WITH(train::run_lra(data, rc), doctest::Contains("another configuration"));
}

TEST_CASE("lra report: Table 6 layout, empty cells for tasks not run, failures shown") {
  std::vector<train::LraRunResult> results(3);
  results[0].task = "listops";
  results[0].attention = nn::Mixer::softmax();
  results[0].test_accuracy = 0.4;
  results[1].task = "pathfinder";
  results[1].attention = nn::Mixer::softmax();
  results[1].test_accuracy = 0.7;
  results[2].task = "listops";
  results[2].attention = nn::parse_mixer("hedgehog", "test");
  results[2].status = "error: boom";
  const std::string table = train::lra_table(results);
  CHECK(table.find("ListOps") != std::string::npos);
  CHECK(table.find("Pathfinder") != std::string::npos);
  CHECK(table.find("55.00") != std::string::npos);  // softmax's average over its two tasks
  CHECK(table.find("failed") != std::string::npos);
  CHECK(table.find("36.37") != std::string::npos);  // the paper's Transformer ListOps beside
  test::TempDir dir("lra_report");
  train::write_lra_report(dir.path.string(), results, "{}");
  std::ifstream csv(dir.file("table6.csv"));
  std::string header, row1, row2;
  std::getline(csv, header);
  std::getline(csv, row1);
  std::getline(csv, row2);
  CHECK(header.rfind("attention,ListOps,Text,Retrieval,Image,Pathfinder,Avg", 0) == 0);
  CHECK(row1.rfind("softmax,40,,,,70,55", 0) == 0);
  CHECK(row2.rfind("hedgehog,,,,,,", 0) == 0);
  for (const char* f : {"results.json", "report.html", "learning_curves.svg"})
    CHECK_MESSAGE(std::ifstream(dir.file(f)).good(), f, " missing");
  // A result survives its JSON round trip (what --resume reads back).
  train::LraRunResult back = train::parse_lra_result(train::lra_result_json(results[1]), "test");
  CHECK(back.task == "pathfinder");
  CHECK(back.test_accuracy == 0.7);
}

TEST_CASE("lra table: a row with a failed task shows no average") {
  using hh::train::LraRunResult;
  std::vector<LraRunResult> rs(2);
  rs[0].task = "listops";
  rs[0].attention = hh::nn::parse_mixer("elu", "test");
  rs[0].test_accuracy = 0.5;
  rs[1].task = "text";
  rs[1].attention = rs[0].attention;
  rs[1].status = "error: out of memory";
  const std::string t = hh::train::lra_table(rs);
  CAPTURE(t);
  CHECK(t.find("50.00") != std::string::npos);
  // The Avg column reads "failed", not 50.00 (the mean of the task left).
  const size_t elu = t.find("\nelu");
  REQUIRE(elu != std::string::npos);
  const std::string line = t.substr(elu + 1, t.find('\n', elu + 1) - elu - 1);
  CHECK(line.rfind("failed") > line.find("failed"));  // twice: the text task and the average
}
