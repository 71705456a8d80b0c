#include "experiments/lm/lm_train.h"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops/nn.h"
#include "autograd/ops/shape.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/internal/json_read.h"
#include "core/progress.h"
#include "core/safetensors.h"
#include "core/stop.h"
#include "data/text_corpus.h"
#include "nn/models/hf_save.h"
#include "train/checkpoint.h"
#include "train/early_stopping.h"
#include "train/metrics_log.h"
#include "train/optim.h"
#include "train/schedule.h"
#include "train/trainer.h"

namespace hh::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int64_t warmup_steps(const LmTrainConfig& c) {
  return c.warmup >= 1.0 ? static_cast<int64_t>(c.warmup) : static_cast<int64_t>(std::llround(c.warmup * c.steps));
}

}  // namespace

void check_lm_train_config(const LmTrainConfig& c, int world) {
  HH_CHECK(c.context >= 1 && c.context <= c.model.n_positions, "--context ", c.context,
           " must be in [1, the model's n_positions ", c.model.n_positions, "]");
  const int64_t eval_ctx = c.eval_context > 0 ? c.eval_context : c.context;
  HH_CHECK(eval_ctx <= c.model.n_positions, "--eval-context ", eval_ctx, " exceeds the model's n_positions ",
           c.model.n_positions);
  HH_CHECK(c.eval_stride >= 0 && c.eval_stride <= eval_ctx, "--eval-stride must be in [0, ", eval_ctx, "], got ",
           c.eval_stride);
  HH_CHECK(c.steps >= 1, "--steps must be >= 1, got ", c.steps);
  HH_CHECK(c.accumulation >= 1, "--accumulation must be >= 1, got ", c.accumulation);
  HH_CHECK(c.batch >= 1 && c.batch % (c.accumulation * world) == 0, "--batch ", c.batch,
           " must be a positive multiple of --accumulation (", c.accumulation, ") x ranks (", world, ")");
  HH_CHECK(std::isfinite(c.lr) && c.lr > 0, "--lr must be > 0, got ", c.lr);
  HH_CHECK(c.min_lr >= 0 && c.min_lr <= c.lr, "--min-lr must be in [0, lr], got ", c.min_lr);
  HH_CHECK(c.weight_decay >= 0, "--weight-decay must be >= 0, got ", c.weight_decay);
  HH_CHECK(c.grad_clip >= 0, "--grad-clip must be >= 0, got ", c.grad_clip);
  HH_CHECK(c.warmup >= 0 && warmup_steps(c) <= c.steps, "--warmup (", c.warmup, ") must be at most the steps");
  HH_CHECK(c.eval_batch >= 1, "--eval-batch must be >= 1, got ", c.eval_batch);
  HH_CHECK(c.eval_every >= 0 && c.checkpoint_every >= 0 && c.eval_windows >= 0, "--eval-every, --checkpoint-every "
           "and --eval-windows must be >= 0");
  HH_CHECK(!c.out_dir.empty(), "train_language_model: no output folder");
  check_precision(c.precision, c.device);
}

namespace {

// The run's own record beside the Trainer's loop state, kept in its checkpoint ("lm.run"): the
// training loss of every step and the validations so far.
struct LmHistory {
  std::vector<double> train_loss;  // per step, the mean over ranks
  std::vector<LmEval> evals;
};

json evals_json(const std::vector<LmEval>& evals) {
  json a = json::array();
  for (const auto& e : evals) a.push_back({e.step, e.loss, e.tokens});
  return a;
}

std::vector<LmEval> evals_from_json(const json& a) {
  std::vector<LmEval> evals;
  for (const auto& e : a)
    evals.push_back({json_int(e.at(0), "train_lm checkpoint: an evaluation's step"), e.at(1).get<double>(),
                     std::exp(e.at(1).get<double>()), json_int(e.at(2), "train_lm checkpoint: an evaluation's tokens")});
  return evals;
}

void compare_fingerprints(const std::string& path, const std::string& saved_text, const std::string& fingerprint) {
  const std::string diff = fingerprint_diff(saved_text, fingerprint);
  if (!diff.empty())
    fail(str("checkpoint ", path, " was saved by a run with another configuration (differs in ", diff,
             "); start afresh without --resume, or use the original settings"));
}

// A checkpoint of train_lm's loop before train/trainer.h ("lm.state" = {seconds, evals} in its
// metadata, the per-step losses in its tensor "train_loss"): the history restored into `h`, and the
// loop state in the Trainer's terms, as the Trainer would have saved it at that step (the running
// loss since the last validation summed in the same order; early stopping replayed over the
// validations' perplexities, the metric train_language_model gives the Trainer).
json load_legacy_lm_state(const std::string& path, const std::map<std::string, std::string>& extra,
                          const LmTrainConfig& c, LmHistory& h) {
  auto it = extra.find("lm.state");
  HH_CHECK(it != extra.end(), "checkpoint ", path, ": metadata lacks 'lm.state' and 'trainer.state' (not a train_lm "
           "checkpoint)");
  const json st = json::parse(it->second);
  h.evals = evals_from_json(st.at("evals"));
  // The losses are a tensor of the checkpoint, which the Trainer's hook does not see: read it again.
  const SafeTensors f = load_safetensors(path);
  auto loss = f.tensors.find("extra.train_loss");
  h.train_loss = loss == f.tensors.end() ? std::vector<double>{} : to_vector<double>(loss->second);
  auto step_text = f.metadata.find("hedgehog.step");
  HH_CHECK(step_text != f.metadata.end() && step_text->second == std::to_string(h.train_loss.size()), "checkpoint ",
           path, ": ", h.train_loss.size(), " losses for step ",
           step_text == f.metadata.end() ? std::string("?") : step_text->second);
  const int64_t steps = static_cast<int64_t>(h.train_loss.size());
  const int64_t last_eval = h.evals.empty() ? 0 : h.evals.back().step;
  HH_CHECK(last_eval >= 0 && last_eval <= steps, "checkpoint ", path, ": a validation at step ", last_eval,
           " after its step ", steps);
  double loss_sum = 0;
  for (int64_t s = last_eval; s < steps; ++s) loss_sum += h.train_loss[static_cast<size_t>(s)];
  EarlyStopping es(std::numeric_limits<int64_t>::max(), EarlyStopMode::min);
  int64_t best_step = 0;
  for (const auto& e : h.evals)
    if (es.update(e.ppl)) best_step = e.step;
  const EarlyStoppingState& e = es.state();
  return {{"loss_sum", loss_sum},
          {"loss_count", steps - last_eval},
          {"finished", !h.evals.empty() && last_eval == c.steps},
          {"seconds", st.at("seconds")},
          {"evaluations", h.evals.size()},
          {"best_step", best_step},
          {"early_stopping", {e.has_best, e.best, e.best_index, e.bad_count, e.num_updates}},
          {"divergence", {steps > 0, steps > 0 ? h.train_loss.front() : 0.0, 0}}};
}

// metrics.jsonl from the history (a resumed run rewrites it, so no line is lost or repeated).
void write_history(MetricsLog& log, const LmHistory& h, int64_t tokens_per_step) {
  size_t e = 0;
  for (int64_t step = 1; step <= static_cast<int64_t>(h.train_loss.size()); ++step) {
    log.write({{"split", "train"}, {"step", step}, {"tokens", step * tokens_per_step},
               {"loss", h.train_loss[static_cast<size_t>(step - 1)]}});
    for (; e < h.evals.size() && h.evals[e].step == step; ++e)
      log.write({{"split", "valid"}, {"step", step}, {"loss", h.evals[e].loss}, {"ppl", h.evals[e].ppl},
                 {"tokens_scored", h.evals[e].tokens}});
  }
}

// The log a resumed run continues: the lines the previous process wrote up to the checkpoint's step,
// as they were (a killed run's torn last line and the lines past the checkpoint dropped), when they
// hold one train line per step; else the checkpoint's history rewritten (no "lr" there). "" when
// the log must be written anew from the history.
std::string log_up_to(const std::string& path, int64_t step) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string line, kept;
  int64_t train_lines = 0;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) continue;
    if (j["step"].get<int64_t>() > step) continue;
    train_lines += j.value("split", "") == "train";
    kept += line + "\n";
  }
  return train_lines == step ? kept : "";
}

}  // namespace

std::string lm_checkpoint_path(const std::string& out_dir) {
  return (fs::path(out_dir) / "checkpoint.safetensors").string();
}

void check_lm_resume(const std::string& out_dir, const std::string& fingerprint) {
  const std::string path = lm_checkpoint_path(out_dir);
  if (!fs::exists(path)) return;
  const SafeTensors f = load_safetensors(path);
  auto it = f.metadata.find("lm.fingerprint");
  HH_CHECK(it != f.metadata.end(), "checkpoint ", path, " is not a train_lm checkpoint (no lm.fingerprint)");
  compare_fingerprints(path, it->second, fingerprint);
}

std::shared_ptr<nn::CausalLM> load_lm_checkpoint_model(const std::string& path) {
  const SafeTensors f = load_safetensors(path);
  auto it = f.metadata.find("lm.hf_config");
  HH_CHECK(it != f.metadata.end(), "checkpoint ", path, " is not a train_lm checkpoint (no lm.hf_config)");
  const nn::HFConfig config = nn::HFConfig::parse(it->second, path + ": lm.hf_config");
  nn::HFModelOptions o;
  nn::apply_hedgehog_section(config, o);
  o.draw_weights = false;
  auto model = build_lm_model(config, o);
  CheckpointMeta meta;
  load_checkpoint(path, *model, nullptr, meta);
  model->eval();
  return model;
}

std::string lm_checkpoint_tokenizer(const std::string& path) {
  const SafeTensors f = load_safetensors(path);
  auto it = f.metadata.find("lm.fingerprint");
  if (it == f.metadata.end()) return "";
  const json fp = json::parse(it->second, nullptr, false);
  if (!fp.is_object() || !fp.contains("data") || !fp["data"].is_string()) return "";
  const json data = json::parse(fp["data"].get<std::string>(), nullptr, false);
  return data.is_object() && data.contains("tokenizer") && data["tokenizer"].is_string()
             ? data["tokenizer"].get<std::string>()
             : "";
}

namespace {
// The identity of a warm start's weights: the path and an FNV-1a hash of its safetensors bytes (a
// folder's .safetensors files in name order, or the checkpoint file).
json init_fingerprint(const std::string& path) {
  uint64_t h = 0xcbf29ce484222325ull;
  std::vector<std::string> files;
  if (fs::is_directory(path)) {
    for (const auto& e : fs::directory_iterator(path))
      if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
  } else {
    files.push_back(path);
  }
  std::sort(files.begin(), files.end());
  HH_CHECK(!files.empty(), "--init: ", path, " holds no .safetensors file");
  std::vector<char> buf(1 << 16);
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    HH_CHECK(in.good(), "--init: cannot read ", f);
    while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
      for (std::streamsize i = 0; i < in.gcount(); ++i) h = (h ^ static_cast<unsigned char>(buf[i])) * 0x100000001b3ull;
    }
  }
  return json{{"path", path}, {"fnv1a", std::to_string(h)}};
}

// Copies the weights of an HF folder or a train_lm checkpoint into `model` (warm start): every HF
// weight of the model by name and shape; the model's own extras (feature maps) keep their
// initialisation when the source lacks them.
void load_init_weights(nn::CausalLM& model, const std::string& folder, const nn::HFModelOptions& options) {
  nn::HFModelOptions o = options;
  o.device = Device::cpu();
  const std::shared_ptr<nn::CausalLM> from =
      fs::is_directory(folder) ? nn::load_causal_lm(folder, o) : load_lm_checkpoint_model(folder);
  HH_CHECK(from->architecture() == model.architecture(), "--init: ", folder, " holds a ", from->architecture(),
           ", this run trains a ", model.architecture(), " (--arch)");
  std::map<std::string, Tensor> theirs;
  for (auto& [name, t] : from->named_parameters()) theirs.emplace(name, t);
  NoGradGuard no_grad;
  for (auto& [name, p] : model.named_parameters()) {
    auto it = theirs.find(name);
    if (it == theirs.end() && name.find(".feature_map.") != std::string::npos) continue;
    HH_CHECK(it != theirs.end(), "--init: ", folder, " has no weight ", name, " (the run's sizes or attention differ)");
    HH_CHECK(it->second.shape() == p.shape(), "--init: ", folder, ": ", name, " is ", str(it->second.shape()),
             ", the run's is ", str(p.shape()), " (--layers, --heads, --dim, --mlp or --positions differ)");
    copy_(p, it->second.to(p.device()).to(p.dtype()));
  }
}
}  // namespace

void check_lm_init(const LmTrainConfig& c) {
  if (c.init_from.empty()) return;
  nn::HFModelOptions mo = c.attention;
  mo.seed = c.seed;
  const auto model = make_lm_model(lm_config_json(c.model, c.eos_id), mo);
  load_init_weights(*model, c.init_from, mo);
}

std::string lm_run_fingerprint(const LmTrainConfig& c) {
  const nn::FeatureMapConfig& f = c.attention.feature_map;
  json j = {{"model", {{"vocab_size", c.model.vocab_size}, {"n_positions", c.model.n_positions},
                       {"n_embd", c.model.n_embd}, {"n_layer", c.model.n_layer}, {"n_head", c.model.n_head},
                       {"n_inner", c.model.n_inner}, {"activation", c.model.activation}}},
            {"attention", {{"mixer", nn::name(c.attention.mixer)}, {"form", static_cast<int>(c.attention.form)},
                           {"chunk", c.attention.chunk}, {"eps", c.attention.eps},
                           {"feature_dim", f.feature_dim}, {"temperature", f.temperature},
                           {"joint_softmax", f.joint_softmax}, {"untied", f.untied}}},
            {"context", c.context}, {"batch", c.batch}, {"accumulation", c.accumulation}, {"steps", c.steps},
            {"lr", c.lr}, {"min_lr", c.min_lr}, {"warmup", c.warmup}, {"schedule", c.schedule},
            {"weight_decay", c.weight_decay}, {"betas", {c.beta1, c.beta2}}, {"adam_eps", c.adam_eps},
            {"grad_clip", c.grad_clip}, {"seed", c.seed}, {"data", c.data_fingerprint}};
  if (c.model.arch != LmArch::gpt2) {  // GPT-2 runs keep their fingerprint
    j["model"]["arch"] = name(c.model.arch);
    j["model"]["rope_theta"] = c.model.rope_theta;
  }
  if (!c.init_from.empty()) j["init"] = init_fingerprint(c.init_from);  // only warm starts: others unchanged
  if (c.precision != Precision::f32) j["precision"] = precision_name(c.precision);  // f32 runs keep their fingerprint
  if (c.attention.mixer.is_hybrid()) j["attention"]["window"] = c.attention.window;  // only hybrids: others unchanged
  if (c.attention.gate != nn::Gate::none) j["attention"]["gate"] = nn::name(c.attention.gate);  // only gated runs
  if (c.attention.gate_output != nn::GateOutput::normalizer)  // only group-norm runs: others unchanged
    j["attention"]["gate_output"] = nn::name(c.attention.gate_output);
  return j.dump();
}

LmEval evaluate_lm(nn::CausalLM& model, const std::vector<int32_t>& ids, int64_t context, int64_t stride,
                   int64_t max_windows, int64_t batch, Communicator& comm) {
  const data::LmWindows w = stride > 0 ? data::lm_strided(ids, context, stride) : data::lm_blocks(ids, context);
  const int64_t n = max_windows > 0 ? std::min(max_windows, w.size()) : w.size();
  const Device dev = model.parameters().front().device();
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  double loss_sum = 0, scored = 0;
  // Windows are dealt to ranks round robin, in batches.
  for (int64_t first = comm.rank() * batch; first < n; first += batch * comm.world()) {
    throw_if_stop_requested("perplexity");  // core/stop.h: between batches (never set in a multi-rank run)
    std::vector<int64_t> rows;
    for (int64_t r = first; r < std::min(first + batch, n); ++r) rows.push_back(r);
    const Tensor tokens = w.tokens(rows);   // (B, L+1)
    const Tensor targets = w.targets(rows);  // (B, L)
    const int64_t L = targets.size(1);
    // The last window may be shorter than L+1 real tokens: it is padded, and the padding is not scored.
    const Tensor logits = model.forward(tokens.slice(1, 0, L).to(dev));  // (B, L, V)
    const Tensor t = targets.to(dev);
    loss_sum += cross_entropy(logits, t, data::kLmIgnoreIndex, 0.0, Reduction::sum).to(Device::cpu()).item<double>();
    const std::vector<int64_t> tv = to_vector<int64_t>(targets);
    scored += static_cast<double>(std::count_if(tv.begin(), tv.end(), [](int64_t x) { return x != data::kLmIgnoreIndex; }));
  }
  Tensor totals = from_vector(std::vector<double>{loss_sum, scored}, {2}, {DType::f64});
  comm.all_reduce_sum(totals);
  const std::vector<double> tot = to_vector<double>(totals);
  if (was_training) model.train();
  HH_CHECK(tot[1] > 0, "evaluation: no token was scored (the validation split is too short)");
  LmEval e;
  e.loss = tot[0] / tot[1];
  e.ppl = std::exp(e.loss);
  e.tokens = static_cast<int64_t>(tot[1]);
  return e;
}

LmTrainResult train_language_model(const LmTrainConfig& c, const data::TokenDataset& train,
                                   const std::vector<int32_t>& valid, Communicator& comm) {
  const int world = comm.world(), rank = comm.rank();
  check_lm_train_config(c, world);
  HH_CHECK(train.vocab_size() == c.model.vocab_size, "the training data's vocabulary (", train.vocab_size(),
           ") is not the model's (", c.model.vocab_size, ")");
  const int64_t eval_ctx = c.eval_context > 0 ? c.eval_context : c.context;
  HH_CHECK(static_cast<int64_t>(valid.size()) >= 2, "the validation split has ", valid.size(),
           " tokens; it needs at least 2");
  const data::WindowSampler sampler(train, c.context, c.seed);

  LmTrainResult r;
  nn::HFModelOptions mo = c.attention;
  mo.seed = c.seed;
  r.config_json = lm_config_json(c.model, c.eos_id);
  r.model = make_lm_model(r.config_json, mo);
  if (!c.init_from.empty()) load_init_weights(*r.model, c.init_from, mo);
  r.model->to(c.device);
  r.model->train();
  r.params = count_parameters(*r.model);
  nn::CausalLM& model = *r.model;

  AdamW opt(decay_groups(model, c.weight_decay), c.lr, AdamWOptions{c.beta1, c.beta2, c.adam_eps});
  ScheduleConfig sc;
  sc.base_lr = c.lr;
  sc.min_lr = c.min_lr;
  sc.total_steps = c.steps;
  sc.warmup_steps = warmup_steps(c);
  const LrSchedule schedule(c.schedule, sc);
  fs::create_directories(c.out_dir);
  const std::string ckpt = lm_checkpoint_path(c.out_dir);
  const int64_t tokens_per_step = c.batch * c.context;
  const int64_t micro = c.batch / c.accumulation / world;  // rows per rank per micro-batch

  TrainerConfig tc;
  tc.total_steps = c.steps;
  tc.eval_every = c.eval_every > 0 ? c.eval_every : c.steps;  // the last step always validates
  tc.accumulation = c.accumulation;
  tc.grad_clip = c.grad_clip;
  tc.patience = 0;  // no early stopping, no best weights: the run ends at its last step
  tc.mode = EarlyStopMode::min;
  tc.keep_best = false;
  tc.checkpoint_path = ckpt;
  tc.kind = "lm";
  tc.fingerprint = lm_run_fingerprint(c);
  tc.checkpoint_every = c.checkpoint_every;
  tc.resume = c.resume;
  tc.stop_after_steps = c.stop_after_steps;
  tc.label = nn::name(c.attention.mixer);
  tc.metric_name = "val_ppl";
  tc.progress_seconds = 10;
  tc.show_progress = rank == 0 && c.progress;
  tc.writes_checkpoints = rank == 0;
  // The model's config.json with its attention: load_lm_checkpoint_model rebuilds the model from it.
  tc.checkpoint_metadata["lm.hf_config"] = nn::config_with_hedgehog_section(r.config_json, "train_lm model config", mo);

  LmHistory h;
  std::unique_ptr<GradReducer> reducer;
  MetricsLog log;
  double step_loss = 0;           // the current step's loss, the mean over ranks (reduce_loss)
  double last_eval_loss = NAN;    // shown with the progress
  int64_t start_step = 0;         // where this process started
  Clock::time_point t0 = Clock::now(), step_start = t0, last_step_end = t0;
  TrainerHooks hooks;
  hooks.on_start = [&](int64_t step) {
    HH_CHECK(static_cast<int64_t>(h.train_loss.size()) == step, "checkpoint ", ckpt, ": ", h.train_loss.size(),
             " losses for ", step, " steps");
    // After a resume's load: the reducer's hooks live on the parameter tensors the model has now.
    reducer = std::make_unique<GradReducer>(model.named_parameters(),
                                            std::shared_ptr<Communicator>(&comm, [](Communicator*) {}));
    if (step == 0) reducer->broadcast_parameters();
    if (rank == 0) {
      // The history up to the checkpoint is written beside the log and renamed over it, so a write
      // that fails (a full disk) leaves the previous log whole; new lines are appended after it.
      const std::string path = (fs::path(c.out_dir) / "metrics.jsonl").string(), fresh = path + ".rewrite";
      const std::string previous = step > 0 ? log_up_to(path, step) : "";
      if (step > 0 && !previous.empty()) {
        write_file_atomic(fresh, previous);  // the previous lines kept byte for byte
      } else {
        try {
          MetricsLog rewrite(fresh);
          write_history(rewrite, h, tokens_per_step);
        } catch (...) {
          ::remove(fresh.c_str());
          throw;
        }
      }
      HH_CHECK(::rename(fresh.c_str(), path.c_str()) == 0, "metrics log: cannot replace '", path, "' with '", fresh,
               "': ", std::strerror(errno));
      log = MetricsLog(path, /*append=*/true);
    }
    start_step = step;
    t0 = last_step_end = Clock::now();
  };
  hooks.loss = [&](int64_t step, int64_t m) {
    if (m == 0) step_start = Clock::now();
    const int64_t first = step * c.batch + m * (c.batch / c.accumulation) + rank * micro;
    const Tensor rows = sampler.rows(first, micro).to(c.device);  // (micro, context+1)
    const Tensor x = rows.slice(1, 0, c.context), y = rows.slice(1, 1, c.context + 1);  // (micro, context) each
    PrecisionGuard precision(c.precision);  // forward and loss only; the Trainer's backward runs outside autocast
    return cross_entropy(model.forward(x), y);
  };
  hooks.before_backward = [&](int64_t m) { reducer->set_enabled(m + 1 == c.accumulation); };
  hooks.reduce_loss = [&](double loss) {
    reducer->finish();
    Tensor mean_loss = from_vector(std::vector<double>{loss}, {1}, {DType::f64});  // (1,)
    comm.all_reduce_sum(mean_loss);
    step_loss = mean_loss.item<double>() / world;
    return step_loss;
  };
  hooks.after_step = [&](int64_t step) {
    last_step_end = Clock::now();
    r.step_seconds.push_back(std::chrono::duration<double>(last_step_end - step_start).count());
    h.train_loss.push_back(step_loss);
    if (rank == 0)
      log.write({{"split", "train"}, {"step", step}, {"tokens", step * tokens_per_step}, {"loss", step_loss},
                 {"lr", opt.lr()}});
  };
  hooks.progress_metrics = [&](int64_t step, double loss) {
    const double tok_s =
        static_cast<double>((step - start_step) * tokens_per_step) / std::max(seconds_since(t0), 1e-9);
    return std::isfinite(last_eval_loss)
               ? ProgressMetrics{{"loss", loss}, {"val_ppl", std::exp(last_eval_loss)}, {"tok/s", tok_s}}
               : ProgressMetrics{{"loss", loss}, {"tok/s", tok_s}};
  };
  hooks.evaluate = [&](int64_t step) {
    // Every eval_every steps on eval_windows windows; the last step's validation on all of them.
    PrecisionGuard precision(c.precision);
    LmEval e = evaluate_lm(model, valid, eval_ctx, c.eval_stride, step == c.steps ? 0 : c.eval_windows, c.eval_batch,
                           comm);
    e.step = step;
    h.evals.push_back(e);
    if (rank == 0)
      log.write({{"split", "valid"}, {"step", step}, {"loss", e.loss}, {"ppl", e.ppl}, {"tokens_scored", e.tokens}});
    last_eval_loss = e.loss;
    return Evaluation{e.ppl, {{"val_ppl", e.ppl}}, false};
  };
  hooks.after_checkpoint = [&] { comm.barrier(); };  // rank 0 wrote it
  hooks.save_state = [&] { return JsonText{json{{"train_loss", h.train_loss}, {"evals", evals_json(h.evals)}}.dump()}; };
  hooks.load_state = [&](const JsonText& text) {
    const json st = json::parse(text.text);
    h.train_loss = st.at("train_loss").get<std::vector<double>>();
    h.evals = evals_from_json(st.at("evals"));
  };
  hooks.load_legacy = [&](const std::map<std::string, std::string>& extra) {
    return JsonText{load_legacy_lm_state(ckpt, extra, c, h).dump()};
  };
  const TrainerResult tr = Trainer(model, opt, schedule, tc, std::move(hooks)).fit();
  r.status = tr.status;
  r.steps = tr.steps;
  r.seconds = tr.seconds;
  r.tokens_per_second = static_cast<double>((tr.steps - tr.start_step) * tokens_per_step) /
                        std::max(std::chrono::duration<double>(last_step_end - t0).count(), 1e-9);
  r.train_loss = std::move(h.train_loss);
  r.evals = std::move(h.evals);
  model.eval();
  return r;
}

}  // namespace hh::train
