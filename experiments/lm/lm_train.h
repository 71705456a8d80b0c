// Language-model training from scratch (paper Table 7; apps/train_lm): a GPT-2 or Llama decoder
// (experiments/lm/lm_model.h) on token shards (data/token_shards.h), with AdamW (decay groups), warmup +
// cosine, gradient clipping and accumulation, validation perplexity, checkpoints and data-parallel
// ranks (train/distributed.h).
//
// Batches. Step s reads the global windows s*G .. s*G+G-1 of a seeded WindowSampler (G = batch
// sequences per optimizer step), cut into `accumulation` micro-batches; with W ranks, rank r reads
// the r-th W-th of each micro-batch. The loss of a micro-batch is its mean token cross-entropy over
// accumulation; ranks average their gradients. So the update is the gradient of the mean loss of
// the global batch for any W and accumulation (up to f32 summation order).
//
// Evaluation: the mean cross-entropy and perplexity over fixed windows of the validation split:
// non-overlapping blocks of eval_context tokens (stride 0), or HF's strided sliding window (each
// token scored once, with at least eval_context - stride tokens of context).
//
// The loop is train/trainer.h's (no early stopping, no best weights: the run ends at its last
// step). Checkpoints (<out>/checkpoint.safetensors, atomic, by rank 0) hold the weights, AdamW
// moments, the Trainer's state, the fingerprint (model, attention, data and optimisation settings;
// "lm.fingerprint"), the model's config.json ("lm.hf_config") and the history (per-step losses and
// validations; "lm.run"); resuming refuses a checkpoint with another fingerprint. The windows are a
// function of the step, so on the CPU a resumed run ends bit for bit where an uninterrupted one
// ends. Checkpoints written by train_lm's loop before the Trainer are resumed too.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "data/token_shards.h"
#include "nn/models/hf_model.h"
#include "train/distributed.h"
#include "experiments/lm/lm_model.h"

namespace hh::train {

struct LmTrainConfig {
  LmModelConfig model;               // sizes; vocab_size from the data
  nn::HFModelOptions attention;      // mixer ("softmax" or a feature map), form, chunk, feature map
  int64_t context = 256;             // training window (<= model.n_positions)
  int64_t batch = 32;                // sequences per optimizer step, over all ranks and micro-batches
  int64_t accumulation = 1;          // micro-batches per step
  int64_t steps = 1000;              // optimizer steps
  double lr = 6e-4, min_lr = 0.0;
  double warmup = 0.01;              // warmup steps as a fraction of steps (< 1) or a count (>= 1)
  std::string schedule = "cosine";
  double weight_decay = 0.01;
  double beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8;
  double grad_clip = 1.0;            // 0 = none
  int64_t eval_every = 100;          // steps between validations (0 = only at the end)
  int64_t eval_context = 0;          // 0 = context
  int64_t eval_stride = 0;           // 0 = non-overlapping blocks, else the sliding window's stride
  int64_t eval_windows = 0;          // windows per validation (0 = every one); the final one uses all
  int64_t eval_batch = 8;
  int64_t checkpoint_every = 0;      // steps (0 = at evaluations and the end)
  uint64_t seed = 0;                 // model initialisation and training windows
  Device device = Device::cpu();
  Precision precision = Precision::f32;  // bf16: autocast around forward and loss (autograd/autocast.h)
  std::string out_dir;               // checkpoint.safetensors, metrics.jsonl
  bool resume = false;
  int64_t stop_after_steps = 0;      // tests: write the checkpoint and return after this many steps
  bool progress = true;
  std::string data_fingerprint;      // the prepared data's identity (tokenizer, token counts)
  // A warm start: the weights of this HF folder (e.g. an earlier run's <run>/model, trained at a
  // shorter context or on other data) or train_lm checkpoint file instead of a fresh draw. Every weight of the model must be
  // in it with its shape (a feature map absent from a softmax folder keeps its own initialisation);
  // the optimizer and schedule start afresh. The folder's weights are in the fingerprint.
  std::string init_from;
  int64_t eos_id = -1;               // the tokenizer's end-of-text id, written to the model's config
};

struct LmEval {
  int64_t step = 0;
  double loss = 0.0;     // mean cross-entropy (nats per token)
  double ppl = 0.0;      // exp(loss)
  int64_t tokens = 0;    // predictions scored
};

struct LmTrainResult {
  std::string status = "ok";         // "ok", "interrupted at step N", "diverged at step N: ..."
  int64_t steps = 0;
  int64_t params = 0;
  double seconds = 0.0;              // wall time of the run (a resumed run's earlier processes included)
  double tokens_per_second = 0.0;    // training tokens (all ranks) per second
  std::vector<double> train_loss;    // per step
  std::vector<double> step_seconds;  // wall time of each step this process ran (benchmarks)
  std::vector<LmEval> evals;         // validations in order; the last is the final full one
  std::shared_ptr<nn::CausalLM> model;
  std::string config_json;           // the model's config.json (GPT-2 or Llama)
};

// Everything that decides the result, as JSON text (the checkpoint's fingerprint).
std::string lm_run_fingerprint(const LmTrainConfig& c);

// Every setting checked (the error names the flag), for `world` ranks; train_language_model calls
// it first, apps before any run starts.
void check_lm_train_config(const LmTrainConfig& c, int world);

// A warm start's folder (c.init_from) fits the run: the same architecture, every weight by name and
// shape (the error names them). Loads the folder once; apps call it before any run starts.
void check_lm_init(const LmTrainConfig& c);

// <out_dir>/checkpoint.safetensors.
std::string lm_checkpoint_path(const std::string& out_dir);
// Before any work: when out_dir has a checkpoint, it must have been written with this fingerprint
// (the error names the settings that differ).
void check_lm_resume(const std::string& out_dir, const std::string& fingerprint);

// The model of a train_lm checkpoint (its weights at that step, eval mode), e.g. to sample from a
// run that is still going. The checkpoint holds its config.json with the attention.
std::shared_ptr<nn::CausalLM> load_lm_checkpoint_model(const std::string& path);

// The tokenizer spec the checkpoint's data was prepared with ("" when it does not say).
std::string lm_checkpoint_tokenizer(const std::string& path);

// Validation: cross-entropy of `model` over the windows of `ids` (ranks split the windows).
LmEval evaluate_lm(nn::CausalLM& model, const std::vector<int32_t>& ids, int64_t context, int64_t stride,
                   int64_t max_windows, int64_t batch, Communicator& comm);

// Trains one model. `valid` is the validation split's token stream. Errors (bad settings, data too
// short for a window, a checkpoint of another configuration) are thrown before any step runs.
LmTrainResult train_language_model(const LmTrainConfig& c, const data::TokenDataset& train,
                                   const std::vector<int32_t>& valid, Communicator& comm);

}  // namespace hh::train
