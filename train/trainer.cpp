// The one training loop (see train/trainer.h).
#include "train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <ostream>
#include <utility>

#include <nlohmann/json.hpp>

#include "autograd/ops.h"
#include "core/error.h"
#include "core/internal/json_read.h"
#include "core/stop.h"
#include "train/checkpoint.h"

namespace hh::train {

std::string DivergenceWatch::update(double loss) {
  if (!std::isfinite(loss)) return str("the loss became non-finite (", loss, ")");
  if (!has_initial) {
    initial = loss;
    has_initial = true;
  }
  above = factor > 0 && loss > factor * initial ? above + 1 : 0;
  if (above >= steps && above > 0)
    return str("the loss stayed above ", factor, " x its initial value ", initial, " for ", above, " steps (now ",
               loss, ")");
  return "";
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Early stopping that never stops when patience is 0 (it still tracks the best value).
int64_t stopper_patience(int64_t patience) {
  return patience > 0 ? patience : std::numeric_limits<int64_t>::max();
}

constexpr const char* kStateKey = "trainer.state";

// A count of the saved loop state (`key` names it in the error): a JSON integer within int64. A
// float is refused, not cast: nlohmann casts 1e300 to int64 with undefined behaviour and 1.5 to 1.
int64_t state_int(const nlohmann::json& v, const std::string& path, const std::string& key) {
  return json_int(v, str("checkpoint ", path, ": bad training state in its metadata: \"", key, "\""));
}

}  // namespace

Trainer::Trainer(nn::Module& model, Optimizer& opt, const LrSchedule& schedule, TrainerConfig cfg, TrainerHooks hooks)
    : model_(model),
      opt_(opt),
      schedule_(schedule),
      cfg_(std::move(cfg)),
      hooks_(std::move(hooks)),
      stopper_(stopper_patience(cfg_.patience), cfg_.mode) {
  const TrainerConfig& c = cfg_;
  HH_CHECK(c.total_steps >= 1, "trainer: total_steps must be >= 1, got ", c.total_steps);
  HH_CHECK(c.steps_per_epoch >= 0 && c.eval_every >= 0 && c.checkpoint_every >= 0 && c.stop_after_steps >= 0 &&
               c.patience >= 0,
           "trainer: steps_per_epoch, eval_every, checkpoint_every, stop_after_steps and patience must be >= 0");
  HH_CHECK(c.eval_every > 0 || c.steps_per_epoch > 0, "trainer: give eval_every or steps_per_epoch");
  HH_CHECK(c.accumulation >= 1, "trainer: accumulation must be >= 1, got ", c.accumulation);
  HH_CHECK(c.grad_clip >= 0, "trainer: grad_clip must be >= 0, got ", c.grad_clip);
  HH_CHECK(c.diverge_factor == 0 || c.diverge_factor > 1, "trainer: diverge_factor must be 0 (off) or > 1, got ",
           c.diverge_factor);
  HH_CHECK(c.diverge_steps >= 1, "trainer: diverge_steps must be >= 1, got ", c.diverge_steps);
  HH_CHECK(!(c.resume || c.stop_after_steps > 0 || c.checkpoint_every > 0) || !c.checkpoint_path.empty(),
           "trainer: resume, stop_after_steps and checkpoint_every need a checkpoint_path");
  HH_CHECK(c.checkpoint_path.empty() || !c.kind.empty(), "trainer: checkpoints need the experiment's kind");
  HH_CHECK(static_cast<bool>(hooks_.loss) && static_cast<bool>(hooks_.evaluate), "trainer: the loss and evaluate hooks are required");
  watch_.factor = c.diverge_factor;
  watch_.steps = c.diverge_steps;
}

TrainerResult Trainer::fit() {
  TrainerResult r;
  auto snapshot = [&] {
    best_.clear();
    for (auto& [name, t] : model_.state_dict())
      if (!hooks_.best_filter || hooks_.best_filter(name)) best_[name] = clone(t.detach());
  };
  if (cfg_.keep_best) snapshot();
  if (cfg_.resume && ::access(cfg_.checkpoint_path.c_str(), F_OK) == 0) load(r);
  r.start_step = r.steps;
  const double seconds_before = r.seconds;
  const auto t0 = Clock::now();
  auto elapsed = [&] { return seconds_before + seconds_since(t0); };
  auto save_now = [&] {
    if (cfg_.checkpoint_path.empty()) return;
    r.seconds = elapsed();
    if (cfg_.writes_checkpoints) save(r);
    if (hooks_.after_checkpoint) hooks_.after_checkpoint();
  };

  const int64_t total = cfg_.total_steps, spe = cfg_.steps_per_epoch;
  const int64_t eval_every = cfg_.eval_every > 0 ? cfg_.eval_every : spe;
  const int64_t epochs = spe > 0 ? (total + spe - 1) / spe : 0;
  ProgressOptions po;
  po.every_steps = 0;
  po.every_seconds = cfg_.progress_seconds;
  if (cfg_.quiet) po.mode = ProgressMode::plain;
  std::unique_ptr<Progress> bar;  // per epoch when spe > 0, else one for the whole run
  int64_t bar_epoch = -1;
  auto running_loss = [&] { return loss_sum_ / static_cast<double>(std::max<int64_t>(loss_count_, 1)); };
  if (spe == 0 && cfg_.show_progress) {
    po.label = cfg_.label;
    po.total = total;
    po.start_step = r.steps;
    bar = std::make_unique<Progress>(po);
  }

  if (hooks_.on_start) hooks_.on_start(r.steps);
  model_.train();
  while (!finished_ && r.steps < total) {
    const int64_t step = r.steps;
    const int64_t epoch = spe > 0 ? step / spe : 0;
    if (spe > 0 && cfg_.show_progress && epoch != bar_epoch) {
      po.label = cfg_.label + " epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs);
      po.total = std::min(spe, total - epoch * spe);
      bar = std::make_unique<Progress>(po);
      bar_epoch = epoch;
      if (loss_count_ > 0) bar->update(step - epoch * spe, {{"loss", running_loss()}});  // resumed mid-epoch
    }
    const auto step_start = Clock::now();
    const double lr = schedule_.lr_at(step);
    opt_.set_lr(lr);
    opt_.zero_grad();
    // Every micro-batch runs its backward even after a non-finite loss (data-parallel ranks must
    // take part in the same collectives); such a step never reaches the weights.
    double lv = 0;
    for (int64_t m = 0; m < cfg_.accumulation; ++m) {
      Tensor loss = hooks_.loss(step, m);
      lv += loss.item<double>() / static_cast<double>(cfg_.accumulation);
      if (hooks_.before_backward) hooks_.before_backward(m);
      (cfg_.accumulation == 1 ? loss : mul(loss, 1.0 / static_cast<double>(cfg_.accumulation))).backward();
    }
    if (hooks_.reduce_loss) lv = hooks_.reduce_loss(lv);
    std::string why = watch_.update(lv);
    if (why.empty() && cfg_.grad_clip > 0) {
      try {
        clip_grad_norm(model_.parameters(), cfg_.grad_clip);
      } catch (const Error& e) {  // a finite loss whose gradient overflowed
        why = e.what();
      }
    }
    if (!why.empty()) {  // the best weights before it are loaded below; nothing is saved
      r.status = spe > 0 ? str("diverged at epoch ", epoch + 1, ", step ", step + 1, ": ", why)
                         : str("diverged at step ", step + 1, ": ", why);
      break;
    }
    opt_.step();
    if (hooks_.after_step) hooks_.after_step(step + 1);
    r.step_seconds += seconds_since(step_start);
    r.steps = step + 1;
    loss_sum_ += lv;
    ++loss_count_;
    if (bar) {
      const int64_t done = spe > 0 ? r.steps - epoch * spe : r.steps;
      if (hooks_.progress_metrics)
        bar->update(done, hooks_.progress_metrics(r.steps, lv));
      else if (spe > 0)
        bar->update(done, {{"loss", running_loss()}});
      else
        bar->update(done, {{"loss", running_loss()}, {"lr", lr}});
    }

    bool saved = false;
    if (r.steps % eval_every == 0 || r.steps == total) {
      const Evaluation e = hooks_.evaluate(r.steps);
      model_.train();
      const double train_loss = running_loss();
      const bool best = stopper_.update(e.metric);
      if (best) {
        r.best_step = r.steps;
        if (cfg_.keep_best) snapshot();
      }
      ++r.evaluations;
      if (hooks_.on_evaluation)
        hooks_.on_evaluation({r.steps, train_loss, lr, elapsed(), best, stopper_.should_stop()}, e);
      loss_sum_ = 0;
      loss_count_ = 0;
      finished_ = (cfg_.patience > 0 && stopper_.should_stop()) || e.stop || r.steps >= total;
      ProgressMetrics shown{{"loss", train_loss}};
      shown.insert(shown.end(), e.shown.begin(), e.shown.end());
      if (bar && spe > 0)
        bar->finish(shown);
      else if (bar)
        bar->update(r.steps, shown);
      save_now();
      saved = true;
    } else if (cfg_.checkpoint_every > 0 && r.steps % cfg_.checkpoint_every == 0) {
      save_now();
      saved = true;
    }
    // Stopped here: --stop-after-epochs' step, or a stop requested from outside (core/stop.h).
    const bool requested = stop_requested();
    if (((cfg_.stop_after_steps > 0 && r.steps >= cfg_.stop_after_steps) || requested) && !finished_) {
      if (!saved) save_now();
      r.status = str("interrupted at step ", r.steps, requested ? " (a stop was requested)" : "");
      r.seconds = elapsed();
      r.has_best = stopper_.has_best();
      if (r.has_best) r.best_metric = stopper_.best();
      return r;
    }
  }
  r.has_best = stopper_.has_best();
  if (r.has_best) r.best_metric = stopper_.best();
  if (spe == 0 && bar) bar->finish(r.has_best ? ProgressMetrics{{"best_" + cfg_.metric_name, r.best_metric}} : ProgressMetrics{});
  r.seconds = elapsed();
  if (cfg_.keep_best) model_.load_state_dict(best_, /*strict=*/!hooks_.best_filter);
  return r;
}

void Trainer::save(const TrainerResult& r) const {
  const EarlyStoppingState& es = stopper_.state();
  const nlohmann::json state = {{"loss_sum", loss_sum_},
                                {"loss_count", loss_count_},
                                {"finished", finished_},
                                {"seconds", r.seconds},
                                {"evaluations", r.evaluations},
                                {"best_step", r.best_step},
                                {"early_stopping", {es.has_best, es.best, es.best_index, es.bad_count, es.num_updates}},
                                {"divergence", {watch_.has_initial, watch_.initial, watch_.above}}};
  CheckpointMeta meta;
  meta.step = r.steps;
  meta.generators = hooks_.generators;
  meta.extra = cfg_.checkpoint_metadata;
  meta.extra[cfg_.kind + ".fingerprint"] = cfg_.fingerprint;
  meta.extra[kStateKey] = state.dump();
  if (hooks_.save_state) meta.extra[cfg_.kind + ".run"] = hooks_.save_state().text;
  if (cfg_.keep_best) meta.tensors = best_;
  save_checkpoint(cfg_.checkpoint_path, model_, &opt_, meta);
}

void Trainer::load(TrainerResult& r) {
  const std::string& path = cfg_.checkpoint_path;
  CheckpointMeta meta;
  meta.generators = hooks_.generators;
  load_checkpoint(path, model_, &opt_, meta);
  auto it = meta.extra.find(cfg_.kind + ".fingerprint");
  const bool legacy = meta.extra.find(kStateKey) == meta.extra.end();
  nlohmann::json legacy_state;  // load_legacy's answer, asked for once
  std::string saved;
  if (it != meta.extra.end()) {
    saved = it->second;
  } else {
    // An old loop's checkpoint may keep its fingerprint elsewhere: load_legacy returns it. Without
    // one (or when the hook cannot read the file) the checkpoint is not this experiment's.
    if (legacy && hooks_.load_legacy) {
      try {
        legacy_state = nlohmann::json::parse(hooks_.load_legacy(meta.extra).text);
      } catch (const std::exception&) {
        legacy_state = nullptr;
      }
    }
    HH_CHECK(legacy_state.is_object() && legacy_state.contains("fingerprint") &&
                 legacy_state.at("fingerprint").is_string(),
             "checkpoint ", path, ": metadata lacks '", cfg_.kind, ".fingerprint' (not a ", cfg_.kind, " checkpoint)");
    saved = legacy_state.at("fingerprint").get<std::string>();
  }
  const std::string diff = fingerprint_diff(saved, cfg_.fingerprint);
  if (!diff.empty()) {
    fail(str("checkpoint ", path, ": it was saved by a run with another configuration or data (differs in ", diff,
             "); start afresh without resuming, or use the original settings"));
  }
  try {
    nlohmann::json st;
    auto state = meta.extra.find(kStateKey);
    if (state != meta.extra.end()) {
      st = nlohmann::json::parse(state->second);
      if (hooks_.load_state) {
        auto run = meta.extra.find(cfg_.kind + ".run");
        HH_CHECK(run != meta.extra.end(), "checkpoint ", path, ": metadata lacks '", cfg_.kind, ".run'");
        hooks_.load_state(JsonText{run->second});
      }
    } else if (!legacy_state.is_null()) {
      st = legacy_state;
    } else {
      HH_CHECK(static_cast<bool>(hooks_.load_legacy), "checkpoint ", path, ": metadata lacks '", kStateKey,
               "' (not a checkpoint of this version's training loop: start afresh without resuming)");
      st = nlohmann::json::parse(hooks_.load_legacy(meta.extra).text);
    }
    r.steps = st.contains("steps") ? state_int(st.at("steps"), path, "steps") : meta.step;
    loss_sum_ = st.at("loss_sum").get<double>();
    loss_count_ = state_int(st.at("loss_count"), path, "loss_count");
    finished_ = st.at("finished").get<bool>();
    r.seconds = st.at("seconds").get<double>();
    r.evaluations = st.contains("evaluations") ? state_int(st.at("evaluations"), path, "evaluations") : 0;
    r.best_step = st.contains("best_step") ? state_int(st.at("best_step"), path, "best_step") : 0;
    const auto& e = st.at("early_stopping");
    const EarlyStoppingState es{e.at(0).get<bool>(), e.at(1).get<double>(),
                                state_int(e.at(2), path, "early_stopping[2]"),
                                state_int(e.at(3), path, "early_stopping[3]"),
                                state_int(e.at(4), path, "early_stopping[4]")};
    try {
      stopper_.set_state(es);
    } catch (const Error& err) {  // "early stopping: inconsistent state (...)", with the file named
      fail(str("checkpoint ", path, ": bad training state in its metadata: ", err.what()));
    }
    if (st.contains("divergence")) {
      const auto& d = st.at("divergence");
      watch_.has_initial = d.at(0).get<bool>();
      watch_.initial = d.at(1).get<double>();
      watch_.above = state_int(d.at(2), path, "divergence[2]");
    }
  } catch (const nlohmann::json::exception& e) {
    fail(str("checkpoint ", path, ": bad training state in its metadata: ", e.what()));
  }
  HH_CHECK(r.steps >= 0 && r.steps <= cfg_.total_steps, "checkpoint ", path, ": its step ", r.steps,
           " is outside this run's [0, ", cfg_.total_steps, "] steps");
  HH_CHECK(loss_count_ >= 0, "checkpoint ", path, ": bad training state in its metadata (loss_count ", loss_count_, ")");
  HH_CHECK(r.evaluations >= 0 && r.best_step >= 0 && r.best_step <= r.steps && watch_.above >= 0 &&
               std::isfinite(r.seconds) && r.seconds >= 0,
           "checkpoint ", path, ": bad training state in its metadata (evaluations ", r.evaluations, ", best_step ",
           r.best_step, " of ", r.steps, " steps, divergence[2] ", watch_.above, ", seconds ", r.seconds, ")");
  if (cfg_.keep_best) {
    HH_CHECK(!meta.tensors.empty(), "checkpoint ", path, ": it holds no best weights");
    best_ = meta.tensors;
  }
}

}  // namespace hh::train
