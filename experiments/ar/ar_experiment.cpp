#include "experiments/ar/ar_experiment.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "core/internal/json_read.h"
#include "core/progress.h"
#include "data/batching.h"
#include "nn/diagnostics.h"
#include "train/early_stopping.h"
#include "train/optim.h"
#include "train/schedule.h"
#include "train/trainer.h"

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

const char* ar_targets_name(ArTargets t) {
  return t == ArTargets::query ? "query" : t == ArTargets::all ? "all" : "recall";
}

ArTargets parse_ar_targets(const std::string& name) {
  for (ArTargets t : {ArTargets::query, ArTargets::recall, ArTargets::all})
    if (name == ar_targets_name(t)) return t;
  fail(str("ar: unknown targets '", name, "' (expected query, recall or all)"));
}

Tensor ar_training_targets(const Tensor& inputs, const Tensor& targets, const ArConfig& cfg, ArTargets which) {
  if (which == ArTargets::query) return targets;
  if (which == ArTargets::recall) return ar_dense_targets(inputs, targets, cfg);
  const int64_t N = inputs.size(0), L = inputs.size(1);
  auto in = to_vector<int64_t>(inputs);
  auto out = to_vector<int64_t>(targets);  // keeps the answer in column L-1
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p + 1 < L; ++p) out[static_cast<size_t>(n * L + p)] = in[static_cast<size_t>(n * L + p + 1)];
  return from_vector(out, {N, L}, {DType::i64});
}

ArEval ar_evaluate(nn::DecoderLM& model, const ArSplit& split, int64_t batch, Device device) {
  NoGradGuard ng;
  const int64_t N = split.inputs.size(0), L = split.inputs.size(1);
  int64_t correct = 0;
  double loss_sum = 0;
  for (int64_t s = 0; s < N; s += batch) {
    int64_t e = std::min(N, s + batch);
    Tensor ids = slice(split.inputs, 0, s, e).to(device);
    Tensor logits = model.forward(ids);                   // (b,L,V)
    Tensor last = select(logits, 1, L - 1);               // (b,V)
    Tensor tgt = select(slice(split.targets, 0, s, e), 1, L - 1).contiguous();  // (b,)
    loss_sum += cross_entropy(last, tgt.to(device)).item<double>() * static_cast<double>(e - s);
    auto pred = to_vector<int64_t>(argmax(last, -1));
    auto tv = to_vector<int64_t>(tgt);
    for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == tv[i];
  }
  if (N == 0) return {};
  return {static_cast<double>(correct) / static_cast<double>(N), loss_sum / static_cast<double>(N)};
}

std::string ar_label(const nn::Mixer& mixer, double t, nn::Gate gate) {
  // only exp takes a temperature (REFERENCE.md §2)
  if (mixer.feature_map() != "exp") return nn::gated_label(nn::name(mixer), gate);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s (t=%g)", nn::gated_label(nn::name(mixer), gate).c_str(), t);
  return buf;
}

std::string ar_run_fingerprint(const ArDataset& data, const ArRunConfig& cfg) {
  const nn::TransformerConfig& m = cfg.model;
  const nn::AttentionConfig& a = m.attention;
  const ArConfig& d = data.config;
  nlohmann::json j = {
      {"data", {{"vocab", d.vocab}, {"seq_len", d.seq_len}, {"style", ar_style_name(d.style)},
                {"num_train", d.num_train}, {"num_test", d.num_test}, {"seed", d.seed}}},
      {"model", {{"dim", m.dim}, {"layers", m.layers}, {"heads", m.heads}, {"head_dim", m.head_dim},
                 {"mlp_hidden", m.mlp_hidden}, {"max_len", m.max_len}, {"positions", m.positions},
                 {"pre_ln", m.pre_ln}, {"norm", m.norm}, {"mlp", m.mlp}, {"norm_eps", m.norm_eps},
                 {"dropout", m.dropout}, {"tie_embeddings", m.tie_embeddings}, {"bias", m.bias},
                 {"form", static_cast<int>(a.form)}, {"chunk", a.chunk}, {"eps", a.eps},
                 {"feature_dim", a.feature_map.feature_dim}, {"redraw", a.feature_map.redraw_interval},
                 {"joint_softmax", a.feature_map.joint_softmax}, {"untied", a.feature_map.untied}}},
      {"mixer", nn::name(cfg.mixer)}, {"temperature", cfg.temperature}, {"epochs", cfg.epochs}, {"batch", cfg.batch},
      {"lr", cfg.lr}, {"weight_decay", cfg.weight_decay}, {"patience", cfg.patience},
      {"stop_accuracy", cfg.stop_accuracy}, {"grad_clip", cfg.grad_clip}, {"schedule", cfg.schedule},
      {"warmup_steps", cfg.warmup_steps}, {"targets", ar_targets_name(cfg.targets)},
      {"early_stop", cfg.early_stop}, {"val_fraction", cfg.val_fraction},
      {"seed", cfg.seed}, {"device", cfg.device.str()}, {"diverge_factor", cfg.diverge_factor},
      {"diverge_steps", cfg.diverge_steps}};
  if (cfg.precision != Precision::f32) j["precision"] = precision_name(cfg.precision);  // f32 runs keep their fingerprint
  if (cfg.mixer.is_hybrid()) j["model"]["window"] = a.window;  // only hybrids: other runs keep their fingerprint
  if (cfg.gate != nn::Gate::none) j["model"]["gate"] = nn::name(cfg.gate);  // only gated runs: others unchanged
  if (cfg.gate_output != nn::GateOutput::normalizer) j["model"]["gate_output"] = nn::name(cfg.gate_output);
  return j.dump();
}

namespace {

// Diagnostics and figure material on the first test samples.
void diagnose_run(nn::DecoderLM& model, const ArDataset& data, Device device, ArRunResult& r) {
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

// A checkpoint of the AR loop before train/trainer.h: the loop state it held, in the Trainer's
// terms (its batch cursor is the step's), and the curves restored into `r`.
nlohmann::json load_legacy_ar_state(const std::map<std::string, std::string>& extra, ArRunResult& r) {
  auto it = extra.find("ar.state");
  HH_CHECK(it != extra.end(), "metadata lacks 'ar.state' (not an ar_probe checkpoint)");
  const nlohmann::json st = nlohmann::json::parse(it->second);
  r.train_loss = st.at("train_loss").get<std::vector<double>>();
  r.val_acc = st.at("val_acc").get<std::vector<double>>();
  r.val_loss = st.at("val_loss").get<std::vector<double>>();
  r.val_accuracy = st.at("val_accuracy").get<double>();
  r.epochs_run = json_int(st.at("epochs_run"), "ar_probe checkpoint: ar.state: \"epochs_run\"");
  return {{"loss_sum", st.at("epoch_loss_sum")}, {"loss_count", st.at("epoch_batches")},
          {"finished", st.at("finished")},       {"seconds", st.at("seconds")},
          {"early_stopping", st.at("early_stopping")}, {"divergence", st.at("divergence")}};
}

}  // namespace

ArRunResult run_associative_recall(const ArDataset& data, const ArRunConfig& cfg) {
  HH_CHECK(cfg.epochs > 0 && cfg.batch > 0, "ar: epochs and batch must be positive, got ", cfg.epochs, ", ", cfg.batch);
  HH_CHECK(cfg.stop_accuracy > 0 && cfg.stop_accuracy <= 1, "ar: stop_accuracy must be in (0,1], got ", cfg.stop_accuracy);
  HH_CHECK(cfg.early_stop == "accuracy" || cfg.early_stop == "loss", "ar: early_stop must be accuracy or loss, got '",
           cfg.early_stop, "'");
  HH_CHECK(cfg.val_fraction > 0 && cfg.val_fraction < 1, "ar: val_fraction must be in (0,1), got ", cfg.val_fraction);
  HH_CHECK(cfg.diverge_factor == 0 || cfg.diverge_factor > 1, "ar: diverge_factor must be 0 (off) or > 1, got ",
           cfg.diverge_factor);
  HH_CHECK(cfg.diverge_steps >= 1, "ar: diverge_steps must be >= 1, got ", cfg.diverge_steps);
  HH_CHECK(cfg.checkpoint_every >= 0 && cfg.stop_after_steps >= 0, "ar: checkpoint_every and stop_after_steps must be >= 0");
  const bool checkpoints = !cfg.checkpoint_path.empty();
  HH_CHECK(!(cfg.resume || cfg.stop_after_steps > 0) || checkpoints, "ar: resume and stop_after_steps need a checkpoint_path");
  // Dropout draws from generators that the checkpoint does not hold.
  HH_CHECK(!checkpoints || cfg.model.dropout == 0, "ar: checkpoints need dropout 0 (got ", cfg.model.dropout, ")");
  check_precision(cfg.precision, cfg.device);
  // bf16 autocast for the whole run: forward passes, losses and evaluations. Backward runs outside
  // autocast (the engine turns it off), and the optimizer updates the f32 weights.
  PrecisionGuard precision(cfg.precision);
  ArRunResult r;
  r.mixer = cfg.mixer;
  r.gate = cfg.gate;
  r.gate_output = cfg.gate_output;
  r.temperature = cfg.temperature;
  r.label = ar_label(cfg.mixer, cfg.temperature, cfg.gate);
  r.lr = cfg.lr;
  r.weight_decay = cfg.weight_decay;
  r.batch = cfg.batch;

  nn::TransformerConfig mc = cfg.model;
  mc.vocab = data.config.vocab;
  mc.attention.mixer = cfg.mixer;
  mc.attention.gate = cfg.gate;
  mc.attention.gate_output = cfg.gate_output;
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
  Tensor train_targets = ar_training_targets(train.inputs, train.targets, data.config, cfg.targets);

  Batcher batches({train.inputs.contiguous(), train_targets}, {cfg.batch, true, false, cfg.seed + 17});
  const int64_t steps_per_epoch = batches.batches_per_epoch();
  ScheduleConfig sc;
  sc.kind = parse_schedule_kind(cfg.schedule);
  sc.base_lr = cfg.lr;
  sc.total_steps = steps_per_epoch * cfg.epochs;
  sc.warmup_steps = std::min<int64_t>(cfg.warmup_steps, sc.total_steps / 2);
  LrSchedule schedule(sc);
  AdamW opt(decay_groups(model, cfg.weight_decay), cfg.lr);
  const bool stop_on_loss = cfg.early_stop == "loss";

  TrainerConfig tc;
  tc.total_steps = sc.total_steps;
  tc.steps_per_epoch = steps_per_epoch;  // evaluated at every epoch's end
  tc.grad_clip = cfg.grad_clip;
  tc.patience = cfg.patience;
  tc.mode = stop_on_loss ? EarlyStopMode::min : EarlyStopMode::max;
  tc.diverge_factor = cfg.diverge_factor;
  tc.diverge_steps = cfg.diverge_steps;
  tc.checkpoint_path = cfg.checkpoint_path;
  tc.kind = "ar";
  tc.fingerprint = checkpoints ? ar_run_fingerprint(data, cfg) : "";
  tc.checkpoint_every = cfg.checkpoint_every;
  tc.resume = cfg.resume;
  tc.stop_after_steps = cfg.stop_after_steps;
  tc.label = r.label;
  tc.quiet = cfg.quiet;
  TrainerHooks hooks;
  hooks.loss = [&](int64_t step, int64_t) {
    Batch b;
    batches.set_cursor({step / steps_per_epoch, (step % steps_per_epoch) * cfg.batch});
    batches.next(b);
    Tensor ids = b.inputs().to(cfg.device), tg = b.targets().to(cfg.device);
    Tensor logits = model.forward(ids);  // (B,L,V)
    return cross_entropy(reshape(logits, {-1, mc.vocab}), reshape(tg, {-1}), kArIgnoreIndex);
  };
  ArEval last;
  hooks.evaluate = [&](int64_t) {
    model.eval();
    last = ar_evaluate(model, val, 64, cfg.device);
    return Evaluation{stop_on_loss ? last.loss : last.accuracy, {{"val_loss", last.loss}, {"val_acc", last.accuracy}},
                      last.accuracy >= cfg.stop_accuracy};
  };
  hooks.on_evaluation = [&](const EvaluationPoint& at, const Evaluation&) {
    r.train_loss.push_back(at.train_loss);
    r.val_acc.push_back(last.accuracy);
    r.val_loss.push_back(last.loss);
    r.epochs_run = (at.step + steps_per_epoch - 1) / steps_per_epoch;
    if (at.best) r.val_accuracy = last.accuracy;
  };
  hooks.after_step = [&](int64_t) { model.on_optimizer_step(); };
  hooks.save_state = [&] {
    return JsonText{nlohmann::json{{"train_loss", r.train_loss}, {"val_acc", r.val_acc}, {"val_loss", r.val_loss},
                                   {"val_accuracy", r.val_accuracy}, {"epochs_run", r.epochs_run}}
                        .dump()};
  };
  hooks.load_state = [&](const JsonText& text) {
    const nlohmann::json st = nlohmann::json::parse(text.text);
    r.train_loss = st.at("train_loss").get<std::vector<double>>();
    r.val_acc = st.at("val_acc").get<std::vector<double>>();
    r.val_loss = st.at("val_loss").get<std::vector<double>>();
    r.val_accuracy = st.at("val_accuracy").get<double>();
    r.epochs_run = json_int(st.at("epochs_run"), "ar_probe checkpoint: ar.state: \"epochs_run\"");
  };
  hooks.load_legacy = [&](const std::map<std::string, std::string>& extra) {
    return JsonText{load_legacy_ar_state(extra, r).dump()};
  };
  const TrainerResult tr = Trainer(model, opt, schedule, tc, std::move(hooks)).fit();
  r.status = tr.status;
  r.steps = tr.steps;
  r.seconds = tr.seconds;
  if (tr.interrupted()) return r;  // nothing evaluated

  model.eval();
  r.accuracy = ar_accuracy(model, data.test, 64, cfg.device);
  diagnose_run(model, data, cfg.device, r);
  return r;
}

}  // namespace hh::train
