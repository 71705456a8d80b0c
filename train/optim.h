// Optimizers (AdamW with decoupled decay through the fused backend kernel, SGD with momentum),
// parameter groups, and gradient-norm clipping. State is named after the parameters so
// checkpoints can save and restore it exactly.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace hh::train {

struct ParamGroup {
  std::vector<std::pair<std::string, Tensor>> params;  // (name, parameter)
  double weight_decay = 0.0;
  double lr_scale = 1.0;  // group lr = optimizer lr * lr_scale
};

// Splits trainable parameters into a decayed group and an undecayed one (biases, norm weights and
// every other tensor with fewer than 2 dims), as GPT-style recipes do.
std::vector<ParamGroup> decay_groups(const nn::Module& m, double weight_decay);
// One group with every trainable parameter.
std::vector<ParamGroup> single_group(const nn::Module& m, double weight_decay);

class Optimizer {
 public:
  explicit Optimizer(std::vector<ParamGroup> groups, double lr);
  virtual ~Optimizer() = default;
  virtual void step() = 0;  // parameters without a gradient are skipped
  void zero_grad();
  void set_lr(double lr) { lr_ = lr; }
  double lr() const { return lr_; }
  int64_t steps() const { return steps_; }
  // Named state tensors ("<param>.<slot>") plus the step count, for checkpoints.
  virtual nn::NamedTensors state() const = 0;
  virtual void load_state(const std::map<std::string, Tensor>& state, int64_t steps) = 0;
  const std::vector<ParamGroup>& groups() const { return groups_; }

 protected:
  std::vector<ParamGroup> groups_;
  double lr_;
  int64_t steps_ = 0;
};

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<ParamGroup> groups, double lr, AdamWOptions o = {});
  void step() override;
  nn::NamedTensors state() const override;
  void load_state(const std::map<std::string, Tensor>& state, int64_t steps) override;

 private:
  AdamWOptions o_;
  std::vector<std::vector<Tensor>> m_, v_;  // per group, per parameter
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> groups, double lr, double momentum = 0.0);
  void step() override;
  nn::NamedTensors state() const override;
  void load_state(const std::map<std::string, Tensor>& state, int64_t steps) override;

 private:
  double momentum_;
  std::vector<std::vector<Tensor>> buf_;
};

// Scales gradients in place so their global L2 norm is at most max_norm; returns the norm before
// clipping (torch.nn.utils.clip_grad_norm_). A non-finite norm is an error.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace hh::train
