// train_lm: GPT-style language modelling from scratch with any attention (paper Table 7).
//   train_lm prepare --input PATH[,PATH..] --out DATA [--tokenizer bytes|HF_FOLDER]
//       WikiText-103 (a folder with wiki.*.raw or wiki.*.tokens) or any UTF-8 files and folders,
//       tokenized once on every core into token shards.
//   train_lm train --data DATA --out RUNS [--attentions softmax,hedgehog] [--preset small]
//       one GPT-2 (or, --arch llama, Llama) model per attention, trained on the same windows; the
//       validation perplexities side by side, samples, results.json/csv and report.html in RUNS;
//       each run in RUNS/<attention>/ (checkpoint, metrics.jsonl, model/ = an HF folder). With mpirun,
//       data-parallel over the ranks (--dist auto).
//   train_lm sample --model RUNS/<attention>/model [--prompt TEXT]
//       text from a trained (or any HF decoder) folder: the O(1) recurrent state for linear attention,
//       a KV cache for softmax.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/app.h"
#include "cli/flags.h"
#include "core/atomic_file.h"
#include "core/backend.h"
#include "core/parallel.h"
#include "data/lm_prepare.h"
#include "data/tokenizer_bytes.h"
#include "nn/feature_maps.h"
#include "nn/models/generate.h"
#include "nn/models/hf_save.h"
#include "experiments/lm/lm_report.h"
#include "experiments/lm/lm_train.h"
#include "train/run_dir.h"
#include "train/schedule.h"

using namespace hh;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> split_list(const std::string& s, const std::string& flag) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    HH_CHECK(!item.empty(), "--", flag, ": empty item in '", s, "'");
    out.push_back(item);
    start = end + 1;
  }
  return out;
}

// ---- prepare -------------------------------------------------------------------------------

int prepare(int argc, char** argv) {
  cli::Flags f("train_lm prepare", "Tokenizes a corpus once into token shards that `train_lm train` reads.");
  f.add("input", "", "comma-separated: a WikiText-103 folder (wiki.{train,valid,test}.{raw,tokens}), or UTF-8\n"
        "files and folders (every file one document; the last --valid-fraction of each goes to valid)");
  f.add("out", "", "the prepared folder (shards and meta.json)");
  f.add("tokenizer", "bytes", "bytes (256 bytes + <|endoftext|>) or an HF tokenizer folder (GPT-2: vocab.json +\n"
        "merges.txt or tokenizer.json)");
  f.add("valid-fraction", "0.05", "non-WikiText inputs: the share of each document held out for validation");
  f.add("shard-tokens", "100000000", "tokens per shard file");
  f.add("threads", "0", "tokenizer threads (0 = every core)");
  f.add("quiet", "false", "no progress bar", true);
  if (!f.parse(argc, argv)) return 0;
  data::PrepareOptions o;
  HH_CHECK(f.given("input"), "--input is required (see --help)");
  HH_CHECK(f.given("out"), "--out is required (see --help)");
  o.inputs = split_list(f.str("input"), "input");
  for (const auto& p : o.inputs) HH_CHECK(fs::exists(p), "--input: ", p, " does not exist");
  o.out_dir = f.str("out");
  o.tokenizer = f.str("tokenizer");
  o.valid_fraction = f.number("valid-fraction", 0.0, 0.9);
  o.shard_tokens = f.integer("shard-tokens", 1, int64_t{1} << 40);
  o.threads = static_cast<int>(f.integer("threads", 0, 4096));
  o.progress = !f.boolean("quiet");
  train::check_output_folder(o.out_dir);
  data::make_lm_tokenizer(o.tokenizer);  // a bad tokenizer spec fails before any file is read
  const data::PrepareResult r = data::prepare_lm_data(o);
  std::printf("prepared %s: vocabulary %lld, %zu file(s) written\n", o.out_dir.c_str(),
              static_cast<long long>(r.vocab_size), r.files.size());
  for (const auto& [split, n] : r.tokens) std::printf("  %-6s %12lld tokens\n", split.c_str(), static_cast<long long>(n));
  return 0;
}

// ---- train ---------------------------------------------------------------------------------

struct TrainPreset {
  std::string model;
  int64_t context, batch, accumulation, steps, eval_every, eval_windows;
  double lr, warmup;
};

const std::map<std::string, TrainPreset>& train_presets() {
  // paper: REFERENCE.md §4 (Table 7; lr 6e-4, wd 0.01, batch 512 x 1024, cosine with 1% warmup,
  // clip 1.0); the number of steps is not in the paper: 20,000 steps is about 100 passes over
  // WikiText-103's 103M tokens. small: the offline demonstration (minutes on 2 cores).
  static const std::map<std::string, TrainPreset> p = {
      {"paper", {"paper", 1024, 512, 32, 20000, 1000, 0, 6e-4, 0.01}},
      {"small", {"small", 256, 16, 1, 600, 100, 64, 2e-3, 0.05}},
      {"tiny", {"tiny", 64, 8, 1, 30, 10, 8, 3e-3, 0.1}},
  };
  return p;
}

std::string preset_in_args(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--preset" && i + 1 < argc) return argv[i + 1];
    if (a.rfind("--preset=", 0) == 0) return a.substr(9);
  }
  return "small";
}

std::string number_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", x);
  return buf;
}

// The common flags of `train_lm train` (cli/app.h).
cli::CommonFlagSpec train_common() {
  cli::CommonFlagSpec c;
  c.seed_help = "model initialisation and training windows";
  c.resume = true;
  c.resume_help = "continue each run from its checkpoint (it must have the same settings)";
  c.out = true;
  c.out_help = "output folder (required): results and report; each run in <out>/<attention>/";
  return c;
}

void add_train_flags(cli::Flags& f, const TrainPreset& p) {
  const train::LmModelConfig m = train::lm_model_preset(p.model);
  f.add("data", "", "a folder written by `train_lm prepare` (required)");
  f.add("preset", "small", "paper (Table 7: 125M, context 1024), small (the demonstration: minutes on 2 cores)\n"
        "or tiny (seconds); every value it sets is a flag below and a given flag wins");
  f.add("attentions", "softmax,hedgehog", "comma-separated: softmax and/or feature maps (" +
        [] { std::string s; for (const auto& n : nn::feature_map_names()) s += (s.empty() ? "" : ", ") + n; return s; }() + ")");
  f.add("arch", "gpt2", "gpt2 (learned positions, exported as GPT2LMHeadModel) or llama (RoPE, RMSNorm, SwiGLU,\n"
        "                       tied embeddings; exported as LlamaForCausalLM)");
  f.add("rope-theta", "10000", "RoPE base of --arch llama");
  f.add("init", "", "warm start: the weights of an HF folder (an earlier run's <run>/model, e.g. trained at a\n"
        "                       shorter context) or of a train_lm checkpoint (<run>/checkpoint.safetensors, e.g.\n"
        "                       one left by --stop-after-steps); the same --arch and sizes; optimizer and schedule\n"
        "                       start afresh");
  f.add("stop-after-steps", "0", "stop after this many steps (0 = run to --steps), leaving the checkpoint of that step\n"
        "                       (--resume continues the same schedule; --init starts another run from it); no model/");
  f.add("layers", std::to_string(m.n_layer), "decoder layers");
  f.add("heads", std::to_string(m.n_head), "attention heads");
  f.add("dim", std::to_string(m.n_embd), "hidden size (a multiple of --heads)");
  f.add("mlp", "0", "MLP hidden size (0 = 4 x dim)");
  f.add("positions", "", "gpt2: the learned position table's size; llama: max_position_embeddings (default: the\n"
        "                       larger of --context and --eval-context)");
  f.add("context", std::to_string(p.context), "training window in tokens");
  f.add("form", "chunked", "linear attention form: chunked, recurrent or quadratic");
  f.add("chunk", "64", "chunk size of the chunked form");
  f.add("window", "64", "sliding-window size of the hybrid-<map> mixers");
  f.add("gate", "none", "gates of the linear attentions' state, a comma list: none, decay (RetNet), gla, liger,\n"
        "                       delta (Gated DeltaNet) (each linear attention runs once per gate; softmax and\n"
        "                       hybrids once, ungated)");
  f.add("gate-output", "normalizer",
        "output of the gated attentions: normalizer (y = qS / (qz + eps); delta: y = S^T q) or groupnorm (no\n"
        "                       normalizer, then an RMSNorm per head, as GLA and Gated DeltaNet; needs --gate)");
  f.add("feature-dim", "0", "feature dimension of hedgehog / t2r (0 = head dim) or performer (0 = 256)");
  f.add("map-temperature", "1", "exp / hedgehog temperature");
  f.add("batch", std::to_string(p.batch), "sequences per optimizer step (over every rank and micro-batch)");
  f.add("accumulation", std::to_string(p.accumulation), "micro-batches per step (gradient accumulation)");
  f.add("steps", std::to_string(p.steps), "optimizer steps");
  f.add("lr", number_text(p.lr), "peak learning rate");
  f.add("min-lr", "0", "learning rate at the end of the cosine");
  f.add("warmup", number_text(p.warmup), "warmup: a fraction of --steps (< 1) or a number of steps");
  f.add("schedule", "cosine", "cosine, linear or constant (after the warmup)");
  f.add("weight-decay", "0.01", "AdamW weight decay (matrices and embeddings; not biases or norms)");
  f.add("beta2", "0.95", "AdamW beta2");
  f.add("grad-clip", "1", "clip the global gradient norm to this (0 = off)");
  f.add("eval-every", std::to_string(p.eval_every), "steps between validations (0 = only at the end)");
  f.add("eval-windows", std::to_string(p.eval_windows), "validation windows during training (0 = all; the final "
        "validation always uses all)");
  f.add("eval-context", "0", "validation window (0 = --context; the paper: 1024)");
  f.add("eval-stride", "0", "0 = non-overlapping windows; else a sliding window with this stride");
  f.add("eval-batch", "8", "windows per validation batch");
  f.add("checkpoint-every", "0", "steps between checkpoints (0 = at each validation)");
  cli::add_common_flags(f, train_common());
  f.add("dist", "auto", "data parallelism: auto (mpi under mpirun, else none), none, mpi or nccl");
  f.add("samples", "3", "lines sampled from each trained model at the end (0 = none)");
  f.add("sample-tokens", "60", "tokens per sample");
  f.add("sample-temperature", "0.8", "sampling temperature (0 = greedy)");
  f.add("top-k", "40", "sample among the k most likely tokens (0 = all)");
  f.add("top-p", "1", "nucleus mass (1 = all)");
  f.add("quiet", "false", "no progress bars", true);
}

struct RunSpec {
  nn::Mixer attention;
  nn::Gate gate;
  train::LmTrainConfig cfg;
};

std::vector<std::string> draw_samples(nn::CausalLM& lm, const data::Tokenizer& tok, int64_t n, int64_t tokens,
                                      const nn::SamplingOptions& so, const std::string& prompt) {
  std::vector<std::string> out;
  std::vector<int64_t> ids;
  if (!prompt.empty()) {
    for (int32_t id : tok.encode(prompt, false)) ids.push_back(id);
  } else if (tok.eos_id() >= 0) {
    ids.push_back(tok.eos_id());  // a document starts after <|endoftext|>
  } else {
    ids.push_back(tok.encode("\n", false).front());
  }
  const int64_t room = lm.max_positions() - static_cast<int64_t>(ids.size());
  for (int64_t i = 0; i < n; ++i) {
    nn::SamplingOptions s = so;
    s.seed = so.seed + static_cast<uint64_t>(i);
    nn::Sampler sampler(s);
    nn::GenerateOptions go;
    go.max_new_tokens = std::max<int64_t>(0, std::min(tokens, room));
    if (tok.eos_id() >= 0) go.eos = {tok.eos_id()};
    go.keep_eos = false;
    const nn::Generation g = nn::generate(lm, ids, sampler, go);
    std::vector<int32_t> text_ids(ids.begin() + (prompt.empty() ? 1 : 0), ids.end());
    text_ids.insert(text_ids.end(), g.ids.begin(), g.ids.end());
    out.push_back(tok.decode(text_ids, true));
  }
  return out;
}

int train_cmd(int argc, char** argv) {
  const std::string preset = preset_in_args(argc, argv);
  auto pit = train_presets().find(preset);
  HH_CHECK(pit != train_presets().end(), "--preset: unknown preset '", preset, "' (paper, small, tiny)");
  cli::Flags f("train_lm train", "Trains one GPT-2 or Llama model per attention on prepared token shards.");
  add_train_flags(f, pit->second);
  if (!f.parse(argc, argv)) return 0;

  // Every flag and input is checked here, before any training.
  HH_CHECK(f.given("data"), "--data is required (a folder written by `train_lm prepare`)");
  HH_CHECK(f.given("out"), "--out is required");
  const cli::CommonFlags c = cli::read_common_flags(f, train_common());
  const std::string data_dir = f.str("data"), out = c.out;
  train::refuse_system_folder(out);  // every rank; rank 0 also creates and checks the folder below
  const data::PreparedInfo info = data::read_prepared_info(data_dir);
  const data::TokenDataset train_data = data::TokenDataset::open(data_dir, "train");
  const std::vector<int32_t> valid = data::TokenDataset::open(data_dir, "valid").all();
  std::shared_ptr<data::Tokenizer> tok = data::make_lm_tokenizer(info.tokenizer);

  const int threads = static_cast<int>(c.threads);
  if (threads > 0) set_num_threads(threads);
  const Device device = c.device;
  const Precision precision = c.precision;
  std::shared_ptr<Communicator> comm = make_communicator(f.str("dist"));
  const bool root = comm->rank() == 0;

  train::LmTrainConfig base;
  base.model = train::lm_model_preset(pit->second.model);
  base.model.vocab_size = info.vocab_size;
  base.model.arch = train::parse_lm_arch(f.str("arch"), "--arch");
  HH_CHECK(base.model.arch == train::LmArch::llama || !f.given("rope-theta"), "--rope-theta is for --arch llama");
  base.model.rope_theta = f.number("rope-theta", 1.0 + 1e-9, 1e12);
  base.model.n_layer = f.integer("layers", 1, 1024);
  base.model.n_head = f.integer("heads", 1, 1024);
  base.model.n_embd = f.integer("dim", 1, 1 << 16);
  base.model.n_inner = f.integer("mlp", 0, 1 << 20);
  base.context = f.integer("context", 1, 1 << 20);
  base.eval_context = f.integer("eval-context", 0, 1 << 20);
  base.model.n_positions = f.given("positions") ? f.integer("positions", 2, 1 << 20)
                                                : std::max(base.context, base.eval_context);
  base.attention.form = nn::parse_linear_form(f.str("form"));
  base.attention.chunk = f.integer("chunk", 1, 1 << 16);
  base.attention.window = f.integer("window", 1, 1 << 30);
  base.attention.feature_map.feature_dim = f.integer("feature-dim", 0, 1 << 16);
  base.attention.feature_map.temperature = f.number("map-temperature", 1e-6, 1e6);
  base.batch = f.integer("batch", 1, 1 << 20);
  base.accumulation = f.integer("accumulation", 1, 1 << 20);
  base.steps = f.integer("steps", 1, int64_t{1} << 40);
  base.lr = f.number("lr", 1e-12, 10.0);
  base.min_lr = f.number("min-lr", 0.0, 10.0);
  base.warmup = f.number("warmup", 0.0, 1e12);
  base.schedule = f.str("schedule");
  base.weight_decay = f.number("weight-decay", 0.0, 10.0);
  base.beta2 = f.number("beta2", 0.0, 0.999999);
  base.grad_clip = f.number("grad-clip", 0.0, 1e6);
  base.eval_every = f.integer("eval-every", 0, int64_t{1} << 40);
  base.eval_windows = f.integer("eval-windows", 0, int64_t{1} << 40);
  base.eval_stride = f.integer("eval-stride", 0, 1 << 20);
  base.eval_batch = f.integer("eval-batch", 1, 1 << 16);
  base.checkpoint_every = f.integer("checkpoint-every", 0, int64_t{1} << 40);
  base.seed = c.seed;
  base.device = device;
  base.precision = precision;
  base.resume = c.resume;
  base.progress = !f.boolean("quiet") && root;
  base.eos_id = info.eos_id;
  base.init_from = f.str("init");
  if (!base.init_from.empty()) {
    HH_CHECK(fs::exists(base.init_from), "--init: ", base.init_from, " does not exist");
    HH_CHECK(!fs::is_directory(base.init_from) || fs::exists(fs::path(base.init_from) / "config.json"), "--init: ",
             base.init_from, " has no config.json (an HF folder) and is not a checkpoint file");
  }
  base.stop_after_steps = f.integer("stop-after-steps", 0, int64_t{1} << 40);
  base.data_fingerprint = json{{"tokenizer", info.tokenizer}, {"vocab_size", info.vocab_size}, {"tokens", info.tokens}}.dump();
  {
    ScheduleConfig sc;  // an unknown schedule name fails here
    sc.base_lr = base.lr;
    sc.total_steps = base.steps;
    LrSchedule check(base.schedule, sc);
  }
  HH_CHECK(base.context <= base.model.n_positions, "--context ", base.context, " is longer than the model's ",
           base.model.n_positions, " positions (--positions)");
  HH_CHECK(train_data.size() >= base.context + 1, "the training split of ", data_dir, " has ", train_data.size(),
           " tokens, fewer than one window of --context ", base.context, " + 1");
  HH_CHECK(static_cast<int64_t>(valid.size()) >= 2, "the validation split of ", data_dir, " has ", valid.size(),
           " tokens; it needs at least 2");
  const nn::SamplingOptions so{f.number("sample-temperature", 0.0, 100.0), f.integer("top-k", 0, 1 << 30),
                               f.number("top-p", 1e-6, 1.0), base.seed};
  nn::Sampler{so};  // checks the sampling flags
  const int64_t n_samples = f.integer("samples", 0, 1000), sample_tokens = f.integer("sample-tokens", 1, 1 << 20);

  const std::vector<nn::Gate> gates = nn::parse_gate_list(split_list(f.str("gate"), "gate"), "--gate");
  const nn::GateOutput gate_output = nn::parse_gate_output(f.str("gate-output"), gates, "--gate-output");
  std::vector<RunSpec> runs;
  for (const std::string& name : split_list(f.str("attentions"), "attentions")) {
    const nn::Mixer attention = nn::parse_mixer(name, "--attentions");
    for (const auto& r : runs) HH_CHECK(r.attention != attention, "--attentions: '", name, "' is given twice");
    const bool gated = attention.is_linear() && !attention.is_hybrid();
    for (nn::Gate gate : gated ? gates : std::vector<nn::Gate>{nn::Gate::none}) {
      RunSpec r{attention, gate, base};
      r.cfg.attention.mixer = attention;
      r.cfg.attention.gate = gate;
      r.cfg.attention.gate_output = gate == nn::Gate::none ? nn::GateOutput::normalizer : gate_output;
      r.cfg.out_dir = (fs::path(out) / nn::gated_label(name, gate)).string();
      runs.push_back(std::move(r));
    }
  }
  // The run folder (train/run_dir.h): a fresh run sets the previous result aside and puts it back
  // whole if this one fails; the settings live in results.json and each run's checkpoint.
  std::unique_ptr<train::RunDir> run_dir;
  if (root) {
    train::RunDir::Options rdo;
    rdo.settings_file = "";
    run_dir = std::make_unique<train::RunDir>(out, rdo);
  }
  for (auto& r : runs) {
    train::lm_config_json(r.cfg.model, r.cfg.eos_id);  // checks the sizes
    train::check_lm_train_config(r.cfg, comm->world());
    train::check_lm_init(r.cfg);
    if (root) ensure_writable_dir(r.cfg.out_dir);
    if (r.cfg.resume) train::check_lm_resume(r.cfg.out_dir, train::lm_run_fingerprint(r.cfg));
  }
  const json settings = {{"preset", preset}, {"data", data_dir}, {"tokenizer", info.tokenizer},
                         {"ranks", comm->world()}, {"fingerprint", json::parse(train::lm_run_fingerprint(base))}};
  if (root) {
    std::vector<std::string> results = {"results.json", "results.csv", "report.html", "*.svg"};
    for (const auto& r : runs) {
      const std::string row = fs::path(r.cfg.out_dir).filename().string();
      for (const char* f : {"/checkpoint.safetensors", "/metrics.jsonl", "/model/*"}) results.push_back(row + f);
    }
    run_dir->start(settings.dump(), base.resume, results, {"results.json", "results.csv", "report.html", "*.svg"});
  }
  if (root)
    std::printf("train_lm: %zu run(s), %lld train / %zu valid tokens, %d rank(s)\n", runs.size(),
                static_cast<long long>(train_data.size()), valid.size(), comm->world());

  std::vector<train::LmRunSummary> summaries;
  int failures = 0;
  const std::string tokenizer_files = info.tokenizer == "bytes" ? "" : info.tokenizer;
  for (auto& r : runs) {
    train::LmRunSummary s;
    try {
      const train::LmTrainResult res = train::train_language_model(r.cfg, train_data, valid, *comm);
      s = train::summarize_lm_run(r.attention, res);
      s.gate = r.gate;
      // A run that diverged is a failure (status "diverged at step ..."; nothing exported), an
      // interrupted one (--stop-after-steps) is not.
      if (res.status != "ok" && res.status.rfind("interrupted", 0) != 0) ++failures;
      if (root && res.status == "ok") {
        const std::string model_dir = (fs::path(r.cfg.out_dir) / "model").string();
        nn::save_hf_model(*res.model, model_dir, res.config_json, "train_lm model config", tokenizer_files);
        // The byte-level tokenizer has no files to copy: written as GPT-2 files, so every app
        // (and transformers) reads the folder's tokenizer.
        if (info.tokenizer == "bytes") data::write_byte_tokenizer_files(model_dir);
        PrecisionGuard autocast(precision);
        s.samples = draw_samples(*res.model, *tok, n_samples, sample_tokens, so, "");
      }
    } catch (const std::exception& e) {
      if (comm->world() > 1) {  // the other ranks wait in a collective: end the whole job
        std::fprintf(stderr, "error: rank %d: %s\n", comm->rank(), e.what());
        comm->abort(1);
      }
      s.attention = r.attention;
      s.gate = r.gate;
      s.status = std::string("error: ") + e.what();
      ++failures;
    }
    summaries.push_back(std::move(s));
    if (root) train::write_lm_report(out, summaries, settings.dump());  // each run's result as soon as it is done
  }
  if (!root) return failures ? 1 : 0;
  std::printf("\n%s", train::lm_table(summaries).c_str());
  for (const auto& s : summaries) {
    if (s.samples.empty()) continue;
    std::printf("\nsamples from %s:\n", train::lm_run_label(s).c_str());
    for (const auto& line : s.samples) std::printf("  | %s\n", line.c_str());
  }
  std::printf("\nreport: %s\n", (fs::path(out) / "report.html").c_str());
  bool interrupted = false;
  for (const auto& s : summaries) interrupted = interrupted || s.status.rfind("interrupted", 0) == 0;
  const std::string note = run_dir->finish(failures      ? train::RunDir::End::failed
                                           : interrupted ? train::RunDir::End::partial
                                                         : train::RunDir::End::complete);
  if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
  if (failures) std::fprintf(stderr, "error: %d of %zu run(s) failed (see the table)\n", failures, runs.size());
  return failures ? 1 : 0;
}

// ---- sample --------------------------------------------------------------------------------

int sample_cmd(int argc, char** argv) {
  cli::Flags f("train_lm sample", "Samples text from a model folder (train_lm's <run>/model or any GPT-2 folder).");
  f.add("model", "", "an HF folder (a finished run's <run>/model, or any GPT-2 folder)");
  f.add("checkpoint", "", "or a run's checkpoint.safetensors (e.g. of a run still training)");
  f.add("tokenizer", "", "bytes or an HF tokenizer folder (default: the model folder's own files, else bytes)");
  f.add("prompt", "", "text to continue (default: a new document)");
  f.add("samples", "3", "how many samples");
  f.add("tokens", "100", "new tokens per sample");
  f.add("temperature", "0.8", "0 = greedy");
  f.add("top-k", "40", "0 = all");
  f.add("top-p", "1", "nucleus mass (1 = all)");
  cli::CommonFlagSpec common;
  common.threads = false;
  common.seed_help = "sampling seed";
  cli::add_common_flags(f, common);
  if (!f.parse(argc, argv)) return 0;
  const cli::CommonFlags c = cli::read_common_flags(f, common);
  HH_CHECK(f.given("model") != f.given("checkpoint"), "give one of --model and --checkpoint");
  const std::string folder = f.str("model"), ckpt = f.str("checkpoint");
  if (!folder.empty()) HH_CHECK(fs::is_directory(folder), "--model: ", folder, " is not a folder");
  if (!ckpt.empty()) HH_CHECK(fs::is_regular_file(ckpt), "--checkpoint: ", ckpt, " is not a file");
  // The tokenizer: the flag, else the model folder's own files, else the one the checkpoint's run
  // was prepared with, else bytes.
  std::string spec = f.str("tokenizer");
  const fs::path own(folder);
  if (spec.empty() && !folder.empty() && (fs::exists(own / "vocab.json") || fs::exists(own / "tokenizer.json")))
    spec = folder;
  if (spec.empty() && !ckpt.empty()) spec = train::lm_checkpoint_tokenizer(ckpt);
  if (spec.empty()) spec = "bytes";
  std::shared_ptr<data::Tokenizer> tok = data::make_lm_tokenizer(spec);
  const nn::SamplingOptions so{f.number("temperature", 0.0, 100.0), f.integer("top-k", 0, 1 << 30),
                               f.number("top-p", 1e-6, 1.0), c.seed};
  nn::Sampler{so};
  const int64_t n = f.integer("samples", 1, 1000), tokens = f.integer("tokens", 1, 1 << 20);
  const Device device = c.device;
  const Precision precision = c.precision;
  std::shared_ptr<nn::CausalLM> lm;
  if (!folder.empty()) {
    nn::HFModelOptions mo;
    mo.device = device;
    lm = nn::load_causal_lm(folder, mo);
  } else {
    lm = train::load_lm_checkpoint_model(ckpt);
    lm->to(device);
  }
  HH_CHECK(tok->vocab_size() <= lm->vocab_size(), "the tokenizer (", spec, ") has ", tok->vocab_size(),
           " ids, more than the model's vocabulary of ", lm->vocab_size());
  PrecisionGuard autocast(precision);
  for (const auto& line : draw_samples(*lm, *tok, n, tokens, so, f.str("prompt"))) std::printf("%s\n---\n", line.c_str());
  return 0;
}

int run(int argc, char** argv) {
  const std::string usage =
      "usage: train_lm prepare|train|sample [flags]   (train_lm <command> --help for its flags)";
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::printf("train_lm: GPT-style language modelling from scratch with any attention.\n%s\n", usage.c_str());
    return argc < 2 ? 1 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "prepare") return prepare(argc - 1, argv + 1);
  if (cmd == "train") return train_cmd(argc - 1, argv + 1);
  if (cmd == "sample") return sample_cmd(argc - 1, argv + 1);
  fail(str("unknown command '", cmd, "'; ", usage));
}

}  // namespace

int main(int argc, char** argv) { return hh::cli::run_main(argc, argv, run); }
