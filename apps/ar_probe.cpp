// ar_probe: the associative-recall study of the Hedgehog paper (§3.2, Tables 2-3, Figures 2-4).
// Trains the same decoder with each attention feature map on generated AR data and reports test
// accuracy, attention entropy and monotonicity, with figures and an index.html under --out.
// Long runs are safe to lose: every map's result is written as it finishes, every run checkpoints
// into <out>/<map>/ each epoch, and --resume continues a killed run where it stopped.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <exception>
#include <iostream>
#include <nlohmann/json.hpp>

#include <omp.h>

#include "cli/app.h"
#include "cli/flags.h"
#include "core/atomic_file.h"
#include "core/backend.h"
#include "core/parallel.h"
#include "nn/feature_maps.h"
#include "nn/transformer.h"
#include "experiments/ar/ar_report.h"
#include "train/run_dir.h"
#include "train/run_scheduler.h"
#include "train/schedule.h"

using namespace hh;

namespace {

const char* kPaperMaps = "softmax,elu,performer,cosformer,exp:1,exp:2,taylor,hedgehog";

struct MapSpec {
  nn::Mixer mixer;
  nn::Gate gate;
  double temperature;
  std::string label;  // train::ar_label: unique within a run
};

// "exp:2" selects exp with t = 2; "all" every map; otherwise a comma list of names. Only exp takes
// a parameter (its temperature); a map listed twice is an error (it would overwrite its figures).
// Each linear (non-hybrid) map runs once per gate of `gates` (--gate); softmax and hybrids once,
// ungated.
std::vector<MapSpec> parse_maps(const std::string& arg, double temperature, const std::vector<nn::Gate>& gates) {
  std::string list = arg == "all" ? "softmax,elu,relu,performer,cosformer,exp:1,exp:2,taylor,t2r,hedgehog,"
                                    "hedgehog-exp,hedgehog-untrained"
                     : arg == "paper" ? kPaperMaps
                                      : arg;
  std::vector<MapSpec> out;
  for (const std::string& item : cli::Flags::split_list(list)) {
    std::string name = item;
    double t = temperature;
    size_t colon = item.find(':');
    if (colon != std::string::npos) name = item.substr(0, colon);
    const nn::Mixer mixer = nn::parse_mixer(name, "--feature-map");
    if (colon != std::string::npos) {
      HH_CHECK(mixer.feature_map() == "exp", "--feature-map: '", item, "': ", name,
               " takes no parameter (only exp takes one, its temperature: exp:T)");
      std::string tv = item.substr(colon + 1);
      size_t pos = 0;
      try {
        t = std::stod(tv, &pos);
      } catch (...) {
        pos = 0;
      }
      HH_CHECK(pos == tv.size() && !tv.empty() && t > 0 && t < 1e6, "--feature-map: bad temperature in '", item,
               "' (expected a number in (0, 1e6))");
    }
    const bool gated = mixer.is_linear() && !mixer.is_hybrid();
    for (nn::Gate gate : gated ? gates : std::vector<nn::Gate>{nn::Gate::none}) {
      MapSpec ms{mixer, gate, t, train::ar_label(mixer, t, gate)};
      for (const MapSpec& prev : out)
        HH_CHECK(prev.label != ms.label, "--feature-map: '", item, "' is listed twice (as ", ms.label,
                 "); each map is trained once");
      out.push_back(ms);
    }
  }
  HH_CHECK(!out.empty(), "--feature-map: empty list");
  return out;
}

// Relative cost of one run: the width of the attention's inner products (the feature dimension of
// a linear map, the sequence length for softmax).
int64_t feature_cost(const train::ArRunConfig& c, int64_t seq_len) {
  if (c.mixer.is_softmax()) return seq_len;
  nn::FeatureMapConfig fc = c.model.attention.feature_map;
  fc.name = c.mixer.feature_map();
  fc.heads = c.model.heads;
  fc.head_dim = c.model.head_dim;
  Generator gen(0);
  const int64_t F = nn::make_feature_map(fc, {gen, Device::cpu()})->feature_dim();
  return c.mixer.is_hybrid() ? F + std::min(c.model.attention.window, seq_len) : F;  // the window's scores too
}

// Bytes of memory this process can still use: MemAvailable of /proc/meminfo (sysconf's free pages
// where that cannot be read), lowered to the room left under a cgroup v2 memory limit.
double available_memory(std::string& source) {
  double avail = -1;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (meminfo >> key >> kb) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") {
      avail = kb * 1024.0;
      source = "MemAvailable in /proc/meminfo";
      break;
    }
  }
  if (avail < 0) {
    avail = static_cast<double>(::sysconf(_SC_AVPHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
    source = "free pages from sysconf";
  }
  std::ifstream limit_file("/sys/fs/cgroup/memory.max"), current_file("/sys/fs/cgroup/memory.current");
  double limit = 0, current = 0;
  if (limit_file >> limit && current_file >> current && limit - current < avail) {  // "max" (no limit) fails >>
    avail = std::max(0.0, limit - current);
    source = "the cgroup memory limit (/sys/fs/cgroup/memory.max)";
  }
  return avail;
}

// A rough upper estimate of the memory a run needs, made before the data is generated.
//   data: train + test inputs and targets, int64: (train + test samples) x seq-len x 16 bytes.
//   per concurrent run (x jobs), on the CPU: its dense-target and batch copies of the training
//   split (2 x train x seq-len x 8 bytes); f32 parameters x 7 (weights, gradients, two AdamW
//   moments, the best-weights copy, a checkpoint's tensors and bytes); and activations of one batch,
//   counted twice for the backward pass: per token and layer 12 x dim + 3 x mlp-hidden + 3 x heads x
//   max(seq-len, feature dim) floats, plus 3 x vocab floats of logits per token. On CUDA only the
//   host copies of the data count.
struct MemoryEstimate {
  double data = 0, per_run = 0, total = 0;
};

MemoryEstimate estimate_memory(const ArConfig& d, const train::ArRunConfig& rc, int64_t max_batch, int64_t jobs,
                               bool channel_gates, bool delta_gate) {
  const nn::TransformerConfig& m = rc.model;
  const double L = static_cast<double>(d.seq_len), V = static_cast<double>(d.vocab);
  const double dim = static_cast<double>(m.dim), hidden = static_cast<double>(m.mlp_hidden);
  const double heads = static_cast<double>(m.heads), hd = static_cast<double>(m.head_dim);
  const double layers = static_cast<double>(m.layers);
  const double fdim = std::max<double>({hd, static_cast<double>(m.attention.feature_map.feature_dim), 256.0});
  MemoryEstimate e;
  e.data = static_cast<double>(d.num_train + d.num_test) * L * 16.0;
  e.per_run = 2.0 * static_cast<double>(d.num_train) * L * 8.0;
  if (!rc.device.is_cuda()) {
    const double params = 2 * V * dim + L * dim +
                          layers * (4 * dim * heads * hd + 2 * dim * hidden + 2 * heads * hd * fdim + 8 * dim + hidden);
    const double tokens = static_cast<double>(std::max<int64_t>(max_batch, 64)) * L;
    // A per-channel gate (gla, liger) keeps about six (16, F) blocks per token and head for its
    // backward (gated_attention_chunked's pairs inside a sub-block of 16 tokens).
    // The delta rule's chunked WY form keeps about six (C, C) blocks per chunk and head (the decays,
    // T, the query-key products), six chunk-wide rows per token and head.
    const double chunk = static_cast<double>(m.attention.chunk);
    const double gate = (channel_gates ? 6 * heads * 16 * fdim : 0) + (delta_gate ? 6 * heads * chunk : 0);
    const double per_layer = 12 * dim + 3 * hidden + 3 * heads * std::max(L, fdim) + gate;
    const double act = 2.0 * 4.0 * tokens * (layers * per_layer + 3 * V);
    e.per_run += 7.0 * 4.0 * params + act;
  }
  e.total = e.data + static_cast<double>(jobs) * e.per_run;
  return e;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

int run(int argc, char** argv) {
  cli::Flags f("ar_probe", "Associative recall probe (Hedgehog paper §3.2): accuracy, entropy, monotonicity per feature map.");
  f.add("feature-map", "paper", "a name, a comma list of distinct maps (exp:T sets exp's temperature; no other map\n"
        "                       takes a parameter), 'paper' or 'all'");
  f.add("preset", "small", "small (minutes on a CPU) or paper (REFERENCE.md §4 sizes)");
  f.add("style", "", "sequence style: pairs (a bijection per sequence, query over pairs) or safari (the\n"
        "                       H3/safari generator: values drawn with replacement, '=>' before the query;\n"
        "                       data/associative_recall.h) (default: pairs; paper preset: safari)");
  f.add("vocab", "", "vocabulary size (keys and values: half each; safari: 2 special tokens first)");
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
  f.add("untied", "false", "hedgehog / t2r: separate feature maps for queries and keys", true);
  f.add("joint-softmax", "false", "hedgehog: one softmax over [z, -z] instead of one per half", true);
  f.add("epochs", "", "maximum epochs");
  f.add("lr", "", "peak learning rate (AdamW)");
  f.add("batch", "", "batch size");
  f.add("weight-decay", "0", "AdamW weight decay");
  f.add("patience", "", "early stopping: epochs without validation improvement");
  f.add("early-stop", "", "what early stopping follows: accuracy or loss (validation cross-entropy on the\n"
        "                       answer; the paper's rule) (default: accuracy; paper preset: loss)");
  f.add("schedule", "constant", "lr schedule after a 50-step warmup: constant, cosine, linear, onecycle");
  f.add("stop-at", "", "stop a run once its validation accuracy reaches this (solved) (default: 0.99; paper\n"
        "                       preset: 1)");
  f.add("targets", "", "training targets: query (the answer only), recall (also every value whose key\n"
        "                       occurred before) or all (every next token, as safari trains); accuracy is\n"
        "                       always on the query (default: recall; paper preset: all)");
  f.add("sweep", "", "the paper's grid: lr {1e-2,1e-4} x wd {0,5e-4} x batch {8,32}; best validation per map\n"
        "                       (default: false; paper preset: true)", true);
  f.add("temperature", "1", "temperature for exp / hedgehog-exp when not given as exp:T");
  f.add("chunk", "64", "chunk size of the chunked causal linear form");
  f.add("window", "64", "sliding-window size of the hybrid-<map> mixers");
  f.add("gate", "none", "gates of the linear maps' state, a comma list: none, decay (RetNet), gla, liger,\n"
        "                       delta (Gated DeltaNet) (each linear map runs once per gate; softmax and hybrids\n"
        "                       once, ungated)");
  f.add("gate-output", "normalizer",
        "output of the gated maps: normalizer (y = qS / (qz + eps); delta: y = S^T q) or groupnorm (no\n"
        "                       normalizer, then an RMSNorm per head, as GLA and Gated DeltaNet; needs --gate)");
  cli::CommonFlagSpec common;
  common.seed_help = "seed for data and initialization";
  common.threads_default = "";
  common.threads_help = "CPU threads per run (default: 1 for the small preset, where the model is too small to\n"
                        "                       gain from more; all cores for the paper preset)";
  common.resume = true;
  common.resume_help = "continue the run in --out: skip finished maps, resume the others from their\n"
                       "                       checkpoints (the other flags must be the run's own)";
  common.out = true;
  common.out_default = "out/ar_probe";
  common.out_help = "output folder for results.json/csv, figures and index.html; each map's\n"
                    "                       result and checkpoint go to <out>/<map>/. Checked writable before training";
  cli::add_common_flags(f, common);
  f.add("jobs", "", "runs (maps x sweep configs) trained at once, each on --threads threads (default: as many\n"
        "                       as the cores allow for the small preset, 1 for the paper preset); results do not\n"
        "                       depend on it");
  f.add("diverge-factor", "4", "divergence: stop a run whose loss stays above this x its first step's loss\n"
        "                       for --diverge-steps steps (0 = off; a non-finite loss always stops it)");
  f.add("diverge-steps", "20", "divergence: consecutive steps above the factor that stop a run");
  f.add("checkpoint-every", "0", "also checkpoint every N steps (0 = only at the end of each epoch)");
  f.add("stop-after-steps", "0", "testing --resume: stop each run after N steps with a checkpoint (0 = off)");
  f.add("quiet", "false", "plain progress lines instead of a bar", true);
  if (!f.parse(argc, argv)) return 0;
  const cli::CommonFlags c = cli::read_common_flags(f, common);

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
  data_cfg.seed = c.seed;
  // The paper preset is the paper's protocol as docs/AR_INVESTIGATION.md reads it (the H3/safari
  // task, every next token trained, the sweep, early stopping on validation loss); the small
  // preset is the task on which softmax solves recall within the demo's budget.
  data_cfg.style = parse_ar_style(f.given("style") ? f.str("style") : (paper ? "safari" : "pairs"));
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
  m.attention.window = f.integer("window", 1, 1 << 30);
  m.attention.form = nn::LinearForm::chunked;
  m.attention.feature_map.feature_dim = f.integer("feature-dim", 0, 1 << 20);
  m.attention.feature_map.untied = f.boolean("untied");
  m.attention.feature_map.joint_softmax = f.boolean("joint-softmax");
  rc.epochs = pick("epochs", 4, 100, 1, 100000);
  rc.patience = pick("patience", 4, 10, 1, 100000);
  rc.batch = pick("batch", 32, 32, 1, 1 << 20);
  rc.lr = f.given("lr") ? f.number("lr", 0, 10) : 1e-3;
  HH_CHECK(rc.lr > 0, "--lr: expected a positive learning rate, got ", rc.lr);
  rc.stop_accuracy = f.given("stop-at") ? f.number("stop-at", 1e-9, 1) : (paper ? 1.0 : 0.99);
  rc.early_stop = f.given("early-stop") ? f.str("early-stop") : (paper ? "loss" : "accuracy");
  HH_CHECK(rc.early_stop == "accuracy" || rc.early_stop == "loss", "--early-stop: expected accuracy or loss, got '",
           rc.early_stop, "'");
  rc.weight_decay = f.number("weight-decay", 0, 10);
  rc.schedule = f.str("schedule");
  parse_schedule_kind(rc.schedule);  // a bad name fails here, not in every run
  rc.targets = train::parse_ar_targets(f.given("targets") ? f.str("targets") : (paper ? "all" : "recall"));
  rc.seed = data_cfg.seed;
  rc.device = c.device;
  rc.quiet = f.boolean("quiet");
  rc.diverge_factor = f.number("diverge-factor", 0, 1e12);
  HH_CHECK(rc.diverge_factor == 0 || rc.diverge_factor > 1, "--diverge-factor: expected 0 (off) or a number > 1, got ",
           rc.diverge_factor);
  rc.diverge_steps = f.integer("diverge-steps", 1, 1 << 30);
  rc.checkpoint_every = f.integer("checkpoint-every", 0, INT64_MAX);
  rc.stop_after_steps = f.integer("stop-after-steps", 0, INT64_MAX);
  const bool resume = c.resume;
  rc.precision = c.precision;
  const int cores = std::max(1, omp_get_num_procs());
  int64_t threads = c.threads >= 0 ? c.threads : (paper ? 0 : 1);
  if (threads == 0) threads = cores;
  int64_t jobs = f.given("jobs") ? f.integer("jobs", 1, 4096)
                                 : (paper || rc.device.is_cuda() ? 1 : std::max<int64_t>(1, cores / threads));
  HH_CHECK(jobs == 1 || !rc.device.is_cuda(), "--jobs ", jobs,
           ": concurrent runs are CPU-only for now (runs on their own CUDA streams are built but have not been "
           "tested on a GPU); use --jobs 1");
  set_num_threads(static_cast<int>(threads));
  const std::vector<nn::Gate> gates = nn::parse_gate_list(cli::Flags::split_list(f.str("gate")), "--gate");
  const nn::GateOutput gate_output = nn::parse_gate_output(f.str("gate-output"), gates, "--gate-output");
  auto maps = parse_maps(f.str("feature-map"), f.number("temperature", 1e-6, 1e6), gates);

  struct Grid {
    double lr, wd;
    int64_t batch;
  };
  std::vector<Grid> grid{{rc.lr, rc.weight_decay, rc.batch}};
  const bool sweep = f.given("sweep") ? f.boolean("sweep") : paper;
  if (sweep) grid = {{1e-2, 0, 8}, {1e-2, 0, 32}, {1e-2, 5e-4, 8}, {1e-2, 5e-4, 32},
                                  {1e-4, 0, 8}, {1e-4, 0, 32}, {1e-4, 5e-4, 8}, {1e-4, 5e-4, 32}};

  jobs = std::min<int64_t>(jobs, static_cast<int64_t>(maps.size() * grid.size()));

  // Everything that can be checked is checked before the data is generated and training starts.
  // The run folder (train/run_dir.h): checked here; threads and jobs are recorded in config.json but
  // do not change a result, so --resume does not compare them.
  const std::string out = c.out;
  train::RunDir::Options rdo;
  rdo.resume.not_compared = {"threads", "jobs"};
  train::RunDir run_dir(out, rdo);
  int64_t max_batch = 0;
  for (const Grid& g : grid) max_batch = std::max(max_batch, g.batch);
  bool channel_gates = false, delta_gate = false;
  for (const MapSpec& ms : maps) {
    channel_gates = channel_gates || ms.gate == nn::Gate::gla || ms.gate == nn::Gate::liger;
    delta_gate = delta_gate || ms.gate == nn::Gate::delta;
  }
  const MemoryEstimate need = estimate_memory(data_cfg, rc, max_batch, jobs, channel_gates, delta_gate);
  std::string mem_source;
  const double avail = available_memory(mem_source);
  HH_CHECK(need.total <= avail, "this run needs about ", gib(need.total), " of memory (data ", gib(need.data), " for ",
           data_cfg.num_train + data_cfg.num_test, " samples of ", data_cfg.seq_len, " tokens; ", gib(need.per_run),
           " per concurrent run x ", jobs, ") but only ", gib(avail), " is available (", mem_source,
           "); use fewer --train-samples / --test-samples, a smaller model or --batch, or fewer --jobs");

  // Each map's model is built once here (on the CPU: cheap next to the estimate above), so that a
  // configuration no model accepts fails now rather than in every run.
  for (const MapSpec& ms : maps) {
    nn::TransformerConfig mc = m;
    mc.vocab = data_cfg.vocab;
    mc.attention.mixer = ms.mixer;
    mc.attention.gate = ms.gate;
    mc.attention.gate_output = ms.gate == nn::Gate::none ? nn::GateOutput::normalizer : gate_output;
    mc.attention.feature_map.temperature = ms.temperature;
    Generator gen(0);
    nn::DecoderLM check_model(mc, {gen, Device::cpu()});
  }

  std::string map_list;
  for (const MapSpec& ms : maps) map_list += (map_list.empty() ? "" : ",") + ms.label;
  nlohmann::json cfg = {{"preset", preset},       {"feature_maps", map_list}, {"vocab", data_cfg.vocab},
                        {"seq_len", data_cfg.seq_len}, {"train_samples", data_cfg.num_train},
                        {"test_samples", data_cfg.num_test}, {"layers", m.layers}, {"heads", m.heads},
                        {"head_dim", m.head_dim}, {"dim", m.dim}, {"mlp_hidden", m.mlp_hidden},
                        {"positions", m.positions}, {"chunk", m.attention.chunk},
                        {"feature_dim", m.attention.feature_map.feature_dim}, {"epochs", rc.epochs},
                        {"patience", rc.patience}, {"stop_at", rc.stop_accuracy}, {"sweep", sweep},
                        {"lr", rc.lr}, {"batch", rc.batch}, {"weight_decay", rc.weight_decay},
                        {"schedule", rc.schedule}, {"targets", train::ar_targets_name(rc.targets)},
                        {"early_stop", rc.early_stop}, {"style", ar_style_name(data_cfg.style)},
                        {"untied", m.attention.feature_map.untied},
                        {"joint_softmax", m.attention.feature_map.joint_softmax}, {"seed", data_cfg.seed},
                        {"device", c.device_name}, {"precision", precision_name(rc.precision)},
                        {"diverge_factor", rc.diverge_factor},
                        {"diverge_steps", rc.diverge_steps}, {"threads", threads}, {"jobs", jobs}};
  if (gate_output != nn::GateOutput::normalizer) cfg["gate_output"] = nn::name(gate_output);  // others unchanged

  // Per run (map x sweep config): <out>/<map>/result[_g].json once finished, checkpoint[_g].safetensors
  // while training.
  auto run_file = [&](size_t m_index, size_t g, const char* stem, const char* ext) {
    std::string dir = out + "/" + file_slug(maps[m_index].label);
    return dir + "/" + stem + (grid.size() > 1 ? "_" + std::to_string(g) : std::string()) + ext;
  };
  // A fresh run sets an earlier run's files aside (what it left for these maps must not be taken
  // for this run's, and it comes back if this run fails); --resume checks the settings.
  std::vector<std::string> files = {"results.json", "results.csv", "index.html", "*.svg"};
  for (size_t i = 0; i < maps.size(); ++i)
    for (size_t g = 0; g < grid.size(); ++g)
      for (const auto& p : {run_file(i, g, "result", ".json"), run_file(i, g, "checkpoint", ".safetensors")})
        files.push_back(p.substr(out.size() + 1));
  run_dir.start(cfg.dump(), resume, files);
  for (const MapSpec& ms : maps) ensure_writable_dir(out + "/" + file_slug(ms.label));

  std::printf("associative recall: vocab %lld, length %lld, %lld train / %lld test samples; model %lld layers, "
              "%lld heads x %lld, dim %lld; %zu feature map(s), %zu config(s) each; %lld job(s) x %lld thread(s); "
              "~%s of memory\n",
              (long long)data_cfg.vocab, (long long)data_cfg.seq_len, (long long)data_cfg.num_train,
              (long long)data_cfg.num_test, (long long)m.layers, (long long)m.heads, (long long)m.head_dim,
              (long long)m.dim, maps.size(), grid.size(), (long long)jobs, (long long)threads, gib(need.total).c_str());
  std::fflush(stdout);
  ArDataset data = make_associative_recall(data_cfg);
  const double counting = ar_counting_baseline(data.test, data_cfg);
  std::printf("counting baseline (answer with the value seen most often in the context, no recall): %.1f%% of the "
              "test split\n", 100 * counting);
  std::fflush(stdout);

  // Every (map, config) run is independent (its own model, generator and batch order), so `jobs`
  // of them train at once on worker threads; the results are the same for any number of jobs.
  std::vector<train::ArRunConfig> runs;
  for (size_t i = 0; i < maps.size(); ++i)
    for (size_t g = 0; g < grid.size(); ++g) {
      train::ArRunConfig c = rc;
      c.mixer = maps[i].mixer;
      c.gate = maps[i].gate;
      c.gate_output = maps[i].gate == nn::Gate::none ? nn::GateOutput::normalizer : gate_output;
      c.temperature = maps[i].temperature;
      c.lr = grid[g].lr;
      c.weight_decay = grid[g].wd;
      c.batch = grid[g].batch;
      c.checkpoint_path = run_file(i, g, "checkpoint", ".safetensors");
      c.resume = resume;
      if (jobs > 1) c.quiet = true;  // concurrent progress bars would overwrite each other
      runs.push_back(c);
    }
  std::vector<train::ArRunResult> done(runs.size());
  std::vector<char> complete(runs.size(), 0);  // finished, failed or diverged (not interrupted)

  // The row of map m: its best finished run by validation accuracy (ok runs first); a map whose
  // runs all failed shows its first failure.
  auto map_row = [&](size_t m_index) {
    const train::ArRunResult* best = nullptr;
    auto rank = [](const train::ArRunResult& r) { return r.status == "ok" ? 2 : r.status.rfind("diverged", 0) == 0 ? 1 : 0; };
    for (size_t g = 0; g < grid.size(); ++g) {
      const train::ArRunResult& r = done[m_index * grid.size() + g];
      if (!best || rank(r) > rank(*best) || (rank(r) == rank(*best) && r.val_accuracy > best->val_accuracy)) best = &r;
    }
    return *best;
  };
  auto finished_rows = [&]() {
    std::vector<train::ArRunResult> rows;
    for (size_t i = 0; i < maps.size(); ++i) {
      bool all = true;
      for (size_t g = 0; g < grid.size(); ++g) all = all && complete[i * grid.size() + g];
      if (all) rows.push_back(map_row(i));
    }
    return rows;
  };
  // Records run i (one call at a time): its own result file when it was evaluated, then
  // results.json/csv with every map finished so far.
  auto record = [&](size_t i, const train::ArRunResult& r) {
    done[i] = r;
    const size_t m_index = i / grid.size(), g = i % grid.size();
    if (r.status.rfind("interrupted", 0) == 0) {
      std::printf("  %-20s stopped at step %lld (--stop-after-steps); continue with --resume\n", r.label.c_str(),
                  (long long)r.steps);
      return;
    }
    complete[i] = 1;
    if (r.status.rfind("error", 0) == 0) {
      std::printf("  %-20s lr %-7g wd %-7g batch %-3lld -> FAILED: %s\n", r.label.c_str(), r.lr, r.weight_decay,
                  (long long)r.batch, r.status.c_str());
    } else {
      std::printf("  %-20s lr %-7g wd %-7g batch %-3lld -> val %.1f%%, test %.1f%% (%.1fs)%s%s\n", r.label.c_str(), r.lr,
                  r.weight_decay, (long long)r.batch, 100 * r.val_accuracy, 100 * r.accuracy, r.seconds,
                  r.status == "ok" ? "" : "; DIVERGED: ", r.status == "ok" ? "" : r.status.c_str());
      const std::string path = run_file(m_index, g, "result", ".json");
      run_dir.write(path, train::ar_result_json(r));
      ::unlink(run_file(m_index, g, "checkpoint", ".safetensors").c_str());  // the result supersedes it
    }
    std::fflush(stdout);
    train::write_ar_results(out, finished_rows());
  };

  // Finished maps of a resumed run are read back, not trained again.
  for (size_t i = 0; resume && i < runs.size(); ++i) {
    const std::string path = run_file(i / grid.size(), i % grid.size(), "result", ".json");
    if (::access(path.c_str(), F_OK) != 0) continue;
    done[i] = train::parse_ar_result(read_file(path), path);
    complete[i] = 1;
    std::printf("  %-20s finished earlier (%s)\n", done[i].label.c_str(), path.c_str());
  }
  // The runs left, to train `jobs` at once (train/run_scheduler.h), costliest first (cost ~ the
  // feature dimension) so that the last run to start is a short one. record() runs as each run
  // completes, one at a time; if it throws (writing the results failed), no further run starts
  // and the error ends the program.
  std::vector<size_t> todo;
  std::vector<train::ScheduledJob> sched;
  std::vector<train::ArRunResult> trained(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    if (complete[i]) continue;  // read back above
    todo.push_back(i);
    sched.push_back({static_cast<double>(feature_cost(runs[i], data_cfg.seq_len)),
                     [&, i] { trained[i] = train::run_associative_recall(data, runs[i]); }});
  }
  train::SchedulerOptions so;
  so.workers = static_cast<int>(jobs);
  so.overall_label = "ar_probe";
  so.setup = [threads](int) {
    set_num_threads(static_cast<int>(threads));  // OpenMP's thread count is per thread
    return std::shared_ptr<void>();
  };
  so.on_done = [&](const train::JobOutcome& o) {
    const size_t i = todo[o.index];
    train::ArRunResult r = trained[i];
    if (!o.ok) {
      r = train::ArRunResult{};
      r.label = train::ar_label(runs[i].mixer, runs[i].temperature, runs[i].gate);
      r.mixer = runs[i].mixer;
      r.gate = runs[i].gate;
      r.gate_output = runs[i].gate_output;
      r.temperature = runs[i].temperature;
      r.lr = runs[i].lr;
      r.weight_decay = runs[i].weight_decay;
      r.batch = runs[i].batch;
      r.status = "error: " + o.error;
    }
    record(i, r);
  };
  train::run_jobs(sched, so);
  if (std::find(complete.begin(), complete.end(), 0) != complete.end()) {
    std::printf("\nstopped early (--stop-after-steps): finished maps are in %s/results.json; continue with --resume\n",
                out.c_str());
    run_dir.finish(train::RunDir::End::partial);
    return 0;
  }
  std::vector<train::ArRunResult> results;  // best validation accuracy per map
  for (size_t i = 0; i < maps.size(); ++i) results.push_back(map_row(i));
  std::printf("\n%s", train::ar_table(results).c_str());
  std::printf("counting baseline (most frequent value in the context, no recall): %.1f%%\n", 100 * counting);
  cfg["counting_baseline"] = counting;
  train::write_ar_report(out, results, cfg.dump());
  std::printf("\nwrote %s/{results.json,results.csv,index.html,*.svg}\n", out.c_str());
  std::string failures;
  size_t n_failed = 0, n_errors = 0;
  for (const auto& r : results)
    if (r.status != "ok") {
      ++n_failed;
      n_errors += r.status.rfind("error", 0) == 0;
      failures += str("\n  ", r.label, ": ", r.status);
    }
  // A map that ended with an error leaves no result: the run is not complete and does not replace
  // a previous complete one (a diverged map is a result).
  const std::string note = run_dir.finish(n_errors > 0 ? train::RunDir::End::failed : train::RunDir::End::complete);
  if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
  if (n_failed > 0) {
    std::fprintf(stderr, "error: %zu of %zu feature map(s) failed:%s\n", n_failed, results.size(), failures.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return hh::cli::run_main(argc, argv, run); }
