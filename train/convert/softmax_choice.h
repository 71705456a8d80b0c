// How a conversion chooses the layers that stay softmax (DistillStage::softmax_layers, issue 34):
// a type parsed once at the flag edge, and the choices that need no model.
//   transfer: the K layers of highest attention-transfer error after stage 1 (RADLADS).
//   kl:       KL-guided selection (fla-org/hybrid-distillation): on the all-linear student after
//             stage 1, each layer in turn is restored to the teacher's softmax attention and the drop
//             of the validation next-token KL(teacher || student) is its score; the K largest drops
//             are kept (train/convert/layer_select.h).
//   every:    K layers spread evenly over L: layers floor(i * L / K), i = 0..K-1 (the first is
//             layer 0; e.g. 0, 4, 8, 12, 16, 20, 24 for 7 of 28, fla-org's "uniform" hybrids).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hh::train {

enum class SoftmaxLayerChoice { transfer, kl, every };

// "transfer" | "kl" | "every"; anything else is an error listing them.
SoftmaxLayerChoice parse_softmax_layer_choice(const std::string& s);
const char* softmax_layer_choice_name(SoftmaxLayerChoice c);

// The layers `every` keeps: floor(i * layers / k) for i = 0..k-1, ascending; 1 <= k <= layers.
std::vector<int64_t> evenly_spread_layers(int64_t layers, int64_t k);

// The k layers of highest score (ties: the lower index first), ascending; 0 <= k <= score.size().
// A non-finite score is an error (`what` names the scores).
std::vector<int64_t> top_scoring_layers(const std::vector<double>& score, int64_t k, const std::string& what);

}  // namespace hh::train
