// The one training loop of every experiment: optimizer steps (with gradient accumulation) under a
// learning-rate schedule, gradient clipping, a divergence watch that names the step, evaluation
// every N steps (or at each epoch's end, and always after the last step), early stopping on a
// validation metric with the best weights kept, progress, and a checkpoint that resumes the run
// bit for bit. What differs between experiments comes in as hooks: how a step's loss is made, how
// the model is evaluated, and what the experiment records beside the loop's own state.
//
//   Trainer t(model, opt, schedule, cfg, hooks);
//   TrainerResult r = t.fit();   // the best weights are loaded when it returns (cfg.keep_best)
//
// fit(): loads the checkpoint when resuming, then hooks.on_start, then the steps.
// Per step: lr = schedule(step); zero grads; for each micro-batch m: loss = hooks.loss(step, m),
// a non-finite loss stops the run before any backward, else backward of loss / accumulation;
// hooks.reduce_loss (data parallelism); the divergence watch; clip; optimizer step;
// hooks.after_step; progress (hooks.progress_metrics). A diverged step never reaches the weights.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "core/generator.h"
#include "core/tensor.h"
#include "nn/module.h"
#include "train/early_stopping.h"
#include "train/optim.h"
#include "core/progress.h"
#include "train/schedule.h"

namespace hh::train {

// Watches the per-step loss for divergence: a non-finite loss at any step, or (factor > 0) a loss
// above factor × the first step's loss on `steps` consecutive steps. Its state is checkpointed.
struct DivergenceWatch {
  double factor = 0;
  int64_t steps = 1;
  double initial = 0;  // the first step's loss
  bool has_initial = false;
  int64_t above = 0;   // consecutive steps above factor × initial

  // Returns why the run diverged, or "" when it has not.
  std::string update(double loss);
};

// A JSON document as text: what an experiment keeps in a checkpoint (installed headers do not
// include nlohmann/json, so the hooks pass text; the experiments parse and dump it).
struct JsonText {
  std::string text;
};

// One evaluation, as the experiment's hook reports it.
struct Evaluation {
  double metric = 0;        // what early stopping follows (TrainerConfig::mode says which way is better)
  ProgressMetrics shown;    // printed with the progress at this evaluation (e.g. val_loss, val_acc)
  bool stop = false;        // the experiment's own reason to stop now (e.g. the task is solved)
};

// Where the run stands at an evaluation.
struct EvaluationPoint {
  int64_t step = 0;       // optimizer steps done
  double train_loss = 0;  // mean training loss since the previous evaluation
  double lr = 0;          // the last step's learning rate
  double seconds = 0;     // training time so far, resumed runs' included
  bool best = false;      // this evaluation is the new best
  // The early-stopping patience is spent (no improvement for cfg.patience evaluations): with
  // patience > 0 the run stops here. Lets an experiment say why its run ended.
  bool patience_spent = false;
};

struct TrainerConfig {
  int64_t total_steps = 0;      // optimizer steps at most (>= 1)
  int64_t steps_per_epoch = 0;  // > 0: progress is shown per epoch ("<label> epoch e/E")
  int64_t eval_every = 0;       // steps between evaluations; 0 = every steps_per_epoch; the last step always evaluates
  int64_t accumulation = 1;     // micro-batches per optimizer step
  double grad_clip = 0;         // max global gradient norm (0 = off); a non-finite norm is a divergence
  int64_t patience = 0;         // evaluations without improvement before stopping (0 = never stop early)
  EarlyStopMode mode = EarlyStopMode::max;
  bool keep_best = true;        // keep a copy of the best weights and load them at the end
  double diverge_factor = 0;    // DivergenceWatch (0 = only a non-finite loss diverges)
  int64_t diverge_steps = 1;
  // Checkpoints: the loop's state, the weights, the optimizer, the best weights, the named
  // generators and the experiment's own JSON, written atomically after every evaluation, every
  // checkpoint_every steps (0 = evaluations only) and on interruption.
  std::string checkpoint_path;  // "" = no checkpoints (resume and stop_after_steps need one)
  std::string kind;             // the experiment ("ar", "lra"): metadata keys "<kind>.fingerprint"
  std::string fingerprint;      // every setting that decides the result (JSON); a resume must match it
  int64_t checkpoint_every = 0;
  bool resume = false;          // load checkpoint_path first when it exists
  int64_t stop_after_steps = 0; // testing resumption: checkpoint and return "interrupted" at this step
  std::string label;            // progress label
  std::string metric_name = "metric";  // the evaluation metric's name in the last progress line
  bool quiet = false;           // plain progress lines instead of a bar
  double progress_seconds = 30; // plain mode: a line at least this often
  bool show_progress = true;    // false: no progress at all (data-parallel ranks but 0; a loop inside
                                // another's report, e.g. per layer)
  // Data parallelism: false on the ranks that do not write the checkpoint (all but rank 0); every
  // rank still calls hooks.after_checkpoint at each checkpoint (e.g. a barrier).
  bool writes_checkpoints = true;
  // Further metadata written as it is into every checkpoint, for the experiment's readers of a
  // checkpoint (e.g. the model's config, to rebuild the model from it).
  std::map<std::string, std::string> checkpoint_metadata;
};

struct TrainerHooks {
  // Forward and loss of micro-batch `micro` of step `step` (a scalar with a graph; training mode).
  std::function<Tensor(int64_t step, int64_t micro)> loss;
  // Evaluates the current weights (the hook sets eval/train mode as it needs). `step` ==
  // total_steps is the evaluation after the last step (e.g. on the whole validation set).
  std::function<Evaluation(int64_t step)> evaluate;
  // After each evaluation (EvaluationPoint says where the run stands): the place to record curves
  // and logs.
  std::function<void(const EvaluationPoint& at, const Evaluation& e)> on_evaluation;
  // Optional: after each optimizer step (e.g. the feature maps' redraw schedule).
  std::function<void(int64_t step)> after_step;
  // Optional: before the backward of micro-batch `micro` (e.g. a gradient reducer's sync switch).
  std::function<void(int64_t micro)> before_backward;
  // Optional: the step's mean loss across data-parallel ranks, after the backward passes.
  std::function<double(double loss)> reduce_loss;
  // Optional: the experiment's own state in a checkpoint (curves), and its restore.
  std::function<JsonText()> save_state;
  std::function<void(const JsonText&)> load_state;
  // Optional: a checkpoint written by an experiment's loop before this Trainer existed: returns the
  // loop state ({loss_sum, loss_count, finished, seconds, early_stopping, divergence, best_step})
  // and restores the experiment's own from `extra`, or throws hh::Error saying why it cannot.
  // An old loop that kept its fingerprint elsewhere (no '<kind>.fingerprint' key) returns it as
  // "fingerprint" (checked as that key would be; without either the checkpoint is refused), and
  // one that counted its step otherwise returns "steps" (else the checkpoint's step is taken).
  std::function<JsonText(const std::map<std::string, std::string>& extra)> load_legacy;
  // Optional: which state tensors the best copy holds (default all). A run that trains a part of
  // the model (the conversion's feature maps) keeps only that part; the rest must not change.
  std::function<bool(const std::string& name)> best_filter;
  // Optional: once before the first step, after a resume's load (`step`: the steps already done):
  // e.g. gradient hooks on the parameter tensors the model has now, a data-parallel broadcast of the
  // initial weights (step 0), logs rewritten from the restored history.
  std::function<void(int64_t step)> on_start;
  // Optional: the metrics shown after each step, given its loss (after reduce_loss), in place of
  // the running loss and the learning rate (e.g. tokens/s, the last validation perplexity).
  std::function<ProgressMetrics(int64_t step, double loss)> progress_metrics;
  // Optional: after each checkpoint, on every rank (TrainerConfig::writes_checkpoints), e.g. a
  // barrier so that no rank goes on before rank 0 has written it.
  std::function<void()> after_checkpoint;
  // Generators the run draws from (dropout), saved and restored with a checkpoint.
  std::map<std::string, Generator*> generators;
};

struct TrainerResult {
  // "ok"; "diverged at [epoch E, ]step S: <why>" (the best weights before it are loaded);
  // "interrupted at step S" (stop_after_steps; " (a stop was requested)" after it: core/stop.h).
  std::string status = "ok";
  int64_t steps = 0;           // optimizer steps done, resumed ones included
  int64_t start_step = 0;      // where this process started (0 unless resumed)
  double seconds = 0;          // training time, resumed runs' included
  double step_seconds = 0;     // this process's optimizer steps alone (no evaluation, no checkpoint)
  int64_t evaluations = 0;     // done in all
  bool has_best = false;
  double best_metric = 0;
  int64_t best_step = 0;       // the step of the best evaluation
  bool interrupted() const { return status.rfind("interrupted", 0) == 0; }
};

class Trainer {
 public:
  Trainer(nn::Module& model, Optimizer& opt, const LrSchedule& schedule, TrainerConfig cfg, TrainerHooks hooks);
  TrainerResult fit();

 private:
  void save(const TrainerResult& r) const;
  void load(TrainerResult& r);

  nn::Module& model_;
  Optimizer& opt_;
  const LrSchedule& schedule_;
  TrainerConfig cfg_;
  TrainerHooks hooks_;
  EarlyStopping stopper_;
  DivergenceWatch watch_;
  std::map<std::string, Tensor> best_;
  double loss_sum_ = 0;    // training loss summed since the last evaluation
  int64_t loss_count_ = 0;
  bool finished_ = false;  // stopped early, solved, or out of steps
};

}  // namespace hh::train
