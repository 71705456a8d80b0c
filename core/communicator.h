// Collective communication among the processes of one data-parallel job: the Communicator
// interface, the backend registry and make_communicator. The backends: "none" (one process, built
// always, here), "mpi" (CPU ranks started by mpirun; core/comm_mpi.cpp, the hedgehog_mpi target)
// and "nccl" (one GPU per rank; cuda/comm_nccl.cpp, the hedgehog_nccl target, CUDA builds with
// NCCL), which register themselves when linked. A program that wants MPI or NCCL links those
// targets (CMake: hh_link_distributed); the core library never needs MPI or NCCL. It lives in the
// core so that cuda/ can implement it; the gradient reducer built on it is train/distributed.h.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace hh {

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

}  // namespace hh
