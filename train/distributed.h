// Data-parallel training: a Communicator (collectives among the processes of one job) and the
// GradReducer, which averages gradients across them in buckets while backward is still running
// (docs/ARCHITECTURE.md, "Data-parallel training"). The backends: "none" (one process, built
// always), "mpi" (CPU ranks started by mpirun; the hedgehog_mpi target) and "nccl" (one GPU per
// rank; the hedgehog_nccl target, CUDA builds with NCCL). A program that wants MPI or NCCL links
// those targets (CMake: hh_link_distributed); the core library never needs MPI or NCCL.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace hh::train {

// Collective communication among `world()` processes. Tensors are f32 or f64, contiguous, on the
// communicator's device (CPU for MPI, CUDA for NCCL). Every rank must call the same collectives
// in the same order with tensors of the same size.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual std::string backend() const = 0;  // "none", "mpi", "nccl"
  // Where this rank's tensors must live: the CPU, or for NCCL the GPU of this rank (its local rank
  // on its node).
  virtual Device device() const { return Device::cpu(); }
  virtual void all_reduce_sum(Tensor& t) = 0;  // in place, blocking
  class Pending {
   public:
    virtual ~Pending() = default;  // waits when wait() was not called (the buffer stays valid)
    virtual void wait() = 0;
    // True once the reduction is complete; never blocks. Also moves it on: MPI advances
    // non-blocking collectives only inside MPI calls, so the reducer calls this during backward.
    virtual bool test() { return true; }
  };
  virtual std::unique_ptr<Pending> all_reduce_sum_async(Tensor& t) = 0;  // in place when wait() returns
  // Root's bytes into every rank's t (any dtype).
  virtual void broadcast(Tensor& t, int root) = 0;
  virtual void barrier() = 0;
  // Ends every process of the job with `code` (MPI_Abort), so a rank that failed cannot leave the
  // others waiting in a collective forever. The single-process communicator returns (the caller exits).
  virtual void abort(int code) { (void)code; }
};

// "none" (world 1, every call a no-op), "mpi", "nccl", or "auto" (mpi when launched by mpirun,
// i.e. OMPI_COMM_WORLD_SIZE or PMI_SIZE is set, else none). A backend that was not built, an
// unknown name, or "mpi"/"nccl" without mpirun is a hh::Error saying what to do. MPI is
// initialised on first use (MPI_Init_thread, FUNNELED: only the thread that made it calls MPI)
// and finalised at exit.
std::shared_ptr<Communicator> make_communicator(const std::string& backend);

// The backends a build offers ("none" always); the optional targets add theirs when linked.
using CommunicatorFactory = std::function<std::shared_ptr<Communicator>()>;
bool register_communicator(const std::string& backend, CommunicatorFactory factory);
std::vector<std::string> communicator_backends();

// The size of the job this process was started in by mpirun (1 when not started by one).
int launcher_world_size();

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
