// The associative-recall study (paper §3.2): train one decoder per feature map on generated AR
// data, early-stop on a validation split, and measure test accuracy, attention entropy and
// monotonicity, keeping what the report's figures need.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "data/associative_recall.h"
#include "nn/gate.h"
#include "nn/mixer.h"
#include "nn/transformer.h"

namespace hh::train {

// What the training loss sees (accuracy is always measured on the query's answer):
//   query:  only the query's answer (one target per sequence);
//   recall: also every value whose key occurred earlier in the sequence (the answers a model can
//           know from the context);
//   all:    every next token, keys and "=>" included (safari's training targets: the keys are
//           noise the model cannot predict, the repeated values are recall).
enum class ArTargets { query, recall, all };
const char* ar_targets_name(ArTargets t);
ArTargets parse_ar_targets(const std::string& name);  // throws hh::Error naming the value

struct ArRunConfig {
  nn::Mixer mixer;                // softmax, or linear attention with a feature map
  nn::Gate gate = nn::Gate::none; // linear mixers: the gate on the state (nn/gate.h)
  nn::GateOutput gate_output = nn::GateOutput::normalizer;  // gated mixers: the output (nn/gate.h)
  double temperature = 1.0;       // exp / hedgehog temperature
  nn::TransformerConfig model;    // sizes; attention.mixer is set from `mixer`
  int64_t epochs = 20;
  int64_t batch = 32;
  double lr = 1e-3;
  double weight_decay = 0.0;
  int64_t patience = 10;          // epochs without validation improvement before stopping
  // What early stopping (and the choice of the weights evaluated on the test split) follows:
  // "accuracy" (validation accuracy, higher is better) or "loss" (the paper's rule: validation
  // cross-entropy on the query's answer, lower is better).
  std::string early_stop = "accuracy";
  double stop_accuracy = 1.0;     // stop once validation accuracy reaches this (the task is solved)
  double grad_clip = 1.0;
  std::string schedule = "cosine";
  int64_t warmup_steps = 50;
  ArTargets targets = ArTargets::recall;
  double val_fraction = 0.1;      // held out from the training split for early stopping
  uint64_t seed = 0;
  Device device = Device::cpu();
  Precision precision = Precision::f32;  // autograd/autocast.h
  bool quiet = false;
  // Divergence stops the run (status "diverged at epoch E, step S: ..."): a non-finite loss at any
  // step, or a loss above diverge_factor × the first step's loss (about ln(vocab) for a fresh
  // model) on diverge_steps consecutive steps. A healthy run never comes near that; diverge_factor
  // 0 keeps only the non-finite rule.
  double diverge_factor = 4.0;
  int64_t diverge_steps = 20;
  // Checkpoints: when checkpoint_path is set, the whole training state (weights, AdamW moments,
  // step, batch cursor, early-stopping state, best weights so far, metrics so far, divergence
  // watch) is written there atomically after every epoch and every checkpoint_every steps (0 =
  // epochs only). With resume, an existing checkpoint is loaded first (it must come from the same
  // configuration and data) and training continues exactly where it stopped: the result is the
  // same, bit for bit on the CPU, as that of an uninterrupted run.
  std::string checkpoint_path;
  int64_t checkpoint_every = 0;
  bool resume = false;
  // For tests of resuming: once this many optimizer steps are done (0 = never), write the
  // checkpoint and return with status "interrupted at step N" (no evaluation).
  int64_t stop_after_steps = 0;
};

struct ArRunResult {
  std::string label;          // e.g. "hedgehog", "exp (t=2)"
  // "ok"; "diverged at epoch E, step S: <why>" (the metrics are those of the best weights before
  // it); "interrupted at step S" (stop_after_steps; nothing evaluated); or, set by a caller that
  // caught an exception, "error: <message>".
  std::string status = "ok";
  nn::Mixer mixer;
  nn::Gate gate = nn::Gate::none;
  nn::GateOutput gate_output = nn::GateOutput::normalizer;
  double temperature = 1.0;
  double accuracy = 0.0;      // test accuracy on the query's answer, in [0,1]
  double val_accuracy = 0.0;  // validation accuracy of the kept (best) epoch
  double entropy = 0.0;       // mean attention entropy over layers, heads, query rows (test samples)
  double monotonicity = 0.0;  // mean per-row Spearman(q·k, weight)
  int64_t params = 0;
  double seconds = 0.0;       // training time
  int64_t epochs_run = 0;
  int64_t steps = 0;          // optimizer steps taken
  double lr = 0, weight_decay = 0;
  int64_t batch = 0;
  std::vector<double> train_loss;    // per epoch
  std::vector<double> val_acc;       // per epoch
  std::vector<double> val_loss;      // per epoch: cross-entropy on the query's answer
  // Figure material: one head's weights (heat_len × heat_len) on a test sample, and (q·k, weight)
  // pairs of that head's causal entries.
  std::vector<double> heat;
  int64_t heat_len = 0;
  int64_t heat_layer = 0, heat_head = 0;
  std::vector<std::string> heat_tokens;
  std::vector<double> scatter_qk, scatter_w;
};

// Targets for every value position whose key occurred earlier in the sequence, plus the query's
// answer (the dataset's own target). inputs, targets (N,L) i64 on the CPU.
Tensor ar_dense_targets(const Tensor& inputs, const Tensor& targets, const ArConfig& cfg);
// The training targets of `which` (ArTargets): the dataset's own, ar_dense_targets, or every next
// token with the answer last. inputs, targets (N,L) i64 on the CPU.
Tensor ar_training_targets(const Tensor& inputs, const Tensor& targets, const ArConfig& cfg, ArTargets which);

// Accuracy and mean cross-entropy of `model` on the answer position of `split` (batched, no grad).
struct ArEval {
  double accuracy = 0.0;
  double loss = 0.0;
};
ArEval ar_evaluate(nn::DecoderLM& model, const ArSplit& split, int64_t batch, Device device);
inline double ar_accuracy(nn::DecoderLM& model, const ArSplit& split, int64_t batch, Device device) {
  return ar_evaluate(model, split, batch, device).accuracy;
}

// The label of a run of `mixer`: "exp (t=2)" for exp, which takes a temperature, else its name;
// "+<gate>" after it when gated ("hedgehog+gla").
std::string ar_label(const nn::Mixer& mixer, double temperature, nn::Gate gate = nn::Gate::none);

// Everything that decides a run's result (model, data and training settings), as JSON text: a
// checkpoint stores it and resuming refuses a checkpoint whose fingerprint differs.
std::string ar_run_fingerprint(const ArDataset& data, const ArRunConfig& cfg);

ArRunResult run_associative_recall(const ArDataset& data, const ArRunConfig& cfg);

}  // namespace hh::train
