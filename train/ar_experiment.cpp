#include "train/ar_experiment.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "core/progress.h"
#include "data/batching.h"
#include "nn/diagnostics.h"
#include "train/checkpoint.h"
#include "train/early_stopping.h"
#include "train/optim.h"
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

std::string ar_label(const std::string& mixer, double t) {
  if (mixer != "exp") return mixer;  // only exp takes a temperature (REFERENCE.md §2)
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s (t=%g)", mixer.c_str(), t);
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
      {"mixer", cfg.mixer}, {"temperature", cfg.temperature}, {"epochs", cfg.epochs}, {"batch", cfg.batch},
      {"lr", cfg.lr}, {"weight_decay", cfg.weight_decay}, {"patience", cfg.patience},
      {"stop_accuracy", cfg.stop_accuracy}, {"grad_clip", cfg.grad_clip}, {"schedule", cfg.schedule},
      {"warmup_steps", cfg.warmup_steps}, {"targets", ar_targets_name(cfg.targets)},
      {"early_stop", cfg.early_stop}, {"val_fraction", cfg.val_fraction},
      {"seed", cfg.seed}, {"device", cfg.device.str()}, {"diverge_factor", cfg.diverge_factor},
      {"diverge_steps", cfg.diverge_steps}};
  if (cfg.precision != Precision::f32) j["precision"] = precision_name(cfg.precision);  // f32 runs keep their fingerprint
  return j.dump();
}

namespace {

// Watches the per-step loss for divergence (ArRunConfig::diverge_*); its state is checkpointed.
struct DivergenceWatch {
  double factor = 0;
  int64_t steps = 0;
  double initial = 0;      // the first step's loss
  bool has_initial = false;
  int64_t above = 0;       // consecutive steps above factor × initial

  // Returns why the run diverged, or "" when it has not.
  std::string update(double loss) {
    if (!std::isfinite(loss)) return str("the loss became non-finite (", loss, ")");
    if (!has_initial) {
      initial = loss;
      has_initial = true;
    }
    above = factor > 0 && loss > factor * initial ? above + 1 : 0;
    if (above >= steps && above > 0)
      return str("the loss stayed above ", factor, " x its initial value ", initial, " for ", above,
                 " steps (now ", loss, ")");
    return "";
  }
};

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

// Where a run stands between steps: what a checkpoint holds besides the weights and AdamW state.
struct RunState {
  int64_t step = 0;
  BatchCursor cursor;
  double epoch_loss_sum = 0;  // loss summed over the batches of the current epoch so far
  int64_t epoch_batches = 0;
  bool finished = false;      // the epoch loop is over (early stop, solved, or out of epochs)
  double seconds = 0;         // training time before this process resumed
};

void save_run(const std::string& path, const std::string& fingerprint, const nn::DecoderLM& model, const AdamW& opt,
              const EarlyStopping& stopper, const DivergenceWatch& watch, const RunState& rs, const ArRunResult& r,
              const std::map<std::string, Tensor>& best_state) {
  const EarlyStoppingState& es = stopper.state();
  nlohmann::json state = {{"cursor", {rs.cursor.epoch, rs.cursor.position}},
                          {"epoch_loss_sum", rs.epoch_loss_sum},
                          {"epoch_batches", rs.epoch_batches},
                          {"finished", rs.finished},
                          {"seconds", rs.seconds},
                          {"early_stopping", {es.has_best, es.best, es.best_index, es.bad_count, es.num_updates}},
                          {"divergence", {watch.has_initial, watch.initial, watch.above}},
                          {"train_loss", r.train_loss},
                          {"val_acc", r.val_acc},
                          {"val_loss", r.val_loss},
                          {"val_accuracy", r.val_accuracy},
                          {"epochs_run", r.epochs_run}};
  CheckpointMeta meta;
  meta.step = rs.step;
  meta.extra["ar.fingerprint"] = fingerprint;
  meta.extra["ar.state"] = state.dump();
  meta.tensors = best_state;
  save_checkpoint(path, model, &opt, meta);
}

void load_run(const std::string& path, const std::string& fingerprint, nn::DecoderLM& model, AdamW& opt,
              EarlyStopping& stopper, DivergenceWatch& watch, RunState& rs, ArRunResult& r,
              std::map<std::string, Tensor>& best_state) {
  CheckpointMeta meta;
  load_checkpoint(path, model, &opt, meta);
  auto get = [&](const char* key) -> const std::string& {
    auto it = meta.extra.find(key);
    HH_CHECK(it != meta.extra.end(), "checkpoint ", path, ": metadata lacks '", key, "' (not an ar_probe checkpoint)");
    return it->second;
  };
  const std::string diff = fingerprint_diff(get("ar.fingerprint"), fingerprint);
  if (!diff.empty()) {
    fail(str("checkpoint ", path, ": it was saved by a run with another configuration (differs in ", diff,
             "); start afresh without resuming, or use the original settings"));
  }
  try {
    const nlohmann::json st = nlohmann::json::parse(get("ar.state"));
    rs.step = meta.step;
    rs.cursor = {st.at("cursor").at(0).get<int64_t>(), st.at("cursor").at(1).get<int64_t>()};
    rs.epoch_loss_sum = st.at("epoch_loss_sum").get<double>();
    rs.epoch_batches = st.at("epoch_batches").get<int64_t>();
    rs.finished = st.at("finished").get<bool>();
    rs.seconds = st.at("seconds").get<double>();
    const auto& e = st.at("early_stopping");
    stopper.set_state({e.at(0).get<bool>(), e.at(1).get<double>(), e.at(2).get<int64_t>(), e.at(3).get<int64_t>(),
                       e.at(4).get<int64_t>()});
    const auto& d = st.at("divergence");
    watch.has_initial = d.at(0).get<bool>();
    watch.initial = d.at(1).get<double>();
    watch.above = d.at(2).get<int64_t>();
    r.train_loss = st.at("train_loss").get<std::vector<double>>();
    r.val_acc = st.at("val_acc").get<std::vector<double>>();
    r.val_loss = st.at("val_loss").get<std::vector<double>>();
    r.val_accuracy = st.at("val_accuracy").get<double>();
    r.epochs_run = st.at("epochs_run").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    fail(str("checkpoint ", path, ": bad training state in its metadata: ", e.what()));
  }
  best_state = meta.tensors;
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
  r.temperature = cfg.temperature;
  r.label = ar_label(cfg.mixer, cfg.temperature);
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
  EarlyStopping stopper(cfg.patience, stop_on_loss ? EarlyStopMode::min : EarlyStopMode::max);
  DivergenceWatch watch;
  watch.factor = cfg.diverge_factor;
  watch.steps = cfg.diverge_steps;

  std::map<std::string, Tensor> best_state;
  auto snapshot = [&]() {
    best_state.clear();
    for (auto& [name, t] : model.state_dict()) best_state[name] = clone(t.detach());
  };
  snapshot();
  RunState rs;
  const std::string fingerprint = checkpoints ? ar_run_fingerprint(data, cfg) : "";
  if (cfg.resume && ::access(cfg.checkpoint_path.c_str(), F_OK) == 0) {
    load_run(cfg.checkpoint_path, fingerprint, model, opt, stopper, watch, rs, r, best_state);
    batches.set_cursor(rs.cursor);
  }
  auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return rs.seconds + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  auto save = [&] {
    if (!checkpoints) return;
    RunState now = rs;
    now.cursor = batches.cursor();
    now.seconds = elapsed();
    save_run(cfg.checkpoint_path, fingerprint, model, opt, stopper, watch, now, r, best_state);
  };
  while (!rs.finished) {
    const int64_t epoch = batches.epoch();
    model.train();
    ProgressOptions po;
    po.label = r.label + " epoch " + std::to_string(epoch + 1) + "/" + std::to_string(cfg.epochs);
    po.total = steps_per_epoch;
    po.every_steps = 0;
    po.every_seconds = 30;
    if (cfg.quiet) po.mode = ProgressMode::plain;
    Progress progress(po);
    if (rs.epoch_batches > 0)  // resumed in the middle of this epoch
      progress.update(rs.epoch_batches, {{"loss", rs.epoch_loss_sum / static_cast<double>(rs.epoch_batches)}});
    Batch b;
    while (batches.next(b)) {
      opt.set_lr(schedule.lr_at(rs.step));
      Tensor ids = b.inputs().to(cfg.device), tg = b.targets().to(cfg.device);
      Tensor logits = model.forward(ids);  // (B,L,V)
      Tensor loss = cross_entropy(reshape(logits, {-1, mc.vocab}), reshape(tg, {-1}), kArIgnoreIndex);
      const double lv = loss.item<double>();
      std::string why = watch.update(lv);  // checked before the update: a NaN never reaches the weights
      if (why.empty()) {
        opt.zero_grad();
        loss.backward();
        try {
          if (cfg.grad_clip > 0) clip_grad_norm(model.parameters(), cfg.grad_clip);
        } catch (const Error& e) {  // a finite loss whose gradient overflowed
          why = e.what();
        }
      }
      if (!why.empty()) {
        // Evaluate the best weights seen before the divergence; the caller reports the status.
        r.status = str("diverged at epoch ", epoch + 1, ", step ", rs.step + 1, ": ", why);
        rs.finished = true;
        break;
      }
      opt.step();
      model.on_optimizer_step();
      ++rs.step;
      rs.epoch_loss_sum += lv;
      ++rs.epoch_batches;
      progress.update(rs.epoch_batches, {{"loss", rs.epoch_loss_sum / static_cast<double>(rs.epoch_batches)}});
      const bool stop_now = cfg.stop_after_steps > 0 && rs.step >= cfg.stop_after_steps;
      if ((cfg.checkpoint_every > 0 && rs.step % cfg.checkpoint_every == 0) || stop_now) save();
      if (stop_now) {
        r.status = str("interrupted at step ", rs.step);
        r.steps = rs.step;
        r.seconds = elapsed();
        return r;
      }
    }
    if (rs.finished) break;  // diverged
    model.eval();
    const double mean_loss = rs.epoch_loss_sum / static_cast<double>(std::max<int64_t>(rs.epoch_batches, 1));
    const ArEval ve = ar_evaluate(model, val, 64, cfg.device);
    const double va = ve.accuracy;
    progress.finish({{"loss", mean_loss}, {"val_loss", ve.loss}, {"val_acc", va}});
    r.train_loss.push_back(mean_loss);
    r.val_acc.push_back(va);
    r.val_loss.push_back(ve.loss);
    r.epochs_run = epoch + 1;
    if (stopper.update(stop_on_loss ? ve.loss : va)) {
      r.val_accuracy = va;
      snapshot();
    }
    rs.epoch_loss_sum = 0;
    rs.epoch_batches = 0;
    rs.finished = stopper.should_stop() || va >= cfg.stop_accuracy || epoch + 1 >= cfg.epochs;
    save();
  }
  r.steps = rs.step;
  r.seconds = elapsed();
  model.load_state_dict(best_state);
  model.eval();
  r.accuracy = ar_accuracy(model, data.test, 64, cfg.device);
  diagnose_run(model, data, cfg.device, r);
  return r;
}

}  // namespace hh::train
