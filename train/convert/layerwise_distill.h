// Attention transfer layer by layer or block by block (LoLCATs' stage 1 for large decoders): the
// frozen softmax teacher runs one block of layers at a time; the feature maps (and hybrid window
// factors) of the block's layers are trained together, each layer on its own transfer loss
// (nn::distillation_loss: the weights term, the attention-output MSE, or both) computed from the
// teacher's hidden state entering that layer. Inside a block the residual stream carries the
// teacher's attention outputs (TraceRequest::teacher_forward), so every layer sees teacher hidden
// states, never a student's. Then every batch's hidden state is advanced through the block with the
// teacher's attention and the next block follows. Each block's training is one run of
// train/trainer.h's Trainer over its feature maps (no validation, no checkpoints).
//
// Memory: at any time one block's activations are alive (with the weights term, (B,H,L,L) teacher
// and student weights per layer; with the MSE alone, the efficient forms: no (L,L) matrix), besides
// every batch's hidden state at the block boundary (B·L·C each), kept on the device, in host
// memory, or in memory-mapped shard files on disk (train/convert/hidden_store.h). The whole-model
// stage 1 instead keeps every layer's activations and graph for the backward pass.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "core/tensor.h"
#include "nn/diagnostics.h"
#include "nn/models/hf_model.h"
#include "train/convert/hidden_store.h"

namespace hh::train {

struct LayerwiseConfig {
  int64_t epochs = 1;         // passes over the batches per block
  int64_t block = 1;          // layers trained together (the last block may be shorter)
  double lr = 1e-2;           // AdamW, as the driver's stage 1 (paper App. A.3: lr 1e-2, wd 0)
  double weight_decay = 0.0;
  nn::DistillOptions loss;    // per layer: weights term (soft CE or KL), output MSE, or both
  HiddenPlace hidden = HiddenPlace::device;  // where the hidden states wait between blocks
  std::string hidden_folder;  // HiddenPlace::disk: the shard folder (files removed at the end)
  bool quiet = true;          // false: one progress line per block on stderr
  Precision precision = Precision::f32;  // autograd/autocast.h
};

struct LayerwiseResult {
  // Per layer: its transfer loss at every step (epochs × batches, in order), and its mean over
  // each epoch's batches.
  std::vector<std::vector<double>> step_loss, epoch_loss;
  int64_t steps = 0, tokens = 0;  // optimizer steps over all blocks; tokens seen by them
  double seconds = 0;
  int64_t trainable = 0;          // feature-map scalars trained (all layers)
  int64_t hidden_bytes_on_disk = 0;  // HiddenPlace::disk: one boundary's shards
  double tokens_per_second() const { return seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0; }
};

// Trains every feature map of `student` (a causal LM with a linear or hybrid mixer; its other
// weights are the teacher's and stay bit-for-bit unchanged; layers kept as softmax are skipped)
// on `batches` of token ids (each (B,L) i64). Errors: a student with no feature map, no batches,
// a batch that is not (B,L) ids, block < 1. Every parameter's requires_grad flag is restored on
// return; the model is left in train mode, as the driver's stage 1 leaves it.
LayerwiseResult distill_layerwise(nn::CausalLM& student, const std::vector<Tensor>& batches,
                                  const LayerwiseConfig& cfg);

}  // namespace hh::train
