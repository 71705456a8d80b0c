#include "train/convert/convert.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/progress.h"
#include "core/safetensors.h"
#include "nn/attention.h"
#include "train/checkpoint.h"
#include "train/early_stopping.h"
#include "train/optim.h"
#include "train/schedule.h"

namespace hh::train {

bool is_feature_map_param(const std::string& name) {
  return name.rfind("feature_map.", 0) == 0 || name.find(".feature_map.") != std::string::npos;
}

void load_teacher_weights(nn::Module& student, const nn::Module& teacher) {
  std::map<std::string, Tensor> state;
  for (auto& [name, t] : teacher.state_dict()) state[name] = t;
  std::vector<std::string> missing, unexpected;
  std::set<std::string> mine;
  for (auto& [name, t] : student.state_dict()) {
    mine.insert(name);
    if (!state.count(name) && !is_feature_map_param(name)) missing.push_back(name);
  }
  for (auto& [name, t] : state)
    if (!mine.count(name)) unexpected.push_back(name);
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  HH_CHECK(missing.empty() && unexpected.empty(), "load_teacher_weights: the student and the teacher differ outside ",
           "the feature maps: missing [", join(missing), "], unexpected [", join(unexpected), "]");
  student.load_state_dict(state, /*strict=*/false);
}

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Performer redraws its projection once per optimizer step (REFERENCE.md §2).
void feature_maps_on_step(nn::Module& m) {
  for (auto& [name, mod] : m.named_modules())
    if (auto* fm = dynamic_cast<nn::FeatureMap*>(mod.get())) fm->on_step();
}

int64_t count_feature_map_params(const nn::Module& m) {
  int64_t n = 0;
  for (auto& [name, t] : m.named_parameters())
    if (is_feature_map_param(name)) n += t.numel();
  return n;
}

// Makes exactly the parameters whose names `train` accepts trainable; returns how many scalars.
template <typename Pred>
int64_t set_trainable(nn::Module& m, Pred train) {
  int64_t n = 0;
  for (auto& [name, t] : m.named_parameters()) {
    Tensor& p = m.parameter(name);
    const bool on = train(name);
    p.requires_grad_(on);
    if (on) n += p.numel();
  }
  return n;
}

nn::TraceRequest distill_trace(const nn::DistillOptions& o) {
  nn::TraceRequest tr;
  tr.weights = true;
  tr.teacher = true;
  tr.outputs = o.output_mse > 0;
  return tr;
}

// Mean distillation loss over (up to `max_batches`) validation batches, no grad.
double distill_validation(ConversionTask& task, const nn::DistillOptions& o, int64_t max_batches) {
  NoGradGuard ng;
  task.model().eval();
  int64_t n = task.batches(Split::val);
  if (max_batches > 0) n = std::min(n, max_batches);
  HH_CHECK(n > 0, "convert: the validation split has no batches");
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    nn::TraceRequest tr = distill_trace(o);
    task.trace(Split::val, i, tr);
    total += nn::distillation_loss(tr, o).item<double>();
  }
  return total / static_cast<double>(n);
}

std::map<std::string, Tensor> snapshot(const nn::Module& m, bool feature_maps_only) {
  std::map<std::string, Tensor> s;
  for (auto& [name, t] : m.state_dict())
    if (!feature_maps_only || is_feature_map_param(name)) s[name] = clone(t.detach());
  return s;
}

// Adds LoRA adapters (their init drawn from `seed`) and returns the names of the adapted Linears.
std::vector<std::string> add_lora(nn::Module& model, const FinetuneStage& f, uint64_t seed) {
  nn::LoraConfig lc;
  lc.rank = f.lora_rank;
  lc.alpha = f.lora_alpha;
  lc.dropout = f.lora_dropout;
  lc.target_modules = f.lora_targets;
  Generator gen(seed);
  nn::apply_lora(model, lc, {gen, model.parameters().front().device()});
  std::vector<std::string> names;
  const std::string tag = ".lora_A.weight";
  for (auto& [name, t] : model.named_parameters())
    if (name.size() > tag.size() && name.compare(name.size() - tag.size(), tag.size(), tag) == 0)
      names.push_back(name.substr(0, name.size() - tag.size()));
  return names;
}

nlohmann::json metrics_json(const Metrics& m) {
  nlohmann::json j = nlohmann::json::array();
  for (auto& [k, v] : m) j.push_back({k, v});
  return j;
}
Metrics metrics_from(const nlohmann::json& j) {
  Metrics m;
  for (const auto& e : j) m.emplace_back(e.at(0).get<std::string>(), e.at(1).get<double>());
  return m;
}
nlohmann::json log_json(const StageLog& l) {
  return {{"train_loss", l.train_loss}, {"val", l.val},     {"steps", l.steps},
          {"tokens", l.tokens},         {"seconds", l.seconds}, {"stopped", l.stopped}};
}
StageLog log_from(const nlohmann::json& j) {
  StageLog l;
  l.train_loss = j.at("train_loss").get<std::vector<double>>();
  l.val = j.at("val").get<std::vector<double>>();
  l.steps = j.at("steps").get<int64_t>();
  l.tokens = j.at("tokens").get<int64_t>();
  l.seconds = j.at("seconds").get<double>();
  l.stopped = j.at("stopped").get<std::string>();
  return l;
}

// Where a conversion stands: what a checkpoint holds besides the weights, optimizer and best copy.
struct ConvertState {
  int stage = 1;            // the stage in progress (1 distill, 2 finetune; 3 = both done)
  int64_t epochs_done = 0;  // epochs of that stage completed
  EarlyStoppingState stopper;
  ConvertResult result;
};

nlohmann::json state_json(const ConvertState& s, const std::string& fingerprint) {
  const EarlyStoppingState& e = s.stopper;
  const ConvertResult& r = s.result;
  return {{"fingerprint", fingerprint},
          {"stage", s.stage},
          {"epochs_done", s.epochs_done},
          {"stopper", {e.has_best, e.best, e.best_index, e.bad_count, e.num_updates}},
          {"swapped", metrics_json(r.swapped)},
          {"distilled", metrics_json(r.distilled)},
          {"finetuned", metrics_json(r.finetuned)},
          {"distill", log_json(r.distill)},
          {"finetune", log_json(r.finetune)},
          {"trainable", {r.trainable_distill, r.trainable_finetune}},
          {"lora_targets", r.lora_targets}};
}

ConvertState state_from(const std::string& path, const std::string& text, const std::string& fingerprint) {
  ConvertState s;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    HH_CHECK(j.at("fingerprint").get<std::string>() == fingerprint, "checkpoint ", path,
             ": it was written by a conversion with other settings, model or data; start afresh without --resume, "
             "or use the original settings");
    s.stage = j.at("stage").get<int>();
    s.epochs_done = j.at("epochs_done").get<int64_t>();
    const auto& e = j.at("stopper");
    s.stopper = {e.at(0).get<bool>(), e.at(1).get<double>(), e.at(2).get<int64_t>(), e.at(3).get<int64_t>(),
                 e.at(4).get<int64_t>()};
    s.result.swapped = metrics_from(j.at("swapped"));
    s.result.distilled = metrics_from(j.at("distilled"));
    s.result.finetuned = metrics_from(j.at("finetuned"));
    s.result.distill = log_from(j.at("distill"));
    s.result.finetune = log_from(j.at("finetune"));
    s.result.trainable_distill = j.at("trainable").at(0).get<int64_t>();
    s.result.trainable_finetune = j.at("trainable").at(1).get<int64_t>();
    s.result.lora_targets = j.at("lora_targets").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    fail(str("checkpoint ", path, ": bad conversion state in its metadata: ", e.what()));
  }
  HH_CHECK(s.stage >= 1 && s.stage <= 3 && s.epochs_done >= 0, "checkpoint ", path, ": bad stage ", s.stage);
  return s;
}

bool better_or_equal(double v, double target, bool higher) { return higher ? v >= target : v <= target; }

// One stage's epoch loop. `step_loss(i)` builds the training loss of batch i; `validate()` gives the
// value early stopping watches after each epoch. The best weights (by that value) are restored at
// the end when keep_best.
struct StageRun {
  std::string name;  // "distill" or "finetune"
  int64_t epochs = 0, max_steps = 0, patience = 0;
  bool higher_is_better = false;
  bool keep_best = true;
  bool feature_maps_only = false;  // the best copy holds only feature-map tensors
  double grad_clip = 0;
  const LrSchedule* schedule = nullptr;  // null: constant lr
  double stop_at = 0.0;                  // stop once the validation value reaches this (0 = never)
  bool quiet = false;
};

}  // namespace

ConvertResult convert(ConversionTask& task, const ConvertConfig& cfg) {
  const DistillStage& d = cfg.distill;
  const FinetuneStage& f = cfg.finetune;
  HH_CHECK(d.epochs >= 0 && f.epochs >= 0 && d.max_steps >= 0 && f.max_steps >= 0,
           "convert: epochs and max_steps must be >= 0");
  HH_CHECK(d.lr > 0 && f.lr > 0, "convert: learning rates must be positive, got ", d.lr, " and ", f.lr);
  HH_CHECK(d.patience >= 1, "convert: distill patience must be >= 1, got ", d.patience);
  HH_CHECK(f.patience >= 0, "convert: finetune patience must be >= 0, got ", f.patience);
  HH_CHECK(f.mode == "full" || f.mode == "lora", "convert: finetune mode must be full or lora, got '", f.mode, "'");
  HH_CHECK(f.warmup_fraction >= 0 && f.warmup_fraction < 1, "convert: warmup fraction must be in [0,1), got ",
           f.warmup_fraction);
  HH_CHECK(f.joint_weight >= 0, "convert: joint weight must be >= 0, got ", f.joint_weight);
  HH_CHECK(!cfg.resume || !cfg.checkpoint_path.empty(), "convert: --resume needs a checkpoint path");
  HH_CHECK(task.batches(Split::train) > 0, "convert: the training split has no batches");
  HH_CHECK(task.batches(Split::val) > 0, "convert: the validation split has no batches");
  nn::Module& model = task.model();
  check_precision(cfg.precision, model.parameters().front().device());
  // bf16 autocast for the whole run (autograd/autocast.h): forward passes, losses, evaluations;
  // backward runs outside autocast and the optimizer updates f32 weights.
  PrecisionGuard precision(cfg.precision);

  ConvertState st;
  const bool resuming = cfg.resume && ::access(cfg.checkpoint_path.c_str(), F_OK) == 0;
  if (resuming) {
    SafeTensors peek = load_safetensors(cfg.checkpoint_path);
    auto it = peek.metadata.find("convert.state");
    HH_CHECK(it != peek.metadata.end(), "checkpoint ", cfg.checkpoint_path,
             ": metadata lacks 'convert.state' (not a conversion checkpoint)");
    st = state_from(cfg.checkpoint_path, it->second, cfg.fingerprint);
  } else {
    st.result.swapped = task.evaluate(Split::val);
  }
  ConvertResult& r = st.result;
  std::map<std::string, Tensor> best;

  auto save = [&](const Optimizer* opt) {
    if (cfg.checkpoint_path.empty()) return;
    CheckpointMeta meta;
    meta.step = r.distill.steps + r.finetune.steps;
    meta.extra["convert.state"] = state_json(st, cfg.fingerprint).dump();
    meta.tensors = best;
    save_checkpoint(cfg.checkpoint_path, model, opt, meta);
  };
  // Restores the checkpoint of the stage in progress (weights, optimizer, best copy, stopper).
  auto restore = [&](Optimizer* opt, EarlyStopping* stopper) {
    CheckpointMeta meta;
    load_checkpoint(cfg.checkpoint_path, model, opt, meta);
    best = meta.tensors;
    if (stopper && st.stopper.num_updates > 0) stopper->set_state(st.stopper);
  };

  int64_t epochs_this_call = 0;
  // The epoch loop shared by both stages; returns false when stop_after_epochs interrupted it.
  auto run_stage = [&](const StageRun& run, StageLog& log, Optimizer& opt, EarlyStopping* stopper,
                       const std::function<Tensor(int64_t)>& step_loss, const std::function<double()>& validate) {
    const int64_t nb = task.batches(Split::train);
    while (st.epochs_done < run.epochs) {
      const int64_t epoch = st.epochs_done;
      task.shuffle(epoch);
      model.train();
      ProgressOptions po;
      po.label = str(run.name, " epoch ", epoch + 1, "/", run.epochs);
      po.total = nb;
      po.every_steps = 0;
      po.every_seconds = 30;
      if (cfg.quiet) po.mode = ProgressMode::plain;
      Progress progress(po);
      auto t0 = Clock::now();
      double loss_sum = 0;
      int64_t done = 0;
      bool out_of_steps = false, diverged = false;
      for (int64_t i = 0; i < nb; ++i) {
        if (run.max_steps > 0 && log.steps >= run.max_steps) {
          out_of_steps = true;
          break;
        }
        if (run.schedule) opt.set_lr(run.schedule->lr_at(log.steps));
        Tensor loss = step_loss(i);
        const double lv = loss.item<double>();
        if (!std::isfinite(lv)) {
          log.stopped = str("diverged at step ", log.steps + 1, " (loss ", lv, ")");
          diverged = true;
          break;
        }
        opt.zero_grad();
        loss.backward();
        if (run.grad_clip > 0) clip_grad_norm(model.parameters(), run.grad_clip);
        opt.step();
        feature_maps_on_step(model);
        ++log.steps;
        log.tokens += task.tokens(Split::train, i);
        loss_sum += lv;
        ++done;
        progress.update(done, {{"loss", loss_sum / static_cast<double>(done)}});
      }
      log.seconds += since(t0);
      if (done > 0) {
        const double v = validate();
        const double mean_loss = loss_sum / static_cast<double>(done);
        progress.finish({{"loss", mean_loss}, {run.name == "distill" ? "val_distill" : "val", v}});
        log.train_loss.push_back(mean_loss);
        log.val.push_back(v);
        if (!stopper || stopper->update(v)) best = snapshot(model, run.feature_maps_only);
        if (stopper) st.stopper = stopper->state();
      }
      ++st.epochs_done;
      if (diverged) break;
      if (out_of_steps) {
        log.stopped = "max steps";
        break;
      }
      if (run.stop_at != 0 && !log.val.empty() && better_or_equal(log.val.back(), run.stop_at, run.higher_is_better)) {
        log.stopped = str("reached ", run.stop_at, " after epoch ", epoch + 1);
        break;
      }
      if (stopper && run.patience > 0 && stopper->should_stop()) {
        log.stopped = str("early stop after epoch ", epoch + 1);
        break;
      }
      save(&opt);
      if (cfg.stop_after_epochs > 0 && ++epochs_this_call >= cfg.stop_after_epochs) return false;
    }
    if (log.stopped.empty()) log.stopped = "epochs";
    if (run.keep_best && !best.empty()) model.load_state_dict(best, /*strict=*/!run.feature_maps_only);
    best.clear();
    return true;
  };

  // ---- stage 1: attention distillation, feature maps only -------------------------------------
  if (st.stage == 1) {
    const int64_t maps = count_feature_map_params(model);
    if (d.epochs == 0) {
      r.distill.stopped = "skipped (--distill-epochs 0)";
    } else if (maps == 0) {
      r.distill.stopped = "skipped (the feature map has no trainable weights)";
    } else {
      r.trainable_distill = set_trainable(model, is_feature_map_param);
      AdamW opt(single_group(model, d.weight_decay), d.lr);
      EarlyStopping stopper(d.patience, EarlyStopMode::min);
      if (resuming) restore(&opt, &stopper);
      StageRun run;
      run.name = "distill";
      run.epochs = d.epochs;
      run.max_steps = d.max_steps;
      run.patience = d.patience;
      run.feature_maps_only = true;
      run.quiet = cfg.quiet;
      const bool finished = run_stage(
          run, r.distill, opt, &stopper,
          [&](int64_t i) {
            nn::TraceRequest tr = distill_trace(d.loss);
            task.trace(Split::train, i, tr);
            return nn::distillation_loss(tr, d.loss);
          },
          [&] { return distill_validation(task, d.loss, d.val_batches); });
      if (!finished) {
        r.interrupted = true;
        return r;
      }
      r.distilled = task.evaluate(Split::val);
    }
    st.stage = 2;
    st.epochs_done = 0;
    st.stopper = {};
    save(nullptr);
  } else if (resuming && st.stage == 3) {
    restore(nullptr, nullptr);
  } else if (resuming && st.stage == 2 && f.epochs == 0) {
    restore(nullptr, nullptr);
  }

  // ---- stage 2: finetuning on the task loss (all weights or LoRA), or the joint variant --------
  if (st.stage == 2) {
    if (f.epochs == 0) {
      r.finetune.stopped = "skipped (--finetune-epochs 0)";
    } else {
      // A resumed stage 2 starts from the checkpoint's weights: before the adapters exist when the
      // checkpoint was written on entering the stage, after them otherwise.
      const bool mid_stage = resuming && st.epochs_done > 0;
      if (resuming && !mid_stage) restore(nullptr, nullptr);
      if (f.mode == "lora") {
        r.lora_targets = add_lora(model, f, cfg.seed + 101);
        r.trainable_finetune = set_trainable(model, [&](const std::string& n) {
          return n.find(".lora_") != std::string::npos || (f.train_feature_maps && is_feature_map_param(n));
        });
      } else {
        r.trainable_finetune = set_trainable(model, [](const std::string&) { return true; });
      }
      AdamW opt(decay_groups(model, f.weight_decay), f.lr);
      const int64_t nb = task.batches(Split::train);
      ScheduleConfig sc;
      sc.kind = parse_schedule_kind(f.schedule);
      sc.base_lr = f.lr;
      sc.total_steps = f.max_steps > 0 ? std::min(f.max_steps, nb * f.epochs) : nb * f.epochs;
      sc.warmup_steps = static_cast<int64_t>(f.warmup_fraction * static_cast<double>(sc.total_steps));
      LrSchedule schedule(sc);
      const bool higher = task.higher_is_better();
      EarlyStopping stopper(std::max<int64_t>(f.patience, 1), higher ? EarlyStopMode::max : EarlyStopMode::min);
      if (mid_stage) restore(&opt, &stopper);
      StageRun run;
      run.name = "finetune";
      run.epochs = f.epochs;
      run.max_steps = f.max_steps;
      run.patience = f.patience;
      run.higher_is_better = higher;
      run.keep_best = f.keep_best;
      run.grad_clip = f.grad_clip;
      run.schedule = &schedule;
      run.stop_at = f.stop_at;
      run.quiet = cfg.quiet;
      Metrics last;
      const bool finished = run_stage(
          run, r.finetune, opt, &stopper,
          [&](int64_t i) {
            if (f.joint_weight <= 0) return task.loss(Split::train, i, nullptr);
            nn::TraceRequest tr = distill_trace(f.joint_loss);
            Tensor task_loss = task.loss(Split::train, i, &tr);
            return add(task_loss, mul(nn::distillation_loss(tr, f.joint_loss), f.joint_weight));
          },
          [&] {
            last = task.evaluate(Split::val);
            HH_CHECK(!last.empty(), "convert: the task's evaluate() returned no metric");
            return last.front().second;
          });
      if (!finished) {
        r.interrupted = true;
        return r;
      }
      if (f.mode == "lora" && f.merge_lora) nn::merge_lora(model);
      set_trainable(model, [](const std::string&) { return true; });
      r.finetuned = task.evaluate(Split::val);
    }
    st.stage = 3;
    st.epochs_done = 0;
    save(nullptr);
  }
  task.model().eval();
  return r;
}

namespace {
// Mean over batch and query rows of KL(P‖Q) per head: P, Q (B,H,L,L) -> H values.
std::vector<double> kl_per_head(const Tensor& teacher, const Tensor& student) {
  Tensor P = teacher.detach().to(DType::f64), Q = student.detach().to(DType::f64);
  Tensor logP = log(clamp(P, 1e-300, 1e300)), logQ = log(clamp(Q, 1e-12, 1e300));
  Tensor row = sum(mul(P, sub(logP, logQ)), {-1});  // (B,H,L); P = 0 entries contribute 0
  return to_vector<double>(mean(row, {0, 2}));
}
}  // namespace

Fidelity measure_fidelity(ConversionTask& task, Split s, int64_t batches, bool causal, int64_t pic_layer,
                          int64_t pic_head) {
  NoGradGuard ng;
  task.model().eval();
  int64_t n = task.batches(s);
  if (batches > 0) n = std::min(n, batches);
  HH_CHECK(n > 0, "measure_fidelity: the split has no batches");
  Fidelity fd;
  for (int64_t i = 0; i < n; ++i) {
    nn::TraceRequest tr;
    tr.weights = tr.teacher = tr.scores = true;
    task.trace(s, i, tr);
    HH_CHECK(!tr.layers.empty(), "measure_fidelity: the model traced no attention layer");
    if (i == 0) {
      fd.layers = static_cast<int64_t>(tr.layers.size());
      fd.heads = tr.layers[0].weights.size(1);
      fd.kl.assign(static_cast<size_t>(fd.layers * fd.heads), 0.0);
      fd.pic_layer = std::clamp<int64_t>(pic_layer, 0, fd.layers - 1);
      fd.pic_head = std::clamp<int64_t>(pic_head, 0, fd.heads - 1);
      const nn::AttentionTrace& t = tr.layers[static_cast<size_t>(fd.pic_layer)];
      fd.pic_len = t.weights.size(2);
      fd.pic_teacher = to_vector<double>(select(select(t.teacher, 0, 0), 0, fd.pic_head));
      fd.pic_student = to_vector<double>(select(select(t.weights, 0, 0), 0, fd.pic_head));
    }
    HH_CHECK(static_cast<int64_t>(tr.layers.size()) == fd.layers, "measure_fidelity: layer count changed");
    for (int64_t l = 0; l < fd.layers; ++l) {
      const nn::AttentionTrace& t = tr.layers[static_cast<size_t>(l)];
      std::vector<double> kl = kl_per_head(t.teacher, t.weights);
      for (int64_t h = 0; h < fd.heads; ++h) fd.kl[static_cast<size_t>(l * fd.heads + h)] += kl[static_cast<size_t>(h)];
      fd.entropy_student += nn::attention_entropy(t.weights);
      fd.entropy_teacher += nn::attention_entropy(t.teacher);
      fd.monotonicity_student += nn::attention_monotonicity(t.scores, t.weights, causal);
      fd.monotonicity_teacher += nn::attention_monotonicity(t.scores, t.teacher, causal);
    }
  }
  const double per_layer = static_cast<double>(n * fd.layers);
  for (double& v : fd.kl) v /= static_cast<double>(n);
  double total = 0;
  for (double v : fd.kl) total += v;
  fd.kl_mean = total / static_cast<double>(fd.kl.size());
  fd.entropy_student /= per_layer;
  fd.entropy_teacher /= per_layer;
  fd.monotonicity_student /= per_layer;
  fd.monotonicity_teacher /= per_layer;
  return fd;
}

}  // namespace hh::train
