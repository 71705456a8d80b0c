// The backend registry, the single-process communicator and the gradient reducer
// (train/distributed.h). The MPI and NCCL communicators live in train/comm_mpi.cpp and
// cuda/comm_nccl.cpp, in targets of their own that register themselves here when linked.
#include "train/distributed.h"

#include <algorithm>
#include <cstdlib>
#include <map>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"

namespace hh::train {

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

// ---- GradReducer ----

GradReducer::GradReducer(std::vector<std::pair<std::string, Tensor>> params, std::shared_ptr<Communicator> comm,
                         int64_t bucket_bytes)
    : comm_(std::move(comm)) {
  HH_CHECK(comm_, "GradReducer: no communicator");
  HH_CHECK(bucket_bytes > 0, "GradReducer: bucket_bytes must be positive, got ", bucket_bytes);
  // Reverse registration order, each tensor once (a parameter listed twice would be reduced twice).
  std::vector<TensorImpl*> seen;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    const Tensor& t = it->second;
    HH_CHECK(t.defined() && t.requires_grad() && t.is_leaf(), "GradReducer: parameter '", it->first,
             "' is not a leaf tensor that requires grad");
    HH_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64, "GradReducer: parameter '", it->first,
             "' has dtype ", dtype_name(t.dtype()), "; gradients are reduced in f32 or f64");
    if (std::find(seen.begin(), seen.end(), t.impl_ptr().get()) != seen.end()) continue;
    seen.push_back(t.impl_ptr().get());
    Param p;
    p.name = it->first;
    p.tensor = t;
    params_.push_back(std::move(p));
  }
  int64_t bytes = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    bool fits = !buckets_.empty() && bytes < bucket_bytes && buckets_.back().dtype == p.tensor.dtype() &&
                buckets_.back().device == p.tensor.device();
    if (!fits) {
      buckets_.emplace_back();
      buckets_.back().dtype = p.tensor.dtype();
      buckets_.back().device = p.tensor.device();
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    p.bucket = buckets_.size() - 1;
    p.offset = b.numel;
    b.params.push_back(i);
    b.numel += p.tensor.numel();
    bytes += p.tensor.numel() * static_cast<int64_t>(itemsize(p.tensor.dtype()));
  }
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i].hook = params_[i].tensor.add_grad_ready_hook([this, i] { on_grad_ready(i); });
  reset_step();
}

GradReducer::~GradReducer() {
  for (Param& p : params_) p.tensor.remove_grad_ready_hook(p.hook);
  for (Bucket& b : buckets_) b.op.reset();  // waits for a reduction still in flight into b.flat
}

void GradReducer::set_enabled(bool on) { enabled_ = on; }

void GradReducer::reset_step() {
  for (Param& p : params_) p.ready = false;
  for (Bucket& b : buckets_) {
    b.waiting = static_cast<int64_t>(b.params.size());
    b.op.reset();
    b.done = false;
    b.flat = Tensor();
  }
  next_launch_ = 0;
  launched_in_backward_ = 0;
}

void GradReducer::on_grad_ready(size_t param) {
  if (!enabled_ || comm_->world() == 1) return;
  Param& p = params_[param];
  if (p.ready) return;  // a second backward before finish(): its gradient was already taken
  p.ready = true;
  poll_launched();
  if (--buckets_[p.bucket].waiting == 0) launch_ready_buckets(true);
}

int64_t GradReducer::poll_launched() {
  int64_t done = 0;
  for (size_t i = 0; i < next_launch_; ++i) {
    Bucket& b = buckets_[i];
    if (!b.done) b.done = b.op->test();
    done += b.done ? 1 : 0;
  }
  return done;
}

void GradReducer::launch_ready_buckets(bool from_backward) {
  NoGradGuard no_grad;
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].waiting == 0) {
    Bucket& b = buckets_[next_launch_];
    b.flat = zeros({b.numel}, {b.dtype, b.device});
    for (size_t i : b.params) {
      const Param& p = params_[i];
      Tensor g = p.tensor.grad();
      if (!g.defined()) continue;  // no gradient on this rank: zeros
      HH_CHECK(g.shape() == p.tensor.shape(), "GradReducer: gradient of '", p.name, "' has shape ", g.shape(),
               ", the parameter ", p.tensor.shape());
      copy_(slice(b.flat, 0, p.offset, p.offset + p.tensor.numel()).view(p.tensor.shape()), g);
    }
    b.op = comm_->all_reduce_sum_async(b.flat);
    if (from_backward) ++launched_in_backward_;
    ++next_launch_;
  }
}

void GradReducer::finish() {
  if (!enabled_ || comm_->world() == 1) return;
  completed_in_backward_last_ = poll_launched();
  // Whatever backward did not make ready (no gradient in this backward) is final now.
  for (Bucket& b : buckets_) {
    for (size_t i : b.params) {
      Param& p = params_[i];
      if (p.ready) continue;
      p.ready = true;
      --b.waiting;
    }
  }
  launch_ready_buckets(false);
  NoGradGuard no_grad;
  const double inv_world = 1.0 / comm_->world();
  for (Bucket& b : buckets_) {
    b.op->wait();
    b.op.reset();
    Tensor avg = mul(b.flat, inv_world);
    // A fresh tensor per parameter: two leaves' gradients may share storage (add's backward hands
    // both inputs the same tensor), so writing into the old ones in place could mix them.
    for (size_t i : b.params) {
      Param& p = params_[i];
      p.tensor.set_grad(slice(avg, 0, p.offset, p.offset + p.tensor.numel()).view(p.tensor.shape()).clone());
    }
  }
  launched_in_backward_last_ = launched_in_backward_;
  reset_step();
}

void GradReducer::broadcast_parameters() {
  NoGradGuard no_grad;
  // Registration order (params_ is reversed); every rank walks the same list.
  for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
    Tensor& t = it->tensor;
    HH_CHECK(t.is_contiguous(), "broadcast_parameters: parameter '", it->name, "' is not contiguous");
    comm_->broadcast(t, 0);
  }
}

}  // namespace hh::train
