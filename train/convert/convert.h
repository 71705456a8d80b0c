// The two-stage conversion of a trained softmax model into a linear-attention one (paper §4,
// App. A.3; REFERENCE.md §3): the student is the teacher's weights with a feature map in every
// attention. Stage 1 freezes every original weight and trains only the feature maps to mimic the
// softmax weights (distillation loss, early stop on its validation value); stage 2 finetunes on the
// task loss, every weight or LoRA adapters. The joint variant trains both losses in one stage.
//
// Each stage is one run of train/trainer.h's Trainer: epochs of the training batches, an evaluation
// at each epoch's end, early stopping with the best weights kept, one checkpoint file for both.
//
// The driver knows nothing of the task: a ConversionTask gives it the student model, batches, the
// task loss and the task metric (GLUE, perplexity, top-1, ROUGE, associative recall).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/autocast.h"
#include "nn/diagnostics.h"
#include "nn/lora.h"
#include "nn/models/hf_model.h"
#include "nn/module.h"
#include "train/convert/hidden_store.h"
#include "train/convert/logit_cache.h"
#include "train/convert/softmax_choice.h"

namespace hh::train {

enum class Split { train, val, test };  // the driver uses train and val; apps report test
using Metrics = std::vector<std::pair<std::string, double>>;  // the first entry is the primary metric

class ConversionTask {
 public:
  virtual ~ConversionTask() = default;
  virtual nn::Module& model() = 0;  // the student
  virtual int64_t batches(Split s) const = 0;  // batches in one pass over a split
  // Reorders the training batches for an epoch (deterministic in `epoch`).
  virtual void shuffle(int64_t epoch) { (void)epoch; }
  // Runs the model on batch i of split s and returns the scalar task loss. When trace is not null
  // every attention layer appends its trace to it (the driver asks for teacher weights).
  virtual Tensor loss(Split s, int64_t i, nn::TraceRequest* trace) = 0;
  // Runs the model on batch i of split s only for its attention traces (stage 1, fidelity). The
  // default computes the task loss too; a task may skip its head here (e.g. an LM's vocabulary
  // projection, the largest matmul of a small GPT).
  virtual void trace(Split s, int64_t i, nn::TraceRequest& trace) { loss(s, i, &trace); }
  // Tokens (or positions) in batch i of split s, for throughput figures.
  virtual int64_t tokens(Split s, int64_t i) const = 0;
  // The task's metrics on a split, no grad, eval mode; the first is the primary one.
  virtual Metrics evaluate(Split s) = 0;
  virtual bool higher_is_better() const { return true; }  // of the primary metric (false: perplexity)
  // Turns the listed attention layers (0-based, in trace order) of the student back into softmax
  // (DistillStage::softmax_layers). The default refuses: the task's model cannot.
  virtual void keep_softmax(const std::vector<int64_t>& layers);
  // Logit distillation (LogitStage): the student's next-token distributions on batch i of split s
  // against the softmax teacher's, nn::logit_distillation_loss over the positions the task scores.
  // The default refuses: the task has no teacher logits.
  virtual Tensor logit_loss(Split s, int64_t i, double temperature);
  // Whether logit_loss can run (a teacher is there): KL-guided layer selection is refused before
  // any work without it.
  virtual bool has_teacher_logits() const { return false; }
  // The top-k logit cache (LogitStage::cache, train/convert/logit_cache.h): the teacher's top-k of
  // batch i of split s over the positions logit_loss scores (its `batch` set to batch_key), the key
  // that identifies the batch (a checksum of its ids and scored positions), and logit_loss against
  // a cached top-k of the batch (nn::topk_logit_distillation_loss). The defaults refuse.
  virtual TopkLogits teacher_topk(Split s, int64_t i, int64_t k, double temperature);
  virtual uint64_t batch_key(Split s, int64_t i) const;
  virtual Tensor topk_logit_loss(Split s, int64_t i, const TopkLogits& teacher, double temperature);
  // Block-wise attention transfer (DistillStage::blocks): the student as a causal LM and the input
  // ids (B,L) of every training batch. The defaults: none (the driver refuses block-wise transfer).
  virtual nn::CausalLM* causal_lm() { return nullptr; }
  virtual std::vector<Tensor> transfer_batches() { return {}; }
};

// A task whose student is a causal LM and whose batches are next-token (inputs, targets), targets
// -100 where not scored: what the LLM stages need follows from that (block-wise transfer over the
// training inputs; logit distillation against `teacher` over the scored positions).
class CausalLmTask : public ConversionTask {
 public:
  nn::CausalLM* causal_lm() override { return &lm(); }
  std::vector<Tensor> transfer_batches() override;  // every training batch's input ids
  // KL(teacher ‖ student) over the positions the loss scores.
  Tensor logit_loss(Split s, int64_t i, double temperature) override;
  bool has_teacher_logits() const override { return teacher() != nullptr; }
  TopkLogits teacher_topk(Split s, int64_t i, int64_t k, double temperature) override;
  uint64_t batch_key(Split s, int64_t i) const override;
  Tensor topk_logit_loss(Split s, int64_t i, const TopkLogits& teacher, double temperature) override;
  void keep_softmax(const std::vector<int64_t>& layers) override { lm().keep_softmax(layers); }
  virtual nn::CausalLM& lm() = 0;
  // (B,L) inputs and targets of batch i of split s.
  virtual void batch(Split s, int64_t i, Tensor& inputs, Tensor& targets) const = 0;

 protected:
  virtual nn::CausalLM* teacher() const = 0;  // the softmax teacher for logit distillation, or null
};

struct DistillStage {
  int64_t epochs = 5;           // 0 = skip stage 1 (the "swap + finetune" baselines)
  int64_t max_steps = 0;        // stop after this many steps in all (0 = epochs only)
  double lr = 1e-2;             // paper App. A.3: AdamW, lr 1e-2, wd 0
  double weight_decay = 0.0;
  int64_t patience = 1;         // epochs without a lower validation loss before stopping
  int64_t val_batches = 0;      // validation batches per evaluation (0 = all)
  nn::DistillOptions loss;      // soft cross-entropy or KL, sum or mean over heads, output MSE
  // Kept softmax layers (RADLADS, fla-org's hybrid distillation): after stage 1 (and before logit
  // distillation, which then trains the hybrid) N layers go back to softmax, chosen by
  // softmax_choice (train/convert/softmax_choice.h: the highest transfer error on the validation
  // batches, the loss above per layer; KL-guided; evenly spread); or exactly the listed ones
  // (0-based). The per-layer transfer error is in the result either way.
  int64_t softmax_layers = 0;
  SoftmaxLayerChoice softmax_choice = SoftmaxLayerChoice::transfer;
  std::vector<int64_t> softmax_layer_list;
  // KL-guided choice (train/convert/layer_select.h): validation batches the KL is measured on (0 =
  // all), and logit-distillation steps given to each candidate (and to the all-linear baseline)
  // before its KL is measured, at LogitStage's lr, temperature and clip, every weight (0 = none).
  int64_t kl_select_batches = 0;
  int64_t kl_select_finetune = 0;
  // > 0: LoLCATs' block-wise transfer instead of the whole-model stage (train/convert/
  // layerwise_distill.h): this many layers at a time on the teacher's hidden states, `epochs`
  // passes over the training batches per block (no validation, early stop or resume inside it).
  int64_t blocks = 0;
  HiddenPlace hidden = HiddenPlace::device;  // where the hidden states wait between blocks
  std::string hidden_folder;                 // HiddenPlace::disk: the shard folder
};

// Logit distillation (RADLADS / MOHAWK): the whole student (every weight, or LoRA adapters merged at
// the end) trained on KL(teacher ‖ student) over next-token distributions, after attention transfer
// and before (or instead of) the task finetuning. The teacher's logits are computed on the fly, or
// (cache topk) once before the stage over the very batches it will see, in its order (its training
// steps, then its validation batches), their top-k kept in shards under cache_folder
// (train/convert/logit_cache.h); the loss is then the KL over the top-k plus an "other" bucket
// (nn::topk_logit_distillation_loss), the validation KL too. Shards of this teacher, data, K and T
// that match their batch are reused (a resumed stage, an interrupted cache build), others rebuilt;
// the shards are removed once the stage has finished.
struct LogitStage {
  int64_t tokens = 0;           // training tokens (task.tokens) to distill on; 0 = skip the stage
  double lr = 1e-4;
  double weight_decay = 0.0;
  double temperature = 1.0;
  double grad_clip = 1.0;       // 0 = off
  std::string mode = "full";    // "full" or "lora" (FinetuneStage's LoRA settings)
  int64_t val_batches = 0;      // validation batches per evaluation of the KL (0 = all)
  LogitCache cache = LogitCache::none;
  int64_t topk = 64;            // cache topk: the teacher's logits kept per position (1..vocabulary)
  std::string cache_folder;     // cache topk: where the shards go (created if needed)
};

struct FinetuneStage {
  int64_t epochs = 5;           // 0 = no finetuning
  int64_t max_steps = 0;
  double lr = 1e-5;
  double weight_decay = 0.0;
  std::string schedule = "cosine";
  double warmup_fraction = 0.0;  // of the stage's steps
  double grad_clip = 1.0;        // 0 = off
  int64_t patience = 0;          // epochs without a better validation metric before stopping (0 = never)
  bool keep_best = true;         // restore the weights of the best validation metric at the end
  double stop_at = 0.0;          // stop once the validation metric reaches this (higher-is-better tasks; 0 = never)
  std::string mode = "full";     // "full": every weight; "lora": LoRA adapters (merged at the end)
  int64_t lora_rank = 8;         // paper (Llama): rank 8, alpha 16 on q, k, v, o
  double lora_alpha = 16.0;
  double lora_dropout = 0.0;
  std::vector<std::string> lora_targets = {"q_proj", "k_proj", "v_proj", "o_proj"};  // Linear names
  bool train_feature_maps = true;  // with mode lora: also train the feature maps (LoLCATs: no)
  bool merge_lora = true;
  // Joint variant (paper): task loss + joint_weight × distillation loss, every weight, in this stage.
  double joint_weight = 0.0;
  nn::DistillOptions joint_loss;
};

struct ConvertConfig {
  DistillStage distill;
  LogitStage logits;
  FinetuneStage finetune;
  uint64_t seed = 0;            // LoRA init
  bool quiet = false;           // plain progress lines instead of a bar
  Precision precision = Precision::f32;  // autograd/autocast.h
  // Checkpoint after every epoch of either stage; resume continues from the last one written
  // (also one written by the driver's loop before the Trainer).
  std::string checkpoint_path;
  bool resume = false;
  std::string fingerprint;      // the caller's description of model + data; resuming refuses another
  // For tests of resuming: after this many epochs (of either stage) in this call, write the
  // checkpoint and return with `interrupted` set (0 = never).
  int64_t stop_after_epochs = 0;
};

struct StageLog {
  std::vector<double> train_loss;  // per epoch
  std::vector<double> val;         // per epoch: distillation loss (stage 1) or primary metric (stage 2)
  int64_t steps = 0;
  int64_t tokens = 0;
  double seconds = 0;
  std::string stopped;             // why the stage ended ("epochs", "early stop", "max steps", "skipped: ...")
  double tokens_per_second() const { return seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0; }
};

struct ConvertResult {
  Metrics swapped;      // the student right after the swap (untrained maps), validation split
  Metrics distilled;    // after stage 1 (empty when skipped)
  Metrics logit_distilled;  // after logit distillation (empty when skipped)
  Metrics finetuned;    // after stage 2 (empty when skipped)
  StageLog distill, logits, finetune;  // logits.val: the validation KL per evaluation
  // The top-k logit cache in this call: shards written and reused, and the bytes written.
  int64_t logit_shards_written = 0, logit_shards_reused = 0, logit_cache_bytes = 0;
  int64_t trainable_distill = 0, trainable_finetune = 0;  // parameters trained in each stage
  std::vector<std::string> lora_targets;  // Linear modules that got adapters
  // After stage 1: each attention layer's transfer error on the validation batches (empty when
  // stage 1 did not run and no layer was kept), and the layers kept as softmax (ascending).
  std::vector<double> layer_error;
  std::vector<int64_t> softmax_layers;
  // How softmax_layers were chosen: "transfer", "kl", "every" or "list" (empty when none was kept).
  std::string softmax_choice;
  // KL-guided choice: the validation KL(teacher || student) of the all-linear student, of it with
  // each layer restored to softmax (alone), and each layer's score kl_all_linear - layer_kl[l].
  double kl_all_linear = 0;
  std::vector<double> layer_kl, layer_score;
  bool interrupted = false;               // stop_after_epochs ended the call; resume to go on
};

// Stage 1 then stage 2 on `task`. Parameters outside the feature maps are bit-for-bit unchanged by
// stage 1 (they are frozen and the optimizer never sees them).
ConvertResult convert(ConversionTask& task, const ConvertConfig& cfg);

// The fingerprint a conversion checkpoint was written with (ConvertConfig::fingerprint), from its
// safetensors metadata; nullopt when it is not a conversion checkpoint. Throws nlohmann's
// exceptions on unreadable state.
std::optional<std::string> conversion_checkpoint_fingerprint(const std::map<std::string, std::string>& metadata);

// Every feature-map parameter of a model: names containing ".feature_map." (or starting with it).
bool is_feature_map_param(const std::string& name);

// The n layers of highest error (ties: the lower index first), ascending; n <= error.size().
std::vector<int64_t> highest_error_layers(const std::vector<double>& error, int64_t n);

// Copies every teacher tensor into the student (same names and shapes), leaving the student's
// feature-map tensors as they are; any other missing or extra name is an error listing them.
void load_teacher_weights(nn::Module& student, const nn::Module& teacher);

// How faithfully the student's attention mimics the teacher's on a split (REFERENCE.md §3).
struct Fidelity {
  int64_t layers = 0, heads = 0;
  std::vector<double> kl;                // (layers*heads) mean KL(P‖Q) over rows, per layer and head
  double kl_mean = 0;
  double entropy_student = 0, entropy_teacher = 0;
  double monotonicity_student = 0, monotonicity_teacher = 0;
  // Pictures (Figs. 7, 9): sample 0's weights of one (layer, head), teacher and student, L×L.
  int64_t pic_layer = 0, pic_head = 0, pic_len = 0;
  std::vector<double> pic_teacher, pic_student;
};
// batches <= 0: every batch of the split. pic_layer/pic_head pick the pictured head (clamped).
Fidelity measure_fidelity(ConversionTask& task, Split s, int64_t batches, bool causal, int64_t pic_layer = 0,
                          int64_t pic_head = 0);

}  // namespace hh::train
