#include "train/lra_experiment.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "core/progress.h"
#include "data/batching.h"
#include "train/checkpoint.h"
#include "train/early_stopping.h"
#include "train/metrics_log.h"
#include "train/optim.h"
#include "train/schedule.h"

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
                 {"layers", m.layers}, {"dropout", m.dropout}, {"attention", m.attention},
                 {"feature_dim", f.feature_dim}, {"temperature", f.temperature}, {"redraw", f.redraw_interval}}},
      {"max_len", cfg.max_len}, {"batch", cfg.batch}, {"steps", cfg.steps}, {"warmup", cfg.warmup}, {"lr", cfg.lr},
      {"weight_decay", cfg.weight_decay}, {"adam_eps", cfg.adam_eps}, {"grad_clip", cfg.grad_clip},
      {"eval_every", cfg.eval_every}, {"patience", cfg.patience}, {"eval_batch", cfg.eval_batch},
      {"seed", cfg.seed}, {"device", cfg.device.str()}};
  if (cfg.precision != Precision::f32) j["precision"] = precision_name(cfg.precision);  // f32 runs keep their fingerprint
  return j.dump();
}

namespace {

// Where a run stands between steps, beside the weights and AdamW state.
struct RunState {
  int64_t step = 0;
  double loss_sum = 0;    // training loss summed since the last evaluation
  int64_t loss_count = 0;
  bool finished = false;  // early-stopped (or out of steps)
  double seconds = 0;     // training time before this process resumed
};

std::map<std::string, Generator*> dropout_generators(nn::LraClassifier& model) {
  std::map<std::string, Generator*> gens;
  auto drops = model.dropouts();
  for (size_t i = 0; i < drops.size(); ++i) gens["dropout." + std::to_string(i)] = &drops[i]->gen;
  return gens;
}

void save_run(const std::string& path, const std::string& fingerprint, nn::LraClassifier& model, const AdamW& opt,
              const EarlyStopping& stopper, const RunState& rs, const LraRunResult& r,
              const std::map<std::string, Tensor>& best_state) {
  const EarlyStoppingState& es = stopper.state();
  nlohmann::json state = {{"loss_sum", rs.loss_sum},       {"loss_count", rs.loss_count},
                          {"finished", rs.finished},       {"seconds", rs.seconds},
                          {"early_stopping", {es.has_best, es.best, es.best_index, es.bad_count, es.num_updates}},
                          {"eval_steps", r.eval_steps},    {"train_loss", r.train_loss},
                          {"val_acc", r.val_acc},          {"val_accuracy", r.val_accuracy},
                          {"best_step", r.best_step}};
  CheckpointMeta meta;
  meta.step = rs.step;
  meta.generators = dropout_generators(model);
  meta.extra["lra.fingerprint"] = fingerprint;
  meta.extra["lra.state"] = state.dump();
  meta.tensors = best_state;
  save_checkpoint(path, model, &opt, meta);
}

void load_run(const std::string& path, const std::string& fingerprint, nn::LraClassifier& model, AdamW& opt,
              EarlyStopping& stopper, RunState& rs, LraRunResult& r, std::map<std::string, Tensor>& best_state) {
  CheckpointMeta meta;
  meta.generators = dropout_generators(model);
  load_checkpoint(path, model, &opt, meta);
  auto get = [&](const char* key) -> const std::string& {
    auto it = meta.extra.find(key);
    HH_CHECK(it != meta.extra.end(), "checkpoint ", path, ": metadata lacks '", key, "' (not an lra checkpoint)");
    return it->second;
  };
  const std::string diff = fingerprint_diff(get("lra.fingerprint"), fingerprint);
  if (!diff.empty()) {
    fail(str("checkpoint ", path, ": it was saved by a run with another configuration or data (differs in ", diff,
             "); start afresh without --resume, or use the original settings"));
  }
  try {
    const nlohmann::json st = nlohmann::json::parse(get("lra.state"));
    rs.step = meta.step;
    rs.loss_sum = st.at("loss_sum").get<double>();
    rs.loss_count = st.at("loss_count").get<int64_t>();
    rs.finished = st.at("finished").get<bool>();
    rs.seconds = st.at("seconds").get<double>();
    const auto& e = st.at("early_stopping");
    stopper.set_state({e.at(0).get<bool>(), e.at(1).get<double>(), e.at(2).get<int64_t>(), e.at(3).get<int64_t>(),
                       e.at(4).get<int64_t>()});
    r.eval_steps = st.at("eval_steps").get<std::vector<int64_t>>();
    r.train_loss = st.at("train_loss").get<std::vector<double>>();
    r.val_acc = st.at("val_acc").get<std::vector<double>>();
    r.val_accuracy = st.at("val_accuracy").get<double>();
    r.best_step = st.at("best_step").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    fail(str("checkpoint ", path, ": bad training state in its metadata: ", e.what()));
  }
  best_state = meta.tensors;
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
  EarlyStopping stopper(cfg.patience, EarlyStopMode::max);
  const int64_t N = static_cast<int64_t>(data.train.examples.size());
  RowBatches order(N, cfg.batch, true, cfg.seed + 17);
  const int64_t per_epoch = order.size();
  const int64_t eval_batch = cfg.eval_batch > 0 ? cfg.eval_batch : cfg.batch;

  std::map<std::string, Tensor> best_state;
  auto snapshot = [&]() {
    best_state.clear();
    for (auto& [name, t] : model.state_dict()) best_state[name] = clone(t.detach());
  };
  snapshot();
  RunState rs;
  const bool checkpoints = !cfg.checkpoint_path.empty();
  const std::string fingerprint = checkpoints ? lra_run_fingerprint(data, cfg) : "";
  bool resumed = false;
  if (cfg.resume && ::access(cfg.checkpoint_path.c_str(), F_OK) == 0) {
    load_run(cfg.checkpoint_path, fingerprint, model, opt, stopper, rs, r, best_state);
    resumed = true;
  }
  MetricsLog log;
  if (!cfg.log_path.empty()) log = MetricsLog(cfg.log_path, resumed);

  auto t0 = std::chrono::steady_clock::now();
  const int64_t start_step = rs.step;
  auto elapsed = [&] { return rs.seconds + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  auto save = [&] {
    if (!checkpoints) return;
    RunState now = rs;
    now.seconds = elapsed();
    save_run(cfg.checkpoint_path, fingerprint, model, opt, stopper, now, r, best_state);
  };
  ProgressOptions po;
  po.label = r.task + " " + r.attention;
  po.total = cfg.steps;
  po.start_step = rs.step;
  po.every_steps = 0;
  po.every_seconds = 30;
  if (cfg.quiet) po.mode = ProgressMode::plain;
  Progress progress(po);
  model.train();
  int64_t epoch_ready = -1;
  double step_seconds = 0;  // this process's optimizer steps alone (no evaluation)
  while (!rs.finished && rs.step < cfg.steps) {
    const int64_t epoch = rs.step / per_epoch;
    if (epoch != epoch_ready) {
      order.set_epoch(epoch);
      epoch_ready = epoch;
    }
    const auto step_start = std::chrono::steady_clock::now();
    LraBatch b = lra_batch(data.train, order.rows(rs.step % per_epoch), cfg.device);
    const double lr = schedule.lr_at(rs.step);
    opt.set_lr(lr);
    Tensor loss = cross_entropy(forward_batch(model, b), b.labels);
    const double lv = loss.item<double>();
    std::string why = std::isfinite(lv) ? "" : str("the loss became non-finite (", lv, ")");
    if (why.empty()) {
      opt.zero_grad();
      loss.backward();
      try {
        if (cfg.grad_clip > 0) clip_grad_norm(model.parameters(), cfg.grad_clip);
      } catch (const Error& e) {
        why = e.what();
      }
    }
    if (!why.empty()) {  // scored below with the best weights before it; nothing is saved
      r.status = str("diverged at step ", rs.step + 1, ": ", why);
      break;
    }
    opt.step();
    model.on_optimizer_step();
    step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    ++rs.step;
    rs.loss_sum += lv;
    ++rs.loss_count;
    progress.update(rs.step, {{"loss", rs.loss_sum / static_cast<double>(rs.loss_count)}, {"lr", lr}});
    if (rs.step % cfg.eval_every == 0 || rs.step == cfg.steps) {
      const double va = lra_accuracy(model, data.val, eval_batch, cfg.device);
      const double tl = rs.loss_sum / static_cast<double>(rs.loss_count);
      r.eval_steps.push_back(rs.step);
      r.train_loss.push_back(tl);
      r.val_acc.push_back(va);
      if (stopper.update(va)) {
        r.val_accuracy = va;
        r.best_step = rs.step;
        snapshot();
      }
      if (log.is_open())
        log.write({{"task", r.task}, {"attention", r.attention}, {"step", rs.step}, {"lr", lr},
                   {"train_loss", tl}, {"val_acc", va}, {"best_val_acc", r.val_accuracy}, {"seconds", elapsed()}});
      rs.loss_sum = 0;
      rs.loss_count = 0;
      rs.finished = stopper.should_stop() || rs.step >= cfg.steps;
      progress.update(rs.step, {{"loss", tl}, {"val_acc", va}});
      save();
    }
    if (cfg.stop_after_steps > 0 && rs.step >= cfg.stop_after_steps && !rs.finished) {
      save();
      r.status = str("interrupted at step ", rs.step);
      r.steps = rs.step;
      r.seconds = elapsed();
      return r;
    }
  }
  progress.finish({{"best_val_acc", r.val_accuracy}});
  r.steps = rs.step;
  r.seconds = elapsed();
  r.steps_per_second = step_seconds > 0 ? static_cast<double>(rs.step - start_step) / step_seconds : 0.0;
  model.load_state_dict(best_state);
  r.test_accuracy = lra_accuracy(model, data.test, eval_batch, cfg.device);
  return r;
}

}  // namespace hh::train
