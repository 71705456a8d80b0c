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

// Feeds `prompt` (batch 1, at least one token) and draws up to max_new_tokens; stops early at eos
// or when the model has no position left for the next token. No gradients are recorded.
Generation generate(CausalLM& lm, const std::vector<int64_t>& prompt, Sampler& sampler, const GenerateOptions& o);

}  // namespace hh::nn
