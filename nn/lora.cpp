#include "nn/lora.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <utility>

namespace hh::nn {

namespace {

std::string last_component(const std::string& dotted) {
  size_t dot = dotted.rfind('.');
  return dot == std::string::npos ? dotted : dotted.substr(dot + 1);
}

std::string join(const std::vector<std::string>& v, size_t limit) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size() && i < limit; ++i) os << (i ? ", " : "") << v[i];
  if (v.size() > limit) os << ", ... (" << v.size() << " in all)";
  return os.str();
}

bool reserved(const std::string& name) { return name == "lora_A" || name == "lora_B" || name == "lora_dropout"; }

void check_config(const LoraConfig& cfg) {
  HH_CHECK(cfg.rank > 0, "apply_lora: rank must be positive, got ", cfg.rank);
  HH_CHECK(std::isfinite(cfg.alpha) && cfg.alpha > 0, "apply_lora: alpha must be positive, got ", cfg.alpha);
  HH_CHECK(cfg.dropout >= 0 && cfg.dropout < 1, "apply_lora: dropout must be in [0, 1), got ", cfg.dropout);
  HH_CHECK(!cfg.target_modules.empty(), "apply_lora: no target modules");
  for (const std::string& t : cfg.target_modules)
    HH_CHECK(!t.empty() && t.find('.') == std::string::npos && !reserved(t), "apply_lora: invalid target '", t,
             "' (a plain module name such as q_proj, without dots, not an adapter's own name)");
}

}  // namespace

int64_t apply_lora(Module& root, const LoraConfig& cfg, Init init) {
  check_config(cfg);
  std::vector<std::pair<std::string, std::shared_ptr<Linear>>> matched;
  std::vector<std::string> linear_names, linear_lasts;  // full names; distinct last components
  for (auto& [name, m] : root.named_modules()) {
    auto lin = std::dynamic_pointer_cast<Linear>(m);
    std::string last = last_component(name);
    if (!lin || reserved(last)) continue;
    linear_names.push_back(name);
    if (std::find(linear_lasts.begin(), linear_lasts.end(), last) == linear_lasts.end()) linear_lasts.push_back(last);
    if (std::find(cfg.target_modules.begin(), cfg.target_modules.end(), last) != cfg.target_modules.end())
      matched.emplace_back(name, lin);
  }
  HH_CHECK(!matched.empty(), "apply_lora: target modules [", join(cfg.target_modules, 100),
           "] match no Linear; the Linear names here end in [", join(linear_lasts, 20), "] (",
           linear_names.empty() ? std::string("there is no Linear") : "e.g. " + join(linear_names, 3), ")");
  for (auto& [name, lin] : matched)
    HH_CHECK(!lin->lora_A, "apply_lora: '", name, "' already has a LoRA adapter (merge_lora it first)");

  double scaling = cfg.alpha / static_cast<double>(cfg.rank);
  for (auto& [name, lin] : matched) {
    Init like_weight{init.gen, lin->weight.device(), lin->weight.dtype()};
    auto a = std::make_shared<Linear>(lin->in_features, cfg.rank, false, like_weight);  // U(-1/√in, 1/√in)
    like_weight.draw = false;
    auto b = std::make_shared<Linear>(cfg.rank, lin->out_features, false, like_weight);
    {
      NoGradGuard ng;
      copy_(b->weight, zeros(b->weight.shape(), {b->weight.dtype(), b->weight.device()}));
    }
    std::shared_ptr<Dropout> drop;
    if (cfg.dropout > 0) {
      drop = std::make_shared<Dropout>(cfg.dropout, init.gen.next_u32());
      drop->train(lin->is_training());
    }
    a->train(lin->is_training());
    b->train(lin->is_training());
    lin->attach_lora(std::move(a), std::move(b), std::move(drop), scaling);
  }
  return static_cast<int64_t>(matched.size());
}

int64_t merge_lora(Module& root) {
  NoGradGuard ng;
  int64_t merged = 0;
  for (auto& [name, m] : root.named_modules()) {
    auto lin = std::dynamic_pointer_cast<Linear>(m);
    if (!lin || !lin->lora_A) continue;
    const Tensor& w = lin->weight;  // (out, in)
    Tensor ba = matmul(lin->lora_B->weight.to(DType::f32), lin->lora_A->weight.to(DType::f32));  // (out, in)
    copy_(w, add(w.to(DType::f32), mul(ba, lin->lora_scaling)).to(w.dtype()));
    lin->detach_lora();
    ++merged;
  }
  HH_CHECK(merged > 0, "merge_lora: the model has no LoRA adapter");
  return merged;
}

}  // namespace hh::nn
