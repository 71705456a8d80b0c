#include "train/convert/softmax_choice.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace hh::train {

SoftmaxLayerChoice parse_softmax_layer_choice(const std::string& s) {
  if (s == "transfer") return SoftmaxLayerChoice::transfer;
  if (s == "kl") return SoftmaxLayerChoice::kl;
  if (s == "every") return SoftmaxLayerChoice::every;
  fail(str("unknown layer selection method '", s, "' (kl, transfer or every)"));
}

const char* softmax_layer_choice_name(SoftmaxLayerChoice c) {
  switch (c) {
    case SoftmaxLayerChoice::kl: return "kl";
    case SoftmaxLayerChoice::every: return "every";
    case SoftmaxLayerChoice::transfer: break;
  }
  return "transfer";
}

std::vector<int64_t> evenly_spread_layers(int64_t layers, int64_t k) {
  HH_CHECK(k >= 1 && k <= layers, "convert: cannot spread ", k, " softmax layers over ", layers, " layers");
  std::vector<int64_t> out;
  for (int64_t i = 0; i < k; ++i) out.push_back(i * layers / k);
  return out;
}

std::vector<int64_t> top_scoring_layers(const std::vector<double>& score, int64_t k, const std::string& what) {
  HH_CHECK(k >= 0 && k <= static_cast<int64_t>(score.size()), "convert: cannot keep ", k, " of ", score.size(),
           " layers as softmax");
  for (size_t l = 0; l < score.size(); ++l)
    HH_CHECK(std::isfinite(score[l]), "convert: the ", what, " of layer ", l, " is ", score[l],
             " (not finite): no layer can be chosen by it");
  std::vector<int64_t> order(score.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)];
  });
  order.resize(static_cast<size_t>(k));
  std::sort(order.begin(), order.end());
  return order;
}

}  // namespace hh::train
