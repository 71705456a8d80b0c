#include "train/optim.h"

#include <algorithm>
#include <cmath>

#include "core/backend.h"

namespace hh::train {

std::vector<ParamGroup> decay_groups(const nn::Module& m, double weight_decay) {
  ParamGroup decay{{}, weight_decay, 1.0}, no_decay{{}, 0.0, 1.0};
  for (auto& [name, p] : m.named_parameters()) {
    if (!p.requires_grad()) continue;
    (p.dim() >= 2 ? decay : no_decay).params.emplace_back(name, p);
  }
  std::vector<ParamGroup> out;
  if (!decay.params.empty()) out.push_back(decay);
  if (!no_decay.params.empty()) out.push_back(no_decay);
  return out;
}

std::vector<ParamGroup> single_group(const nn::Module& m, double weight_decay) {
  ParamGroup g{{}, weight_decay, 1.0};
  for (auto& [name, p] : m.named_parameters())
    if (p.requires_grad()) g.params.emplace_back(name, p);
  return {g};
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr) : groups_(std::move(groups)), lr_(lr) {
  HH_CHECK(lr >= 0, "optimizer: learning rate must be >= 0, got ", lr);
  size_t n = 0;
  for (auto& g : groups_) {
    HH_CHECK(g.weight_decay >= 0, "optimizer: weight decay must be >= 0, got ", g.weight_decay);
    for (auto& [name, p] : g.params) {
      HH_CHECK(p.is_leaf() && is_compute_float(p.dtype()), "optimizer: parameter '", name,
               "' must be an f32/f64 leaf tensor, got ", p.dtype());
      ++n;
    }
  }
  HH_CHECK(n > 0, "optimizer: no trainable parameters");
}

void Optimizer::zero_grad() {
  for (auto& g : groups_)
    for (auto& [name, p] : g.params) Tensor(p).zero_grad();
}

AdamW::AdamW(std::vector<ParamGroup> groups, double lr, AdamWOptions o) : Optimizer(std::move(groups), lr), o_(o) {
  HH_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "AdamW: betas must be in [0,1), got ", o.beta1,
           ", ", o.beta2);
  HH_CHECK(o.eps > 0, "AdamW: eps must be positive, got ", o.eps);
  for (auto& g : groups_) {
    m_.emplace_back();
    v_.emplace_back();
    for (auto& [name, p] : g.params) {
      m_.back().push_back(zeros_like(p));
      v_.back().push_back(zeros_like(p));
    }
  }
}

void AdamW::step() {
  ++steps_;
  // One multi-tensor update per (device, dtype): every group's tensors in one backend call, each
  // with its group's lr and weight decay.
  std::vector<std::vector<AdamWTensor>> batches;
  std::vector<Tensor> updated;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    for (size_t i = 0; i < g.params.size(); ++i) {
      const Tensor& param = g.params[i].second;
      Tensor grad = param.grad();
      if (!grad.defined()) continue;
      HH_CHECK(grad.shape() == param.shape(), "AdamW: gradient of '", g.params[i].first, "' has shape ", grad.shape(),
               ", parameter ", param.shape());
      AdamWTensor t{param, contiguous(grad.to(param.dtype())), m_[gi][i], v_[gi][i], lr_ * g.lr_scale, g.weight_decay};
      auto same = [&](const std::vector<AdamWTensor>& b) {  // batches are never empty
        return b.front().param.device() == param.device() && b.front().param.dtype() == param.dtype();
      };
      auto it = std::find_if(batches.begin(), batches.end(), same);
      if (it == batches.end()) it = batches.insert(batches.end(), std::vector<AdamWTensor>{});
      it->push_back(std::move(t));
      updated.push_back(param);
    }
  }
  const AdamWParams shared{lr_, o_.beta1, o_.beta2, o_.eps, 0.0, steps_};
  for (const auto& b : batches) backend_of(b.front().param).adamw_multi_step(b, shared);
  for (const Tensor& param : updated) bump_version(param);  // in-place writes: graphs that saved them can no longer backward
}

nn::NamedTensors AdamW::state() const {
  nn::NamedTensors out;
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t i = 0; i < groups_[gi].params.size(); ++i) {
      out.emplace_back(groups_[gi].params[i].first + ".exp_avg", m_[gi][i]);
      out.emplace_back(groups_[gi].params[i].first + ".exp_avg_sq", v_[gi][i]);
    }
  return out;
}

namespace {
void load_slot(const std::map<std::string, Tensor>& state, const std::string& key, Tensor& dst) {
  auto it = state.find(key);
  HH_CHECK(it != state.end(), "optimizer state: missing '", key, "'");
  HH_CHECK(it->second.shape() == dst.shape(), "optimizer state: '", key, "' has shape ", it->second.shape(),
           ", expected ", dst.shape());
  copy_(dst, it->second.to(dst.dtype()).to(dst.device()));
}
}  // namespace

void AdamW::load_state(const std::map<std::string, Tensor>& state, int64_t steps) {
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t i = 0; i < groups_[gi].params.size(); ++i) {
      load_slot(state, groups_[gi].params[i].first + ".exp_avg", m_[gi][i]);
      load_slot(state, groups_[gi].params[i].first + ".exp_avg_sq", v_[gi][i]);
    }
  steps_ = steps;
}

SGD::SGD(std::vector<ParamGroup> groups, double lr, double momentum) : Optimizer(std::move(groups), lr), momentum_(momentum) {
  HH_CHECK(momentum >= 0 && momentum < 1, "SGD: momentum must be in [0,1), got ", momentum);
  for (auto& g : groups_) {
    buf_.emplace_back();
    for (auto& [name, p] : g.params) buf_.back().push_back(zeros_like(p));
  }
}

void SGD::step() {
  ++steps_;
  NoGradGuard ng;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    const double lr = lr_ * g.lr_scale;
    for (size_t i = 0; i < g.params.size(); ++i) {
      const Tensor& p = g.params[i].second;
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      Tensor d = g.weight_decay > 0 ? add(grad, mul(p.detach(), g.weight_decay)) : grad;
      if (momentum_ > 0) {  // torch: buf = momentum * buf + d (dampening 0); first step buf = d
        Tensor nb = steps_ == 1 ? d : add(mul(buf_[gi][i], momentum_), d);
        copy_(buf_[gi][i], nb);
        d = buf_[gi][i];
      }
      copy_(p, sub(p.detach(), mul(d, lr)));
    }
  }
}

nn::NamedTensors SGD::state() const {
  nn::NamedTensors out;
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t i = 0; i < groups_[gi].params.size(); ++i)
      out.emplace_back(groups_[gi].params[i].first + ".momentum_buffer", buf_[gi][i]);
  return out;
}

void SGD::load_state(const std::map<std::string, Tensor>& state, int64_t steps) {
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t i = 0; i < groups_[gi].params.size(); ++i)
      load_slot(state, groups_[gi].params[i].first + ".momentum_buffer", buf_[gi][i]);
  steps_ = steps;
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  HH_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be positive, got ", max_norm);
  NoGradGuard ng;
  double total = 0.0;
  for (const Tensor& p : params)
    if (p.grad().defined()) total += sum(square(p.grad().to(DType::f64))).item<double>();
  double norm = std::sqrt(total);
  HH_CHECK(std::isfinite(norm), "clip_grad_norm: the gradient norm is not finite (", norm, ")");
  double scale = max_norm / (norm + 1e-6);
  if (scale < 1.0)
    for (const Tensor& p : params)
      if (p.grad().defined()) Tensor(p).set_grad(mul(p.grad(), scale));
  return norm;
}

}  // namespace hh::train
