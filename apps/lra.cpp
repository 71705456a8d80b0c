// lra: Long Range Arena (paper Table 6). Trains one classifier per (task, attention) from
// scratch with the PyTorch LRA protocol (REFERENCE.md §4) and prints the results in the layout of
// Table 6, with the paper's numbers beside. Data: the official release files (--data DIR, one
// folder per task: DIR/listops, DIR/text, DIR/retrieval, DIR/image, DIR/pathfinder) or the
// project's generators for ListOps and Pathfinder (--generate, into <out>/data/<task>).
// Every flag and every input file is checked before training starts. Each run's result is written
// as it finishes (<out>/<task>/<attention>/result.json, and table6.csv / results.json with every
// run so far); runs checkpoint at every evaluation and --resume continues a killed run.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include <omp.h>

#include "cli/app.h"
#include "cli/flags.h"
#include "core/atomic_file.h"
#include "core/backend.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "core/replace_dir.h"
#include "data/lra.h"
#include "data/lra_generate.h"
#include "nn/feature_maps.h"
#include "experiments/lra/lra_report.h"
#include "train/optim.h"
#include "train/run_dir.h"

using namespace hh;

namespace {

std::vector<data::LraTask> parse_tasks(const std::string& arg) {
  std::vector<data::LraTask> out;
  for (const std::string& name : cli::Flags::split_list(arg)) {
    data::LraTask t;
    try {
      t = data::parse_lra_task(name);
    } catch (const Error& e) {
      fail(str("--tasks: ", e.what()));
    }
    HH_CHECK(std::find(out.begin(), out.end(), t) == out.end(), "--tasks: '", name, "' is listed twice");
    out.push_back(t);
  }
  HH_CHECK(!out.empty(), "--tasks: empty list");
  return out;
}

std::vector<nn::Mixer> parse_attentions(const std::string& arg) {
  std::vector<nn::Mixer> out;
  for (const std::string& name : cli::Flags::split_list(arg)) {
    const nn::Mixer m = nn::parse_mixer(name, "--attentions");
    HH_CHECK(std::find(out.begin(), out.end(), m) == out.end(), "--attentions: '", name, "' is listed twice");
    out.push_back(m);
  }
  HH_CHECK(!out.empty(), "--attentions: empty list");
  return out;
}

// --bench: the training step alone (the same step as train::run_lra: forward, cross-entropy,
// backward, AdamW) on one random batch whose row i has max_len - 7·i real tokens (as
// tools/lra_torch.py builds it); prints steps/s (median of `steps` after 2 warm-up steps) and the
// peak of the engine's allocator (core/memory.h) above its level before the first step.
void bench(const train::LraRunConfig& c, int64_t steps) {
  const data::LraTaskInfo info = data::lra_task_info(c.task);
  nn::LraModelConfig mc = c.model;
  mc.vocab = info.vocab_size;
  mc.classes = info.num_classes;
  mc.two_documents = info.two_documents;
  mc.max_len = c.max_len;
  Generator gen(c.seed);
  nn::LraClassifier model(mc, {gen, c.device});
  model.train();
  train::AdamWOptions ao;
  ao.eps = c.adam_eps;
  train::AdamW opt(train::decay_groups(model, c.weight_decay), c.lr, ao);
  data::LraSplit split{c.task, {}};
  Generator g(c.seed + 1);
  for (int64_t i = 0; i < c.batch; ++i) {
    data::LraExample e;
    for (int64_t t = 0; t < std::max<int64_t>(1, c.max_len - 7 * i); ++t)
      e.tokens.push_back(static_cast<int32_t>(g.next_int(1, mc.vocab)));
    if (mc.two_documents) e.tokens2 = e.tokens;
    e.label = static_cast<int32_t>(g.next_int(0, mc.classes));
    split.examples.push_back(e);
  }
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < c.batch; ++i) rows.push_back(i);
  const train::LraBatch b = train::lra_batch(split, rows, c.device);
  const int64_t before = static_cast<int64_t>(memory_stats(c.device).current);
  reset_peak_memory(c.device);
  std::vector<double> times;
  for (int64_t i = 0; i < 2 + steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    Tensor loss = cross_entropy(model.forward(b.ids, b.mask, b.ids2, b.mask2), b.labels);
    loss.backward();
    opt.step();
    HH_CHECK(std::isfinite(loss.item<double>()), "--bench: non-finite loss");
    if (i >= 2) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  const double peak = static_cast<double>(static_cast<int64_t>(memory_stats(c.device).peak) - before) / (1 << 20);
  std::printf("{\"framework\": \"hedgehog\", \"device\": \"%s\", \"threads\": %d, \"task\": \"%s\", "
              "\"attention\": \"%s\", \"len\": %lld, \"batch\": %lld, \"steps_per_s\": %.4f, \"peak_mib\": %.1f}\n",
              c.device.str().c_str(), num_threads(), data::lra_task_name(c.task), nn::gated_label(nn::name(c.model.attention), c.model.gate).c_str(),
              static_cast<long long>(c.max_len), static_cast<long long>(c.batch), 1.0 / times[times.size() / 2], peak);
  std::fflush(stdout);
}

int run(int argc, char** argv) {
  cli::Flags f("lra", "Long Range Arena (Hedgehog paper Table 6): train each attention from scratch on each task.");
  f.add("tasks", "listops,pathfinder", "comma list of listops, text, retrieval, image, pathfinder");
  f.add("attentions", "softmax,hedgehog,elu", "comma list: softmax or feature maps of REFERENCE.md §2 (non-causal linear form)");
  f.add("gate", "none", "gates of the linear maps' state, a comma list: none, decay (RetNet), gla, liger,\n"
        "                       delta (Gated DeltaNet) (each linear map runs once per gate; a gated map runs\n"
        "                       causally, left to right)");
  f.add("gate-output", "normalizer",
        "output of the gated maps: normalizer (y = qS / (qz + eps); delta: y = S^T q) or groupnorm (no\n"
        "                       normalizer, then an RMSNorm per head, as GLA and Gated DeltaNet; needs --gate)");
  f.add("preset", "demo", "paper (REFERENCE.md §4 protocol), demo (minutes on a CPU, generated data) or tiny (tests)");
  f.add("data", "", "folder of the release files, one sub-folder per task (DIR/listops, DIR/text, ...)");
  f.add("generate", "false", "generate ListOps / Pathfinder into <out>/data/<task> instead of --data", true);
  f.add("max-len", "", "tokens per document (longer inputs are truncated); default: the preset's");
  f.add("batch", "", "batch size; default: the preset's");
  f.add("steps", "", "training steps; default: the preset's");
  f.add("warmup", "", "linear warmup steps (then linear decay to 0); default: the preset's");
  f.add("lr", "", "peak learning rate (AdamW); default: the preset's (paper 1e-4)");
  f.add("weight-decay", "0", "AdamW weight decay");
  f.add("adam-eps", "1e-6", "AdamW epsilon");
  f.add("grad-clip", "0", "gradient norm clip (0 = none)");
  f.add("eval-every", "", "steps between validation passes and checkpoints; default: the preset's");
  f.add("patience", "10", "early stopping: evaluations without a better validation accuracy");
  f.add("dim", "64", "embedding size");
  f.add("mlp-hidden", "128", "FFN hidden size (and the retrieval head's)");
  f.add("heads", "2", "attention heads");
  f.add("head-dim", "32", "head dimension");
  f.add("layers", "2", "encoder layers");
  f.add("dropout", "0.1", "dropout");
  f.add("feature-dim", "0", "feature dim for t2r/hedgehog (0 = head dim) or performer features (0 = 256)");
  f.add("temperature", "1", "temperature of exp / hedgehog-exp");
  f.add("gen-train", "", "--generate: training examples per task (default: the preset's)");
  f.add("gen-eval", "", "--generate: validation and test examples each (default: the preset's)");
  f.add("listops-len", "", "--generate: ListOps lengths as MIN:MAX (default: the preset's)");
  f.add("listops-depth", "", "--generate: ListOps maximum depth (default: the preset's)");
  f.add("pathfinder-size", "", "--generate: Pathfinder image side (default: the preset's)");
  f.add("pathfinder-contour", "", "--generate: Pathfinder contour length, the difficulty (default: the preset's)");
  cli::CommonFlagSpec common;
  common.seed_help = "seed for generation, initialization and batch order";
  common.resume = true;
  common.resume_help = "continue the run in --out: skip finished runs, resume the others from their checkpoints";
  common.out = true;
  common.out_default = "out/lra";
  common.out_help = "output folder: table6.csv, results.json, report.html, learning_curves.svg, per-run folders";
  cli::add_common_flags(f, common);
  f.add("stop-after-steps", "0", "testing --resume: stop each run after N steps with a checkpoint (0 = off)");
  f.add("quiet", "false", "plain progress lines instead of a bar", true);
  f.add("bench", "0", "time N training steps per (task, attention) on a random padded batch of --max-len\n"
        "                       tokens (no data, no training run) and print steps/s and peak memory");
  f.add("min-accuracy", "0", "exit 1 unless every run reaches this test accuracy in [0,1] (checks, CI)");
  if (!f.parse(argc, argv)) return 0;
  const cli::CommonFlags c = cli::read_common_flags(f, common);

  const std::string preset = f.str("preset");
  HH_CHECK(preset == "paper" || preset == "demo" || preset == "tiny", "--preset: expected paper, demo or tiny, got '",
           preset, "'");
  const auto tasks = parse_tasks(f.str("tasks"));
  const auto attentions = parse_attentions(f.str("attentions"));
  const std::vector<nn::Gate> gates = nn::parse_gate_list(cli::Flags::split_list(f.str("gate")), "--gate");
  const nn::GateOutput gate_output = nn::parse_gate_output(f.str("gate-output"), gates, "--gate-output");
  const bool generate = f.boolean("generate");
  const std::string data_dir = f.str("data");
  const int64_t bench_steps = f.integer("bench", 0, 1000000);
  HH_CHECK(bench_steps > 0 || generate != !data_dir.empty(), "give exactly one of --data DIR (release files) and --generate");
  if (generate)
    for (data::LraTask t : tasks)
      HH_CHECK(t == data::LraTask::listops || t == data::LraTask::pathfinder, "--generate: only listops and pathfinder "
               "have generators; '", data::lra_task_name(t), "' needs --data with the release files");
  if (!generate && bench_steps == 0) {
    HH_CHECK(std::filesystem::is_directory(data_dir), "--data: '", data_dir, "' is not a folder");
    for (data::LraTask t : tasks) {
      const std::string d = data_dir + "/" + data::lra_task_name(t);
      HH_CHECK(std::filesystem::is_directory(d), "--data: '", d, "' is not a folder (each task's release files go in ",
               "DIR/<task>)");
    }
  }
  // Generated sizes: paper = the release's ListOps (96k/2k/2k, 500-2000 tokens, depth 10) and
  // Pathfinder-32 at contour length 14; demo and tiny are small and easy.
  const bool tiny = preset == "tiny", paper = preset == "paper";
  const int64_t gen_train =
      f.given("gen-train") ? f.integer("gen-train", 1, 10000000) : (tiny ? 400 : paper ? 96000 : 2000);
  const int64_t gen_eval = f.given("gen-eval") ? f.integer("gen-eval", 1, 10000000) : (tiny ? 100 : paper ? 2000 : 200);
  int64_t lo_len = tiny ? 8 : paper ? 500 : 16, hi_len = tiny ? 40 : paper ? 2000 : 64;
  if (f.given("listops-len")) {
    const std::string v = f.str("listops-len");
    const size_t colon = v.find(':');
    HH_CHECK(colon != std::string::npos, "--listops-len: expected MIN:MAX, got '", v, "'");
    try {
      lo_len = std::stoll(v.substr(0, colon));
      hi_len = std::stoll(v.substr(colon + 1));
    } catch (...) {
      lo_len = hi_len = -1;
    }
    HH_CHECK(lo_len >= 1 && hi_len >= lo_len, "--listops-len: expected MIN:MAX with 1 <= MIN <= MAX, got '", v, "'");
  }
  const int depth =
      static_cast<int>(f.given("listops-depth") ? f.integer("listops-depth", 1, 100) : (tiny ? 2 : paper ? 10 : 3));
  const int pf_size = static_cast<int>(f.given("pathfinder-size") ? f.integer("pathfinder-size", 16, 512) : paper ? 32 : 16);
  const int pf_contour =
      static_cast<int>(f.given("pathfinder-contour") ? f.integer("pathfinder-contour", 1, 100) : paper ? 14 : 4);

  train::LraRunConfig base;
  nn::LraModelConfig& m = base.model;
  m.dim = f.integer("dim", 1, 1 << 16);
  m.mlp_hidden = f.integer("mlp-hidden", 1, 1 << 20);
  m.heads = f.integer("heads", 1, 1024);
  m.head_dim = f.integer("head-dim", 1, 4096);
  m.layers = f.integer("layers", 1, 1024);
  m.dropout = f.number("dropout", 0, 0.99);
  m.feature_map.feature_dim = f.integer("feature-dim", 0, 1 << 20);
  m.feature_map.temperature = f.number("temperature", 1e-6, 1e6);
  base.weight_decay = f.number("weight-decay", 0, 10);
  base.adam_eps = f.number("adam-eps", 1e-30, 1);
  base.grad_clip = f.number("grad-clip", 0, 1e12);
  base.patience = f.integer("patience", 1, 1 << 30);
  base.seed = c.seed;
  base.device = c.device;
  base.quiet = f.boolean("quiet");
  base.stop_after_steps = f.integer("stop-after-steps", 0, INT64_MAX);
  const bool resume = c.resume;
  const double min_accuracy = f.number("min-accuracy", 0, 1);
  base.precision = c.precision;
  const int64_t threads = cli::apply_threads(c.threads);

  // One config per (task, attention); the preset fills what no flag gives.
  std::vector<train::LraRunConfig> runs;
  for (data::LraTask t : tasks) {
    const train::LraPreset p = train::lra_preset(preset, t);
    for (const nn::Mixer& a : attentions)
      for (nn::Gate gate : a.is_linear() && !a.is_hybrid() ? gates : std::vector<nn::Gate>{nn::Gate::none}) {
        train::LraRunConfig c = base;
        c.task = t;
        c.model.attention = a;
        c.model.gate = gate;
        c.model.gate_output = gate == nn::Gate::none ? nn::GateOutput::normalizer : gate_output;
        c.max_len = f.given("max-len") ? f.integer("max-len", 1, 1 << 24) : p.max_len;
        c.batch = f.given("batch") ? f.integer("batch", 1, 1 << 20) : p.batch;
        c.steps = f.given("steps") ? f.integer("steps", 1, INT64_MAX / 2) : p.steps;
        c.warmup = f.given("warmup") ? f.integer("warmup", 0, INT64_MAX / 2) : p.warmup;
        c.lr = f.given("lr") ? f.number("lr", 1e-12, 10) : p.lr;
        c.eval_every = f.given("eval-every") ? f.integer("eval-every", 1, INT64_MAX / 2) : p.eval_every;
        // A model no setting accepts fails here, before any data is read.
        nn::LraModelConfig mc = c.model;
        const data::LraTaskInfo info = data::lra_task_info(t);
        mc.vocab = info.vocab_size;
        mc.classes = info.num_classes;
        mc.two_documents = info.two_documents;
        mc.max_len = c.max_len;
        Generator gen(0);
        nn::LraClassifier check_model(mc, {gen, Device::cpu()});
        runs.push_back(c);
      }
  }

  if (bench_steps > 0) {
    for (const auto& c : runs) bench(c, bench_steps);
    return 0;
  }
  // The run folder (train/run_dir.h); threads do not change a result: recorded, not compared.
  const std::string out = c.out;
  train::RunDir::Options rdo;
  rdo.resume.not_compared = {"threads"};
  rdo.resume.show_saved = false;
  train::RunDir run_folder(out, rdo);
  nlohmann::json cfg = {{"preset", preset}, {"tasks", f.str("tasks")}, {"attentions", f.str("attentions")},
                        {"data", generate ? "generated" : data_dir}, {"gen_train", gen_train}, {"gen_eval", gen_eval},
                        {"listops_len", {lo_len, hi_len}}, {"listops_depth", depth}, {"pathfinder_size", pf_size},
                        {"pathfinder_contour", pf_contour}, {"threads", threads}};
  cfg["runs"] = nlohmann::json::array();
  for (const auto& c : runs) {
    train::LraData empty{{c.task, {}}, {c.task, {}}, {c.task, {}}};
    cfg["runs"].push_back(nlohmann::json::parse(train::lra_run_fingerprint(empty, c)));
  }
  auto run_dir = [&](const train::LraRunConfig& c) {
    return out + "/" + data::lra_task_name(c.task) + "/" + nn::gated_label(nn::name(c.model.attention), c.model.gate);
  };
  // A fresh run sets an earlier run's files aside (back in place if this run fails); --resume
  // checks the settings.
  std::vector<std::string> files = {"table6.csv", "results.json", "report.html", "learning_curves.svg"};
  for (const auto& c : runs)
    for (const char* name : {"/result.json", "/checkpoint.safetensors", "/log.jsonl"})
      files.push_back((run_dir(c) + name).substr(out.size() + 1));
  run_folder.start(cfg.dump(), resume, files);
  for (const auto& c : runs) ensure_writable_dir(run_dir(c));

  // Data: generated, then read back like release files; every split of every task is read (and so
  // checked) before the first run trains.
  std::map<data::LraTask, train::LraData> datasets;
  for (data::LraTask t : tasks) {
    std::string dir = generate ? out + "/data/" + data::lra_task_name(t) : data_dir + "/" + data::lra_task_name(t);
    if (generate) {  // built beside the previous data and swapped in only when complete
      if (t == data::LraTask::listops) {
        data::ListOpsOptions o;
        o.train = gen_train;
        o.val = o.test = gen_eval;
        o.min_len = lo_len;
        o.max_len = hi_len;
        o.max_depth = depth;
        o.seed = base.seed;
        o.progress = !base.quiet;
        replace_dir(dir, [&](const std::string& stage) { data::generate_listops(stage, o); });
      } else {
        data::PathfinderOptions o;
        o.train = gen_train;
        o.val = o.test = gen_eval;
        o.size = pf_size;
        o.contour_length = pf_contour;
        o.seed = base.seed;
        o.progress = !base.quiet;
        replace_dir(dir, [&](const std::string& stage) { data::generate_pathfinder(stage, o); });
        dir += "/curv_contour_length_" + std::to_string(pf_contour);  // this run's difficulty
      }
    }
    int64_t max_len = 0;
    for (const auto& c : runs)
      if (c.task == t) max_len = c.max_len;
    train::LraData d{data::read_lra_split(t, dir, "train", max_len), data::read_lra_split(t, dir, "val", max_len),
                     data::read_lra_split(t, dir, "test", max_len)};
    std::printf("%s: %zu train / %zu val / %zu test examples from %s\n", data::lra_task_name(t), d.train.examples.size(),
                d.val.examples.size(), d.test.examples.size(), dir.c_str());
    datasets[t] = std::move(d);
  }
  std::fflush(stdout);

  std::vector<train::LraRunResult> results;
  bool interrupted = false;
  for (auto c : runs) {
    const std::string dir = run_dir(c);
    const std::string result_path = dir + "/result.json";
    train::LraRunResult r;
    if (resume && ::access(result_path.c_str(), F_OK) == 0) {
      r = train::parse_lra_result(read_file(result_path), result_path);
      std::printf("  %-11s %-20s finished earlier (%s)\n", r.task.c_str(), nn::gated_label(nn::name(r.attention), r.gate).c_str(),
                  result_path.c_str());
      results.push_back(r);
      continue;
    }
    c.checkpoint_path = dir + "/checkpoint.safetensors";
    c.log_path = dir + "/log.jsonl";
    c.resume = resume;
    try {
      r = train::run_lra(datasets.at(c.task), c);
    } catch (const std::exception& e) {
      r.task = data::lra_task_name(c.task);
      r.attention = c.model.attention;
      r.gate = c.model.gate;
      r.status = std::string("error: ") + e.what();
    }
    if (r.status.rfind("interrupted", 0) == 0) {
      std::printf("  %-11s %-20s stopped at step %lld (--stop-after-steps); continue with --resume\n", r.task.c_str(),
                  nn::gated_label(nn::name(r.attention), r.gate).c_str(), static_cast<long long>(r.steps));
      interrupted = true;
      continue;
    }
    std::printf("  %-11s %-20s -> val %.2f%%, test %.2f%% (%lld steps, %.1f s, %.2f steps/s) %s\n", r.task.c_str(),
                nn::gated_label(nn::name(r.attention), r.gate).c_str(), 100 * r.val_accuracy, 100 * r.test_accuracy,
                static_cast<long long>(r.steps), r.seconds, r.steps_per_second, r.status.c_str());
    std::fflush(stdout);
    if (r.status.rfind("error", 0) != 0) {
      run_folder.write(result_path, train::lra_result_json(r));
      ::unlink(c.checkpoint_path.c_str());  // the result supersedes it
    }
    results.push_back(r);
    train::write_lra_results(out, results);
  }
  if (interrupted) {
    std::printf("\nstopped early (--stop-after-steps): continue with --resume\n");
    run_folder.finish(train::RunDir::End::partial);
    return 0;
  }
  std::printf("\n%s", train::lra_table(results).c_str());
  train::write_lra_report(out, results, cfg.dump());
  std::printf("\nwrote %s/{table6.csv,results.json,report.html,learning_curves.svg}\n", out.c_str());
  size_t failed = 0, below = 0, errors = 0;
  for (const auto& r : results) {
    failed += r.status != "ok";
    errors += r.status.rfind("error", 0) == 0;
    below += r.status == "ok" && r.test_accuracy < min_accuracy;
  }
  // A run that ended with an error leaves no result: this run does not replace a previous complete one.
  const std::string note = run_folder.finish(errors > 0 ? train::RunDir::End::failed : train::RunDir::End::complete);
  if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
  if (failed > 0) {
    std::fprintf(stderr, "error: %zu of %zu run(s) failed (see the table)\n", failed, results.size());
    return 1;
  }
  if (below > 0) {
    std::fprintf(stderr, "error: %zu of %zu run(s) below --min-accuracy %g\n", below, results.size(), min_accuracy);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return hh::cli::run_main(argc, argv, run); }
