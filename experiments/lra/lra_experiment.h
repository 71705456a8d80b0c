// Long Range Arena training (paper Table 6, REFERENCE.md §4): one model per (task, attention),
// trained from scratch for a number of steps with AdamW and a linear warmup / linear decay
// schedule, evaluated on the validation split every eval_every steps, early-stopped on validation
// accuracy, and scored on the test split with the best weights. Checkpoints hold the whole
// training state (weights, AdamW moments, dropout generators, step, early stopping, best weights,
// curves), so a resumed run equals an uninterrupted one, bit for bit on the CPU.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "data/lra.h"
#include "experiments/lra/lra_classifier.h"
#include "nn/mixer.h"

namespace hh::train {

// The per-task protocol numbers a preset fixes (flags may override each).
struct LraPreset {
  int64_t max_len = 0;  // tokens per document (longer inputs are truncated)
  int64_t batch = 0;
  int64_t steps = 0;
  int64_t warmup = 0;
  int64_t eval_every = 0;
  double lr = 0;        // peak
};
// "paper": REFERENCE.md §4 (ListOps 2000/32/5k/1000, Text 4000/32/20k/8000, Retrieval
// 4000/32/30k/800, Image 1024/256/35k/175, Pathfinder 1024/256/62.4k/312; peak lr 1e-4; an
// evaluation every steps/20); "demo": the small
// generated sets of the README's demonstration (minutes on 2 cores); "tiny": seconds, for tests.
LraPreset lra_preset(const std::string& preset, data::LraTask task);

struct LraData {
  data::LraSplit train, val, test;
};

struct LraRunConfig {
  data::LraTask task = data::LraTask::listops;
  nn::LraModelConfig model;  // vocab, classes, two_documents and max_len are set from the task by run_lra
  int64_t max_len = 0;       // positions table size (0 = the task's length)
  int64_t batch = 32;
  int64_t steps = 5000;
  int64_t warmup = 1000;
  double lr = 1e-4;           // peak
  double weight_decay = 0.0;
  double adam_eps = 1e-6;
  double grad_clip = 0.0;     // 0 = none (the protocol clips nothing)
  int64_t eval_every = 500;   // steps between validation passes (and checkpoints)
  int64_t patience = 10;      // evaluations without a better validation accuracy before stopping
  int64_t eval_batch = 0;     // 0 = batch
  uint64_t seed = 0;
  Device device = Device::cpu();
  Precision precision = Precision::f32;  // autograd/autocast.h
  bool quiet = false;
  std::string log_path;       // JSONL: one line per evaluation (empty = none)
  std::string checkpoint_path;  // written atomically at every evaluation (empty = none)
  bool resume = false;          // load checkpoint_path first when it exists
  int64_t stop_after_steps = 0;  // tests of resuming: checkpoint and return "interrupted" at this step
};

struct LraRunResult {
  std::string task;
  nn::Mixer attention;
  nn::Gate gate = nn::Gate::none;  // shown after the attention's name when gated ("hedgehog+gla")
  // "ok", "diverged at step S: <why>" (scored with the best weights before it), "interrupted at
  // step S", or, set by a caller that caught an exception, "error: <message>".
  std::string status = "ok";
  double test_accuracy = 0.0;   // in [0,1]
  double val_accuracy = 0.0;    // best
  int64_t best_step = 0;
  int64_t steps = 0;
  double seconds = 0.0;         // training time (evaluations included)
  double steps_per_second = 0.0;  // optimizer steps per second (batching, forward, backward, update; no evaluation)
  int64_t params = 0;
  std::vector<int64_t> eval_steps;   // curves, one point per evaluation
  std::vector<double> train_loss;    // mean training loss since the previous evaluation
  std::vector<double> val_acc;
};

// Accuracy of `model` on `split` (batched in order, no grad, eval mode).
double lra_accuracy(nn::LraClassifier& model, const data::LraSplit& split, int64_t batch, Device device);
// The model's inputs for `rows` of `split`: padded ids and masks (second document for retrieval)
// and the labels (B) i64, on `device`.
struct LraBatch {
  Tensor ids, mask, ids2, mask2, labels;
};
LraBatch lra_batch(const data::LraSplit& split, const std::vector<int64_t>& rows, Device device);

// Everything that decides a run's result, as JSON text (a checkpoint refuses another).
std::string lra_run_fingerprint(const LraData& data, const LraRunConfig& cfg);

LraRunResult run_lra(const LraData& data, const LraRunConfig& cfg);

}  // namespace hh::train
