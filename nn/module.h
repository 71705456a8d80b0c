// Module: named parameters, buffers and submodules with dotted paths (HF-style names by
// construction), train/eval, freezing by name pattern, state_dict with strict checks.
// Modules are held by shared_ptr and never copied (the registry points into the object).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/ops.h"

namespace hh::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter/buffer of this module and its children, "child.sub.name" order of registration.
  NamedTensors named_parameters() const;
  NamedTensors named_buffers() const;
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules() const;  // includes self as ""
  int64_t num_parameters(bool trainable_only = false) const;

  // Parameters and buffers by name (what checkpoints and HF import read and write).
  NamedTensors state_dict() const;
  // strict: every name must exist on both sides with equal shapes; otherwise an Error lists the
  // missing and unexpected names and the mismatched shapes. Values are copied into the existing
  // tensors (cast to their dtype), so handles held elsewhere stay valid.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Glob patterns over parameter names ('*' matches any run of characters, including dots).
  // Returns how many parameters matched; zero matches is an error (a typo must not pass silently).
  int64_t freeze(const std::string& pattern);
  int64_t unfreeze(const std::string& pattern);
  void zero_grad();
  // Moves parameters and buffers to `d` (cast to `t` for floating tensors when given).
  void to(Device d);
  void to(DType t);

  Tensor& parameter(const std::string& dotted_name);  // lookup by full name; throws listing nearby names
  // Removes a registered submodule (and with it its parameters from state_dict), as `del
  // module.child` in PyTorch; throws when absent.
  void unregister_module(const std::string& name);

 protected:
  // Registers a member tensor as a parameter (requires_grad on); returns it.
  Tensor& register_parameter(const std::string& name, Tensor* slot, Tensor init);
  Tensor& register_buffer(const std::string& name, Tensor* slot, Tensor init);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }
  virtual void on_train(bool) {}

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void check_name(const std::string& name) const;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<std::pair<std::string, Tensor*>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

// An ordered list of submodules named "0", "1", ... (like torch.nn.ModuleList).
template <typename M>
class ModuleList : public Module {
 public:
  std::shared_ptr<M> push_back(std::shared_ptr<M> m) {
    items_.push_back(register_module(std::to_string(items_.size()), std::move(m)));
    return items_.back();
  }
  size_t size() const { return items_.size(); }
  const std::shared_ptr<M>& operator[](size_t i) const { return items_.at(i); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

bool glob_match(const std::string& pattern, const std::string& name);

}  // namespace hh::nn
