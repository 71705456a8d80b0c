// End-to-end: the associative-recall experiment and its report on a tiny generated problem.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/parallel.h"
#include "train/ar_report.h"

using namespace hh;

namespace {
// A one-layer model small enough for a 9-token task, two epochs.
train::ArRunConfig tiny_run(const char* mixer, int64_t batch) {
  train::ArRunConfig rc;
  rc.mixer = mixer;
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
    CAPTURE(cfgs[i].mixer);
    CHECK(concurrent[i].train_loss == serial[i].train_loss);  // bit-identical, epoch by epoch
    CHECK(concurrent[i].accuracy == serial[i].accuracy);
    CHECK(concurrent[i].entropy == serial[i].entropy);
  }
}
