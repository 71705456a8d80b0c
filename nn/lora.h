// LoRA adapters on Linear layers, with PEFT's semantics and parameter names. For a Linear with
// weight W (out, in) and bias b, an adapter of rank r adds A (r, in) and B (out, r):
//   y = x Wᵀ + b + (alpha / r) · dropout(x) Aᵀ Bᵀ
// A starts as PEFT's kaiming_uniform(a=√5), i.e. U(-1/√in, 1/√in), and B as zeros, so a fresh
// adapter leaves the output unchanged. The tensors are saved as "<linear>.lora_A.weight" and
// "<linear>.lora_B.weight", the names of a PEFT adapter checkpoint.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nn/layers.h"

namespace hh::nn {

struct LoraConfig {
  int64_t rank = 8;
  double alpha = 16;
  double dropout = 0;  // on the adapter's input only, as PEFT's lora_dropout
  // Plain module names matched exactly against the LAST component of each Linear's dotted name
  // (HF names differ per family: q_proj/v_proj for Llama, query/value for BERT, c_attn for GPT-2).
  std::vector<std::string> target_modules = {"q_proj", "k_proj", "v_proj", "o_proj"};
};

// Attaches an adapter to every Linear below `root` whose last name component is a target; returns
// how many. A and B take the dtype and device of the Linear's weight (init's dtype, device and
// draw are not used); A is always drawn from init.gen (in named_modules order), and an adapter
// with dropout gets a Dropout seeded from init.gen. The root itself is never a target. Throws,
// changing nothing, on a bad config, when no Linear matches (the error lists the targets and the
// Linear names that exist) or when a matching Linear already has an adapter.
// Nothing is frozen: to train only the adapters, call root.freeze("*") then root.unfreeze("*lora_*").
int64_t apply_lora(Module& root, const LoraConfig& cfg, Init init);

// Folds every adapter into its Linear, W += (alpha / r) · B A (computed in f32, stored in W's
// dtype, without autograd), and removes the adapter, so state_dict() has the original names
// again. Returns how many were merged; a model without adapters is an error.
int64_t merge_lora(Module& root);

}  // namespace hh::nn
