// Text generation with a causal LM: the prompt in one pass (CausalLM::prefill), then one token per
// step through CausalLM::step: a KV cache for softmax attention, the O(1) recurrent state for a
// linear feature map. Sampling follows HF's
// generate(): temperature, then top-k, then top-p (the smallest nucleus whose mass reaches p).
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "nn/models/hf_model.h"

namespace hh::nn {

struct SamplingOptions {
  double temperature = 1.0;  // 0 = greedy (argmax, the first on ties)
  int64_t top_k = 0;         // 0 = every token
  double top_p = 1.0;        // 1 = every token
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& o);  // checks the options (errors name the bad one)
  // The next token id from one row of logits.
  int64_t next(const std::vector<double>& logits);

 private:
  SamplingOptions o_;
  std::mt19937_64 rng_;
};

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  std::vector<int64_t> eos;  // stop when one of these ids is drawn (none: never)
  bool keep_eos = true;    // the drawn eos is part of the result (HF generate), or dropped
  // Called once the prompt is in (after the prefill, before the first token is drawn).
  std::function<void()> on_prefilled;
  // Called after every new token with (tokens generated so far, the token).
  std::function<void(int64_t, int64_t)> on_token;
  // Called with the logits each new token is drawn from, before on_token (log-probabilities).
  std::function<void(const std::vector<double>&)> on_logits;
  // Asked after every new token (after on_token): true ends the generation there (a stop string
  // seen, a client gone, a deadline passed).
  std::function<bool()> should_stop;
  // How the prompt goes in: prompt ids, a fresh state -> the last position's logits (1,1,V), the
  // state as the prompt's steps leave it. Unset: CausalLM::prefill in one pass (hh_serve's prefix
  // cache sets serve::prefill_with_cache).
  std::function<Tensor(CausalLM&, const std::vector<int64_t>&, DecodeState&)> prefill;
};

struct Generation {
  std::vector<int64_t> ids;       // the new tokens (not the prompt)
  double prefill_seconds = 0.0;   // feeding the prompt
  double generate_seconds = 0.0;  // drawing the new tokens
};

// What transformers' generate() does by default for a folder: its generation_config.json
// (GenerationConfig's defaults for the keys it leaves out: do_sample false, temperature 1, top_k 50,
// top_p 1), greedy when the file is absent or do_sample is false.
struct GenerationDefaults {
  bool found = false;         // the folder has generation_config.json
  bool do_sample = false;
  SamplingOptions sampling;   // temperature 0 (greedy) unless do_sample
  std::vector<int64_t> eos;   // its eos_token_id (one id or a list); empty when not given
};
// Reads FOLDER/generation_config.json; a value of the wrong type is an error naming file and key.
GenerationDefaults read_generation_config(const std::string& folder);

// The ids a generation stops at, as transformers picks them: generation_config.json's eos_token_id,
// else the tokenizer's end-of-sequence token (tokenizer_eos >= 0), else config.json's eos_token_id.
std::vector<int64_t> stop_ids(const GenerationDefaults& g, int64_t tokenizer_eos, const HFConfig& config);

// One generation as a sequence of draws, so that many can share decode steps (decode_step below,
// hh_serve's continuous batching); nn::generate is one run alone. The prompt goes in one pass
// (prefill), then each draw() samples a token from the logits in hand and decides whether the run
// ends (eos, max_new_tokens, should_stop, no position left); if not, the drawn token is the input
// of the run's next step. The sampler and the options' callbacks must outlive the run.
class DecodeRun {
 public:
  // Checks the prompt (at least one token, within the vocabulary and the model's positions).
  DecodeRun(CausalLM& lm, std::vector<int64_t> prompt, Sampler& sampler, GenerateOptions o);
  void prefill();  // the prompt in one pass (CausalLM::prefill), then on_prefilled
  void draw();     // one token drawn from the logits in hand (on_logits, on_token, the stop checks)
  bool finished() const { return finished_; }
  bool prefilled() const { return prefilled_; }
  int64_t next_input() const { return next_; }  // the token the next step feeds (not finished)
  DecodeState& state() { return state_; }
  void set_logits(std::vector<double> logits) { logits_ = std::move(logits); }
  const std::vector<int64_t>& generated() const { return generated_; }
  double prefill_seconds() const { return prefill_seconds_; }

 private:
  CausalLM& lm_;
  std::vector<int64_t> prompt_, generated_;
  Sampler& sampler_;
  GenerateOptions o_;
  DecodeState state_;
  std::vector<double> logits_;
  int64_t drawn_ = 0, next_ = -1;
  bool finished_ = false, prefilled_ = false;
  double prefill_seconds_ = 0.0;
};

// One step for every unfinished run (their next inputs as one batch through CausalLM::step_many
// under a BatchInvariant guard, so each run's logits are those it would get alone); each run gets
// its row of logits. No gradients are recorded.
void decode_step(CausalLM& lm, const std::vector<DecodeRun*>& runs);

// Feeds `prompt` (batch 1, at least one token) and draws up to max_new_tokens; stops early at eos
// or when the model has no position left for the next token: one DecodeRun alone, decoded as
// decode_step decodes it in a batch. No gradients are recorded.
Generation generate(CausalLM& lm, const std::vector<int64_t>& prompt, Sampler& sampler, const GenerateOptions& o);

}  // namespace hh::nn
