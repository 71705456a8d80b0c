// The communicator backend registry and the single-process communicator (core/communicator.h).
// The MPI and NCCL communicators live in core/comm_mpi.cpp and cuda/comm_nccl.cpp, in targets of
// their own that register themselves here when linked.
#include "core/communicator.h"

#include <cstdlib>
#include <map>
#include <utility>

#include "core/error.h"

namespace hh {

namespace {

std::map<std::string, CommunicatorFactory>& registry() {
  static std::map<std::string, CommunicatorFactory> factories;
  return factories;
}

class NoneCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  std::string backend() const override { return "none"; }
  void all_reduce_sum(Tensor&) override {}
  std::unique_ptr<Pending> all_reduce_sum_async(Tensor&) override { return std::make_unique<Done>(); }
  void broadcast(Tensor&, int root) override {
    HH_CHECK(root == 0, "broadcast: root ", root, " is not a rank of a single-process job");
  }
  void barrier() override {}

 private:
  struct Done final : Pending {
    void wait() override {}
  };
};

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  return (*end == '\0' && x > 0 && x < (1 << 30)) ? static_cast<int>(x) : 0;
}

std::string how_to_build(const std::string& backend) {
  if (backend == "mpi")
    return "this program was built without MPI: install Open MPI (apt-get install libopenmpi-dev openmpi-bin; "
           "scripts/setup does it), reconfigure, and link the program to hedgehog_mpi (hh_link_distributed)";
  return "this program was built without NCCL: it needs a CUDA build (HH_CUDA=ON) where nccl.h and libnccl are "
         "found, with Open MPI for the launch, and the program linked to hedgehog_nccl (hh_link_distributed)";
}

}  // namespace

bool register_communicator(const std::string& backend, CommunicatorFactory factory) {
  registry()[backend] = std::move(factory);
  return true;
}

std::vector<std::string> communicator_backends() {
  std::vector<std::string> names{"none"};
  for (const auto& kv : registry()) names.push_back(kv.first);
  return names;
}

int launcher_world_size() {
  int n = env_int("OMPI_COMM_WORLD_SIZE");
  if (n == 0) n = env_int("PMI_SIZE");
  return n == 0 ? 1 : n;
}

std::shared_ptr<Communicator> make_communicator(const std::string& backend) {
  bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE");
  std::string b = backend;
  if (b == "auto") {
    if (!launched) return std::make_shared<NoneCommunicator>();
    // Started by mpirun: every rank training alone on its own data would be silently wrong.
    HH_CHECK(registry().count("mpi") || launcher_world_size() == 1, "communicator 'auto': started by mpirun (",
             launcher_world_size(), " processes) but ", how_to_build("mpi"));
    if (!registry().count("mpi")) return std::make_shared<NoneCommunicator>();
    b = "mpi";
  }
  if (b == "none") return std::make_shared<NoneCommunicator>();
  HH_CHECK(b == "mpi" || b == "nccl", "unknown communicator backend '", backend,
           "' (expected none, mpi, nccl or auto)");
  auto it = registry().find(b);
  HH_CHECK(it != registry().end(), "communicator '", b, "' is not available: ", how_to_build(b));
  HH_CHECK(launched, "communicator '", b, "' needs processes started by mpirun (e.g. mpirun -np 2 <program> ...); ",
           "OMPI_COMM_WORLD_SIZE / PMI_SIZE is not set. Use 'none' or 'auto' for a single process");
  return it->second();
}

}  // namespace hh
