// The concurrent-run scheduler (see run_scheduler.h).
#include "train/run_scheduler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

#include "core/error.h"
#include "core/progress.h"

namespace hh::train {

std::vector<size_t> hand_out_order(const std::vector<ScheduledJob>& jobs) {
  std::vector<size_t> order(jobs.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return jobs[a].cost > jobs[b].cost; });
  return order;
}

namespace {

// What the workers share, guarded by mu.
struct Shared {
  const std::vector<ScheduledJob>& jobs;
  const SchedulerOptions& options;
  std::vector<size_t> order;
  std::vector<JobOutcome> outcomes;
  std::mutex mu;
  size_t next = 0;             // position in `order` of the next job to hand out
  std::exception_ptr fatal;    // a setup hook or on_done threw: hand out nothing more
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  size_t done = 0;
  double cost_done = 0, cost_all = 0;

  // The overall line (options.overall_label), under mu.
  void report_overall(size_t i) {
    ++done;
    cost_done += std::max(jobs[i].cost, 1e-9);
    if (options.overall_label.empty() || jobs.size() < 2) return;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double left = done >= jobs.size() ? 0.0 : elapsed * (cost_all - cost_done) / cost_done;
    std::fprintf(stderr, "%s: %zu of %zu runs done, %s elapsed, about %s left\n", options.overall_label.c_str(), done,
                 jobs.size(), format_duration(elapsed).c_str(), format_duration(left).c_str());
  }

  // The next job to run, or false when there is none (or the hand-out stopped).
  bool take(size_t& position) {
    std::lock_guard<std::mutex> lock(mu);
    if (fatal || next >= order.size()) return false;
    position = next++;
    return true;
  }

  void stop(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu);
    if (!fatal) fatal = e;
  }

  void worker(int w) {
    std::shared_ptr<void> guard;
    try {
      if (options.setup) guard = options.setup(w);
    } catch (...) {
      stop(std::current_exception());
      return;
    }
    for (size_t position = 0; take(position);) {
      const size_t i = order[position];
      JobOutcome o;
      o.index = i;
      o.worker = w;
      o.started = position;
      const auto t0 = std::chrono::steady_clock::now();
      try {
        if (!jobs[i].run) fail(str("job ", i, " has nothing to run"));
        jobs[i].run();
        o.ok = true;
      } catch (const std::exception& e) {
        o.error = e.what();
      } catch (...) {
        o.error = "unknown exception (not a std::exception)";
      }
      o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::lock_guard<std::mutex> lock(mu);
      outcomes[i] = o;
      report_overall(i);
      if (!options.on_done) continue;
      try {
        options.on_done(o);
      } catch (...) {
        if (!fatal) fatal = std::current_exception();
      }
    }
  }
};

}  // namespace

std::vector<JobOutcome> run_jobs(const std::vector<ScheduledJob>& jobs, const SchedulerOptions& options) {
  HH_CHECK(options.workers >= 1, "run_jobs: workers must be at least 1, got ", options.workers);
  if (jobs.empty()) return {};
  Shared s{jobs, options, hand_out_order(jobs), std::vector<JobOutcome>(jobs.size()), {}, 0, nullptr,
           std::chrono::steady_clock::now(), 0, 0, 0};
  for (const ScheduledJob& j : jobs) s.cost_all += std::max(j.cost, 1e-9);
  const int workers = static_cast<int>(std::min(static_cast<size_t>(options.workers), jobs.size()));
  if (workers == 1) {
    s.worker(0);
  } else {
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(workers));
    try {
      for (int w = 0; w < workers; ++w) threads.emplace_back([&s, w] { s.worker(w); });
    } catch (...) {  // no thread could be started: stop the ones running, then report it
      s.stop(std::current_exception());
    }
    for (std::thread& t : threads) t.join();
  }
  if (s.fatal) std::rethrow_exception(s.fatal);
  return s.outcomes;
}

}  // namespace hh::train
