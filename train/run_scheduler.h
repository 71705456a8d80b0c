// Runs independent jobs (training runs of a sweep, say) on K worker threads at once.
//
// Jobs are handed out costliest first (by the caller's cost estimate; ties keep their given
// order), so the last job to start is a short one and the workers finish close together. Each
// worker calls the setup hook once on its own thread before its first job: the place to set its
// OpenMP thread count, or on CUDA to give it a stream of its own (core/cuda_stream.h). A job that
// throws is recorded as failed and the others go on. Every job's outcome is delivered to on_done
// as soon as it completes, one call at a time (never two at once), in completion order.
//
// With one worker (or one job) everything runs on the calling thread, in the same order.
// A setup hook or an on_done that throws stops the hand-out: the jobs already running finish
// (and are delivered), no other starts, and run_jobs rethrows the first such exception.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hh::train {

struct ScheduledJob {
  double cost = 0;            // any unit; only the order matters
  std::function<void()> run;  // the job; it stores its own result
};

struct JobOutcome {
  size_t index = 0;    // position in the jobs given to run_jobs
  int worker = 0;      // which worker ran it (0 .. workers-1)
  size_t started = 0;  // hand-out position: 0 for the first job started
  bool ok = false;
  std::string error;  // what the job threw when !ok
  double seconds = 0;
};

struct SchedulerOptions {
  int workers = 1;  // at most one per job; at least 1
  // Called on each worker's thread before its first job; what it returns is kept alive until the
  // worker has finished its last job (a guard: a CUDA stream, say). May be empty.
  std::function<std::shared_ptr<void>(int worker)> setup;
  // Called as each job completes (serialized). May be empty.
  std::function<void(const JobOutcome&)> on_done;
  // Not empty: after each job of several, a line on stderr with the whole batch's progress and an
  // overall estimate of the time left ("<label>: 3 of 14 runs done, 2:10 elapsed, about 7:35
  // left"): the elapsed time scaled by the cost still to run over the cost done.
  std::string overall_label;
};

// The order jobs are handed out in: indices by cost, highest first, ties in the given order.
std::vector<size_t> hand_out_order(const std::vector<ScheduledJob>& jobs);

// Runs every job exactly once; returns the outcomes indexed like `jobs`.
std::vector<JobOutcome> run_jobs(const std::vector<ScheduledJob>& jobs, const SchedulerOptions& options);

}  // namespace hh::train
