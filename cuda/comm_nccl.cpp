// The NCCL communicator (CUDA tensors, one rank per GPU), in the hedgehog_nccl target: built only
// in CUDA builds where nccl.h and libnccl are found (and MPI, which starts the ranks and carries
// NCCL's unique id from rank 0 to the others), linked only by the programs that want it,
// registered as "nccl" when linked. Not run by any test of this project (no GPU on the machine
// that builds it); it is compiled there.
//
// Streams: gradients are produced on the CUDA backend's own stream. A reduction first waits for
// that stream (Backend::synchronize, the one ordering the backend exposes), then runs on this
// communicator's stream, so backward's next kernels overlap with it; Pending::wait() waits for
// the reduction's event.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "core/backend.h"
#include "core/communicator.h"
#include "core/error.h"

namespace hh {

namespace {

void check_nccl(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess) fail(str("nccl: ", what, " failed: ", ncclGetErrorString(rc)));
}

void check_cuda_call(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) fail(str("nccl: ", what, " failed: ", cudaGetErrorString(rc)));
}

// Makes `device` current for one call and restores the caller's device.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    check_cuda_call(cudaGetDevice(&prev_), "cudaGetDevice");
    if (prev_ != device) check_cuda_call(cudaSetDevice(device), "cudaSetDevice");
  }
  ~CurrentDevice() { cudaSetDevice(prev_); }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int prev_ = 0;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator() : boot_(make_communicator("mpi")) {
    rank_ = boot_->rank();
    world_ = boot_->world();
    int count = 0;
    check_cuda_call(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    HH_CHECK(count > 0, "nccl: no CUDA device on this node (rank ", rank_, ")");
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    device_ = local ? std::atoi(local) : rank_ % count;
    HH_CHECK(device_ >= 0 && device_ < count, "nccl: local rank ", device_, " but this node has ", count,
             " GPUs; start one rank per GPU (mpirun -np <GPUs per node> ...)");
    CurrentDevice guard(device_);
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    Tensor buf = zeros({static_cast<int64_t>(sizeof(id))}, Options(DType::u8));
    std::memcpy(buf.raw_data(), &id, sizeof(id));
    boot_->broadcast(buf, 0);
    std::memcpy(&id, buf.raw_data(), sizeof(id));
    check_nccl(ncclCommInitRank(&comm_, world_, id, rank_), "ncclCommInitRank");
    check_cuda_call(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~NcclCommunicator() override {
    CurrentDevice guard(device_);
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend() const override { return "nccl"; }
  Device device() const override { return Device::cuda(device_); }

  void all_reduce_sum(Tensor& t) override { all_reduce_sum_async(t)->wait(); }

  std::unique_ptr<Pending> all_reduce_sum_async(Tensor& t) override {
    check_tensor(t, "all_reduce_sum");
    HH_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64, "nccl all_reduce_sum: dtype ",
             dtype_name(t.dtype()), " (expected f32 or f64)");
    CurrentDevice guard(device_);
    cuda_backend(device_).synchronize();  // t's values are final on the backend's stream
    ncclDataType_t type = t.dtype() == DType::f32 ? ncclFloat32 : ncclFloat64;
    check_nccl(ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), type, ncclSum, comm_, stream_),
               "ncclAllReduce");
    auto p = std::make_unique<NcclPending>(t);
    check_cuda_call(cudaEventRecord(p->done, stream_), "cudaEventRecord");
    bump_version(t);
    return p;
  }

  void broadcast(Tensor& t, int root) override {
    check_tensor(t, "broadcast");
    HH_CHECK(root >= 0 && root < world_, "nccl broadcast: root ", root, " is not a rank of ", world_);
    CurrentDevice guard(device_);
    cuda_backend(device_).synchronize();
    size_t bytes = static_cast<size_t>(t.numel()) * itemsize(t.dtype());
    check_nccl(ncclBroadcast(t.raw_data(), t.raw_data(), bytes, ncclUint8, root, comm_, stream_), "ncclBroadcast");
    check_cuda_call(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    bump_version(t);
  }

  void barrier() override { boot_->barrier(); }
  void abort(int code) override { boot_->abort(code); }

 private:
  struct NcclPending final : Pending {
    explicit NcclPending(Tensor t) : tensor(std::move(t)) {
      check_cuda_call(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    }
    ~NcclPending() override {
      cudaEventSynchronize(done);
      cudaEventDestroy(done);
    }
    void wait() override { check_cuda_call(cudaEventSynchronize(done), "cudaEventSynchronize (all-reduce)"); }
    bool test() override { return cudaEventQuery(done) == cudaSuccess; }
    Tensor tensor;  // keeps the buffer alive until the reduction is done
    cudaEvent_t done = nullptr;
  };

  void check_tensor(const Tensor& t, const char* what) const {
    HH_CHECK(t.device() == Device::cuda(device_), "nccl ", what, ": tensor is on ", t.device().str(), ", this rank's GPU is ",
             Device::cuda(device_).str());
    HH_CHECK(t.is_contiguous(), "nccl ", what, ": tensor of shape ", t.shape(), " is not contiguous");
  }

  std::shared_ptr<Communicator> boot_;  // MPI: ranks, the unique id, barrier, abort
  int rank_ = 0, world_ = 1, device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// Linked into a program (an object of the hedgehog_nccl object library), this adds "nccl" to the
// backends make_communicator knows.
struct RegisterNccl {
  RegisterNccl() { register_communicator("nccl", [] { return std::make_shared<NcclCommunicator>(); }); }
};
const RegisterNccl register_nccl;

}  // namespace

}  // namespace hh
