// Attention transfer layer by layer (LoLCATs-style stage 1 for large decoders): the frozen softmax
// teacher runs block by block; layer l's feature map alone is trained to make the quadratic-form
// weights of layer l's own q, k (computed by the frozen projections, after RoPE, from the teacher's
// hidden state entering layer l) mimic the softmax weights of the same q, k (nn::distillation_loss,
// the driver's loss). Then every batch's hidden state is advanced through layer l with softmax
// attention (the teacher's block) and layer l+1 follows. Layers are independent: each sees teacher
// hidden states, never a student's. Each layer's training is one run of train/trainer.h's Trainer
// over that layer's feature map (no validation, no checkpoints, no progress of its own).
//
// Memory: at any time one layer's activations are alive, (B,H,L,L) teacher and student weights of
// one batch plus the feature-map activations, besides the current hidden state of every batch
// (B·L·C each; `hidden_on_host` keeps those in host memory). The whole-model stage 1 instead keeps
// every layer's weights and graph for the backward pass: layers × (B,H,L,L) × several.
#pragma once
#include <cstdint>
#include <vector>

#include "autograd/autocast.h"
#include "core/tensor.h"
#include "nn/diagnostics.h"
#include "nn/models/llama.h"

namespace hh::train {

struct LayerwiseConfig {
  int64_t epochs = 1;         // passes over the batches per layer
  double lr = 1e-2;           // AdamW, as the driver's stage 1 (paper App. A.3: lr 1e-2, wd 0)
  double weight_decay = 0.0;
  nn::DistillOptions loss;    // soft cross-entropy or KL, sum or mean over heads, output MSE
  bool hidden_on_host = false;  // keep the batches' hidden states in host memory between layers
  bool quiet = true;          // false: one progress line per layer on stderr
  Precision precision = Precision::f32;  // autograd/autocast.h
};

struct LayerwiseResult {
  // Per layer: the distillation loss of every step (epochs × batches, in order), and its mean over
  // each epoch's batches.
  std::vector<std::vector<double>> step_loss, epoch_loss;
  int64_t steps = 0, tokens = 0;  // over all layers
  double seconds = 0;
  int64_t trainable = 0;          // feature-map scalars trained (all layers)
  double tokens_per_second() const { return seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0; }
};

// Trains every layer's feature map of `student` (a Llama with a linear mixer; its other weights
// are the teacher's and stay bit-for-bit unchanged) on `batches` of token ids (each (B,L) i64).
// Errors: a softmax student (nothing to train), no batches, a batch that is not (B,L) ids.
// Every parameter's requires_grad flag is restored on return; the model is left in train mode,
// as the driver's stage 1 leaves it.
LayerwiseResult distill_layerwise(nn::LlamaForCausalLM& student, const std::vector<Tensor>& batches,
                                  const LayerwiseConfig& cfg);

}  // namespace hh::train
