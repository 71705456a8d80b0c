// ar_probe: the associative-recall study of the Hedgehog paper (§3.2, Tables 2-3, Figures 2-4).
// Trains the same decoder with each attention feature map on generated AR data and reports test
// accuracy, attention entropy and monotonicity, with figures and an index.html under --out.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include <omp.h>

#include "apps/flags.h"
#include "core/backend.h"
#include "core/parallel.h"
#include "nn/feature_maps.h"
#include "train/ar_report.h"

using namespace hh;

namespace {

const char* kPaperMaps = "softmax,elu,performer,cosformer,exp:1,exp:2,taylor,hedgehog";

struct MapSpec {
  std::string mixer;
  double temperature;
};

// "exp:2" selects exp with t = 2; "all" every map; otherwise a comma list of names.
std::vector<MapSpec> parse_maps(const std::string& arg, double temperature) {
  std::string list = arg == "all" ? "softmax,elu,relu,performer,cosformer,exp:1,exp:2,taylor,t2r,hedgehog,"
                                    "hedgehog-exp,hedgehog-untrained"
                     : arg == "paper" ? kPaperMaps
                                      : arg;
  std::vector<MapSpec> out;
  for (const std::string& item : apps::Flags::split_list(list)) {
    std::string name = item;
    double t = temperature;
    size_t colon = item.find(':');
    if (colon != std::string::npos) {
      name = item.substr(0, colon);
      std::string tv = item.substr(colon + 1);
      size_t pos = 0;
      try {
        t = std::stod(tv, &pos);
      } catch (...) {
        pos = 0;
      }
      HH_CHECK(pos == tv.size() && !tv.empty() && t > 0, "--feature-map: bad temperature in '", item, "'");
    }
    HH_CHECK(name == "softmax" || nn::is_feature_map_name(name), "--feature-map: unknown feature map '", name,
             "' (expected softmax, all, paper, or one of the names in REFERENCE.md §2)");
    out.push_back({name, t});
  }
  HH_CHECK(!out.empty(), "--feature-map: empty list");
  return out;
}

// Relative cost of one run: the width of the attention's inner products (the feature dimension of
// a linear map, the sequence length for softmax).
int64_t feature_cost(const train::ArRunConfig& c, int64_t seq_len) {
  if (c.mixer == "softmax") return seq_len;
  nn::FeatureMapConfig fc = c.model.attention.feature_map;
  fc.name = c.mixer;
  fc.heads = c.model.heads;
  fc.head_dim = c.model.head_dim;
  Generator gen(0);
  return nn::make_feature_map(fc, {gen, Device::cpu()})->feature_dim();
}

int run(int argc, char** argv) {
  apps::Flags f("ar_probe", "Associative recall probe (Hedgehog paper §3.2): accuracy, entropy, monotonicity per feature map.");
  f.add("feature-map", "paper", "a name, a comma list (exp:T sets a temperature), 'paper' or 'all'");
  f.add("preset", "small", "small (minutes on a CPU) or paper (REFERENCE.md §4 sizes)");
  f.add("vocab", "", "vocabulary size (keys and values: half each)");
  f.add("seq-len", "", "sequence length");
  f.add("train-samples", "", "training samples (10% held out for validation)");
  f.add("test-samples", "", "test samples (fresh associations)");
  f.add("layers", "", "decoder layers");
  f.add("heads", "", "attention heads");
  f.add("head-dim", "", "head dimension");
  f.add("dim", "", "model width (default heads*head-dim)");
  f.add("mlp-hidden", "", "MLP hidden size (default 2*dim)");
  f.add("positions", "rope", "position encoding: rope (the paper's) or learned");
  f.add("feature-dim", "0", "feature dim for t2r/hedgehog (0 = head dim) or performer features (0 = 256)");
  f.add("epochs", "", "maximum epochs");
  f.add("lr", "", "peak learning rate (AdamW)");
  f.add("batch", "", "batch size");
  f.add("weight-decay", "0", "AdamW weight decay");
  f.add("patience", "", "early stopping: epochs without validation improvement");
  f.add("schedule", "constant", "lr schedule after a 50-step warmup: constant, cosine, linear, onecycle");
  f.add("stop-at", "0.99", "stop a run once its validation accuracy reaches this (solved)");
  f.add("dense-targets", "true", "also train on every repeated key's value (accuracy is always on the query)", true);
  f.add("sweep", "false", "the paper's grid: lr {1e-2,1e-4} x wd {0,5e-4} x batch {8,32}; best validation per map", true);
  f.add("temperature", "1", "temperature for exp / hedgehog-exp when not given as exp:T");
  f.add("chunk", "64", "chunk size of the chunked causal linear form");
  f.add("seed", "0", "seed for data and initialization");
  f.add("device", "cpu", "cpu or cuda[:N]");
  f.add("threads", "", "CPU threads per run (default: 1 for the small preset, where the model is too small to\n"
        "                       gain from more; all cores for the paper preset)");
  f.add("jobs", "", "runs (maps x sweep configs) trained at once, each on --threads threads (default: as many\n"
        "                       as the cores allow for the small preset, 1 for the paper preset); results do not\n"
        "                       depend on it");
  f.add("out", "out/ar_probe", "output folder for results.json/csv, figures and index.html");
  f.add("quiet", "false", "plain progress lines instead of a bar", true);
  if (!f.parse(argc, argv)) return 0;

  const std::string preset = f.str("preset");
  HH_CHECK(preset == "small" || preset == "paper", "--preset: expected small or paper, got '", preset, "'");
  const bool paper = preset == "paper";
  auto pick = [&](const char* name, int64_t small_v, int64_t paper_v, int64_t lo, int64_t hi) {
    return f.given(name) ? f.integer(name, lo, hi) : (paper ? paper_v : small_v);
  };
  ArConfig data_cfg;
  // The small preset is the paper's task scaled to a CPU budget: with 8 keys in 32 tokens a softmax
  // decoder forms its recall (induction) circuit in under ~2,000 steps, where 20 keys in 64-128
  // tokens take ~10,000 or more (docs/ARCHITECTURE.md, "The AR demo's size").
  data_cfg.vocab = pick("vocab", 16, 40, 4, 1 << 20);
  data_cfg.seq_len = pick("seq-len", 32, 128, 3, 1 << 20);
  data_cfg.num_train = pick("train-samples", 20000, 10000, 2, 100000000);
  data_cfg.num_test = pick("test-samples", 1000, 2000, 1, 100000000);
  data_cfg.seed = static_cast<uint64_t>(f.integer("seed", 0));
  validate(data_cfg);

  train::ArRunConfig rc;
  nn::TransformerConfig& m = rc.model;
  m.layers = pick("layers", 2, 4, 1, 1024);
  m.heads = pick("heads", 2, 4, 1, 1024);
  m.head_dim = pick("head-dim", 32, 64, 2, 4096);
  m.dim = f.given("dim") ? f.integer("dim", 1, 1 << 20) : m.heads * m.head_dim;
  m.mlp_hidden = f.given("mlp-hidden") ? f.integer("mlp-hidden", 1, 1 << 24) : 2 * m.dim;
  m.positions = f.str("positions");
  HH_CHECK(m.positions == "rope" || m.positions == "learned", "--positions: expected rope or learned, got '",
           m.positions, "'");
  m.pre_ln = true;
  m.max_len = data_cfg.seq_len;
  m.attention.chunk = f.integer("chunk", 1, 1 << 20);
  m.attention.form = nn::LinearForm::chunked;
  m.attention.feature_map.feature_dim = f.integer("feature-dim", 0, 1 << 20);
  rc.epochs = pick("epochs", 4, 100, 1, 100000);
  rc.patience = pick("patience", 4, 10, 1, 100000);
  rc.batch = pick("batch", 32, 32, 1, 1 << 20);
  rc.lr = f.given("lr") ? f.number("lr", 0, 10) : 1e-3;
  rc.stop_accuracy = f.number("stop-at", 1e-9, 1);
  rc.weight_decay = f.number("weight-decay", 0, 10);
  rc.schedule = f.str("schedule");
  rc.dense_targets = f.boolean("dense-targets");
  rc.seed = data_cfg.seed;
  rc.device = parse_device(f.str("device"));
  rc.quiet = f.boolean("quiet");
  if (rc.device.is_cuda()) HH_CHECK(cuda_available(), "--device ", f.str("device"), ": ", cuda_unavailable_reason());
  const int cores = std::max(1, omp_get_num_procs());
  int64_t threads = f.given("threads") ? f.integer("threads", 0, 4096) : (paper ? 0 : 1);
  if (threads == 0) threads = cores;
  int64_t jobs = f.given("jobs") ? f.integer("jobs", 1, 4096)
                                 : (paper || rc.device.is_cuda() ? 1 : std::max<int64_t>(1, cores / threads));
  HH_CHECK(jobs == 1 || !rc.device.is_cuda(), "--jobs ", jobs,
           ": concurrent runs are CPU-only (a CUDA device runs one stream); use --jobs 1");
  set_num_threads(static_cast<int>(threads));
  auto maps = parse_maps(f.str("feature-map"), f.number("temperature", 1e-6, 1e6));

  struct Grid {
    double lr, wd;
    int64_t batch;
  };
  std::vector<Grid> grid{{rc.lr, rc.weight_decay, rc.batch}};
  if (f.boolean("sweep")) grid = {{1e-2, 0, 8}, {1e-2, 0, 32}, {1e-2, 5e-4, 8}, {1e-2, 5e-4, 32},
                                  {1e-4, 0, 8}, {1e-4, 0, 32}, {1e-4, 5e-4, 8}, {1e-4, 5e-4, 32}};

  jobs = std::min<int64_t>(jobs, static_cast<int64_t>(maps.size() * grid.size()));
  std::printf("associative recall: vocab %lld, length %lld, %lld train / %lld test samples; model %lld layers, "
              "%lld heads x %lld, dim %lld; %zu feature map(s), %zu config(s) each; %lld job(s) x %lld thread(s)\n",
              (long long)data_cfg.vocab, (long long)data_cfg.seq_len, (long long)data_cfg.num_train,
              (long long)data_cfg.num_test, (long long)m.layers, (long long)m.heads, (long long)m.head_dim,
              (long long)m.dim, maps.size(), grid.size(), (long long)jobs, (long long)threads);
  std::fflush(stdout);
  ArDataset data = make_associative_recall(data_cfg);

  // Every (map, config) run is independent (its own model, generator and batch order), so `jobs`
  // of them train at once on worker threads; the results are the same for any number of jobs.
  std::vector<train::ArRunConfig> runs;
  for (const MapSpec& ms : maps)
    for (const Grid& g : grid) {
      train::ArRunConfig c = rc;
      c.mixer = ms.mixer;
      c.temperature = ms.temperature;
      c.lr = g.lr;
      c.weight_decay = g.wd;
      c.batch = g.batch;
      if (jobs > 1) c.quiet = true;  // concurrent progress bars would overwrite each other
      runs.push_back(c);
    }
  // Hand out the costliest runs first (cost ~ feature dimension) so that the last run to start
  // is a short one.
  std::vector<size_t> order(runs.size());
  std::vector<int64_t> cost(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    order[i] = i;
    cost[i] = feature_cost(runs[i], data_cfg.seq_len);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  std::vector<train::ArRunResult> done(runs.size());
  std::vector<std::exception_ptr> failed(runs.size());
  std::atomic<size_t> next{0};
  std::mutex print_mu;
  auto worker = [&]() {
    set_num_threads(static_cast<int>(threads));  // OpenMP's thread count is per thread
    for (size_t n; (n = next.fetch_add(1)) < runs.size();) {
      const size_t i = order[n];
      try {
        done[i] = train::run_associative_recall(data, runs[i]);
      } catch (...) {
        failed[i] = std::current_exception();
        next = runs.size();  // stop handing out runs
        continue;
      }
      const train::ArRunResult& r = done[i];
      std::lock_guard<std::mutex> lock(print_mu);
      std::printf("  %-20s lr %-7g wd %-7g batch %-3lld -> val %.1f%%, test %.1f%% (%.1fs)\n", r.label.c_str(), r.lr,
                  r.weight_decay, (long long)r.batch, 100 * r.val_accuracy, 100 * r.accuracy, r.seconds);
      std::fflush(stdout);
    }
  };
  if (jobs <= 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    for (int64_t j = 0; j < jobs; ++j) pool.emplace_back(worker);
    for (auto& t : pool) t.join();
  }
  for (const auto& e : failed)
    if (e) std::rethrow_exception(e);
  std::vector<train::ArRunResult> results;  // best validation accuracy per map
  for (size_t m = 0; m < maps.size(); ++m) {
    const train::ArRunResult* best = nullptr;
    for (size_t g = 0; g < grid.size(); ++g) {
      const train::ArRunResult& r = done[m * grid.size() + g];
      if (!best || r.val_accuracy > best->val_accuracy) best = &r;
    }
    results.push_back(*best);
  }
  std::printf("\n%s", train::ar_table(results).c_str());

  nlohmann::json cfg = {{"preset", preset},       {"vocab", data_cfg.vocab},    {"seq_len", data_cfg.seq_len},
                        {"train_samples", data_cfg.num_train}, {"test_samples", data_cfg.num_test},
                        {"layers", m.layers},     {"heads", m.heads},           {"head_dim", m.head_dim},
                        {"dim", m.dim},           {"mlp_hidden", m.mlp_hidden}, {"positions", m.positions}, {"epochs", rc.epochs},
                        {"patience", rc.patience}, {"stop_at", rc.stop_accuracy}, {"sweep", f.boolean("sweep")}, {"lr", rc.lr},
                        {"batch", rc.batch},      {"weight_decay", rc.weight_decay}, {"schedule", rc.schedule},
                        {"dense_targets", rc.dense_targets}, {"seed", data_cfg.seed}, {"device", f.str("device")},
                        {"threads", threads}, {"jobs", jobs}};
  const std::string out = f.str("out");
  train::write_ar_report(out, results, cfg.dump());
  std::printf("\nwrote %s/{results.json,results.csv,index.html,*.svg}\n", out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
