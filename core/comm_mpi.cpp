// The MPI communicator (CPU tensors), in the hedgehog_mpi target: built only when CMake finds
// MPI, linked only by the programs that want it, registered as "mpi" when linked. MPI is
// initialised on first use with MPI_THREAD_FUNNELED (backward and its hooks run on the thread that
// created the communicator; OpenMP threads inside kernels never call MPI) and finalised at exit.
// Errors are returned (MPI_ERRORS_RETURN), not fatal, and become hh::Error naming the call.
#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/communicator.h"
#include "core/error.h"

namespace hh {

namespace {

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail(str("mpi: ", what, " failed: ", std::string(msg, static_cast<size_t>(len))));
}

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void init_mpi_once() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  std::atexit(finalize_mpi);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  HH_CHECK(provided >= MPI_THREAD_FUNNELED, "mpi: the library gives thread level ", provided,
           ", below MPI_THREAD_FUNNELED");
}

// The MPI datatype and count of a tensor's elements for a reduction (f32 / f64 only).
MPI_Datatype reduce_type(const Tensor& t, const char* what) {
  HH_CHECK(t.device().is_cpu(), "mpi ", what, ": tensor is on ", t.device().str(), "; the MPI communicator takes CPU tensors");
  HH_CHECK(t.is_contiguous(), "mpi ", what, ": tensor of shape ", t.shape(), " is not contiguous");
  if (t.dtype() == DType::f32) return MPI_FLOAT;
  HH_CHECK(t.dtype() == DType::f64, "mpi ", what, ": dtype ", dtype_name(t.dtype()), " (expected f32 or f64)");
  return MPI_DOUBLE;
}

int count_of(const Tensor& t) {
  HH_CHECK(t.numel() <= INT32_MAX, "mpi: a tensor of ", t.numel(), " elements is too large for one MPI call");
  return static_cast<int>(t.numel());
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    init_mpi_once();
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &world_), "MPI_Comm_size");
  }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend() const override { return "mpi"; }

  void all_reduce_sum(Tensor& t) override {
    MPI_Datatype type = reduce_type(t, "all_reduce_sum");
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, t.raw_data(), count_of(t), type, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    bump_version(t);
  }

  std::unique_ptr<Pending> all_reduce_sum_async(Tensor& t) override {
    MPI_Datatype type = reduce_type(t, "all_reduce_sum_async");
    auto p = std::make_unique<MpiPending>(t);
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, t.raw_data(), count_of(t), type, MPI_SUM, MPI_COMM_WORLD, &p->request),
              "MPI_Iallreduce");
    return p;
  }

  void broadcast(Tensor& t, int root) override {
    HH_CHECK(root >= 0 && root < world_, "mpi broadcast: root ", root, " is not a rank of ", world_);
    HH_CHECK(t.device().is_cpu() && t.is_contiguous(), "mpi broadcast: the tensor must be a contiguous CPU tensor");
    int64_t bytes = t.numel() * static_cast<int64_t>(itemsize(t.dtype()));
    HH_CHECK(bytes <= INT32_MAX, "mpi broadcast: ", bytes, " bytes is too large for one MPI call");
    check_mpi(MPI_Bcast(t.raw_data(), static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
    bump_version(t);
  }

  void barrier() override { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }
  void abort(int code) override { MPI_Abort(MPI_COMM_WORLD, code); }

 private:
  // Holds the tensor so its buffer outlives the reduction, waits in its destructor if not waited.
  struct MpiPending final : Pending {
    explicit MpiPending(Tensor t) : tensor(std::move(t)) {}
    ~MpiPending() override {
      if (request != MPI_REQUEST_NULL) MPI_Wait(&request, MPI_STATUS_IGNORE);
    }
    void wait() override {
      if (request == MPI_REQUEST_NULL) return;
      check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait (all-reduce)");
      bump_version(tensor);
    }
    bool test() override {
      if (request == MPI_REQUEST_NULL) return true;
      int flag = 0;
      check_mpi(MPI_Test(&request, &flag, MPI_STATUS_IGNORE), "MPI_Test (all-reduce)");
      if (flag) bump_version(tensor);  // MPI_Test freed the request: wait() has nothing left to do
      return flag != 0;
    }
    Tensor tensor;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  int rank_ = 0, world_ = 1;
};

// Linked into a program (an object of the hedgehog_mpi object library), this adds "mpi" to the
// backends make_communicator knows.
struct RegisterMpi {
  RegisterMpi() { register_communicator("mpi", [] { return std::make_shared<MpiCommunicator>(); }); }
};
const RegisterMpi register_mpi;

}  // namespace

}  // namespace hh
