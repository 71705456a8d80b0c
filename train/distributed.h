// Data-parallel training: the GradReducer, which averages gradients across the processes of one
// job in buckets while backward is still running (docs/ARCHITECTURE.md, "Data-parallel
// training"). The collectives themselves are a Communicator (core/communicator.h: the interface,
// make_communicator and the "none", "mpi" and "nccl" backends).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/communicator.h"
#include "core/tensor.h"

namespace hh::train {

// DDP-style gradient averaging. Parameters are grouped into buckets of ~bucket_bytes in REVERSE
// registration order (the order backward produces their gradients); when every gradient of a
// bucket is final during backward (Tensor::add_grad_ready_hook), the bucket is flattened and
// all-reduced asynchronously while backward goes on. Buckets are launched strictly in order on
// every rank (a ready bucket waits for the ones before it), so all ranks issue the same
// collectives in the same order. finish() launches what is left (a parameter that got no
// gradient counts as zero and gets a zero .grad, so every rank reduces the same buckets), waits
// for every bucket, divides by world and gives each parameter a fresh .grad with the average.
class GradReducer {
 public:
  GradReducer(std::vector<std::pair<std::string, Tensor>> params, std::shared_ptr<Communicator> comm,
              int64_t bucket_bytes = 25 << 20);
  ~GradReducer();  // removes its hooks
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Off for the first micro-steps of gradient accumulation (DDP's no_sync: gradients only add up
  // locally), on for the last one. On by default.
  void set_enabled(bool on);
  bool enabled() const { return enabled_; }
  void finish();                // call after backward() (when enabled); no-op when world == 1
  void broadcast_parameters();  // rank 0's weights to every rank (call once at start)
  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }
  // Buckets launched from inside backward (before finish) in the last synchronised step: the
  // overlap achieved. The rest were launched by finish().
  int64_t launched_during_backward() const { return launched_in_backward_last_; }
  // Of those, the buckets whose reduction had already completed when finish() was called.
  int64_t completed_during_backward() const { return completed_in_backward_last_; }
  const Communicator& communicator() const { return *comm_; }

 private:
  struct Param {
    std::string name;
    Tensor tensor;
    size_t bucket = 0;
    int64_t offset = 0;  // in elements, in its bucket's flat buffer
    int64_t hook = -1;
    bool ready = false;  // its gradient is final in this step
  };
  struct Bucket {
    std::vector<size_t> params;  // indices into params_, in reverse registration order
    int64_t numel = 0;
    DType dtype = DType::f32;
    Device device = Device::cpu();
    int64_t waiting = 0;  // parameters not yet ready in this step
    Tensor flat;
    std::unique_ptr<Communicator::Pending> op;
    bool done = false;  // op completed (seen by poll_launched)
  };
  void on_grad_ready(size_t param);
  void launch_ready_buckets(bool from_backward);
  int64_t poll_launched();  // test()s the launched, unfinished reductions; returns how many are done
  void reset_step();

  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  std::shared_ptr<Communicator> comm_;
  bool enabled_ = true;
  size_t next_launch_ = 0;  // buckets before it are launched in this step
  int64_t launched_in_backward_ = 0, launched_in_backward_last_ = 0, completed_in_backward_last_ = 0;
};

}  // namespace hh::train
