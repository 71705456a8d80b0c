// Checkpoints: one safetensors file with the model's weights ("model.<name>"), the optimizer state
// ("optim.<name>.<slot>"), the caller's own tensors ("extra.<name>") and __metadata__ holding the format version, the step, the generators'
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
  std::map<std::string, Tensor> tensors;          // free-form tensors (e.g. a best-so-far copy of the weights)
};

// Before writing, removes stale temp files of `path` left by a writer that was killed mid-write
// (remove_stale_temps in core/atomic_file.h says which are stale).
void save_checkpoint(const std::string& path, const nn::Module& model, const Optimizer* opt, const CheckpointMeta& meta);
// Written with a checksum per tensor (core/safetensors.h).
// Restores weights (strict), optimizer state and the generators named in `meta`; fills meta.step
// meta.extra and meta.tensors. Errors name the file and what is missing or mismatched. Every
// tensor's checksum is verified (a checkpoint without checksums, written before they existed,
// loads with a one-line warning on stderr), and a model or optimizer tensor holding NaN or
// infinity is refused, naming it (meta.tensors, the caller's own, are not checked).
void load_checkpoint(const std::string& path, nn::Module& model, Optimizer* opt, CheckpointMeta& meta);

// Where two run fingerprints (JSON texts: every setting that decides a run's result) differ: their
// JSON pointers joined by ", " ("/lr, /model/n_embd"), or "" when they are equal. A saved text that
// is not JSON gives "its unreadable fingerprint". Resuming apps refuse a checkpoint that differs.
std::string fingerprint_diff(const std::string& saved, const std::string& now);

}  // namespace hh::train
