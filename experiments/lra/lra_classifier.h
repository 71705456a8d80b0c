// The Long Range Arena models (paper Table 6, the PyTorch LRA protocol of REFERENCE.md §4):
// a single-document classifier (ListOps, Text, Image, Pathfinder) that IS an EncoderClassifier,
// and the Retrieval two-tower model: the same encoder on both documents, pooled features x1, x2
// combined as [x1, x2, x1·x2, x1−x2] and classified by an MLP (Linear 4·dim → hidden, ReLU,
// Linear hidden → classes), as the PyTorch LRA code's dual-input head does.
// Batches are padded to their longest row with id 0; key masks keep padding out of attention
// (softmax and every linear form) and out of the mean pooling.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/gate.h"
#include "nn/mixer.h"
#include "nn/transformer.h"

namespace hh::nn {

struct LraModelConfig {
  int64_t vocab = 257;
  int64_t classes = 2;
  int64_t max_len = 1024;       // learned positions table size (per document)
  bool two_documents = false;   // Retrieval's two-tower model
  int64_t dim = 64;             // embedding
  int64_t mlp_hidden = 128;     // FFN (and the two-tower head's hidden width)
  int64_t heads = 2;
  int64_t head_dim = 32;
  int64_t layers = 2;
  double dropout = 0.1;
  Mixer attention;                    // softmax or a feature map (REFERENCE.md §2)
  Gate gate = Gate::none;             // a gated linear map runs causally (a recurrence read left to right)
  GateOutput gate_output = GateOutput::normalizer;  // gated maps: the output (nn/gate.h)
  FeatureMapConfig feature_map;       // options of the map (feature_dim, temperature, ...)
  uint64_t seed = 0;
};

// The encoder's TransformerConfig for `c`: learned positions, pre-LN, GELU FFN, non-causal
// attention (the linear maps in their non-causal form), mean pooling.
TransformerConfig lra_transformer_config(const LraModelConfig& c);

class LraClassifier : public Module {
 public:
  LraClassifier(const LraModelConfig& cfg, Init init);
  // ids (B,L) i64 with key_mask (B,L) bool; for two documents also ids2, mask2 (B,L2).
  // Returns logits (B,classes).
  Tensor forward(const Tensor& ids, const Tensor& key_mask, const Tensor& ids2 = Tensor(),
                 const Tensor& mask2 = Tensor());
  void on_optimizer_step();  // performer redraws
  // Every dropout module of the model (their generators go into checkpoints).
  std::vector<Dropout*> dropouts();

  LraModelConfig cfg;
  std::shared_ptr<EncoderClassifier> encoder;  // single document: with its classifier; two: without
  std::shared_ptr<Linear> head1, head2;        // two-tower MLP head (null for one document)
};

// Pads token rows to the longest one (at least 1 token) with id 0: ids (B,L) i64 and key_mask (B,L)
// bool, on the CPU.
void pad_batch(const std::vector<const std::vector<int32_t>*>& rows, Tensor& ids, Tensor& key_mask);

}  // namespace hh::nn
