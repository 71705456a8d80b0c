#include "train/ar_experiment.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include "data/batching.h"
#include "nn/diagnostics.h"
#include "train/early_stopping.h"
#include "train/optim.h"
#include "train/progress.h"
#include "train/schedule.h"

namespace hh::train {

Tensor ar_dense_targets(const Tensor& inputs, const Tensor& targets, const ArConfig& cfg) {
  const int64_t N = inputs.size(0), L = inputs.size(1);
  auto in = to_vector<int64_t>(inputs);
  auto out = to_vector<int64_t>(targets);
  std::vector<char> seen(static_cast<size_t>(cfg.vocab));
  for (int64_t n = 0; n < N; ++n) {
    std::fill(seen.begin(), seen.end(), 0);
    const int64_t* row = &in[static_cast<size_t>(n * L)];
    for (int64_t p = 0; p + 1 < L; ++p) {
      int64_t tok = row[p];
      if (!ar_is_key(tok, cfg) || !ar_is_value(row[p + 1], cfg)) continue;
      if (seen[static_cast<size_t>(tok)]) out[static_cast<size_t>(n * L + p)] = row[p + 1];
      seen[static_cast<size_t>(tok)] = 1;
    }
  }
  return from_vector(out, {N, L}, {DType::i64});
}

double ar_accuracy(nn::DecoderLM& model, const ArSplit& split, int64_t batch, Device device) {
  NoGradGuard ng;
  const int64_t N = split.inputs.size(0), L = split.inputs.size(1);
  int64_t correct = 0;
  for (int64_t s = 0; s < N; s += batch) {
    int64_t e = std::min(N, s + batch);
    Tensor ids = slice(split.inputs, 0, s, e).to(device);
    Tensor logits = model.forward(ids);                   // (b,L,V)
    Tensor last = select(logits, 1, L - 1);               // (b,V)
    auto pred = to_vector<int64_t>(argmax(last, -1));
    auto tgt = to_vector<int64_t>(select(slice(split.targets, 0, s, e), 1, L - 1));
    for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == tgt[i];
  }
  return N ? static_cast<double>(correct) / static_cast<double>(N) : 0.0;
}

namespace {

std::string label_of(const std::string& mixer, double t) {
  if (mixer == "exp" || mixer == "hedgehog-exp") {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s (t=%g)", mixer.c_str(), t);
    return buf;
  }
  return mixer;
}

// Diagnostics and figure material on the first test samples.
void diagnose(nn::DecoderLM& model, const ArDataset& data, Device device, ArRunResult& r) {
  NoGradGuard ng;
  model.eval();
  const int64_t n = std::min<int64_t>(16, data.test.inputs.size(0));
  nn::TraceRequest trace;
  trace.weights = true;
  trace.scores = true;
  model.forward(slice(data.test.inputs, 0, 0, n).to(device), &trace);
  double ent = 0, mono = 0;
  double best_entropy = 1e300;
  for (size_t l = 0; l < trace.layers.size(); ++l) {
    const auto& t = trace.layers[l];
    ent += nn::attention_entropy(t.weights);
    mono += nn::attention_monotonicity(t.scores, t.weights, true);
    // The figures show the most selective head of the model (lowest entropy) on sample 0.
    for (int64_t h = 0; h < t.weights.size(1); ++h) {
      Tensor w = select(select(t.weights, 0, 0), 0, h);  // (L,L)
      double e = nn::attention_entropy(reshape(w, {1, 1, w.size(0), w.size(1)}));
      if (e < best_entropy) {
        best_entropy = e;
        r.heat_layer = static_cast<int64_t>(l);
        r.heat_head = h;
      }
    }
  }
  r.entropy = ent / static_cast<double>(trace.layers.size());
  r.monotonicity = mono / static_cast<double>(trace.layers.size());
  const auto& t = trace.layers[static_cast<size_t>(r.heat_layer)];
  Tensor w = select(select(t.weights, 0, 0), 0, r.heat_head), s = select(select(t.scores, 0, 0), 0, r.heat_head);
  const int64_t L = w.size(0);
  r.heat = to_vector<double>(w);
  r.heat_len = L;
  auto ids = to_vector<int64_t>(select(data.test.inputs, 0, 0));
  for (int64_t id : ids) r.heat_tokens.push_back(std::to_string(id));
  auto sv = to_vector<double>(s);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      r.scatter_qk.push_back(sv[static_cast<size_t>(i * L + j)]);
      r.scatter_w.push_back(r.heat[static_cast<size_t>(i * L + j)]);
    }
}

}  // namespace

ArRunResult run_associative_recall(const ArDataset& data, const ArRunConfig& cfg) {
  HH_CHECK(cfg.epochs > 0 && cfg.batch > 0, "ar: epochs and batch must be positive, got ", cfg.epochs, ", ", cfg.batch);
  HH_CHECK(cfg.stop_accuracy > 0 && cfg.stop_accuracy <= 1, "ar: stop_accuracy must be in (0,1], got ", cfg.stop_accuracy);
  HH_CHECK(cfg.val_fraction > 0 && cfg.val_fraction < 1, "ar: val_fraction must be in (0,1), got ", cfg.val_fraction);
  ArRunResult r;
  r.mixer = cfg.mixer;
  r.temperature = cfg.temperature;
  r.label = label_of(cfg.mixer, cfg.temperature);
  r.lr = cfg.lr;
  r.weight_decay = cfg.weight_decay;
  r.batch = cfg.batch;

  nn::TransformerConfig mc = cfg.model;
  mc.vocab = data.config.vocab;
  mc.attention.mixer = cfg.mixer;
  mc.attention.feature_map.temperature = cfg.temperature;
  mc.seed = cfg.seed;
  Generator init_gen(cfg.seed);
  nn::DecoderLM model(mc, {init_gen, cfg.device});
  r.params = model.num_parameters();

  // Validation rows come off the end of the training split.
  const int64_t N = data.train.inputs.size(0);
  const int64_t n_val = std::max<int64_t>(1, static_cast<int64_t>(std::llround(cfg.val_fraction * static_cast<double>(N))));
  HH_CHECK(N - n_val >= 1, "ar: not enough training samples (", N, ") for a validation split of ", n_val);
  ArSplit train{slice(data.train.inputs, 0, 0, N - n_val), slice(data.train.targets, 0, 0, N - n_val)};
  ArSplit val{slice(data.train.inputs, 0, N - n_val, N), slice(data.train.targets, 0, N - n_val, N)};
  Tensor train_targets = cfg.dense_targets ? ar_dense_targets(train.inputs, train.targets, data.config) : train.targets;

  Batcher batches({train.inputs.contiguous(), train_targets}, {cfg.batch, true, false, cfg.seed + 17});
  const int64_t steps_per_epoch = batches.batches_per_epoch();
  ScheduleConfig sc;
  sc.kind = parse_schedule_kind(cfg.schedule);
  sc.base_lr = cfg.lr;
  sc.total_steps = steps_per_epoch * cfg.epochs;
  sc.warmup_steps = std::min<int64_t>(cfg.warmup_steps, sc.total_steps / 2);
  LrSchedule schedule(sc);
  AdamW opt(decay_groups(model, cfg.weight_decay), cfg.lr);
  EarlyStopping stopper(cfg.patience, EarlyStopMode::max);

  std::map<std::string, Tensor> best_state;
  auto snapshot = [&]() {
    best_state.clear();
    for (auto& [name, t] : model.state_dict()) best_state[name] = clone(t.detach());
  };
  snapshot();
  auto t0 = std::chrono::steady_clock::now();
  int64_t step = 0;
  for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    model.train();
    ProgressOptions po;
    po.label = r.label + " epoch " + std::to_string(epoch + 1) + "/" + std::to_string(cfg.epochs);
    po.total = steps_per_epoch;
    po.every_steps = 0;
    po.every_seconds = 30;
    if (cfg.quiet) po.mode = ProgressMode::plain;
    Progress progress(po);
    double loss_sum = 0;
    int64_t nb = 0;
    Batch b;
    while (batches.next(b)) {
      opt.set_lr(schedule.lr_at(step));
      Tensor ids = b.inputs().to(cfg.device), tg = b.targets().to(cfg.device);
      Tensor logits = model.forward(ids);  // (B,L,V)
      Tensor loss = cross_entropy(reshape(logits, {-1, mc.vocab}), reshape(tg, {-1}), kArIgnoreIndex);
      opt.zero_grad();
      loss.backward();
      if (cfg.grad_clip > 0) clip_grad_norm(model.parameters(), cfg.grad_clip);
      opt.step();
      model.on_optimizer_step();
      double lv = loss.item<double>();
      HH_CHECK(std::isfinite(lv), "ar (", r.label, "): loss became ", lv, " at step ", step);
      loss_sum += lv;
      ++nb;
      ++step;
      progress.update(nb, {{"loss", loss_sum / static_cast<double>(nb)}});
    }
    model.eval();
    double va = ar_accuracy(model, val, 64, cfg.device);
    progress.finish({{"loss", loss_sum / static_cast<double>(std::max<int64_t>(nb, 1))}, {"val_acc", va}});
    r.train_loss.push_back(loss_sum / static_cast<double>(std::max<int64_t>(nb, 1)));
    r.val_acc.push_back(va);
    r.epochs_run = epoch + 1;
    bool improved = stopper.update(va);
    if (improved) {
      r.val_accuracy = va;
      snapshot();
    }
    if (stopper.should_stop() || va >= cfg.stop_accuracy) break;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  model.load_state_dict(best_state);
  model.eval();
  r.accuracy = ar_accuracy(model, data.test, 64, cfg.device);
  diagnose(model, data, cfg.device, r);
  return r;
}

}  // namespace hh::train
