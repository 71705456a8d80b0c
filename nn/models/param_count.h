// A model's parameter count computed from config.json before any layer is built (issue 27): each
// family sums its weights' sizes with overflow-checked arithmetic (core/checked.h), then refuses a
// config whose parameters would not fit in this machine's memory, or that needs more values than
// the folder's safetensors files hold, naming the config key behind the largest part of the count
// (a num_hidden_layers of 1,000,000,000 is refused at once instead of building layers for minutes).
#pragma once
#include <cstdint>
#include <string>
#include <utility>

#include "core/safetensors.h"

namespace hh::nn {

class ParamCount {
 public:
  explicit ParamCount(std::string where) : where_(std::move(where)) {}
  // `n` more parameters, a part of the model that grows with the config key `key` (whose value is
  // `value`): the key of the largest part is the one named when the count is refused.
  void add(const std::string& key, int64_t value, int64_t n);
  // a * b for a part of the count; the error on overflow names `what` (the keys multiplied).
  int64_t mul(int64_t a, int64_t b, const std::string& what) const;
  int64_t total() const { return total_; }
  // hh::Error when total() parameters exceed the machine's physical memory even as bf16.
  void check_memory() const;
  // Before a model is built from a folder: hh::Error when the config asks for more layers than
  // the weights hold (`key` = `layers`; the files' layers are the indices N of names with the
  // segments "<container>.N."), or for far more values (over 2^24 more: 64 MiB of f32) than all
  // their tensors hold. Smaller differences are left to the per-tensor shape check after the
  // build, which names the tensor.
  void check_stored(const SafeTensors& weights, const std::string& folder, const std::string& key, int64_t layers,
                    const std::string& container) const;

 private:
  std::string largest() const;  // "n_layer = 1000000000 (N parameters)"
  std::string where_;
  int64_t total_ = 0;
  std::string key_;
  int64_t value_ = 0, part_ = -1;
};

}  // namespace hh::nn
