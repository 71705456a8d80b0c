#include "nn/models/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "autograd/grad_mode.h"
#include "core/batch_invariant.h"
#include "core/error.h"
#include "autograd/ops.h"
#include "core/tensor.h"
#include "nn/models/hf_config.h"

namespace hh::nn {

Sampler::Sampler(const SamplingOptions& o) : o_(o), rng_(o.seed) {
  HH_CHECK(std::isfinite(o.temperature) && o.temperature >= 0.0, "sampling: temperature must be >= 0, got ",
           o.temperature);
  HH_CHECK(o.top_k >= 0, "sampling: top-k must be >= 0, got ", o.top_k);
  HH_CHECK(o.top_p > 0.0 && o.top_p <= 1.0, "sampling: top-p must be in (0, 1], got ", o.top_p);
}

int64_t Sampler::next(const std::vector<double>& logits) {
  const int64_t V = static_cast<int64_t>(logits.size());
  HH_CHECK(V > 0, "sampling: empty logits");
  if (o_.temperature == 0.0) return std::max_element(logits.begin(), logits.end()) - logits.begin();
  std::vector<int64_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  const int64_t keep = o_.top_k > 0 ? std::min(o_.top_k, V) : V;
  std::vector<double> p(static_cast<size_t>(keep));
  const double mx = logits[order[0]];
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) total += p[i] = std::exp((logits[order[i]] - mx) / o_.temperature);
  double mass = 0;
  int64_t n = 0;
  while (n < keep) {  // the nucleus: the fewest top tokens whose probability reaches top_p
    mass += p[n++] / total;
    if (mass >= o_.top_p) break;
  }
  std::discrete_distribution<int64_t> pick(p.begin(), p.begin() + n);
  return order[pick(rng_)];
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

namespace {
Device device_of(const CausalLM& lm) {
  return lm.parameters().empty() ? Device::cpu() : lm.parameters().front().device();
}
}  // namespace

DecodeRun::DecodeRun(CausalLM& lm, std::vector<int64_t> prompt, Sampler& sampler, GenerateOptions o)
    : lm_(lm), prompt_(std::move(prompt)), sampler_(sampler), o_(std::move(o)), state_(lm.start_decoding()) {
  HH_CHECK(!prompt_.empty(), "generate: empty prompt");
  HH_CHECK(o_.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got ", o_.max_new_tokens);
  const int64_t P = lm.max_positions();
  HH_CHECK(P < 0 || static_cast<int64_t>(prompt_.size()) <= P, "generate: the prompt has ", prompt_.size(),
           " tokens, more than the model's ", P, " positions");
  for (int64_t id : prompt_)
    HH_CHECK(id >= 0 && id < lm.vocab_size(), "generate: prompt token id ", id, " is outside the vocabulary of ",
             lm.vocab_size());
  finished_ = o_.max_new_tokens == 0;
}

void DecodeRun::prefill() {
  NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  Tensor last;
  if (o_.prefill) {
    last = o_.prefill(lm_, prompt_, state_);
  } else {
    const Tensor ids = from_vector(prompt_, {1, static_cast<int64_t>(prompt_.size())}, {DType::i64}).to(device_of(lm_));
    last = lm_.prefill(ids, state_);
  }
  logits_ = to_vector<double>(reshape(last, {-1}));
  prefill_seconds_ = seconds_since(t0);
  prefilled_ = true;
  if (o_.on_prefilled) o_.on_prefilled();
}

void DecodeRun::draw() {
  HH_CHECK(!finished_ && !logits_.empty(), "DecodeRun::draw: the run has ended or has no logits");
  if (o_.on_logits) o_.on_logits(logits_);
  const int64_t next = sampler_.next(logits_);
  logits_.clear();
  ++drawn_;
  const bool stop = std::find(o_.eos.begin(), o_.eos.end(), next) != o_.eos.end();
  if (!stop || o_.keep_eos) {
    generated_.push_back(next);
    if (o_.on_token) o_.on_token(static_cast<int64_t>(generated_.size()), next);
  }
  const int64_t P = lm_.max_positions();
  finished_ = stop || drawn_ == o_.max_new_tokens || (o_.should_stop && o_.should_stop()) ||
              (P >= 0 && state_.pos >= P);  // no position left to read the token just drawn
  next_ = finished_ ? -1 : next;
}

void decode_step(CausalLM& lm, const std::vector<DecodeRun*>& runs) {
  std::vector<DecodeRun*> due;
  std::vector<int64_t> inputs;
  std::vector<DecodeState*> states;
  for (DecodeRun* r : runs)
    if (!r->finished()) {
      due.push_back(r);
      inputs.push_back(r->next_input());
      states.push_back(&r->state());
    }
  if (due.empty()) return;
  NoGradGuard no_grad;
  BatchInvariant invariant;
  const int64_t n = static_cast<int64_t>(due.size());
  const Tensor logits = lm.step_many(from_vector(inputs, {n, 1}, {DType::i64}).to(device_of(lm)), states);
  const std::vector<double> all = to_vector<double>(reshape(logits, {-1}));
  const size_t V = all.size() / due.size();
  for (size_t i = 0; i < due.size(); ++i)
    due[i]->set_logits(std::vector<double>(all.begin() + static_cast<std::ptrdiff_t>(i * V),
                                           all.begin() + static_cast<std::ptrdiff_t>((i + 1) * V)));
}

Generation generate(CausalLM& lm, const std::vector<int64_t>& prompt, Sampler& sampler, const GenerateOptions& o) {
  DecodeRun run(lm, prompt, sampler, o);
  Generation g;
  run.prefill();
  g.prefill_seconds = run.prefill_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  while (!run.finished()) {
    run.draw();
    decode_step(lm, {&run});
  }
  g.ids = run.generated();
  g.generate_seconds = seconds_since(t0);
  return g;
}

namespace {

// eos_token_id: one id or a list of ids (Llama 3's <|end_of_text|>, <|eom_id|>, <|eot_id|>); none
// when not given.
std::vector<int64_t> eos_token_ids(const HFConfig& c) {
  if (!c.has("eos_token_id")) return {};
  try {
    return {c.get_int("eos_token_id")};
  } catch (const Error&) {
    return c.get_ints("eos_token_id");
  }
}

}  // namespace

GenerationDefaults read_generation_config(const std::string& folder) {
  GenerationDefaults d;
  d.sampling.temperature = 0.0;
  const std::string path = folder + "/generation_config.json";
  if (!std::filesystem::is_regular_file(path)) return d;
  const HFConfig c = HFConfig::load(path);
  d.found = true;
  d.do_sample = c.get_bool("do_sample", false);
  if (d.do_sample) {
    d.sampling.temperature = c.get_double("temperature", 1.0);
    d.sampling.top_k = c.get_int("top_k", 50);
    d.sampling.top_p = c.get_double("top_p", 1.0);
    HH_CHECK(d.sampling.temperature > 0, path, ": temperature ", d.sampling.temperature,
             " with do_sample (transformers refuses a temperature <= 0 when sampling)");
    HH_CHECK(d.sampling.top_k >= 0, path, ": top_k must be >= 0, got ", d.sampling.top_k);
    HH_CHECK(d.sampling.top_p > 0 && d.sampling.top_p <= 1, path, ": top_p must be in (0, 1], got ",
             d.sampling.top_p);
  }
  d.eos = eos_token_ids(c);
  return d;
}

std::vector<int64_t> stop_ids(const GenerationDefaults& g, int64_t tokenizer_eos, const HFConfig& config) {
  if (!g.eos.empty()) return g.eos;
  if (tokenizer_eos >= 0) return {tokenizer_eos};
  return eos_token_ids(config);
}

}  // namespace hh::nn
