// Tensor: a cheap handle to (storage, element offset, shape, strides, dtype, device) plus the
// autograd slots (requires_grad, grad, grad_fn). Views share storage and change metadata only.
// Differentiable ops are free functions in autograd/ops.h; the members below that compute
// (reshape, sum, ...) forward to them.
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/generator.h"
#include "core/shape.h"
#include "core/storage.h"

namespace hh {

struct Node;  // autograd/node.h

// Callbacks run by backward once a leaf's gradient is final in that backward (after its last
// contribution; never for a leaf that got no gradient). They belong to one leaf: copying a
// TensorImpl (detach, record) starts with none, so a copy never fires its source's hooks.
struct GradReadyHooks {
  GradReadyHooks() = default;
  GradReadyHooks(const GradReadyHooks&) {}
  GradReadyHooks& operator=(const GradReadyHooks&) { return *this; }
  std::vector<std::pair<int64_t, std::function<void()>>> list;  // (id, callback), in order added
  int64_t next_id = 0;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Strides strides;
  DType dtype = DType::f32;
  // autograd
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  int grad_output = 0;            // which of grad_fn's outputs this tensor is (multi-output nodes)
  GradReadyHooks grad_ready_hooks;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Strides& strides() const { return impl().strides; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const { return numel_of(impl().shape); }
  int64_t offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device; }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }

  // Typed pointer to element 0 of this view (dtype checked). Valid on the tensor's device.
  template <typename T>
  T* data() const {
    HH_CHECK(dtype_of<T>::value == dtype(), "data<", dtype_name(dtype_of<T>::value), ">: tensor has dtype ", dtype_name(dtype()));
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const;

  // Reads a one-element tensor as T (any device, any dtype).
  template <typename T>
  T item() const {
    return static_cast<T>(item_double());
  }
  double item_double() const;

  // Raw metadata view: no autograd, no checks beyond bounds. Used by the view ops.
  Tensor as_strided(Shape shape, Strides strides, int64_t offset) const;

  // --- autograd slots ---
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  Tensor grad() const { return impl().grad ? Tensor(impl().grad) : Tensor(); }
  void set_grad(const Tensor& g) { impl_->grad = g.impl_; }
  void zero_grad() { impl_->grad.reset(); }
  const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }
  int grad_output() const { return impl().grad_output; }
  void set_grad_fn(std::shared_ptr<Node> fn) { impl_->grad_fn = std::move(fn); }
  // Runs `fn` each time a backward has made this leaf's .grad final (autograd/engine.cpp), e.g. to
  // start reducing it while backward goes on. Returns an id for remove_grad_ready_hook.
  int64_t add_grad_ready_hook(std::function<void()> fn) const;
  void remove_grad_ready_hook(int64_t id) const;
  // Runs reverse-mode autodiff from this tensor (autograd/engine.cpp). A non-scalar output needs
  // an explicit gradient. retain_graph keeps saved tensors for a second backward.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;

  // --- members that forward to the op library (autograd/tensor_methods.cpp) ---
  Tensor reshape(const Shape& s) const;
  Tensor view(const Shape& s) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& s) const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor detach() const;
  Tensor to(DType t) const;
  Tensor to(Device d) const;
  Tensor sum() const;
  Tensor mean() const;

  std::string str() const;  // PyTorch-like print: tensor([...], dtype=f32)
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  const TensorImpl& impl() const {
    HH_CHECK(impl_, "use of an undefined tensor");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- creation (leaf tensors, no autograd history) ----
struct Options {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  Options() = default;
  Options(DType t) : dtype(t) {}  // NOLINT: allows zeros(s, DType::f64)
  Options(DType t, Device d) : dtype(t), device(d) {}
  Options(Device d) : device(d) {}  // NOLINT
};

Tensor empty(const Shape& shape, Options o = {});
Tensor zeros(const Shape& shape, Options o = {});
Tensor ones(const Shape& shape, Options o = {});
Tensor full(const Shape& shape, double value, Options o = {});
Tensor scalar_tensor(double value, Options o = {});
Tensor arange(double start, double end, double step = 1.0, Options o = {});
Tensor arange(int64_t n, Options o = {});
Tensor eye(int64_t n, Options o = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
// An uninitialized dense tensor of `shape` whose memory order follows `order_of` (dims by
// decreasing stride, ties by position): a buffer laid out like a strided view's storage, e.g. the
// gradient of a (B,H,L,D) head view of a (B,L,C) projection stored as (B,L,H,D).
Tensor empty_in_layout(const Shape& shape, const Strides& order_of, Options o = {});

// From host values (converted to o.dtype), shaped as given (numel must match).
Tensor from_vector(const std::vector<double>& values, const Shape& shape, Options o = {});
Tensor from_vector(const std::vector<float>& values, const Shape& shape, Options o = {});
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape, Options o = {DType::i64});
// Host copy of all elements in logical (row-major) order, converted to T.
template <typename T>
std::vector<T> to_vector(const Tensor& t);

// Random, from an explicit Generator (Philox; same numbers on every backend).
Tensor rand(const Shape& shape, Generator& gen, Options o = {});                    // U(0,1]
Tensor uniform(const Shape& shape, double lo, double hi, Generator& gen, Options o = {});
Tensor randn(const Shape& shape, Generator& gen, Options o = {});                   // N(0,1)
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& gen, Options o = {DType::i64});
Tensor bernoulli(const Shape& shape, double p, Generator& gen, Options o = {});     // 1 with prob. p

// Copies src into dst elementwise (same shape; any strides; casts dtype; same device). An in-place
// write: bumps dst's storage version. Not recorded by autograd, so a dst that requires grad is
// refused while grad mode is on (write it under NoGradGuard, as optimizers do).
void copy_(const Tensor& dst, const Tensor& src);
// Marks an in-place write into t made outside copy_ (a backend kernel writing t directly).
inline void bump_version(const Tensor& t) { ++t.storage()->version; }
// max |a-b| <= atol + rtol*|b| elementwise, on host in f64; shapes must match.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
double max_abs_diff(const Tensor& a, const Tensor& b);
// Index (in row-major order) of the first NaN or infinity of a floating tensor, or -1 (also for
// integer and boolean dtypes). Reads every element once (a tensor on a device is copied to the host).
int64_t first_non_finite(const Tensor& t);
// "nan", "inf" or "-inf": element i of t, an index first_non_finite returned.
std::string non_finite_text(const Tensor& t, int64_t i);

}  // namespace hh
