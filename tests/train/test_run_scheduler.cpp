// The concurrent-run scheduler (train/run_scheduler.h): hand-out order, every job run exactly
// once, a failing job losing nothing of the others, results equal to a serial run, K > N, and
// the setup hook's and on_done's contracts; on CUDA (HH_DEVICE=cuda), concurrent jobs on their
// own streams against the CPU.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "autograd/ops.h"
#include "core/cuda_stream.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "tests/cuda_compare.h"
#include "tests/op_table.h"
#include "train/run_scheduler.h"

namespace hh::test {
namespace {

using train::JobOutcome;
using train::ScheduledJob;
using train::SchedulerOptions;

// Jobs that record the order they started in.
struct StartLog {
  std::mutex mu;
  std::vector<size_t> started;
  void add(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    started.push_back(i);
  }
};

std::vector<ScheduledJob> logged_jobs(const std::vector<double>& costs, StartLog& log) {
  std::vector<ScheduledJob> jobs;
  for (size_t i = 0; i < costs.size(); ++i) jobs.push_back({costs[i], [&log, i] { log.add(i); }});
  return jobs;
}

}  // namespace

TEST_CASE("run scheduler: jobs are handed out costliest first, ties in the given order") {
  const std::vector<double> costs = {1, 5, 3, 5, 0, 2};
  const std::vector<size_t> want = {1, 3, 2, 5, 0, 4};
  StartLog log;
  std::vector<ScheduledJob> jobs = logged_jobs(costs, log);
  CHECK(train::hand_out_order(jobs) == want);
  std::vector<size_t> done;
  SchedulerOptions o;
  o.on_done = [&](const JobOutcome& r) { done.push_back(r.index); };
  std::vector<JobOutcome> out = train::run_jobs(jobs, o);  // one worker: the calling thread, in order
  CHECK(log.started == want);
  CHECK(done == want);
  for (size_t p = 0; p < want.size(); ++p) CHECK(out[want[p]].started == p);

  // With several workers the hand-out order is the same (each job records its position).
  o.workers = 3;
  o.on_done = nullptr;
  out = train::run_jobs(jobs, o);
  for (size_t p = 0; p < want.size(); ++p) CHECK(out[want[p]].started == p);
}

TEST_CASE("run scheduler: every job runs exactly once, each worker set up once on its own thread") {
  constexpr size_t kJobs = 40;
  std::vector<std::atomic<int>> runs(kJobs);
  std::mutex mu;
  std::set<std::thread::id> job_threads, setup_threads;
  std::vector<int> setups(4, 0);
  std::vector<ScheduledJob> jobs;
  for (size_t i = 0; i < kJobs; ++i)
    jobs.push_back({static_cast<double>(i % 7), [&, i] {
                      runs[i].fetch_add(1);
                      std::this_thread::sleep_for(std::chrono::microseconds(200));
                      std::lock_guard<std::mutex> lock(mu);
                      job_threads.insert(std::this_thread::get_id());
                    }});
  SchedulerOptions o;
  o.workers = 4;
  size_t delivered = 0;
  std::atomic<int> in_on_done{0};
  bool overlapped = false;
  o.setup = [&](int w) {
    std::lock_guard<std::mutex> lock(mu);
    ++setups[static_cast<size_t>(w)];
    setup_threads.insert(std::this_thread::get_id());
    return std::shared_ptr<void>();
  };
  o.on_done = [&](const JobOutcome& r) {
    overlapped = overlapped || in_on_done.fetch_add(1) != 0;
    CHECK(r.ok);
    ++delivered;
    in_on_done.fetch_sub(1);
  };
  std::vector<JobOutcome> out = train::run_jobs(jobs, o);
  for (size_t i = 0; i < kJobs; ++i) CHECK(runs[i].load() == 1);
  CHECK(delivered == kJobs);
  CHECK_FALSE(overlapped);
  CHECK(setups == std::vector<int>{1, 1, 1, 1});
  CHECK(setup_threads.size() == 4);
  CHECK(setup_threads.count(std::this_thread::get_id()) == 0);  // worker threads, not the caller's
  for (const std::thread::id& t : job_threads) CHECK(setup_threads.count(t) == 1);
  for (size_t i = 0; i < kJobs; ++i) {
    CHECK(out[i].index == i);
    CHECK(out[i].worker >= 0);
    CHECK(out[i].worker < 4);
  }
}

TEST_CASE("run scheduler: a failing job is recorded and the others still run and are delivered") {
  std::vector<int> ran(6, 0);
  std::vector<ScheduledJob> jobs;
  for (size_t i = 0; i < ran.size(); ++i)
    jobs.push_back({static_cast<double>(i), [&ran, i] {
                      ran[i] = 1;
                      if (i == 4) throw std::runtime_error("run 4 diverged");  // the second handed out
                      if (i == 1) throw 42;                                      // not a std::exception
                    }});
  for (int workers : {1, 3}) {
    std::fill(ran.begin(), ran.end(), 0);
    SchedulerOptions o;
    o.workers = workers;
    std::vector<size_t> delivered;
    o.on_done = [&](const JobOutcome& r) { delivered.push_back(r.index); };
    std::vector<JobOutcome> out = train::run_jobs(jobs, o);
    CHECK(ran == std::vector<int>(6, 1));
    CHECK(delivered.size() == 6);
    for (size_t i = 0; i < out.size(); ++i) {
      CAPTURE(i);
      CHECK(out[i].ok == (i != 4 && i != 1));
    }
    CHECK(out[4].error == "run 4 diverged");
    CHECK(out[1].error.find("unknown exception") != std::string::npos);
    CHECK(out[0].error.empty());
  }
}

TEST_CASE("run scheduler: results equal a serial run's, for any number of workers") {
  // Each job does engine work with its own generator, on the worker's OpenMP thread count.
  constexpr size_t kJobs = 7;
  auto compute = [](size_t i) {
    Generator gen(100 + i);
    Tensor a = randn({16, 24}, gen), b = randn({24, 8}, gen);
    return to_vector<float>(sum(matmul(a, b), {0}));
  };
  std::vector<std::vector<float>> serial(kJobs);
  for (size_t i = 0; i < kJobs; ++i) serial[i] = compute(i);
  const int threads_before = num_threads();
  for (int workers : {1, 2, 5}) {
    std::vector<std::vector<float>> got(kJobs);
    std::vector<ScheduledJob> jobs;
    for (size_t i = 0; i < kJobs; ++i) jobs.push_back({double(i % 3), [&, i] { got[i] = compute(i); }});
    SchedulerOptions o;
    o.workers = workers;
    o.setup = [](int) {
      set_num_threads(1);  // OpenMP's thread count is per thread
      return std::shared_ptr<void>();
    };
    train::run_jobs(jobs, o);
    CAPTURE(workers);
    CHECK(got == serial);
  }
  set_num_threads(threads_before);  // the one-worker pass ran the hook on this thread
}

TEST_CASE("run scheduler: more workers than jobs, no jobs, and bad arguments") {
  StartLog log;
  std::vector<ScheduledJob> jobs = logged_jobs({1, 2}, log);
  std::atomic<int> setups{0};
  SchedulerOptions o;
  o.workers = 16;
  o.setup = [&](int) {
    setups.fetch_add(1);
    return std::shared_ptr<void>();
  };
  std::vector<JobOutcome> out = train::run_jobs(jobs, o);
  CHECK(log.started.size() == 2);
  CHECK(setups.load() == 2);  // one worker per job, no idle ones
  CHECK(out[0].ok);
  CHECK(out[1].ok);

  CHECK(train::run_jobs({}, o).empty());
  CHECK(setups.load() == 2);

  o.workers = 0;
  check_throws([&] { train::run_jobs(jobs, o); }, {"run_jobs", "workers must be at least 1, got 0"});
  std::vector<ScheduledJob> empty_job(1);
  o.workers = 1;
  out = train::run_jobs(empty_job, o);
  CHECK_FALSE(out[0].ok);
  CHECK(out[0].error.find("nothing to run") != std::string::npos);
}

TEST_CASE("run scheduler: a failing setup or on_done stops the hand-out and is rethrown") {
  std::atomic<int> ran{0};
  std::vector<ScheduledJob> jobs;
  for (int i = 0; i < 20; ++i) jobs.push_back({0, [&] { ran.fetch_add(1); }});
  SchedulerOptions o;
  o.workers = 2;
  o.setup = [](int) -> std::shared_ptr<void> { fail("no stream for this worker"); };
  check_throws([&] { train::run_jobs(jobs, o); }, {"no stream for this worker"});
  CHECK(ran.load() == 0);

  o.setup = nullptr;
  o.workers = 1;
  int delivered = 0;
  o.on_done = [&](const JobOutcome&) {
    if (++delivered == 3) fail("disk full writing results");
  };
  check_throws([&] { train::run_jobs(jobs, o); }, {"disk full writing results"});
  CHECK(ran.load() == 3);
  CHECK(delivered == 3);

  // The guard a setup returns lives until its worker is done.
  auto alive = std::make_shared<std::atomic<int>>(0);
  o.on_done = nullptr;
  o.workers = 2;
  o.setup = [&](int) {
    alive->fetch_add(1);
    return std::shared_ptr<void>(nullptr, [alive](void*) { alive->fetch_sub(1); });
  };
  bool guarded = true;
  std::mutex mu;
  for (auto& j : jobs)
    j.run = [&] {
      std::lock_guard<std::mutex> lock(mu);
      guarded = guarded && alive->load() >= 1;
    };
  train::run_jobs(jobs, o);
  CHECK(guarded);
  CHECK(alive->load() == 0);
}

// Each worker gets a stream of its own (cuda_use_own_stream): jobs run forward and backward at
// once on several streams of one device, and each must match the CPU.
TEST_CASE("run scheduler: concurrent jobs on their own CUDA streams match the CPU" *
          doctest::skip(!cuda_requested())) {
  constexpr size_t kJobs = 6;
  auto compute = [](size_t i, Device d) {
    Generator gen(7 + i);
    Tensor a = place(uniform({64, 96}, -1, 1, gen), d).requires_grad_(), b = place(uniform({96, 48}, -1, 1, gen), d);
    Tensor y = softmax(matmul(a, b), -1);
    Tensor loss = sum(y * y);
    loss.backward();
    return std::vector<Tensor>{y.detach().to(Device::cpu()), a.grad().to(Device::cpu())};
  };
  std::vector<std::vector<Tensor>> want(kJobs), got(kJobs);
  for (size_t i = 0; i < kJobs; ++i) want[i] = compute(i, Device::cpu());
  std::vector<ScheduledJob> jobs;
  for (size_t i = 0; i < kJobs; ++i) jobs.push_back({1, [&, i] { got[i] = compute(i, test_device()); }});
  SchedulerOptions o;
  o.workers = 3;
  o.setup = [](int) { return cuda_use_own_stream(test_device().index); };
  std::vector<JobOutcome> out = train::run_jobs(jobs, o);
  for (size_t i = 0; i < kJobs; ++i) {
    CAPTURE(i);
    REQUIRE_MESSAGE(out[i].ok, out[i].error);
    for (size_t k = 0; k < 2; ++k) {
      std::vector<double> g = to_vector<double>(got[i][k]), w = to_vector<double>(want[i][k]);
      REQUIRE(g.size() == w.size());
      double worst = 0;
      for (size_t e = 0; e < g.size(); ++e) worst = std::max(worst, std::fabs(g[e] - w[e]));
      CHECK(worst < 1e-4);
    }
  }
}

}  // namespace hh::test
