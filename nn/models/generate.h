// Text generation with a causal LM: the prompt in one pass (CausalLM::prefill), then one token per
// step through CausalLM::step: a KV cache for softmax attention, the O(1) recurrent state for a
// linear feature map. Sampling follows HF's
// generate(): temperature, then top-k, then top-p (the smallest nucleus whose mass reaches p).
#pragma once
#include <cstdint>
#include <functional>
#include <random>
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
  int64_t eos = -1;        // stop when this id is drawn (-1: never)
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
};

struct Generation {
  std::vector<int64_t> ids;       // the new tokens (not the prompt)
  double prefill_seconds = 0.0;   // feeding the prompt
  double generate_seconds = 0.0;  // drawing the new tokens
};

// Feeds `prompt` (batch 1, at least one token) and draws up to max_new_tokens; stops early at eos
// or when the model has no position left for the next token. No gradients are recorded.
Generation generate(CausalLM& lm, const std::vector<int64_t>& prompt, Sampler& sampler, const GenerateOptions& o);

}  // namespace hh::nn
