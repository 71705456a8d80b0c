#include "experiments/lm/lm_train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "autograd/grad_mode.h"
#include "autograd/ops/nn.h"
#include "autograd/ops/shape.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/safetensors.h"
#include "data/text_corpus.h"
#include "nn/models/hf_save.h"
#include "train/checkpoint.h"
#include "train/metrics_log.h"
#include "train/optim.h"
#include "train/schedule.h"

namespace hh::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int64_t warmup_steps(const LmTrainConfig& c) {
  return c.warmup >= 1.0 ? static_cast<int64_t>(c.warmup) : static_cast<int64_t>(std::llround(c.warmup * c.steps));
}

}  // namespace

void check_lm_train_config(const LmTrainConfig& c, int world) {
  HH_CHECK(c.context >= 1 && c.context <= c.model.n_positions, "--context ", c.context,
           " must be in [1, the model's n_positions ", c.model.n_positions, "]");
  const int64_t eval_ctx = c.eval_context > 0 ? c.eval_context : c.context;
  HH_CHECK(eval_ctx <= c.model.n_positions, "--eval-context ", eval_ctx, " exceeds the model's n_positions ",
           c.model.n_positions);
  HH_CHECK(c.eval_stride >= 0 && c.eval_stride <= eval_ctx, "--eval-stride must be in [0, ", eval_ctx, "], got ",
           c.eval_stride);
  HH_CHECK(c.steps >= 1, "--steps must be >= 1, got ", c.steps);
  HH_CHECK(c.accumulation >= 1, "--accumulation must be >= 1, got ", c.accumulation);
  HH_CHECK(c.batch >= 1 && c.batch % (c.accumulation * world) == 0, "--batch ", c.batch,
           " must be a positive multiple of --accumulation (", c.accumulation, ") x ranks (", world, ")");
  HH_CHECK(std::isfinite(c.lr) && c.lr > 0, "--lr must be > 0, got ", c.lr);
  HH_CHECK(c.min_lr >= 0 && c.min_lr <= c.lr, "--min-lr must be in [0, lr], got ", c.min_lr);
  HH_CHECK(c.weight_decay >= 0, "--weight-decay must be >= 0, got ", c.weight_decay);
  HH_CHECK(c.grad_clip >= 0, "--grad-clip must be >= 0, got ", c.grad_clip);
  HH_CHECK(c.warmup >= 0 && warmup_steps(c) <= c.steps, "--warmup (", c.warmup, ") must be at most the steps");
  HH_CHECK(c.eval_batch >= 1, "--eval-batch must be >= 1, got ", c.eval_batch);
  HH_CHECK(c.eval_every >= 0 && c.checkpoint_every >= 0 && c.eval_windows >= 0, "--eval-every, --checkpoint-every "
           "and --eval-windows must be >= 0");
  HH_CHECK(!c.out_dir.empty(), "train_language_model: no output folder");
  check_precision(c.precision, c.device);
}

namespace {

struct Checkpointed {
  int64_t step = 0;
  double seconds = 0;
  std::vector<double> train_loss;
  std::vector<LmEval> evals;
};

json evals_json(const std::vector<LmEval>& evals) {
  json a = json::array();
  for (const auto& e : evals) a.push_back({e.step, e.loss, e.tokens});
  return a;
}

void save_run(const std::string& path, const std::string& fingerprint, const nn::GPT2LMHeadModel& model,
              const AdamW& opt, const Checkpointed& s, const std::string& hf_config) {
  CheckpointMeta meta;
  meta.step = s.step;
  meta.extra["lm.fingerprint"] = fingerprint;
  meta.extra["lm.hf_config"] = hf_config;
  meta.extra["lm.state"] = json{{"seconds", s.seconds}, {"evals", evals_json(s.evals)}}.dump();
  if (!s.train_loss.empty())
    meta.tensors["train_loss"] = from_vector(s.train_loss, {static_cast<int64_t>(s.train_loss.size())}, {DType::f64});
  save_checkpoint(path, model, &opt, meta);
}

void compare_fingerprints(const std::string& path, const std::string& saved_text, const std::string& fingerprint) {
  const std::string diff = fingerprint_diff(saved_text, fingerprint);
  if (!diff.empty())
    fail(str("checkpoint ", path, " was saved by a run with another configuration (differs in ", diff,
             "); start afresh without --resume, or use the original settings"));
}

void load_run(const std::string& path, const std::string& fingerprint, nn::Module& model, AdamW& opt, Checkpointed& s) {
  CheckpointMeta meta;
  load_checkpoint(path, model, &opt, meta);
  const auto get = [&](const char* key) -> const std::string& {
    auto it = meta.extra.find(key);
    HH_CHECK(it != meta.extra.end(), "checkpoint ", path, ": metadata lacks '", key, "' (not a train_lm checkpoint)");
    return it->second;
  };
  compare_fingerprints(path, get("lm.fingerprint"), fingerprint);
  try {
    const json st = json::parse(get("lm.state"));
    s.step = meta.step;
    s.seconds = st.at("seconds").get<double>();
    s.evals.clear();
    for (const auto& e : st.at("evals"))
      s.evals.push_back({e.at(0).get<int64_t>(), e.at(1).get<double>(), std::exp(e.at(1).get<double>()),
                         e.at(2).get<int64_t>()});
  } catch (const json::exception& e) {
    fail(str("checkpoint ", path, ": malformed train_lm state (", e.what(), ")"));
  }
  s.train_loss.clear();
  auto it = meta.tensors.find("train_loss");
  if (it != meta.tensors.end()) s.train_loss = to_vector<double>(it->second);
  HH_CHECK(static_cast<int64_t>(s.train_loss.size()) == s.step, "checkpoint ", path, ": ", s.train_loss.size(),
           " losses for ", s.step, " steps");
}

// metrics.jsonl from the history (a resumed run rewrites it, so no line is lost or repeated).
void write_history(MetricsLog& log, const Checkpointed& s, int64_t tokens_per_step) {
  size_t e = 0;
  for (int64_t step = 1; step <= static_cast<int64_t>(s.train_loss.size()); ++step) {
    log.write({{"split", "train"}, {"step", step}, {"tokens", step * tokens_per_step},
               {"loss", s.train_loss[static_cast<size_t>(step - 1)]}});
    for (; e < s.evals.size() && s.evals[e].step == step; ++e)
      log.write({{"split", "valid"}, {"step", step}, {"loss", s.evals[e].loss}, {"ppl", s.evals[e].ppl},
                 {"tokens_scored", s.evals[e].tokens}});
  }
}

}  // namespace

std::string lm_checkpoint_path(const std::string& out_dir) {
  return (fs::path(out_dir) / "checkpoint.safetensors").string();
}

void check_lm_resume(const std::string& out_dir, const std::string& fingerprint) {
  const std::string path = lm_checkpoint_path(out_dir);
  if (!fs::exists(path)) return;
  const SafeTensors f = load_safetensors(path);
  auto it = f.metadata.find("lm.fingerprint");
  HH_CHECK(it != f.metadata.end(), "checkpoint ", path, " is not a train_lm checkpoint (no lm.fingerprint)");
  compare_fingerprints(path, it->second, fingerprint);
}

std::shared_ptr<nn::GPT2LMHeadModel> load_lm_checkpoint_model(const std::string& path) {
  const SafeTensors f = load_safetensors(path);
  auto it = f.metadata.find("lm.hf_config");
  HH_CHECK(it != f.metadata.end(), "checkpoint ", path, " is not a train_lm checkpoint (no lm.hf_config)");
  const nn::HFConfig config = nn::HFConfig::parse(it->second, path + ": lm.hf_config");
  nn::HFModelOptions o;
  nn::apply_hedgehog_section(config, o);
  o.draw_weights = false;
  auto model = std::make_shared<nn::GPT2LMHeadModel>(config, o);
  CheckpointMeta meta;
  load_checkpoint(path, *model, nullptr, meta);
  model->eval();
  return model;
}

std::string lm_checkpoint_tokenizer(const std::string& path) {
  const SafeTensors f = load_safetensors(path);
  auto it = f.metadata.find("lm.fingerprint");
  if (it == f.metadata.end()) return "";
  const json fp = json::parse(it->second, nullptr, false);
  if (!fp.is_object() || !fp.contains("data") || !fp["data"].is_string()) return "";
  const json data = json::parse(fp["data"].get<std::string>(), nullptr, false);
  return data.is_object() && data.contains("tokenizer") && data["tokenizer"].is_string()
             ? data["tokenizer"].get<std::string>()
             : "";
}

std::string lm_run_fingerprint(const LmTrainConfig& c) {
  const nn::FeatureMapConfig& f = c.attention.feature_map;
  json j = {{"model", {{"vocab_size", c.model.vocab_size}, {"n_positions", c.model.n_positions},
                       {"n_embd", c.model.n_embd}, {"n_layer", c.model.n_layer}, {"n_head", c.model.n_head},
                       {"n_inner", c.model.n_inner}, {"activation", c.model.activation}}},
            {"attention", {{"mixer", c.attention.mixer}, {"form", static_cast<int>(c.attention.form)},
                           {"chunk", c.attention.chunk}, {"eps", c.attention.eps},
                           {"feature_dim", f.feature_dim}, {"temperature", f.temperature},
                           {"joint_softmax", f.joint_softmax}, {"untied", f.untied}}},
            {"context", c.context}, {"batch", c.batch}, {"accumulation", c.accumulation}, {"steps", c.steps},
            {"lr", c.lr}, {"min_lr", c.min_lr}, {"warmup", c.warmup}, {"schedule", c.schedule},
            {"weight_decay", c.weight_decay}, {"betas", {c.beta1, c.beta2}}, {"adam_eps", c.adam_eps},
            {"grad_clip", c.grad_clip}, {"seed", c.seed}, {"data", c.data_fingerprint}};
  if (c.precision != Precision::f32) j["precision"] = precision_name(c.precision);  // f32 runs keep their fingerprint
  return j.dump();
}

LmEval evaluate_lm(nn::CausalLM& model, const std::vector<int32_t>& ids, int64_t context, int64_t stride,
                   int64_t max_windows, int64_t batch, Communicator& comm) {
  const data::LmWindows w = stride > 0 ? data::lm_strided(ids, context, stride) : data::lm_blocks(ids, context);
  const int64_t n = max_windows > 0 ? std::min(max_windows, w.size()) : w.size();
  const Device dev = model.parameters().front().device();
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  double loss_sum = 0, scored = 0;
  // Windows are dealt to ranks round robin, in batches.
  for (int64_t first = comm.rank() * batch; first < n; first += batch * comm.world()) {
    std::vector<int64_t> rows;
    for (int64_t r = first; r < std::min(first + batch, n); ++r) rows.push_back(r);
    const Tensor tokens = w.tokens(rows);   // (B, L+1)
    const Tensor targets = w.targets(rows);  // (B, L)
    const int64_t L = targets.size(1);
    // The last window may be shorter than L+1 real tokens: it is padded, and the padding is not scored.
    const Tensor logits = model.forward(tokens.slice(1, 0, L).to(dev));  // (B, L, V)
    const Tensor t = targets.to(dev);
    loss_sum += cross_entropy(logits, t, data::kLmIgnoreIndex, 0.0, Reduction::sum).to(Device::cpu()).item<double>();
    const std::vector<int64_t> tv = to_vector<int64_t>(targets);
    scored += static_cast<double>(std::count_if(tv.begin(), tv.end(), [](int64_t x) { return x != data::kLmIgnoreIndex; }));
  }
  Tensor totals = from_vector(std::vector<double>{loss_sum, scored}, {2}, {DType::f64});
  comm.all_reduce_sum(totals);
  const std::vector<double> tot = to_vector<double>(totals);
  if (was_training) model.train();
  HH_CHECK(tot[1] > 0, "evaluation: no token was scored (the validation split is too short)");
  LmEval e;
  e.loss = tot[0] / tot[1];
  e.ppl = std::exp(e.loss);
  e.tokens = static_cast<int64_t>(tot[1]);
  return e;
}

LmTrainResult train_language_model(const LmTrainConfig& c, const data::TokenDataset& train,
                                   const std::vector<int32_t>& valid, Communicator& comm) {
  const int world = comm.world(), rank = comm.rank();
  check_lm_train_config(c, world);
  HH_CHECK(train.vocab_size() == c.model.vocab_size, "the training data's vocabulary (", train.vocab_size(),
           ") is not the model's (", c.model.vocab_size, ")");
  const int64_t eval_ctx = c.eval_context > 0 ? c.eval_context : c.context;
  HH_CHECK(static_cast<int64_t>(valid.size()) >= 2, "the validation split has ", valid.size(),
           " tokens; it needs at least 2");
  const data::WindowSampler sampler(train, c.context, c.seed);

  LmTrainResult r;
  nn::HFModelOptions mo = c.attention;
  mo.seed = c.seed;
  r.config_json = gpt2_config_json(c.model, c.eos_id);
  r.model = make_lm_model(r.config_json, mo);
  r.model->to(c.device);
  r.model->train();
  r.params = count_parameters(*r.model);
  nn::GPT2LMHeadModel& model = *r.model;

  AdamW opt(decay_groups(model, c.weight_decay), c.lr, AdamWOptions{c.beta1, c.beta2, c.adam_eps});
  ScheduleConfig sc;
  sc.base_lr = c.lr;
  sc.min_lr = c.min_lr;
  sc.total_steps = c.steps;
  sc.warmup_steps = warmup_steps(c);
  const LrSchedule schedule(c.schedule, sc);
  fs::create_directories(c.out_dir);
  const std::string ckpt = lm_checkpoint_path(c.out_dir);
  const std::string fingerprint = lm_run_fingerprint(c);
  const std::string hf_config = nn::config_with_hedgehog_section(r.config_json, "train_lm model config", mo);
  Checkpointed s;
  if (c.resume && fs::exists(ckpt)) load_run(ckpt, fingerprint, model, opt, s);
  // After loading: the reducer's hooks live on the parameter tensors the model has now.
  GradReducer reducer(model.named_parameters(), std::shared_ptr<Communicator>(&comm, [](Communicator*) {}));
  if (s.step == 0) reducer.broadcast_parameters();
  MetricsLog log;
  const int64_t tokens_per_step = c.batch * c.context;
  if (rank == 0) {
    log = MetricsLog((fs::path(c.out_dir) / "metrics.jsonl").string());
    write_history(log, s, tokens_per_step);
  }
  const auto checkpoint = [&] {
    if (rank == 0) save_run(ckpt, fingerprint, model, opt, s, hf_config);
    comm.barrier();
  };
  const auto validate = [&](int64_t max_windows) {
    PrecisionGuard precision(c.precision);
    LmEval e = evaluate_lm(model, valid, eval_ctx, c.eval_stride, max_windows, c.eval_batch, comm);
    e.step = s.step;
    s.evals.push_back(e);
    if (rank == 0)
      log.write({{"split", "valid"}, {"step", s.step}, {"loss", e.loss}, {"ppl", e.ppl}, {"tokens_scored", e.tokens}});
    return e;
  };

  const int64_t micro = c.batch / c.accumulation / world;  // rows per rank per micro-batch
  ProgressOptions po;
  po.label = c.attention.mixer;
  po.total = c.steps;
  po.start_step = s.step;
  std::unique_ptr<Progress> bar;
  if (rank == 0 && c.progress) bar = std::make_unique<Progress>(po);
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t start_step = s.step;
  const double seconds_before = s.seconds;
  double last_eval_loss = NAN;
  while (s.step < c.steps) {
    const auto step_start = std::chrono::steady_clock::now();
    opt.set_lr(schedule.lr_at(s.step));
    double step_loss = 0;
    for (int64_t m = 0; m < c.accumulation; ++m) {
      const int64_t first = s.step * c.batch + m * (c.batch / c.accumulation) + rank * micro;
      const Tensor rows = sampler.rows(first, micro).to(c.device);  // (micro, context+1)
      const Tensor x = rows.slice(1, 0, c.context), y = rows.slice(1, 1, c.context + 1);
      Tensor loss;
      {
        PrecisionGuard precision(c.precision);  // forward and loss only; backward runs outside autocast
        loss = cross_entropy(model.forward(x), y);
      }
      step_loss += loss.to(Device::cpu()).item<double>() / static_cast<double>(c.accumulation);
      reducer.set_enabled(m + 1 == c.accumulation);
      mul(loss, 1.0 / static_cast<double>(c.accumulation)).backward();
    }
    reducer.finish();
    Tensor mean_loss = from_vector(std::vector<double>{step_loss}, {1}, {DType::f64});
    comm.all_reduce_sum(mean_loss);
    step_loss = mean_loss.item<double>() / world;
    if (!std::isfinite(step_loss)) {
      r.status = str("diverged at step ", s.step + 1, ": the training loss is ", step_loss);
      break;
    }
    if (c.grad_clip > 0) clip_grad_norm(model.parameters(), c.grad_clip);
    opt.step();
    opt.zero_grad();
    r.step_seconds.push_back(seconds_since(step_start));
    ++s.step;
    s.train_loss.push_back(step_loss);
    if (rank == 0)
      log.write({{"split", "train"}, {"step", s.step}, {"tokens", s.step * tokens_per_step}, {"loss", step_loss},
                 {"lr", opt.lr()}});
    const double secs = seconds_since(t0);
    const double tok_s = static_cast<double>((s.step - start_step) * tokens_per_step) / std::max(secs, 1e-9);
    const bool last = s.step == c.steps;
    const bool eval_now = !last && c.eval_every > 0 && s.step % c.eval_every == 0;
    if (eval_now) last_eval_loss = validate(c.eval_windows).loss;
    if (bar)
      bar->update(s.step, std::isfinite(last_eval_loss)
                              ? ProgressMetrics{{"loss", step_loss}, {"val_ppl", std::exp(last_eval_loss)}, {"tok/s", tok_s}}
                              : ProgressMetrics{{"loss", step_loss}, {"tok/s", tok_s}});
    s.seconds = seconds_before + secs;
    const bool ckpt_now = (c.checkpoint_every > 0 && s.step % c.checkpoint_every == 0) || eval_now;
    if (ckpt_now && !last) checkpoint();
    if (c.stop_after_steps > 0 && s.step == c.stop_after_steps && !last) {
      if (!ckpt_now) checkpoint();
      r.status = str("interrupted at step ", s.step);
      break;
    }
  }
  const double train_seconds = seconds_since(t0);
  const bool final_done = !s.evals.empty() && s.evals.back().step == c.steps;  // a finished run resumed
  if (r.status == "ok" && !final_done) {
    validate(0);  // the final validation: every window
    checkpoint();
  }
  if (bar) bar->finish({{"val_ppl", s.evals.empty() ? NAN : s.evals.back().ppl}});
  r.steps = s.step;
  r.seconds = s.seconds;
  r.tokens_per_second = (s.step - start_step) * tokens_per_step / std::max(train_seconds, 1e-9);
  r.train_loss = s.train_loss;
  r.evals = s.evals;
  model.eval();
  return r;
}

}  // namespace hh::train
