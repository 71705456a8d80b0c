#include "train/convert/layerwise_distill.h"

#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <string>

#include "autograd/grad_mode.h"
#include "train/optim.h"
#include "train/schedule.h"
#include "train/trainer.h"

namespace hh::train {

namespace {

// Restores every parameter's requires_grad flag when the run ends (normally or by an error).
class TrainableFlags {
 public:
  explicit TrainableFlags(nn::Module& m) : m_(m) {
    for (auto& [name, t] : m.named_parameters()) saved_[name] = t.requires_grad();
  }
  ~TrainableFlags() {
    for (auto& [name, on] : saved_) m_.parameter(name).requires_grad_(on);
  }
  TrainableFlags(const TrainableFlags&) = delete;
  TrainableFlags& operator=(const TrainableFlags&) = delete;

 private:
  nn::Module& m_;
  std::map<std::string, bool> saved_;
};

// The teacher's block l on hidden state x (no grad): softmax attention of the layer's own q, k, v.
Tensor teacher_block(const nn::LlamaDecoderLayer& layer, const Tensor& x) {
  Tensor q, k, v;
  layer.self_attn->project(layer.input_layernorm->forward(x), 0, q, k, v);
  Tensor h = add(x, layer.self_attn->merge(nn::softmax_attention(q, k, v, layer.self_attn->mixer.cfg.causal, Tensor())));
  return add(h, layer.mlp->forward(layer.post_attention_layernorm->forward(h)));
}

}  // namespace

LayerwiseResult distill_layerwise(nn::LlamaForCausalLM& student, const std::vector<Tensor>& batches,
                                  const LayerwiseConfig& cfg) {
  HH_CHECK(!batches.empty(), "distill_layerwise: no batches");
  HH_CHECK(cfg.epochs >= 1, "distill_layerwise: epochs must be >= 1, got ", cfg.epochs);
  HH_CHECK(cfg.lr > 0, "distill_layerwise: lr must be > 0, got ", cfg.lr);
  const nn::ModuleList<nn::LlamaDecoderLayer>& layers = *student.model->layers;
  for (size_t l = 0; l < layers.size(); ++l)
    HH_CHECK(layers[l]->self_attn->feature_map != nullptr, "distill_layerwise: layer ", l,
             " has softmax attention; the student needs a linear mixer (a feature map) to distill");
  const Device device = student.options().device;
  check_precision(cfg.precision, device);
  PrecisionGuard precision(cfg.precision);  // forward passes and losses; backward runs outside autocast
  const Device keep = cfg.hidden_on_host ? Device::cpu() : device;

  TrainableFlags restore(student);
  for (auto& [name, t] : student.named_parameters()) student.parameter(name).requires_grad_(false);
  student.train();

  LayerwiseResult r;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Tensor> hidden;  // the teacher's hidden state entering the current layer, per batch
  {
    NoGradGuard ng;
    for (const Tensor& ids : batches) hidden.push_back(student.embed(ids.to(device)).to(keep));
  }
  for (size_t l = 0; l < layers.size(); ++l) {
    const nn::LlamaDecoderLayer& layer = *layers[l];
    nn::LlamaAttention& attn = *layer.self_attn;
    ParamGroup group;
    for (auto& [name, t] : attn.feature_map->named_parameters()) {
      Tensor& p = attn.feature_map->parameter(name);
      p.requires_grad_(true);
      group.params.emplace_back(name, p);
      r.trainable += p.numel();
    }
    group.weight_decay = cfg.weight_decay;
    std::vector<double> steps, epochs;
    if (!group.params.empty()) {
      // One Trainer run per layer over its feature map alone: constant lr, no clipping, no
      // validation (each epoch's end records the epoch's mean training loss), no checkpoints.
      AdamW opt({group}, cfg.lr);
      ScheduleConfig sc;
      sc.base_lr = cfg.lr;
      const LrSchedule schedule(sc);
      const auto nb = static_cast<int64_t>(hidden.size());
      TrainerConfig tc;
      tc.total_steps = cfg.epochs * nb;
      tc.steps_per_epoch = nb;
      tc.keep_best = false;
      tc.show_progress = false;  // the line per layer below is this loop's progress
      tc.label = str("layer ", l + 1);
      TrainerHooks hooks;
      hooks.loss = [&](int64_t step, int64_t) {
        const auto b = static_cast<size_t>(step % nb);
        Tensor q, k, v;
        {
          NoGradGuard ng;
          attn.project(layer.input_layernorm->forward(hidden[b].to(device)), 0, q, k, v);
        }
        nn::TraceRequest tr = nn::distill_trace_request(cfg.loss);
        attn.mixer.forward(q, k, v, Tensor(), &tr);
        Tensor loss = nn::distillation_loss(tr, cfg.loss);
        const double lv = loss.item<double>();
        HH_CHECK(std::isfinite(lv), "distill_layerwise: layer ", l, " diverged at epoch ", step / nb + 1, ", batch ", b,
                 " (loss ", lv, ")");
        steps.push_back(lv);
        return loss;
      };
      hooks.evaluate = [](int64_t) { return Evaluation{}; };
      hooks.on_evaluation = [&](const EvaluationPoint& at, const Evaluation&) { epochs.push_back(at.train_loss); };
      hooks.after_step = [&](int64_t step) {
        attn.feature_map->on_step();
        const auto b = static_cast<size_t>((step - 1) % nb);
        ++r.steps;
        r.tokens += hidden[b].size(0) * hidden[b].size(1);
      };
      Trainer(*attn.feature_map, opt, schedule, tc, std::move(hooks)).fit();
      for (auto& [name, p] : group.params) p.requires_grad_(false);
    }
    if (!cfg.quiet && !epochs.empty())
      std::cerr << "layerwise distillation: layer " << l + 1 << "/" << layers.size() << " loss " << epochs.front()
                << " -> " << epochs.back() << "\n";
    r.step_loss.push_back(std::move(steps));
    r.epoch_loss.push_back(std::move(epochs));
    if (l + 1 < layers.size()) {  // the teacher's block l feeds layer l+1
      NoGradGuard ng;
      for (Tensor& x : hidden) x = teacher_block(layer, x.to(device)).to(keep);
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace hh::train
