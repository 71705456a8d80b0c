// End-to-end: the associative-recall experiment and its report on a tiny generated problem;
// divergence, checkpoint/resume and the report of failed maps.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/parallel.h"
#include "tests/op_table.h"
#include "experiments/ar/ar_report.h"

using namespace hh;

namespace {
// A one-layer model small enough for a 9-token task, two epochs.
train::ArRunConfig tiny_run(const char* mixer, int64_t batch) {
  train::ArRunConfig rc;
  rc.mixer = nn::parse_mixer(mixer, "test");
  rc.model.layers = 1;
  rc.model.heads = 2;
  rc.model.head_dim = 4;
  rc.model.dim = 8;
  rc.model.mlp_hidden = 16;
  rc.model.max_len = 9;
  rc.epochs = 2;
  rc.batch = batch;
  rc.quiet = true;
  return rc;
}

// The 9-token task the tiny runs train on (vocab 8: 4 keys, 4 values).
ArDataset tiny_data(int64_t num_train, int64_t num_test) {
  ArConfig dc;
  dc.vocab = 8;
  dc.seq_len = 9;
  dc.num_train = num_train;
  dc.num_test = num_test;
  return make_associative_recall(dc);
}
}  // namespace

TEST_CASE("ar experiment: trains, evaluates, diagnoses and writes a complete report") {
  ArDataset data = tiny_data(64, 16);
  std::vector<train::ArRunResult> results;
  for (const char* mixer : {"softmax", "hedgehog"}) {
    train::ArRunConfig rc = tiny_run(mixer, 16);
    train::ArRunResult r = train::run_associative_recall(data, rc);
    CHECK(r.accuracy >= 0.0);
    CHECK(r.accuracy <= 1.0);
    CHECK(std::isfinite(r.entropy));
    CHECK(r.entropy > 0.0);
    CHECK(r.entropy <= std::log(9.0) + 1e-9);  // never above uniform over the longest row
    CHECK(r.monotonicity >= -1.0);
    CHECK(r.monotonicity <= 1.0);
    CHECK(r.epochs_run == 2);
    CHECK(r.train_loss.size() == 2);
    CHECK(r.heat.size() == 81);
    CHECK(r.scatter_qk.size() == 45);  // causal entries of a 9x9 head
    results.push_back(r);
  }
  CHECK(results[0].params < results[1].params);  // hedgehog adds its feature-map weights
  const std::string dir = "/tmp/hh_test_ar_report";
  train::write_ar_report(dir, results, "{\"test\":true}");
  std::ifstream in(dir + "/results.json");
  REQUIRE(in.good());
  nlohmann::json j = nlohmann::json::parse(in);
  REQUIRE(j.is_array());
  REQUIRE(j.size() == 2);
  for (const auto& e : j) {
    for (const char* key : {"feature_map", "accuracy", "entropy", "monotonicity", "params", "seconds"})
      CHECK_MESSAGE(e.contains(key), "results.json lacks ", key);
    CHECK(e["accuracy"].get<double>() >= 0.0);
    CHECK(e["accuracy"].get<double>() <= 1.0);
  }
  CHECK(j[1]["feature_map"] == "hedgehog");
  for (const char* f : {"/results.csv", "/index.html", "/entropy_vs_accuracy.svg", "/heatmap_hedgehog.svg",
                        "/scatter_softmax.svg", "/training_curves.svg"}) {
    std::ifstream fs(dir + f);
    CHECK_MESSAGE(fs.good(), "missing ", f);
  }
  std::stringstream html;
  html << std::ifstream(dir + "/index.html").rdbuf();
  CHECK(html.str().find("heatmap_hedgehog.svg") != std::string::npos);
}

TEST_CASE("ar experiment: dense targets mark exactly the repeated keys") {
  ArConfig dc;
  dc.vocab = 8;
  dc.seq_len = 9;
  // keys 0..3, values 4..7: k0 v k1 v k0 v k2 v q
  Tensor in = from_vector(std::vector<int64_t>{0, 5, 1, 6, 0, 5, 2, 7, 1}, {1, 9});
  Tensor tg = from_vector(std::vector<int64_t>{-100, -100, -100, -100, -100, -100, -100, -100, 6}, {1, 9});
  auto d = to_vector<int64_t>(train::ar_dense_targets(in, tg, dc));
  CHECK(d == std::vector<int64_t>{-100, -100, -100, -100, 5, -100, -100, -100, 6});
  using train::ArTargets;
  CHECK(to_vector<int64_t>(train::ar_training_targets(in, tg, dc, ArTargets::recall)) == d);
  CHECK(to_vector<int64_t>(train::ar_training_targets(in, tg, dc, ArTargets::query)) == to_vector<int64_t>(tg));
  // all: every next token, the answer last.
  CHECK(to_vector<int64_t>(train::ar_training_targets(in, tg, dc, ArTargets::all)) ==
        std::vector<int64_t>{5, 1, 6, 0, 5, 2, 7, 1, 6});
  CHECK(train::parse_ar_targets("all") == ArTargets::all);
  CHECK_THROWS_WITH_AS(train::parse_ar_targets("dense"), doctest::Contains("unknown targets 'dense'"), hh::Error);
}

TEST_CASE("ar experiment: early stopping on validation loss records the loss curve") {
  ArDataset data = tiny_data(64, 16);
  train::ArRunConfig rc = tiny_run("hedgehog", 16);
  rc.early_stop = "loss";
  rc.epochs = 3;
  train::ArRunResult r = train::run_associative_recall(data, rc);
  REQUIRE(r.val_loss.size() == 3);
  for (double l : r.val_loss) {
    CHECK(std::isfinite(l));
    CHECK(l > 0.0);
  }
  // The kept weights are those of the lowest validation loss: its epoch's accuracy is reported.
  const size_t best = static_cast<size_t>(std::min_element(r.val_loss.begin(), r.val_loss.end()) - r.val_loss.begin());
  CHECK(r.val_accuracy == r.val_acc[best]);
  rc.early_stop = "perplexity";
  CHECK_THROWS_WITH_AS(train::run_associative_recall(data, rc), doctest::Contains("early_stop must be"), hh::Error);
}

TEST_CASE("ar experiment: runs on concurrent threads match the same runs one after another") {
  // ar_probe --jobs trains several maps at once; each run must not depend on the others.
  ArDataset data = tiny_data(48, 8);
  std::vector<train::ArRunConfig> cfgs;
  for (const char* mixer : {"softmax", "hedgehog", "performer"}) cfgs.push_back(tiny_run(mixer, 8));
  std::vector<train::ArRunResult> serial, concurrent(cfgs.size());
  for (const auto& c : cfgs) serial.push_back(train::run_associative_recall(data, c));
  std::vector<std::thread> pool;
  const int threads = num_threads();  // OpenMP's thread count is per thread: give workers the same
  for (size_t i = 0; i < cfgs.size(); ++i)
    pool.emplace_back([&, i] {
      set_num_threads(threads);
      concurrent[i] = train::run_associative_recall(data, cfgs[i]);
    });
  for (auto& t : pool) t.join();
  for (size_t i = 0; i < cfgs.size(); ++i) {
    CAPTURE(nn::name(cfgs[i].mixer));
    CHECK(concurrent[i].train_loss == serial[i].train_loss);  // bit-identical, epoch by epoch
    CHECK(concurrent[i].accuracy == serial[i].accuracy);
    CHECK(concurrent[i].entropy == serial[i].entropy);
  }
}

TEST_CASE("ar experiment: a non-finite loss stops the run, naming the epoch and the step") {
  ArDataset data = tiny_data(48, 8);
  train::ArRunConfig rc = tiny_run("softmax", 8);
  rc.lr = 1e38;  // the first update overflows the weights: the next loss is not finite
  rc.warmup_steps = 0;
  train::ArRunResult r;
  REQUIRE_NOTHROW(r = train::run_associative_recall(data, rc));
  CAPTURE(r.status);
  CHECK(r.status.rfind("diverged at epoch 1, step ", 0) == 0);
  CHECK(r.status.find("the loss became") != std::string::npos);
  CHECK(r.steps >= 1);
  CHECK(r.steps <= 3);
  // The metrics are those of the best weights before the divergence (here: the initial ones).
  CHECK(r.heat.size() == 81);
  CHECK(std::isfinite(r.entropy));
}

TEST_CASE("ar experiment: a loss that stays far above its start stops the run") {
  ArDataset data = tiny_data(48, 8);
  train::ArRunConfig rc = tiny_run("softmax", 8);
  rc.epochs = 20;
  rc.lr = 10;  // issue 8: took the loss from 2.2 to 568 with exit 0
  rc.warmup_steps = 0;
  rc.diverge_factor = 4;
  rc.diverge_steps = 5;
  train::ArRunResult r = train::run_associative_recall(data, rc);
  CAPTURE(r.status);
  CHECK(r.status.rfind("diverged at epoch ", 0) == 0);
  CHECK(r.status.find("stayed above 4 x its initial value") != std::string::npos);
  // Off, the same run trains on (and does not report a divergence).
  rc.diverge_factor = 0;
  rc.epochs = 2;
  CHECK(train::run_associative_recall(data, rc).status.rfind("diverged", 0) != 0);
}

namespace {
// Everything a run's result holds, compared exactly.
void check_same_result(const train::ArRunResult& a, const train::ArRunResult& b) {
  CHECK(a.status == b.status);
  CHECK(a.train_loss == b.train_loss);
  CHECK(a.val_acc == b.val_acc);
  CHECK(a.val_accuracy == b.val_accuracy);
  CHECK(a.accuracy == b.accuracy);
  CHECK(a.entropy == b.entropy);
  CHECK(a.monotonicity == b.monotonicity);
  CHECK(a.epochs_run == b.epochs_run);
  CHECK(a.steps == b.steps);
  CHECK(a.heat == b.heat);  // the attention of the final weights on a test sample
  CHECK(a.scatter_qk == b.scatter_qk);
}
}  // namespace

TEST_CASE("ar experiment: an interrupted run resumed from its checkpoint ends bit for bit as an uninterrupted one") {
  ArDataset data = tiny_data(48, 8);  // 43 training rows, batch 8: 6 steps an epoch
  const std::string dir = "/tmp/hh_test_ar_resume_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  for (const char* mixer : {"hedgehog", "performer"}) {  // performer: a random projection redrawn in training
    CAPTURE(mixer);
    train::ArRunConfig rc = tiny_run(mixer, 8);
    rc.epochs = 3;
    rc.schedule = "cosine";
    rc.model.attention.feature_map.redraw_interval = 4;
    const train::ArRunResult plain = train::run_associative_recall(data, rc);
    CHECK(plain.status == "ok");
    CHECK(plain.steps == 18);
    // After epoch 1 (step 6), mid-epoch 2 (step 8), and with checkpoints every 5 steps.
    for (int64_t stop : {6, 8, 11}) {
      CAPTURE(stop);
      train::ArRunConfig first = rc;
      first.checkpoint_path = dir + "/" + mixer + ".safetensors";
      std::filesystem::remove(first.checkpoint_path);
      first.stop_after_steps = stop;
      first.checkpoint_every = stop == 11 ? 5 : 0;
      train::ArRunResult cut = train::run_associative_recall(data, first);
      CHECK(cut.status == "interrupted at step " + std::to_string(stop));
      train::ArRunConfig second = first;
      second.stop_after_steps = 0;
      second.resume = true;
      check_same_result(train::run_associative_recall(data, second), plain);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("ar experiment: resuming refuses a checkpoint of another configuration") {
  ArDataset data = tiny_data(48, 8);
  const std::string path = "/tmp/hh_test_ar_resume_cfg_" + std::to_string(::getpid()) + ".safetensors";
  train::ArRunConfig rc = tiny_run("softmax", 8);
  rc.checkpoint_path = path;
  rc.stop_after_steps = 3;
  REQUIRE(train::run_associative_recall(data, rc).status == "interrupted at step 3");
  rc.stop_after_steps = 0;
  rc.resume = true;
  rc.lr = 2e-3;
  hh::test::check_throws([&] { train::run_associative_recall(data, rc); }, {path, "another configuration", "/lr"});
  rc.lr = 1e-3;
  ArDataset other = tiny_data(40, 8);
  hh::test::check_throws([&] { train::run_associative_recall(other, rc); }, {path, "/data/num_train"});
  std::filesystem::remove(path);
}

TEST_CASE("ar report: status column, failed maps in the table and result files that round-trip") {
  ArDataset data = tiny_data(48, 8);
  train::ArRunResult ok = train::run_associative_recall(data, tiny_run("softmax", 8));
  train::ArRunResult failed;
  failed.label = "hedgehog";
  failed.mixer = nn::parse_mixer("hedgehog", "test");
  failed.status = "error: out of memory";
  const std::string table = train::ar_table({ok, failed});
  CHECK(table.find("status") != std::string::npos);
  CHECK(table.find("error: out of memory") != std::string::npos);
  const std::string dir = "/tmp/hh_test_ar_report_failed_" + std::to_string(::getpid());
  train::write_ar_report(dir, {ok, failed}, "{}");
  nlohmann::json j = nlohmann::json::parse(std::ifstream(dir + "/results.json"));
  REQUIRE(j.size() == 2);
  CHECK(j[0]["status"] == "ok");
  CHECK(j[1]["status"] == "error: out of memory");
  CHECK(std::filesystem::exists(dir + "/heatmap_softmax.svg"));
  CHECK(!std::filesystem::exists(dir + "/heatmap_hedgehog.svg"));  // nothing to draw for a failed run
  std::filesystem::remove_all(dir);

  train::ArRunResult back = train::parse_ar_result(train::ar_result_json(ok), "mem");
  check_same_result(back, ok);
  CHECK(back.label == ok.label);
  CHECK(back.scatter_w == ok.scatter_w);
  CHECK(back.heat_tokens == ok.heat_tokens);
  hh::test::check_throws([&] { train::parse_ar_result("{\"feature_map\":\"x\"}", "bad.json"); }, {"bad.json"});
}
