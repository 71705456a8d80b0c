// hh_serve's decode loop (continuous batching): one model thread runs every admitted generation.
// Each iteration it prefills the runs handed to it since the last one (the prompt in one pass), lets
// every live run draw its next token (sampling, stop strings, client gone, deadline: the run's own
// GenerateOptions callbacks), drops the runs that ended, and feeds the others' tokens through one
// batched step (nn::decode_step: a row's logits are bit-identical to the run's alone). Runs join
// and leave at token granularity; nothing here knows about HTTP.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nn/models/generate.h"

namespace hh::serve {

class DecodeScheduler {
 public:
  // The loop's thread runs `threads` OpenMP threads and holds `model_mutex` for each iteration's
  // work. token_delay_ms: a pause after every iteration (a test hook, see EngineOptions).
  DecodeScheduler(nn::CausalLM& lm, int threads, std::mutex& model_mutex, int64_t token_delay_ms = 0);
  ~DecodeScheduler();  // ends the loop; runs still live are ended with the error "server stopped"
  DecodeScheduler(const DecodeScheduler&) = delete;
  DecodeScheduler& operator=(const DecodeScheduler&) = delete;

  // Hands a run to the loop. on_end (on the model thread) is called once when it has finished,
  // with "" or the message of the exception that ended it.
  using OnEnd = std::function<void(const std::string& error)>;
  void submit(std::shared_ptr<nn::DecodeRun> run, OnEnd on_end);
  int64_t live() const;     // runs in the batch or waiting for their prefill
  int64_t largest_batch() const;  // the most runs one step has fed (statistics)

 private:
  struct Entry {
    std::shared_ptr<nn::DecodeRun> run;
    OnEnd on_end;
  };
  void loop();
  void iterate(std::vector<Entry>& live);

  nn::CausalLM& lm_;
  int threads_;
  std::mutex& model_mutex_;
  int64_t token_delay_ms_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::vector<Entry> pending_;
  int64_t live_ = 0, largest_batch_ = 0;
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace hh::serve
