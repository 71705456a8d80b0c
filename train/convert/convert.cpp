#include "train/convert/convert.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/safetensors.h"
#include "nn/attention.h"
#include "train/checkpoint.h"
#include "train/convert/layer_select.h"
#include "train/convert/layerwise_distill.h"
#include "train/early_stopping.h"
#include "train/optim.h"
#include "train/schedule.h"
#include "train/trainer.h"

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

// Mean distillation loss over (up to `max_batches`) validation batches, no grad.
double distill_validation(ConversionTask& task, const nn::DistillOptions& o, int64_t max_batches) {
  NoGradGuard ng;
  task.model().eval();
  int64_t n = task.batches(Split::val);
  if (max_batches > 0) n = std::min(n, max_batches);
  HH_CHECK(n > 0, "convert: the validation split has no batches");
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    nn::TraceRequest tr = nn::distill_trace_request(o);
    task.trace(Split::val, i, tr);
    total += nn::distillation_loss(tr, o).item<double>();
  }
  return total / static_cast<double>(n);
}

// Each traced layer's distillation loss, averaged over (up to `max_batches`) validation batches.
std::vector<double> layer_transfer_error(ConversionTask& task, const nn::DistillOptions& o, int64_t max_batches) {
  NoGradGuard ng;
  task.model().eval();
  int64_t n = task.batches(Split::val);
  if (max_batches > 0) n = std::min(n, max_batches);
  std::vector<double> total;
  for (int64_t i = 0; i < n; ++i) {
    nn::TraceRequest tr = nn::distill_trace_request(o);
    task.trace(Split::val, i, tr);
    const std::vector<double> e = nn::distillation_loss_per_layer(tr, o);
    if (total.empty()) total.assign(e.size(), 0.0);
    HH_CHECK(e.size() == total.size(), "convert: the number of traced attention layers changed between batches");
    for (size_t l = 0; l < e.size(); ++l) total[l] += e[l];
  }
  for (double& v : total) v /= static_cast<double>(n);
  return total;
}

// The attention layers the task's model traces (one forward of validation batch 0, no weights).
int64_t traced_layers(ConversionTask& task) {
  NoGradGuard ng;
  nn::TraceRequest tr;
  task.trace(Split::val, 0, tr);
  return static_cast<int64_t>(tr.layers.size());
}

// Stage 1 as LoLCATs' block-wise transfer (train/convert/layerwise_distill.h) over the task's
// training batches; returns its log (train_loss: per epoch, the sum over layers of each layer's
// mean loss).
StageLog blockwise_transfer(ConversionTask& task, const ConvertConfig& cfg, int64_t& trainable) {
  const DistillStage& d = cfg.distill;
  nn::CausalLM* lm = task.causal_lm();
  HH_CHECK(lm != nullptr, "convert: block-wise transfer (--blocks) needs a causal LM task");
  LayerwiseConfig lc;
  lc.epochs = d.epochs;
  lc.block = d.blocks;
  lc.lr = d.lr;
  lc.weight_decay = d.weight_decay;
  lc.loss = d.loss;
  lc.hidden = d.hidden;
  lc.hidden_folder = d.hidden_folder;
  lc.quiet = cfg.quiet;
  lc.precision = cfg.precision;
  std::vector<Tensor> batches = task.transfer_batches();
  if (d.max_steps > 0 && static_cast<int64_t>(batches.size()) > d.max_steps) batches.resize(static_cast<size_t>(d.max_steps));
  const LayerwiseResult lr = distill_layerwise(*lm, batches, lc);
  StageLog log;
  log.train_loss.assign(static_cast<size_t>(d.epochs), 0.0);
  for (const auto& per_layer : lr.epoch_loss)
    for (size_t e = 0; e < per_layer.size() && e < log.train_loss.size(); ++e) log.train_loss[e] += per_layer[e];
  log.steps = lr.steps;
  log.tokens = lr.tokens;
  log.seconds = lr.seconds;
  log.stopped = str("block-wise, ", d.blocks, d.blocks == 1 ? " layer" : " layers", " a block");
  trainable = lr.trainable;
  return log;
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

nlohmann::json result_json(const ConvertResult& r) {
  nlohmann::json j = {{"swapped", metrics_json(r.swapped)},
          {"distilled", metrics_json(r.distilled)},
          {"finetuned", metrics_json(r.finetuned)},
          {"distill", log_json(r.distill)},
          {"finetune", log_json(r.finetune)},
          {"trainable", {r.trainable_distill, r.trainable_finetune}},
          {"lora_targets", r.lora_targets}};
  if (!r.layer_error.empty()) j["layer_error"] = r.layer_error;  // absent before kept layers existed
  // Absent before logit distillation existed; present from the stage's first step (a checkpoint
  // written inside the stage keeps its log for the resume).
  if (!r.logits.stopped.empty() || r.logits.steps > 0) {
    j["logits"] = log_json(r.logits);
    j["logit_distilled"] = metrics_json(r.logit_distilled);
  }
  if (!r.softmax_layers.empty()) j["softmax_layers"] = r.softmax_layers;
  if (!r.softmax_choice.empty()) j["softmax_choice"] = r.softmax_choice;
  if (!r.layer_score.empty())
    j["kl_select"] = {{"all_linear", r.kl_all_linear}, {"layer_kl", r.layer_kl}, {"score", r.layer_score}};
  return j;
}
void result_from(const nlohmann::json& j, ConvertResult& r) {
  r.swapped = metrics_from(j.at("swapped"));
  r.distilled = metrics_from(j.at("distilled"));
  r.finetuned = metrics_from(j.at("finetuned"));
  r.distill = log_from(j.at("distill"));
  r.finetune = log_from(j.at("finetune"));
  r.trainable_distill = j.at("trainable").at(0).get<int64_t>();
  r.trainable_finetune = j.at("trainable").at(1).get<int64_t>();
  r.lora_targets = j.at("lora_targets").get<std::vector<std::string>>();
  r.layer_error = j.value("layer_error", std::vector<double>{});
  r.softmax_layers = j.value("softmax_layers", std::vector<int64_t>{});
  r.softmax_choice = j.value("softmax_choice", std::string());
  if (j.contains("kl_select")) {
    const nlohmann::json& k = j.at("kl_select");
    r.kl_all_linear = k.at("all_linear").get<double>();
    r.layer_kl = k.at("layer_kl").get<std::vector<double>>();
    r.layer_score = k.at("score").get<std::vector<double>>();
  }
  if (j.contains("logits")) {
    r.logits = log_from(j.at("logits"));
    r.logit_distilled = metrics_from(j.at("logit_distilled"));
  }
}

// A conversion checkpoint holds, besides the Trainer's own state, "convert.run": the stage whose
// Trainer wrote it, the caller's fingerprint and the results so far. One written by the driver's
// own loop before train/trainer.h holds "convert.state" instead (the same results, the stage, its
// epochs done and the early-stopping state; stage 2 with 0 epochs done is the weights after stage
// 1, stage 3 the finished conversion). The Trainer's stages: 1 attention transfer, 3 logit
// distillation, 2 finetuning (numbered in the order they were added).
constexpr const char* kRunKey = "convert.run";
constexpr const char* kLegacyKey = "convert.state";

// What the checkpoint to resume from says.
struct OnDisk {
  bool found = false;
  bool legacy = false;
  int stage = 0;               // 1 or 2 (legacy: 1, 2 or 3)
  int64_t legacy_epochs = 0;   // legacy: epochs of that stage done
  EarlyStoppingState legacy_stopper;
  std::string fingerprint;
  ConvertResult result;        // the results so far
  bool legacy_stage_start() const { return legacy && stage == 2 && legacy_epochs == 0; }
};

OnDisk read_checkpoint(const std::string& path, const std::string& fingerprint) {
  OnDisk d;
  const SafeTensors peek = load_safetensors(path);
  auto run = peek.metadata.find(kRunKey), old = peek.metadata.find(kLegacyKey);
  HH_CHECK(run != peek.metadata.end() || old != peek.metadata.end(), "checkpoint ", path,
           ": metadata lacks 'convert.run' (not a conversion checkpoint)");
  d.found = true;
  d.legacy = run == peek.metadata.end();
  try {
    const nlohmann::json j = nlohmann::json::parse(d.legacy ? old->second : run->second);
    d.fingerprint = j.at("fingerprint").get<std::string>();
    HH_CHECK(d.fingerprint == fingerprint, "checkpoint ", path,
             ": it was written by a conversion with other settings, model or data; start afresh without --resume, "
             "or use the original settings");
    d.stage = j.at("stage").get<int>();
    result_from(j, d.result);
    if (d.legacy) {
      d.legacy_epochs = j.at("epochs_done").get<int64_t>();
      const auto& e = j.at("stopper");
      d.legacy_stopper = {e.at(0).get<bool>(), e.at(1).get<double>(), e.at(2).get<int64_t>(), e.at(3).get<int64_t>(),
                          e.at(4).get<int64_t>()};
    }
  } catch (const nlohmann::json::exception& e) {
    fail(str("checkpoint ", path, ": bad conversion state in its metadata: ", e.what()));
  }
  HH_CHECK(d.stage >= 1 && d.stage <= 3 && d.legacy_epochs >= 0, "checkpoint ", path, ": bad stage ", d.stage);
  return d;
}

bool better_or_equal(double v, double target, bool higher) { return higher ? v >= target : v <= target; }

// One stage as a Trainer run: epochs of the training batches, an evaluation at each epoch's end.
struct Stage {
  std::string name;  // "distill", "logits" or "finetune"
  int number = 1;    // 1 (distill), 3 (logits) or 2 (finetune)
  int64_t epochs = 0, max_steps = 0, patience = 0;
  EarlyStopMode mode = EarlyStopMode::min;
  bool keep_best = true;
  bool feature_maps_only = false;  // the best copy holds only feature-map tensors (the rest is frozen)
  double grad_clip = 0;
  double stop_at = 0.0;            // the evaluation's own stop (Evaluation::stop) reached this value
  bool resume = false;             // continue from the checkpoint on disk (written in this stage)
};

// The top-k logit cache of stage 3: the teacher runs over the batches the stage will see, in its
// order (training step t is batch t % nb of epoch t / nb, ordered by task.shuffle), then over its
// validation batches, and each batch's top-k goes to its shard unless a valid one is there.
void build_logit_cache(ConversionTask& task, const LogitShards& train, const LogitShards& val, int64_t steps,
                       int64_t val_batches, const LogitStage& g, ConvertResult& r) {
  const int64_t nb = task.batches(Split::train);
  auto fill = [&](const LogitShards& shards, int64_t at, Split s, int64_t i) {
    if (shards.valid(static_cast<size_t>(at), task.batch_key(s, i))) {
      ++r.logit_shards_reused;
      return;
    }
    r.logit_cache_bytes += shards.put(static_cast<size_t>(at), task.teacher_topk(s, i, g.topk, g.temperature));
    ++r.logit_shards_written;
  };
  for (int64_t step = 0; step < steps; ++step) {
    if (step % nb == 0) task.shuffle(step / nb);
    fill(train, step, Split::train, step % nb);
  }
  for (int64_t i = 0; i < val_batches; ++i) fill(val, i, Split::val, i);
  std::cerr << "logit cache: top-" << g.topk << " of the teacher's logits, " << r.logit_shards_written
            << " shards written (" << r.logit_cache_bytes / (1 << 20) << " MiB), " << r.logit_shards_reused
            << " reused, in " << train.folder() << "\n";
}

}  // namespace

std::vector<int64_t> highest_error_layers(const std::vector<double>& error, int64_t n) {
  return top_scoring_layers(error, n, "transfer error");
}

std::optional<std::string> conversion_checkpoint_fingerprint(const std::map<std::string, std::string>& metadata) {
  auto it = metadata.find(kRunKey);
  if (it == metadata.end()) it = metadata.find(kLegacyKey);
  if (it == metadata.end()) return std::nullopt;
  return nlohmann::json::parse(it->second).at("fingerprint").get<std::string>();
}

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
  const LogitStage& g = cfg.logits;
  HH_CHECK(g.tokens >= 0 && g.lr > 0 && g.temperature > 0 && g.grad_clip >= 0,
           "convert: logit distillation needs tokens >= 0, lr > 0, temperature > 0, grad_clip >= 0");
  HH_CHECK(g.mode == "full" || g.mode == "lora", "convert: logit distillation mode must be full or lora, got '", g.mode,
           "'");
  HH_CHECK(g.topk >= 1, "convert: the logit cache's top-k must be >= 1, got ", g.topk);
  if (g.cache == LogitCache::topk && g.tokens > 0) {  // before any work
    HH_CHECK(!g.cache_folder.empty(), "convert: the top-k logit cache needs a folder (LogitStage::cache_folder)");
    if (const nn::CausalLM* lm = task.causal_lm())
      HH_CHECK(g.topk <= lm->vocab_size(), "convert: the logit cache's top-k ", g.topk, " exceeds the vocabulary of ",
               lm->vocab_size());
  }
  HH_CHECK(!cfg.resume || !cfg.checkpoint_path.empty(), "convert: --resume needs a checkpoint path");
  HH_CHECK(cfg.stop_after_epochs == 0 || !cfg.checkpoint_path.empty(),
           "convert: stop_after_epochs needs a checkpoint path");
  HH_CHECK(task.batches(Split::train) > 0, "convert: the training split has no batches");
  HH_CHECK(task.batches(Split::val) > 0, "convert: the validation split has no batches");
  const bool keep = d.softmax_layers > 0 || !d.softmax_layer_list.empty();
  // Before any work: the model must have the layers, and KL-guided selection a teacher.
  check_softmax_choice(task, d, keep ? traced_layers(task) : 0);
  nn::Module& model = task.model();
  check_precision(cfg.precision, model.parameters().front().device());
  // bf16 autocast for the whole run (autograd/autocast.h): forward passes, losses, evaluations;
  // backward runs outside autocast and the optimizer updates f32 weights.
  PrecisionGuard precision(cfg.precision);

  OnDisk disk;
  if (cfg.resume && ::access(cfg.checkpoint_path.c_str(), F_OK) == 0)
    disk = read_checkpoint(cfg.checkpoint_path, cfg.fingerprint);
  ConvertResult r;
  if (disk.found)
    r = disk.result;
  else
    r.swapped = task.evaluate(Split::val);
  // A checkpoint written after the layers were kept holds the model without their feature maps.
  if (disk.found && !r.softmax_layers.empty()) task.keep_softmax(r.softmax_layers);
  // The weights of a legacy checkpoint written between stages or after both (no optimizer).
  auto load_weights = [&] {
    CheckpointMeta meta;
    load_checkpoint(cfg.checkpoint_path, model, nullptr, meta);
  };
  if (disk.legacy && disk.stage == 3) {  // the conversion had finished
    load_weights();
    model.eval();
    return r;
  }

  const int64_t nb = task.batches(Split::train);
  const std::string trainer_fingerprint = nlohmann::json{{"convert", cfg.fingerprint}}.dump();
  int64_t epochs_left = cfg.stop_after_epochs;  // this call's epochs still allowed (stop_after_epochs > 0)

  // One stage as a Trainer run; `log` is its StageLog in r. Returns the Trainer's result; the best
  // weights are loaded when it ends (keep_best).
  auto run_stage = [&](const Stage& s, StageLog& log, Optimizer& opt, const LrSchedule& schedule,
                       const std::function<Tensor(int64_t step, int64_t i)>& step_loss,
                       const std::function<Evaluation()>& validate) {
    TrainerConfig tc;
    tc.total_steps = s.max_steps > 0 ? std::min(s.max_steps, nb * s.epochs) : nb * s.epochs;
    tc.steps_per_epoch = nb;  // evaluated at every epoch's end (and after a max_steps cut)
    tc.grad_clip = s.grad_clip;
    tc.patience = s.patience;
    tc.mode = s.mode;
    tc.keep_best = s.keep_best;
    tc.checkpoint_path = cfg.checkpoint_path;
    tc.kind = "convert";
    tc.fingerprint = trainer_fingerprint;
    tc.resume = s.resume;
    if (epochs_left > 0) tc.stop_after_steps = (s.resume ? log.steps : 0) + epochs_left * nb;
    tc.label = s.name;
    tc.metric_name = s.number == 1 ? "val_distill" : s.number == 3 ? "val_kl" : "val";
    tc.quiet = cfg.quiet;
    TrainerHooks hooks;
    int64_t shuffled = -1;  // the epoch the task's batches are ordered for
    hooks.loss = [&](int64_t step, int64_t) {
      if (step / nb != shuffled) {
        shuffled = step / nb;
        task.shuffle(shuffled);
      }
      return step_loss(step, step % nb);  // the stage's step and the batch of its epoch
    };
    hooks.evaluate = [&](int64_t) { return validate(); };
    int64_t counted = 0;  // epochs that did not end the stage (as stop_after_epochs counts them)
    hooks.on_evaluation = [&](const EvaluationPoint& at, const Evaluation& e) {
      log.train_loss.push_back(at.train_loss);
      log.val.push_back(e.metric);
      const int64_t epoch = (at.step + nb - 1) / nb;
      // A max_steps cut: mid-epoch it ends the stage at once; at an epoch's end the epoch's own
      // reasons come first.
      const bool capped = s.max_steps > 0 && at.step >= s.max_steps && at.step < nb * s.epochs;
      if (capped && at.step % nb != 0) {
        log.stopped = "max steps";
      } else if (e.stop) {
        log.stopped = str("reached ", s.stop_at, " after epoch ", epoch);
      } else if (s.patience > 0 && at.patience_spent) {
        // Patience ran out. On the stage's last epoch the stage ended at its maximum anyway, and
        // says so ("epochs"), not "early stop" (issue 23).
        if (epoch < s.epochs) log.stopped = str("early stop after epoch ", epoch);
      } else {
        if (capped) log.stopped = "max steps";
        ++counted;
      }
    };
    hooks.after_step = [&](int64_t steps) {
      feature_maps_on_step(model);  // Performer redraws its projection once per optimizer step
      ++log.steps;
      log.tokens += task.tokens(Split::train, (steps - 1) % nb);
    };
    hooks.save_state = [&] {
      nlohmann::json j = result_json(r);
      j["fingerprint"] = cfg.fingerprint;
      j["stage"] = s.number;
      return JsonText{j.dump()};
    };
    hooks.load_state = [&](const JsonText& j) { result_from(nlohmann::json::parse(j.text), r); };
    if (disk.legacy) {
      // The driver's loop before the Trainer checkpointed at epoch ends: nothing of an epoch in
      // flight; its step counted both stages.
      hooks.load_legacy = [&](const std::map<std::string, std::string>&) {
        const EarlyStoppingState& e = disk.legacy_stopper;
        return JsonText{nlohmann::json{{"fingerprint", nlohmann::json{{"convert", disk.fingerprint}}.dump()},
                                       {"steps", log.steps},
                                       {"loss_sum", 0.0},
                                       {"loss_count", 0},
                                       {"finished", false},
                                       {"seconds", log.seconds},
                                       {"evaluations", disk.legacy_epochs},
                                       {"early_stopping", {e.has_best, e.best, e.best_index, e.bad_count, e.num_updates}}}
                            .dump()};
      };
    }
    if (s.feature_maps_only) hooks.best_filter = is_feature_map_param;
    const TrainerResult tr = Trainer(model, opt, schedule, tc, std::move(hooks)).fit();
    log.seconds = tr.seconds;
    if (tr.status.rfind("diverged", 0) == 0) {
      log.stopped = tr.status;
    } else if (!tr.interrupted()) {
      if (log.stopped.empty()) log.stopped = "epochs";
      if (epochs_left > 0) epochs_left -= counted;
    }
    return tr;
  };
  // The stage ended exactly where stop_after_epochs stops: the call ends as the old loop's did.
  auto spent = [&] { return cfg.stop_after_epochs > 0 && epochs_left <= 0; };

  // ---- stage 1: attention distillation, feature maps only -------------------------------------
  if (!disk.found || disk.stage == 1) {
    const int64_t maps = count_feature_map_params(model);
    if (d.epochs == 0) {
      r.distill.stopped = "skipped (--distill-epochs 0)";
    } else if (maps == 0) {
      r.distill.stopped = "skipped (the feature map has no trainable weights)";
    } else if (d.blocks > 0) {
      r.distill = blockwise_transfer(task, cfg, r.trainable_distill);
      model.train();
    } else {
      r.trainable_distill = set_trainable(model, is_feature_map_param);
      AdamW opt(single_group(model, d.weight_decay), d.lr);
      ScheduleConfig sc;  // constant: paper App. A.3
      sc.base_lr = d.lr;
      LrSchedule schedule(sc);
      Stage s;
      s.name = "distill";
      s.number = 1;
      s.epochs = d.epochs;
      s.max_steps = d.max_steps;
      s.patience = d.patience;
      s.mode = EarlyStopMode::min;
      s.feature_maps_only = true;
      s.resume = disk.found;
      const TrainerResult tr = run_stage(
          s, r.distill, opt, schedule,
          [&](int64_t, int64_t i) {
            nn::TraceRequest tr = nn::distill_trace_request(d.loss);
            task.trace(Split::train, i, tr);
            return nn::distillation_loss(tr, d.loss);
          },
          [&] {
            const double v = distill_validation(task, d.loss, d.val_batches);
            return Evaluation{v, {{"val_distill", v}}, false};
          });
      if (tr.interrupted() || spent()) {
        r.interrupted = true;
        return r;
      }
    }
    if (r.trainable_distill > 0 || keep) r.layer_error = layer_transfer_error(task, d.loss, d.val_batches);
    if (keep) {  // train/convert/layer_select.h: the list, or K layers by transfer error, KL or evenly spread
      r.softmax_layers = choose_softmax_layers(task, cfg, r);
      task.keep_softmax(r.softmax_layers);
    }
    if (r.trainable_distill > 0) r.distilled = task.evaluate(Split::val);
  }

  // ---- logit distillation: KL(teacher ‖ student) on next tokens, every weight or LoRA -------------
  if (g.tokens > 0 && (!disk.found || (!disk.legacy && (disk.stage == 1 || disk.stage == 3)))) {
    double batch_tokens = 0;  // mean training tokens per batch
    for (int64_t i = 0; i < nb; ++i) batch_tokens += static_cast<double>(task.tokens(Split::train, i));
    batch_tokens /= static_cast<double>(nb);
    HH_CHECK(batch_tokens > 0, "convert: the training batches hold no tokens to distill on");
    const auto steps = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(static_cast<double>(g.tokens) / batch_tokens)));
    if (g.mode == "lora") {
      add_lora(model, f, cfg.seed + 202);
      set_trainable(model, [](const std::string& n) { return n.find(".lora_") != std::string::npos; });
    } else {
      set_trainable(model, [](const std::string&) { return true; });
    }
    AdamW opt(decay_groups(model, g.weight_decay), g.lr);
    ScheduleConfig sc;  // constant
    sc.base_lr = g.lr;
    LrSchedule schedule(sc);
    Stage s;
    s.name = "logits";
    s.number = 3;
    s.epochs = (steps + nb - 1) / nb;
    s.max_steps = steps;
    s.mode = EarlyStopMode::min;
    s.keep_best = false;
    s.grad_clip = g.grad_clip;
    s.resume = disk.found && disk.stage == 3;
    int64_t val_n = task.batches(Split::val);
    if (g.val_batches > 0) val_n = std::min(val_n, g.val_batches);
    std::optional<LogitShards> train_cache, val_cache;
    if (g.cache == LogitCache::topk) {
      const std::string fp = logit_cache_fingerprint(cfg.fingerprint, g.topk, g.temperature);
      train_cache.emplace(g.cache_folder, "train", fp);
      val_cache.emplace(g.cache_folder, "val", fp);
      build_logit_cache(task, *train_cache, *val_cache, steps, val_n, g, r);
    }
    const Device device = model.parameters().front().device();
    // Stage step `at` (or validation batch `at`) is batch i of split sp.
    auto logit_loss = [&](Split sp, int64_t at, int64_t i) {
      if (!train_cache) return task.logit_loss(sp, i, g.temperature);
      const LogitShards& c = sp == Split::train ? *train_cache : *val_cache;
      return task.topk_logit_loss(sp, i, c.get(static_cast<size_t>(at), task.batch_key(sp, i), device), g.temperature);
    };
    const TrainerResult tr = run_stage(
        s, r.logits, opt, schedule, [&](int64_t step, int64_t i) { return logit_loss(Split::train, step, i); },
        [&] {
          NoGradGuard ng;
          model.eval();
          double total = 0;
          for (int64_t i = 0; i < val_n; ++i) total += logit_loss(Split::val, i, i).item<double>();
          model.train();
          const double v = total / static_cast<double>(val_n);
          return Evaluation{v, {{"val_kl", v}}, false};
        });
    if (tr.interrupted() || spent()) {
      r.interrupted = true;
      return r;
    }
    if (train_cache) {  // the stage has finished: a resume never needs the shards again
      train_cache->remove(static_cast<size_t>(steps));
      val_cache->remove(static_cast<size_t>(val_n));
      std::error_code ec;
      std::filesystem::remove(g.cache_folder, ec);  // only if empty
    }
    if (g.mode == "lora") nn::merge_lora(model);
    set_trainable(model, [](const std::string&) { return true; });
    r.logit_distilled = task.evaluate(Split::val);
  }

  // ---- stage 2: finetuning on the task loss (all weights or LoRA), or the joint variant --------
  if (f.epochs == 0) {
    HH_CHECK(!(disk.found && disk.stage == 2 && !disk.legacy), "checkpoint ", cfg.checkpoint_path,
             ": it holds finetuning state but this conversion has no finetuning epochs");
    if (disk.legacy_stage_start()) load_weights();
    r.finetune.stopped = "skipped (--finetune-epochs 0)";
  } else {
    // A stage 2 resumed from its start (a legacy checkpoint between the stages) begins from the
    // weights after stage 1, before the adapters exist; the Trainer's checkpoints hold them.
    if (disk.legacy_stage_start()) load_weights();
    if (f.mode == "lora") {
      r.lora_targets = add_lora(model, f, cfg.seed + 101);
      r.trainable_finetune = set_trainable(model, [&](const std::string& n) {
        return n.find(".lora_") != std::string::npos || (f.train_feature_maps && is_feature_map_param(n));
      });
    } else {
      r.trainable_finetune = set_trainable(model, [](const std::string&) { return true; });
    }
    AdamW opt(decay_groups(model, f.weight_decay), f.lr);
    ScheduleConfig sc;
    sc.kind = parse_schedule_kind(f.schedule);
    sc.base_lr = f.lr;
    sc.total_steps = f.max_steps > 0 ? std::min(f.max_steps, nb * f.epochs) : nb * f.epochs;
    sc.warmup_steps = static_cast<int64_t>(f.warmup_fraction * static_cast<double>(sc.total_steps));
    LrSchedule schedule(sc);
    const bool higher = task.higher_is_better();
    Stage s;
    s.name = "finetune";
    s.number = 2;
    s.epochs = f.epochs;
    s.max_steps = f.max_steps;
    s.patience = f.patience;
    s.mode = higher ? EarlyStopMode::max : EarlyStopMode::min;
    s.keep_best = f.keep_best;
    s.grad_clip = f.grad_clip;
    s.stop_at = f.stop_at;
    s.resume = disk.found && disk.stage == 2 && !disk.legacy_stage_start();
    const TrainerResult tr = run_stage(
        s, r.finetune, opt, schedule,
        [&](int64_t, int64_t i) {
          if (f.joint_weight <= 0) return task.loss(Split::train, i, nullptr);
          nn::TraceRequest tr = nn::distill_trace_request(f.joint_loss);
          Tensor task_loss = task.loss(Split::train, i, &tr);
          return add(task_loss, mul(nn::distillation_loss(tr, f.joint_loss), f.joint_weight));
        },
        [&] {
          const Metrics last = task.evaluate(Split::val);
          HH_CHECK(!last.empty(), "convert: the task's evaluate() returned no metric");
          const double v = last.front().second;
          return Evaluation{v, {{"val", v}}, f.stop_at != 0 && better_or_equal(v, f.stop_at, higher)};
        });
    if (tr.interrupted() || spent()) {
      r.interrupted = true;
      return r;
    }
    if (f.mode == "lora" && f.merge_lora) nn::merge_lora(model);
    set_trainable(model, [](const std::string&) { return true; });
    r.finetuned = task.evaluate(Split::val);
  }
  task.model().eval();
  return r;
}

}  // namespace hh::train
