// The gradient reducer (train/distributed.h). The communicators it reduces with are
// core/communicator.h's.
#include "train/distributed.h"

#include <algorithm>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"

namespace hh::train {

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
