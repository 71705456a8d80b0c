// Checkpoints: one safetensors file with the model's weights ("model.<name>"), the optimizer state
// ("optim.<name>.<slot>") and __metadata__ holding the format version, the step, the generators'
// (seed, offset) and whatever the caller adds (config JSON, data cursor). Written atomically.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "nn/module.h"
#include "train/optim.h"

namespace hh::train {

constexpr const char* kCheckpointFormat = "hedgehog.checkpoint.v1";

struct CheckpointMeta {
  int64_t step = 0;
  std::map<std::string, Generator*> generators;   // saved as "rng.<name>" = "seed offset"
  std::map<std::string, std::string> extra;       // free-form strings (config JSON, cursor, ...)
};

void save_checkpoint(const std::string& path, const nn::Module& model, const Optimizer* opt, const CheckpointMeta& meta);
// Restores weights (strict), optimizer state and the generators named in `meta`; fills meta.step
// and meta.extra. Errors name the file and what is missing or mismatched.
void load_checkpoint(const std::string& path, nn::Module& model, Optimizer* opt, CheckpointMeta& meta);

}  // namespace hh::train
