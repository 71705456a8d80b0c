#include "train/convert/layerwise_distill.h"

#include <algorithm>
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

// Layers [first, last) of the student run as the teacher on x (the residual stream carries the
// softmax outputs). With `losses`, each layer's transfer loss (graph to its feature map) is
// appended; without, nothing is traced beyond what teacher_forward needs and no graph is kept.
Tensor teacher_block(const nn::CausalLM& m, int64_t first, int64_t last, Tensor x, const nn::DistillOptions& o,
                     std::vector<Tensor>* losses) {
  for (int64_t l = first; l < last; ++l) {
    nn::TraceRequest tr;
    if (losses) tr = nn::distill_trace_request(o);
    tr.teacher_forward = true;
    x = m.layer_forward(l, x, &tr);
    if (losses) losses->push_back(nn::distillation_loss(tr, o));
  }
  return x;
}

}  // namespace

LayerwiseResult distill_layerwise(nn::CausalLM& student, const std::vector<Tensor>& batches,
                                  const LayerwiseConfig& cfg) {
  HH_CHECK(!batches.empty(), "distill_layerwise: no batches");
  HH_CHECK(cfg.epochs >= 1, "distill_layerwise: epochs must be >= 1, got ", cfg.epochs);
  HH_CHECK(cfg.block >= 1, "distill_layerwise: block must be >= 1 layer, got ", cfg.block);
  HH_CHECK(cfg.lr > 0, "distill_layerwise: lr must be > 0, got ", cfg.lr);
  nn::distill_trace_request(cfg.loss);  // a loss term is on
  std::vector<nn::AttentionSite> sites = student.attention_sites();
  const int64_t layers = student.num_layers();
  HH_CHECK(static_cast<int64_t>(sites.size()) == layers, "distill_layerwise: ", layers, " layers but ", sites.size(),
           " attention sites");
  bool any = false;
  for (const auto& s : sites) any = any || *s.feature_map != nullptr;
  HH_CHECK(any, "distill_layerwise: every layer has softmax attention; the student needs a linear or hybrid mixer "
                "(a feature map) to distill");
  const Device device = student.options().device;
  check_precision(cfg.precision, device);
  PrecisionGuard precision(cfg.precision);  // forward passes and losses; backward runs outside autocast

  TrainableFlags restore(student);
  for (auto& [name, t] : student.named_parameters()) student.parameter(name).requires_grad_(false);
  student.train();

  LayerwiseResult r;
  r.step_loss.resize(static_cast<size_t>(layers));
  r.epoch_loss.resize(static_cast<size_t>(layers));
  const auto t0 = std::chrono::steady_clock::now();
  HiddenStore hidden(cfg.hidden, device, cfg.hidden_folder);  // entering the current block, per batch
  {
    NoGradGuard ng;
    for (size_t b = 0; b < batches.size(); ++b) hidden.put(b, student.embed(batches[b].to(device)));
  }
  r.hidden_bytes_on_disk = hidden.bytes_on_disk();
  const auto nb = static_cast<int64_t>(batches.size());
  for (int64_t first = 0; first < layers; first += cfg.block) {
    const int64_t last = std::min(layers, first + cfg.block);
    // The block's feature maps, one parameter group.
    ParamGroup group;
    group.weight_decay = cfg.weight_decay;
    for (int64_t l = first; l < last; ++l) {
      const auto& map = *sites[static_cast<size_t>(l)].feature_map;
      if (!map) continue;  // a layer kept as softmax
      for (auto& [name, t] : map->named_parameters()) {
        Tensor& p = map->parameter(name);
        p.requires_grad_(true);
        group.params.emplace_back(str(l, ".", name), p);
        r.trainable += p.numel();
      }
    }
    if (!group.params.empty()) {
      // One Trainer run per block over its feature maps: constant lr, no clipping, no validation,
      // no checkpoints.
      AdamW opt({group}, cfg.lr);
      ScheduleConfig sc;
      sc.base_lr = cfg.lr;
      const LrSchedule schedule(sc);
      TrainerConfig tc;
      tc.total_steps = cfg.epochs * nb;
      tc.steps_per_epoch = nb;
      tc.keep_best = false;
      tc.show_progress = false;  // the line per block below is this loop's progress
      tc.label = str("layers ", first + 1, "-", last);
      TrainerHooks hooks;
      hooks.loss = [&](int64_t step, int64_t) {
        const auto b = static_cast<size_t>(step % nb);
        std::vector<Tensor> losses;
        teacher_block(student, first, last, hidden.get(b), cfg.loss, &losses);
        Tensor total;
        for (size_t k = 0; k < losses.size(); ++k) {
          const double lv = losses[k].item<double>();
          const int64_t l = first + static_cast<int64_t>(k);
          HH_CHECK(std::isfinite(lv), "distill_layerwise: layer ", l, " diverged at epoch ", step / nb + 1, ", batch ",
                   b, " (loss ", lv, ")");
          r.step_loss[static_cast<size_t>(l)].push_back(lv);
          if (*sites[static_cast<size_t>(l)].feature_map) total = total.defined() ? add(total, losses[k]) : losses[k];
        }
        return total;
      };
      hooks.evaluate = [](int64_t) { return Evaluation{}; };
      hooks.after_step = [&](int64_t step) {
        for (int64_t l = first; l < last; ++l)
          if (const auto& map = *sites[static_cast<size_t>(l)].feature_map) map->on_step();
        ++r.steps;
        r.tokens += batches[static_cast<size_t>((step - 1) % nb)].numel();
      };
      Trainer(student, opt, schedule, tc, std::move(hooks)).fit();
      for (auto& [name, p] : group.params) p.requires_grad_(false);
      for (int64_t l = first; l < last; ++l) {  // each epoch's mean, per layer
        const std::vector<double>& s = r.step_loss[static_cast<size_t>(l)];
        for (int64_t e = 0; e < cfg.epochs && !s.empty(); ++e) {
          double sum = 0;
          for (int64_t i = e * nb; i < (e + 1) * nb; ++i) sum += s[static_cast<size_t>(i)];
          r.epoch_loss[static_cast<size_t>(l)].push_back(sum / static_cast<double>(nb));
        }
      }
    }
    if (!cfg.quiet && !group.params.empty()) {
      std::cerr << "layer-wise transfer: layers " << first + 1 << "-" << last << "/" << layers << " loss";
      for (int64_t l = first; l < last; ++l) {
        const auto& e = r.epoch_loss[static_cast<size_t>(l)];
        if (!e.empty()) std::cerr << " " << e.front() << " -> " << e.back();
      }
      std::cerr << "\n";
    }
    if (last < layers) {  // the teacher's block feeds the next one
      NoGradGuard ng;
      for (size_t b = 0; b < batches.size(); ++b)
        hidden.put(b, teacher_block(student, first, last, hidden.get(b), cfg.loss, nullptr));
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace hh::train
