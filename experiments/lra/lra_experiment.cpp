#include "experiments/lra/lra_experiment.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "core/internal/json_read.h"
#include "core/progress.h"
#include "data/batching.h"
#include "train/early_stopping.h"
#include "train/metrics_log.h"
#include "train/optim.h"
#include "train/schedule.h"
#include "train/trainer.h"

namespace hh::train {

using data::LraTask;

LraPreset lra_preset(const std::string& preset, LraTask task) {
  // {max_len, batch, steps, warmup, eval_every, lr}
  if (preset == "paper") {
    switch (task) {
      case LraTask::listops: return {2000, 32, 5000, 1000, 250, 1e-4};
      case LraTask::text: return {4000, 32, 20000, 8000, 1000, 1e-4};
      case LraTask::retrieval: return {4000, 32, 30000, 800, 1500, 1e-4};
      case LraTask::image: return {1024, 256, 35000, 175, 1750, 1e-4};
      case LraTask::pathfinder: return {1024, 256, 62400, 312, 3120, 1e-4};
    }
  }
  if (preset == "demo") {
    // The README's demonstration on generated sets (apps/lra.cpp sizes them): ListOps of 16-64
    // tokens and 16x16 Pathfinder images, a few hundred steps at a higher peak lr (minutes on 2 cores).
    switch (task) {
      case LraTask::listops: return {64, 16, 300, 30, 50, 1e-3};
      case LraTask::pathfinder: return {256, 16, 240, 24, 40, 1e-3};
      case LraTask::text:
      case LraTask::retrieval: return {512, 16, 400, 40, 100, 1e-3};
      case LraTask::image: return {1024, 32, 400, 40, 100, 1e-3};
    }
  }
  if (preset == "tiny") return {64, 16, 60, 6, 20, 3e-3};
  fail(str("--preset: expected paper, demo or tiny, got '", preset, "'"));
}

LraBatch lra_batch(const data::LraSplit& split, const std::vector<int64_t>& rows, Device device) {
  std::vector<const std::vector<int32_t>*> a, b;
  std::vector<int64_t> labels;
  const bool two = !rows.empty() && !split.examples[static_cast<size_t>(rows[0])].tokens2.empty();
  for (int64_t r : rows) {
    const data::LraExample& e = split.examples[static_cast<size_t>(r)];
    a.push_back(&e.tokens);
    b.push_back(&e.tokens2);
    labels.push_back(e.label);
  }
  LraBatch out;
  nn::pad_batch(a, out.ids, out.mask);
  if (two || data::lra_task_info(split.task).two_documents) nn::pad_batch(b, out.ids2, out.mask2);
  out.labels = from_vector(labels, {static_cast<int64_t>(labels.size())}, {DType::i64});
  if (!device.is_cpu()) {
    out.ids = out.ids.to(device);
    out.mask = out.mask.to(device);
    out.labels = out.labels.to(device);
    if (out.ids2.defined()) {
      out.ids2 = out.ids2.to(device);
      out.mask2 = out.mask2.to(device);
    }
  }
  return out;
}

namespace {
Tensor forward_batch(nn::LraClassifier& model, const LraBatch& b) { return model.forward(b.ids, b.mask, b.ids2, b.mask2); }
}  // namespace

double lra_accuracy(nn::LraClassifier& model, const data::LraSplit& split, int64_t batch, Device device) {
  NoGradGuard ng;
  const bool was_training = model.is_training();
  model.eval();
  const int64_t N = static_cast<int64_t>(split.examples.size());
  int64_t correct = 0;
  for (int64_t s = 0; s < N; s += batch) {
    std::vector<int64_t> rows;
    for (int64_t i = s; i < std::min(N, s + batch); ++i) rows.push_back(i);
    LraBatch b = lra_batch(split, rows, device);
    auto pred = to_vector<int64_t>(argmax(forward_batch(model, b), -1));
    auto tgt = to_vector<int64_t>(b.labels);
    for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == tgt[i];
  }
  model.train(was_training);
  return N ? static_cast<double>(correct) / static_cast<double>(N) : 0.0;
}

namespace {

// FNV-1a over a split's tokens and labels: the fingerprint's guard against resuming on other data.
uint64_t split_hash(const data::LraSplit& s) {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](int64_t v) {
    h ^= static_cast<uint64_t>(v);
    h *= 1099511628211ULL;
  };
  for (const auto& e : s.examples) {
    mix(e.label);
    mix(static_cast<int64_t>(e.tokens.size()));
    for (int32_t t : e.tokens) mix(t);
    mix(static_cast<int64_t>(e.tokens2.size()));
    for (int32_t t : e.tokens2) mix(t);
  }
  return h;
}

}  // namespace

std::string lra_run_fingerprint(const LraData& data, const LraRunConfig& cfg) {
  const nn::LraModelConfig& m = cfg.model;
  const nn::FeatureMapConfig& f = m.feature_map;
  nlohmann::json j = {
      {"task", data::lra_task_name(cfg.task)},
      {"data", {std::to_string(split_hash(data.train)), std::to_string(split_hash(data.val)),
                std::to_string(split_hash(data.test))}},
      {"model", {{"dim", m.dim}, {"mlp_hidden", m.mlp_hidden}, {"heads", m.heads}, {"head_dim", m.head_dim},
                 {"layers", m.layers}, {"dropout", m.dropout}, {"attention", nn::gated_label(nn::name(m.attention), m.gate)},
                 {"feature_dim", f.feature_dim}, {"temperature", f.temperature}, {"redraw", f.redraw_interval}}},
      {"max_len", cfg.max_len}, {"batch", cfg.batch}, {"steps", cfg.steps}, {"warmup", cfg.warmup}, {"lr", cfg.lr},
      {"weight_decay", cfg.weight_decay}, {"adam_eps", cfg.adam_eps}, {"grad_clip", cfg.grad_clip},
      {"eval_every", cfg.eval_every}, {"patience", cfg.patience}, {"eval_batch", cfg.eval_batch},
      {"seed", cfg.seed}, {"device", cfg.device.str()}};
  if (cfg.precision != Precision::f32) j["precision"] = precision_name(cfg.precision);  // f32 runs keep their fingerprint
  if (m.gate_output != nn::GateOutput::normalizer) j["model"]["gate_output"] = nn::name(m.gate_output);  // others unchanged
  return j.dump();
}

namespace {

std::map<std::string, Generator*> dropout_generators(nn::LraClassifier& model) {
  std::map<std::string, Generator*> gens;
  auto drops = model.dropouts();
  for (size_t i = 0; i < drops.size(); ++i) gens["dropout." + std::to_string(i)] = &drops[i]->gen;
  return gens;
}

// The curves and best-step record of a run, as its checkpoint holds them.
nlohmann::json run_state(const LraRunResult& r) {
  return {{"eval_steps", r.eval_steps}, {"train_loss", r.train_loss}, {"val_acc", r.val_acc},
          {"val_accuracy", r.val_accuracy}, {"best_step", r.best_step}};
}
void load_run_state(const nlohmann::json& st, LraRunResult& r) {
  r.eval_steps = json_ints(st.at("eval_steps"), "lra checkpoint: \"eval_steps\"");
  r.train_loss = st.at("train_loss").get<std::vector<double>>();
  r.val_acc = st.at("val_acc").get<std::vector<double>>();
  r.val_accuracy = st.at("val_accuracy").get<double>();
  r.best_step = json_int(st.at("best_step"), "lra checkpoint: \"best_step\"");
}

// A checkpoint of the LRA loop before train/trainer.h: the loop state it held, in the Trainer's
// terms, and the curves restored into `r`.
nlohmann::json load_legacy_lra_state(const std::map<std::string, std::string>& extra, LraRunResult& r) {
  auto it = extra.find("lra.state");
  HH_CHECK(it != extra.end(), "metadata lacks 'lra.state' (not an lra checkpoint)");
  const nlohmann::json st = nlohmann::json::parse(it->second);
  load_run_state(st, r);
  return {{"loss_sum", st.at("loss_sum")}, {"loss_count", st.at("loss_count")}, {"finished", st.at("finished")},
          {"seconds", st.at("seconds")},   {"early_stopping", st.at("early_stopping")},
          {"best_step", st.at("best_step")}};
}

void check_config(const LraData& data, const LraRunConfig& c) {
  HH_CHECK(c.batch > 0 && c.steps > 0 && c.warmup >= 0 && c.eval_every > 0 && c.patience > 0 && c.eval_batch >= 0,
           "lra: batch, steps, eval_every and patience must be positive and warmup, eval_batch >= 0 (got batch ",
           c.batch, ", steps ", c.steps, ", warmup ", c.warmup, ", eval_every ", c.eval_every, ", patience ", c.patience,
           ")");
  HH_CHECK(c.lr > 0 && c.adam_eps > 0 && c.weight_decay >= 0 && c.grad_clip >= 0,
           "lra: lr and adam_eps must be positive, weight_decay and grad_clip >= 0");
  HH_CHECK(!(c.resume || c.stop_after_steps > 0) || !c.checkpoint_path.empty(),
           "lra: resume and stop_after_steps need a checkpoint path");
  for (const data::LraSplit* s : {&data.train, &data.val, &data.test}) {
    HH_CHECK(s->task == c.task, "lra: a split of task ", data::lra_task_name(s->task), " given to a ",
             data::lra_task_name(c.task), " run");
    HH_CHECK(!s->examples.empty(), "lra: an empty split (", data::lra_task_name(c.task), ")");
  }
}

}  // namespace

LraRunResult run_lra(const LraData& data, const LraRunConfig& cfg) {
  check_config(data, cfg);
  check_precision(cfg.precision, cfg.device);
  // bf16 autocast for the whole run (autograd/autocast.h): forward passes, losses, evaluations;
  // backward runs outside autocast and the optimizer updates f32 weights.
  PrecisionGuard precision(cfg.precision);
  const data::LraTaskInfo info = data::lra_task_info(cfg.task);
  LraRunResult r;
  r.task = data::lra_task_name(cfg.task);
  r.attention = cfg.model.attention;
  r.gate = cfg.model.gate;

  nn::LraModelConfig mc = cfg.model;
  mc.vocab = info.vocab_size;
  mc.classes = info.num_classes;
  mc.two_documents = info.two_documents;
  mc.max_len = cfg.max_len > 0 ? cfg.max_len : info.max_len;
  mc.seed = cfg.seed;
  for (const data::LraSplit* s : {&data.train, &data.val, &data.test})
    for (const auto& e : s->examples)
      HH_CHECK(static_cast<int64_t>(std::max(e.tokens.size(), e.tokens2.size())) <= mc.max_len, "lra: a ",
               r.task, " example has ", std::max(e.tokens.size(), e.tokens2.size()), " tokens, more than max_len ",
               mc.max_len, " (read the data with the same max_len)");
  Generator init_gen(cfg.seed);
  nn::LraClassifier model(mc, {init_gen, cfg.device});
  r.params = model.num_parameters();

  ScheduleConfig sc;
  sc.kind = ScheduleKind::linear;
  sc.base_lr = cfg.lr;
  sc.total_steps = cfg.steps;
  sc.warmup_steps = std::min(cfg.warmup, cfg.steps);
  LrSchedule schedule(sc);
  AdamWOptions ao;
  ao.eps = cfg.adam_eps;
  AdamW opt(decay_groups(model, cfg.weight_decay), cfg.lr, ao);
  const int64_t N = static_cast<int64_t>(data.train.examples.size());
  RowBatches order(N, cfg.batch, true, cfg.seed + 17);
  const int64_t per_epoch = order.size();
  const int64_t eval_batch = cfg.eval_batch > 0 ? cfg.eval_batch : cfg.batch;
  const bool checkpoints = !cfg.checkpoint_path.empty();
  const bool resumed = cfg.resume && checkpoints && ::access(cfg.checkpoint_path.c_str(), F_OK) == 0;
  MetricsLog log;

  TrainerConfig tc;
  tc.total_steps = cfg.steps;
  tc.eval_every = cfg.eval_every;
  tc.grad_clip = cfg.grad_clip;
  tc.patience = cfg.patience;
  tc.mode = EarlyStopMode::max;
  tc.checkpoint_path = cfg.checkpoint_path;
  tc.kind = "lra";
  tc.fingerprint = checkpoints ? lra_run_fingerprint(data, cfg) : "";
  tc.resume = cfg.resume;
  tc.stop_after_steps = cfg.stop_after_steps;
  tc.label = r.task + " " + nn::gated_label(nn::name(r.attention), r.gate);
  tc.metric_name = "val_acc";
  tc.quiet = cfg.quiet;
  TrainerHooks hooks;
  int64_t epoch_ready = -1;
  hooks.loss = [&](int64_t step, int64_t) {
    const int64_t epoch = step / per_epoch;
    if (epoch != epoch_ready) {
      order.set_epoch(epoch);
      epoch_ready = epoch;
    }
    LraBatch b = lra_batch(data.train, order.rows(step % per_epoch), cfg.device);
    return cross_entropy(forward_batch(model, b), b.labels);
  };
  hooks.evaluate = [&](int64_t) {
    const double va = lra_accuracy(model, data.val, eval_batch, cfg.device);
    return Evaluation{va, {{"val_acc", va}}, false};
  };
  hooks.on_evaluation = [&](const EvaluationPoint& at, const Evaluation& e) {
    r.eval_steps.push_back(at.step);
    r.train_loss.push_back(at.train_loss);
    r.val_acc.push_back(e.metric);
    if (at.best) {
      r.val_accuracy = e.metric;
      r.best_step = at.step;
    }
    if (log.is_open())
      log.write({{"task", r.task}, {"attention", nn::gated_label(nn::name(r.attention), r.gate)}, {"step", at.step}, {"lr", at.lr},
                 {"train_loss", at.train_loss}, {"val_acc", e.metric}, {"best_val_acc", r.val_accuracy},
                 {"seconds", at.seconds}});
  };
  hooks.after_step = [&](int64_t) { model.on_optimizer_step(); };
  hooks.save_state = [&] { return JsonText{run_state(r).dump()}; };
  hooks.load_state = [&](const JsonText& st) { load_run_state(nlohmann::json::parse(st.text), r); };
  hooks.load_legacy = [&](const std::map<std::string, std::string>& extra) {
    return JsonText{load_legacy_lra_state(extra, r).dump()};
  };
  hooks.generators = dropout_generators(model);
  if (!cfg.log_path.empty()) log = MetricsLog(cfg.log_path, resumed);
  const TrainerResult tr = Trainer(model, opt, schedule, tc, std::move(hooks)).fit();
  r.status = tr.status;
  r.steps = tr.steps;
  r.seconds = tr.seconds;
  if (tr.interrupted()) return r;
  r.steps_per_second = tr.step_seconds > 0 ? static_cast<double>(tr.steps - tr.start_step) / tr.step_seconds : 0.0;
  r.test_accuracy = lra_accuracy(model, data.test, eval_batch, cfg.device);
  return r;
}

}  // namespace hh::train
