// Choosing the layers a conversion keeps as softmax (DistillStage::softmax_layers), after stage 1
// and before logit distillation (which then trains the hybrid, as fla-org/hybrid-distillation's
// stage 2 does): the listed layers, or K layers by transfer error, evenly spread, or KL-guided.
//
// KL-guided selection ("Distilling to Hybrid Attention Models via KL-Guided Layer Selection",
// ICLR 2026): on the one all-linear student left by stage 1, each layer l in turn runs the
// teacher's softmax attention again (SoftmaxRestore: the student's own projections, which stage 1
// leaves the teacher's, with the softmax mixer; the other layers unchanged), the mean validation
// next-token KL(teacher || student) at T = 1 is measured, and score(l) = KL_all_linear - KL_with_l.
// The K largest scores are kept (ties: the lower layer). The paper gives each candidate a logit
// distillation run before measuring; DistillStage::kl_select_finetune gives each candidate (and the
// all-linear baseline) that many steps, from the same weights each time, and puts them back after.
#pragma once
#include <cstdint>
#include <vector>

#include "nn/attention.h"
#include "nn/models/hf_model.h"
#include "train/convert/convert.h"

namespace hh::train {

// While it lives, attention layer `layer` (0-based) of `model` is softmax attention with the
// layer's own projections; its mixer (feature map, gate, window) comes back when it is destroyed.
// Nothing is reloaded and no parameter changes: the restored layer's feature-map parameters stay
// in the model, unused.
class SoftmaxRestore {
 public:
  SoftmaxRestore(nn::HFModel& model, int64_t layer);
  ~SoftmaxRestore();
  SoftmaxRestore(const SoftmaxRestore&) = delete;
  SoftmaxRestore& operator=(const SoftmaxRestore&) = delete;

 private:
  nn::AttentionMixer* mixer_ = nullptr;
  nn::AttentionMixer saved_;
};

// The mean over up to `batches` validation batches (0 = all) of the next-token KL(teacher ||
// student) at temperature 1, over the positions the task scores; no grad, eval mode.
double validation_kl(ConversionTask& task, int64_t batches);

struct KlLayerScores {
  double all_linear = 0;           // the all-linear student's KL
  std::vector<double> with_layer;  // the KL with layer l restored to softmax
  std::vector<double> score;       // all_linear - with_layer[l]: larger = restoring l helps more
};
// Every attention layer's score on the task's student (its causal LM; a teacher is needed), with
// cfg.distill.kl_select_batches and kl_select_finetune (cfg.logits: lr, temperature, clip). The
// student is left as it was. One line per layer goes to stderr.
KlLayerScores kl_layer_scores(ConversionTask& task, const ConvertConfig& cfg);

// The layers kept as softmax after stage 1, ascending: cfg.distill.softmax_layer_list, or
// softmax_layers of them by softmax_choice (transfer: by r.layer_error, which the caller has
// measured). Sets r.softmax_choice and, for kl, r.kl_all_linear, r.layer_kl and r.layer_score.
std::vector<int64_t> choose_softmax_layers(ConversionTask& task, const ConvertConfig& cfg, ConvertResult& r);

// Checks before any work that the task can make the choice cfg.distill asks for (`layers`: the
// model's attention layers): K < layers, the listed layers exist, KL-guided selection has a causal
// LM student and its teacher. Errors start with "convert: ".
void check_softmax_choice(ConversionTask& task, const DistillStage& d, int64_t layers);

}  // namespace hh::train
