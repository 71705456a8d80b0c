#include "train/convert/layer_select.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <utility>

#include "autograd/grad_mode.h"
#include "train/optim.h"
#include "train/schedule.h"
#include "train/trainer.h"

namespace hh::train {

SoftmaxRestore::SoftmaxRestore(nn::HFModel& model, int64_t layer) {
  std::vector<nn::AttentionSite> sites = model.attention_sites();
  HH_CHECK(layer >= 0 && layer < static_cast<int64_t>(sites.size()), "convert: layer ", layer,
           " is not one of the model's ", sites.size(), " attention layers");
  mixer_ = sites[static_cast<size_t>(layer)].mixer;
  saved_ = *mixer_;
  // As HFModel::keep_softmax turns a layer back: the softmax mixer, no gate on a state it lacks.
  nn::MixerConfig mc = saved_.cfg;
  mc.mixer = nn::Mixer::softmax();
  mc.gate = nn::Gate::none;
  mc.gate_output = nn::GateOutput::normalizer;
  *mixer_ = nn::AttentionMixer(mc, nullptr);
}

SoftmaxRestore::~SoftmaxRestore() { *mixer_ = std::move(saved_); }

double validation_kl(ConversionTask& task, int64_t batches) {
  NoGradGuard ng;
  task.model().eval();
  int64_t n = task.batches(Split::val);
  if (batches > 0) n = std::min(n, batches);
  HH_CHECK(n > 0, "convert: the validation split has no batches");
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += task.logit_loss(Split::val, i, 1.0).item<double>();
  return total / static_cast<double>(n);
}

namespace {

// The validation KL after `d.kl_select_finetune` steps of logit distillation of every weight (the
// training batches in their epoch-0 order, AdamW at the logit stage's lr, a constant schedule),
// from the student's weights now; those weights, and which parameters train, are put back after.
double finetuned_kl(ConversionTask& task, const ConvertConfig& cfg) {
  const DistillStage& d = cfg.distill;
  const LogitStage& g = cfg.logits;
  nn::Module& model = task.model();
  std::map<std::string, Tensor> saved;
  for (const auto& [name, t] : model.state_dict()) saved[name] = t.detach().clone();
  std::vector<std::pair<std::string, bool>> trainable;
  for (auto& [name, t] : model.named_parameters()) {
    Tensor& p = model.parameter(name);
    trainable.emplace_back(name, p.requires_grad());
    p.requires_grad_(true);
  }
  double kl = 0;
  {
    AdamW opt(decay_groups(model, g.weight_decay), g.lr);
    ScheduleConfig sc;  // constant
    sc.base_lr = g.lr;
    LrSchedule schedule(sc);
    TrainerConfig tc;
    tc.total_steps = d.kl_select_finetune;
    tc.eval_every = d.kl_select_finetune;  // once, after the last step
    tc.grad_clip = g.grad_clip;
    tc.keep_best = false;
    tc.show_progress = false;
    tc.label = "kl select";
    TrainerHooks hooks;
    const int64_t nb = task.batches(Split::train);
    hooks.loss = [&](int64_t step, int64_t) {
      if (step % nb == 0) task.shuffle(step / nb);
      return task.logit_loss(Split::train, step % nb, g.temperature);
    };
    hooks.evaluate = [&](int64_t) {
      kl = validation_kl(task, d.kl_select_batches);
      model.train();
      return Evaluation{kl, {{"val_kl", kl}}, false};
    };
    const TrainerResult tr = Trainer(model, opt, schedule, tc, std::move(hooks)).fit();
    HH_CHECK(tr.status == "ok", "convert: KL-guided layer selection: a candidate's logit distillation ", tr.status);
  }
  model.load_state_dict(saved, /*strict=*/true);
  for (const auto& [name, on] : trainable) model.parameter(name).requires_grad_(on);
  return kl;
}

}  // namespace

KlLayerScores kl_layer_scores(ConversionTask& task, const ConvertConfig& cfg) {
  const DistillStage& d = cfg.distill;
  nn::CausalLM* lm = task.causal_lm();
  HH_CHECK(lm != nullptr && task.has_teacher_logits(),
           "convert: KL-guided layer selection needs a causal LM student and its softmax teacher");
  auto measure = [&] { return d.kl_select_finetune > 0 ? finetuned_kl(task, cfg) : validation_kl(task, d.kl_select_batches); };
  const auto layers = static_cast<int64_t>(lm->attention_sites().size());
  const auto t0 = std::chrono::steady_clock::now();
  KlLayerScores s;
  s.all_linear = measure();
  const std::string after = d.kl_select_finetune > 0 ? str(" after ", d.kl_select_finetune, " logit steps") : "";
  std::cerr << "kl select: validation KL(teacher || student)" << after << ": all-linear " << s.all_linear << "\n";
  for (int64_t l = 0; l < layers; ++l) {
    double kl = 0;
    {
      SoftmaxRestore restore(*lm, l);
      kl = measure();
    }
    s.with_layer.push_back(kl);
    s.score.push_back(s.all_linear - kl);
    char line[160];
    std::snprintf(line, sizeof line, "kl select: layer %lld softmax: KL %.6g, score %.6g\n", static_cast<long long>(l), kl,
                  s.all_linear - kl);
    std::cerr << line;
  }
  std::cerr << "kl select: " << layers << " layers scored in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s\n";
  return s;
}

void check_softmax_choice(ConversionTask& task, const DistillStage& d, int64_t layers) {
  HH_CHECK(d.softmax_layers >= 0, "convert: softmax_layers must be >= 0, got ", d.softmax_layers);
  HH_CHECK(d.softmax_layers == 0 || d.softmax_layer_list.empty(),
           "convert: keep either the N layers of highest error or a list of layers, not both");
  HH_CHECK(d.softmax_choice == SoftmaxLayerChoice::transfer || d.softmax_layer_list.empty(),
           "convert: a list of softmax layers is chosen by hand, not by ", softmax_layer_choice_name(d.softmax_choice));
  HH_CHECK(d.kl_select_batches >= 0 && d.kl_select_finetune >= 0,
           "convert: kl_select_batches and kl_select_finetune must be >= 0");
  if (d.softmax_layers == 0 && d.softmax_layer_list.empty()) return;
  HH_CHECK(d.softmax_layers < layers, "convert: --softmax-layers ", d.softmax_layers, ": the model has ", layers,
           " attention layers (keep fewer than all)");
  for (int64_t l : d.softmax_layer_list)
    HH_CHECK(l >= 0 && l < layers, "convert: softmax layer ", l, " is not one of the model's ", layers,
             " attention layers (0 to ", layers - 1, ")");
  if (d.softmax_layers > 0 && d.softmax_choice == SoftmaxLayerChoice::kl)
    HH_CHECK(task.causal_lm() != nullptr && task.has_teacher_logits(),
             "convert: KL-guided layer selection (--softmax-layers-by kl) needs a causal LM student and its softmax "
             "teacher's logits; choose by transfer or every");
}

std::vector<int64_t> choose_softmax_layers(ConversionTask& task, const ConvertConfig& cfg, ConvertResult& r) {
  const DistillStage& d = cfg.distill;
  std::vector<int64_t> chosen;
  if (!d.softmax_layer_list.empty()) {
    r.softmax_choice = "list";
    chosen = d.softmax_layer_list;
  } else {
    r.softmax_choice = softmax_layer_choice_name(d.softmax_choice);
    switch (d.softmax_choice) {
      case SoftmaxLayerChoice::transfer:
        chosen = top_scoring_layers(r.layer_error, d.softmax_layers, "transfer error");
        break;
      case SoftmaxLayerChoice::every:
        chosen = evenly_spread_layers(static_cast<int64_t>(r.layer_error.size()), d.softmax_layers);
        break;
      case SoftmaxLayerChoice::kl: {
        const KlLayerScores s = kl_layer_scores(task, cfg);
        r.kl_all_linear = s.all_linear;
        r.layer_kl = s.with_layer;
        r.layer_score = s.score;
        chosen = top_scoring_layers(s.score, d.softmax_layers, "KL drop");
        break;
      }
    }
  }
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

}  // namespace hh::train
