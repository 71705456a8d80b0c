#include "serve/scheduler.h"

#include <chrono>
#include <exception>
#include <utility>

#include "core/parallel.h"

namespace hh::serve {

DecodeScheduler::DecodeScheduler(nn::CausalLM& lm, int threads, std::mutex& model_mutex, int64_t token_delay_ms)
    : lm_(lm), threads_(threads), model_mutex_(model_mutex), token_delay_ms_(token_delay_ms) {
  thread_ = std::thread([this] { loop(); });
}

DecodeScheduler::~DecodeScheduler() {
  {
    std::lock_guard<std::mutex> lock(m_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void DecodeScheduler::submit(std::shared_ptr<nn::DecodeRun> run, OnEnd on_end) {
  {
    std::lock_guard<std::mutex> lock(m_);
    pending_.push_back({std::move(run), std::move(on_end)});
    ++live_;
  }
  cv_.notify_all();
}

int64_t DecodeScheduler::live() const {
  std::lock_guard<std::mutex> lock(m_);
  return live_;
}

int64_t DecodeScheduler::largest_batch() const {
  std::lock_guard<std::mutex> lock(m_);
  return largest_batch_;
}

void DecodeScheduler::loop() {
  set_num_threads(threads_);  // this thread's OpenMP team size
  std::vector<Entry> live;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [&] { return quit_ || !pending_.empty() || !live.empty(); });
      if (quit_) {
        for (Entry& e : pending_) live.push_back(std::move(e));
        pending_.clear();
        live_ = 0;
        lock.unlock();
        for (Entry& e : live) e.on_end("server stopped");
        return;
      }
      for (Entry& e : pending_) live.push_back(std::move(e));
      pending_.clear();
    }
    iterate(live);
    if (token_delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(token_delay_ms_));
  }
}

void DecodeScheduler::iterate(std::vector<Entry>& live) {
  std::vector<Entry> kept;
  std::vector<nn::DecodeRun*> due;
  std::vector<std::pair<Entry, std::string>> ended;
  {
    std::lock_guard<std::mutex> model(model_mutex_);
    for (Entry& e : live) {
      try {
        if (!e.run->prefilled()) e.run->prefill();  // joined since the last iteration
        e.run->draw();
      } catch (const std::exception& ex) {
        ended.emplace_back(std::move(e), ex.what());
        continue;
      }
      if (e.run->finished()) {
        ended.emplace_back(std::move(e), "");
      } else {
        due.push_back(e.run.get());
        kept.push_back(std::move(e));
      }
    }
    if (!due.empty()) {
      try {
        nn::decode_step(lm_, due);
      } catch (const std::exception& ex) {  // a failed step ends every run in it
        for (Entry& e : kept) ended.emplace_back(std::move(e), ex.what());
        kept.clear();
      }
    }
  }
  live = std::move(kept);
  {
    std::lock_guard<std::mutex> lock(m_);
    live_ -= static_cast<int64_t>(ended.size());
    largest_batch_ = std::max<int64_t>(largest_batch_, static_cast<int64_t>(due.size()));
  }
  for (auto& [e, error] : ended) e.on_end(error);
}

}  // namespace hh::serve
