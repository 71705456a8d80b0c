#include "nn/module.h"

#include <algorithm>
#include <set>
#include <sstream>

namespace hh::nn {

bool glob_match(const std::string& p, const std::string& s) {
  // Iterative wildcard match with backtracking to the last '*'.
  size_t i = 0, j = 0, star = std::string::npos, mark = 0;
  while (j < s.size()) {
    if (i < p.size() && (p[i] == s[j] || p[i] == '?')) {
      ++i;
      ++j;
    } else if (i < p.size() && p[i] == '*') {
      star = i++;
      mark = j;
    } else if (star != std::string::npos) {
      i = star + 1;
      j = ++mark;
    } else {
      return false;
    }
  }
  while (i < p.size() && p[i] == '*') ++i;
  return i == p.size();
}

void Module::check_name(const std::string& name) const {
  HH_CHECK(!name.empty() && name.find('.') == std::string::npos, "Module: invalid name '", name,
           "' (non-empty, no dots)");
  auto taken = [&](const auto& v) {
    return std::any_of(v.begin(), v.end(), [&](const auto& p) { return p.first == name; });
  };
  HH_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), "Module: name '", name, "' registered twice");
}

Tensor& Module::register_parameter(const std::string& name, Tensor* slot, Tensor init) {
  check_name(name);
  *slot = init.detach();
  if (slot->defined()) slot->requires_grad_(true);
  params_.emplace_back(name, slot);
  return *slot;
}

Tensor& Module::register_buffer(const std::string& name, Tensor* slot, Tensor init) {
  check_name(name);
  *slot = init.defined() ? init.detach() : init;
  buffers_.emplace_back(name, slot);
  return *slot;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_name(name);
  HH_CHECK(m != nullptr, "Module: submodule '", name, "' is null");
  children_.emplace_back(name, std::move(m));
}

void Module::unregister_module(const std::string& name) {
  auto it = std::find_if(children_.begin(), children_.end(), [&](const auto& c) { return c.first == name; });
  HH_CHECK(it != children_.end(), "Module: no submodule named '", name, "' to remove");
  children_.erase(it);
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() const {
  // Pre-order, registration order, iterative. Self comes first as ("", nullptr).
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  out.emplace_back("", nullptr);
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> st2;
  for (auto it = children_.rbegin(); it != children_.rend(); ++it) st2.emplace_back(it->first, it->second);
  while (!st2.empty()) {
    auto [name, m] = st2.back();
    st2.pop_back();
    out.emplace_back(name, m);
    for (auto it = m->children_.rbegin(); it != m->children_.rend(); ++it) st2.emplace_back(name + "." + it->first, it->second);
  }
  return out;
}

namespace {
template <typename Getter>
NamedTensors collect(const Module& root, const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& mods,
                     Getter get) {
  NamedTensors out;
  for (const auto& [prefix, m] : mods) {
    const Module& mod = m ? *m : root;
    for (const auto& [name, slot] : get(mod))
      if (slot->defined()) out.emplace_back(prefix.empty() ? name : prefix + "." + name, *slot);
  }
  return out;
}
}  // namespace

NamedTensors Module::named_parameters() const {
  return collect(*this, named_modules(), [](const Module& m) -> const auto& { return m.params_; });
}
NamedTensors Module::named_buffers() const {
  return collect(*this, named_modules(), [](const Module& m) -> const auto& { return m.buffers_; });
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters())
    if (!trainable_only || t.requires_grad()) n += t.numel();
  return n;
}

NamedTensors Module::state_dict() const {
  NamedTensors out = named_parameters();
  for (auto& b : named_buffers()) out.push_back(b);
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  NamedTensors mine = state_dict();
  std::set<std::string> names;
  std::vector<std::string> missing, mismatched;
  for (auto& [name, t] : mine) {
    names.insert(name);
    auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(name);
      continue;
    }
    if (it->second.shape() != t.shape()) {
      mismatched.push_back(name + " (model " + shape_str(t.shape()) + ", checkpoint " + shape_str(it->second.shape()) + ")");
    }
  }
  std::vector<std::string> unexpected;
  for (auto& [name, t] : state)
    if (!names.count(name)) unexpected.push_back(name);
  auto join = [](const std::vector<std::string>& v) {
    std::ostringstream os;
    for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
    return os.str();
  };
  HH_CHECK(mismatched.empty(), "load_state_dict: shape mismatch for ", join(mismatched));
  HH_CHECK(!strict || (missing.empty() && unexpected.empty()), "load_state_dict: missing keys [", join(missing),
           "], unexpected keys [", join(unexpected), "]");
  NoGradGuard ng;
  for (auto& [name, t] : mine) {
    auto it = state.find(name);
    if (it == state.end()) continue;
    Tensor src = it->second.to(t.dtype()).to(t.device());
    copy_(t, src);
  }
}

void Module::train(bool on) {
  for (auto& [name, m] : named_modules()) {
    Module& mod = m ? *m : *this;
    mod.training_ = on;
    mod.on_train(on);
  }
}

namespace {
int64_t set_requires_grad(Module& m, const std::string& pattern, bool on) {
  int64_t n = 0;
  for (auto& [name, t] : m.named_parameters())
    if (glob_match(pattern, name)) {
      Tensor(t).requires_grad_(on);
      ++n;
    }
  HH_CHECK(n > 0, (on ? "unfreeze" : "freeze"), ": pattern '", pattern, "' matches no parameter");
  return n;
}
}  // namespace

int64_t Module::freeze(const std::string& pattern) { return set_requires_grad(*this, pattern, false); }
int64_t Module::unfreeze(const std::string& pattern) { return set_requires_grad(*this, pattern, true); }

void Module::zero_grad() {
  for (auto& [name, t] : named_parameters()) Tensor(t).zero_grad();
}

void Module::to(Device d) {
  for (auto& [prefix, m] : named_modules()) {
    Module& mod = m ? *m : *this;
    for (auto& [name, slot] : mod.params_) {
      if (!slot->defined() || slot->device() == d) continue;
      bool rg = slot->requires_grad();
      *slot = slot->detach().to(d);
      slot->requires_grad_(rg);
    }
    for (auto& [name, slot] : mod.buffers_)
      if (slot->defined()) *slot = slot->detach().to(d);
  }
}

void Module::to(DType t) {
  for (auto& [prefix, m] : named_modules()) {
    Module& mod = m ? *m : *this;
    for (auto& [name, slot] : mod.params_) {
      if (!slot->defined() || !is_floating(slot->dtype()) || slot->dtype() == t) continue;
      bool rg = slot->requires_grad();
      *slot = slot->detach().to(t);
      slot->requires_grad_(rg);
    }
  }
}

Tensor& Module::parameter(const std::string& dotted) {
  for (auto& [prefix, m] : named_modules()) {
    Module& mod = m ? *m : *this;
    for (auto& [name, slot] : mod.params_)
      if ((prefix.empty() ? name : prefix + "." + name) == dotted) return *slot;
  }
  fail(str("Module::parameter: no parameter named '", dotted, "'"));
}

}  // namespace hh::nn
