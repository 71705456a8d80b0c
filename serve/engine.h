// The model behind the server, without HTTP: one folder loaded once (a decoder or a text encoder,
// with its tokenizer), requests admitted up to --max-concurrent and --max-memory (503 beyond),
// completions decoded together by the DecodeScheduler (continuous batching: each request's tokens
// are those it would draw alone, hf_run's), embeddings pooled as
// sentence-transformers (hf_run --task embed) pools them. A generation ends at its end-of-sequence
// token, a stop string, max_tokens, the request's deadline, a client gone, or shutdown.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/prepacked.h"
#include "data/tokenizer.h"
#include "nn/models/embedding.h"
#include "nn/models/hf_model.h"
#include "serve/api.h"
#include "serve/chat_template.h"
#include "serve/prefix_cache.h"
#include "serve/scheduler.h"

namespace hh::serve {

struct EngineOptions {
  std::string folder;          // the HF model folder (and its tokenizer)
  Device device = Device::cpu();
  WeightFormat weights = WeightFormat::f32;  // every Linear's inference weights (--weights: f32, int8 or bf16)
  int threads = 1;             // CPU threads of each request's forward (OpenMP's setting is per thread)
  int64_t max_concurrent = 4;  // requests admitted at once (running or waiting for the model)
  int64_t max_context = 0;     // prompt + max_tokens; 0: the model's positions (4096 without a limit)
  int64_t max_tokens = 0;      // a request's max_tokens; 0: max_context
  // Bytes of decode state (KV caches, linear states) the running requests may hold together; a
  // request reserves what prompt + max_tokens can reach (nn::decode_state_bytes) at admission.
  // 0: a quarter of the machine's memory.
  int64_t max_memory = 0;
  // The prefix state cache (serve/prefix_cache.h): its byte budget (0: off) and chunk. With it on,
  // every prompt is prefilled in segments ending at multiples of the chunk, hit or not, so a hit
  // gives bit for bit the tokens of a miss.
  int64_t prefix_cache_bytes = 0;
  int64_t prefix_chunk = 256;
  double timeout_s = 600;      // a request's generation stops after this many seconds
  // Test hook: a pause after every generated token (HH_SERVE_TEST_TOKEN_DELAY_MS), so tests can
  // hold a request running to see 503s, disconnects and shutdown.
  int64_t token_delay_ms = 0;
};

// What one completion did, for the response and the log line.
struct CompletionStats {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  double first_token_s = 0;  // from admission to the first token (waiting for the model included)
  double generate_s = 0;     // from the first token to the last
  std::string ended;         // eos, stop, length, timeout, client gone, shutdown
};

class Engine {
 public:
  // Loads the folder: a decoder (completions) or a BERT-family encoder (embeddings).
  explicit Engine(const EngineOptions& o);

  const std::string& model_id() const { return model_id_; }  // the folder's name
  bool is_decoder() const { return lm_ != nullptr; }
  const Limits& limits() const { return limits_; }
  bool has_chat_template() const { return chat_.available(); }
  int64_t active() const { return active_.load(); }
  int64_t reserved_bytes() const { return reserved_.load(); }
  int64_t max_memory() const { return max_memory_; }
  // Decode-state bytes of a request of `tokens` tokens (0 for an encoder).
  int64_t state_bytes(int64_t tokens) const;
  // The most requests one decode step has fed so far.
  int64_t largest_batch() const { return scheduler_ ? scheduler_->largest_batch() : 0; }
  // The prefix cache's counters (all 0 when it is off).
  PrefixCacheStats prefix_cache_stats() const { return prefix_cache_ ? prefix_cache_->stats() : PrefixCacheStats{}; }
  int64_t max_concurrent() const { return options_.max_concurrent; }

  // A request's place among the --max-concurrent: held while it runs, freed when destroyed.
  class Slot {
   public:
    explicit Slot(Engine& e) : start(std::chrono::steady_clock::now()), e_(e) {}
    ~Slot() {
      --e_.active_;
      e_.reserved_ -= bytes_;
    }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    const std::chrono::steady_clock::time_point start;  // admission: the request's clock starts

   private:
    friend class Engine;
    Engine& e_;
    int64_t bytes_ = 0;  // decode memory reserved
  };
  // A slot, or ApiError 503 when --max-concurrent requests are running or the server is stopping.
  std::unique_ptr<Slot> admit();

  // A completion request checked against this model (a decoder, its vocabulary, the context) and
  // its prompt tokenized: every 400 comes from here, before anything runs.
  struct Prepared {
    CompletionRequest request;
    std::vector<int64_t> prompt;  // token ids
    std::string echo;             // the prompt's text, when echoed
  };
  Prepared prepare(const CompletionRequest& r) const;
  // A completion's slot with its decode memory reserved: 400 when prompt + max_tokens can never
  // fit --max-memory, 503 while running requests hold too much of it.
  std::unique_ptr<Slot> admit(const Prepared& p);

  // Runs a prepared completion. on_text(text, logprob) is called once per generated token with the
  // text it releases (often "", see TextStream; logprob null unless asked) and returns false when
  // the client is gone, which stops the generation. Returns the whole completion.
  using OnText = std::function<bool(const std::string&, const json&)>;
  Completion complete(const Prepared& p, const Slot& slot, const OnText& on_text, CompletionStats& stats);

  // One embedding per text (and the token count), the folder's pooling and normalization.
  std::vector<std::vector<float>> embed(const std::vector<std::string>& texts, int64_t& tokens);

  // Shutdown: running generations end at their next token, new requests get 503.
  void stop_all() { stopping_ = true; }
  bool stopping() const { return stopping_.load(); }

 private:
  EngineOptions options_;
  std::string model_id_;
  std::shared_ptr<nn::HFModel> model_;
  nn::CausalLM* lm_ = nullptr;
  std::unique_ptr<data::Tokenizer> tok_;  // null when the folder has none (token-id prompts only)
  nn::EmbeddingConfig embedding_;
  std::vector<int64_t> eos_;
  ChatTemplate chat_;         // the folder's chat template (chat completions)  // the ids a completion stops at (nn::stop_ids)
  Limits limits_;
  std::mutex model_mutex_;  // one forward at a time
  std::atomic<int64_t> active_{0};
  std::atomic<int64_t> reserved_{0};  // decode-state bytes reserved by admitted completions
  int64_t max_memory_ = 0;
  nn::DecodeState state_probe_;       // a two-token prefill's state (state_bytes)
  std::unique_ptr<PrefixCache> prefix_cache_;  // null when --prefix-cache is 0
  std::unique_ptr<DecodeScheduler> scheduler_;  // decoders: the batch loop (declared last: stops first)
  std::atomic<bool> stopping_{false};
};

}  // namespace hh::serve
