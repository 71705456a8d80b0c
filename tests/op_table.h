// The op table: one OpSpec per op (or op variant). The harness runs, for every spec:
//   forward      f32 and f64 on random inputs against the spec's plain host reference;
//   noncontig    the same inputs as non-contiguous views (transposed / strided buffers);
//   grad         central finite differences in f64 against backward (|a-n| <= 1e-6 max(1,|n|));
//   errors       the spec's error checks (messages must name the op and the bad shapes/dtypes);
//   device       with HH_DEVICE=cuda, forward and backward on the GPU against the CPU.
// A coverage test fails when an op registered with OpName has no spec, or a spec lacks a part.
#pragma once
#include <cstdint>
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "autograd/ops.h"

namespace hh::test {

// Host tensor for references: row-major values in f64.
struct Host {
  Shape shape;
  std::vector<double> v;
  int64_t numel() const { return static_cast<int64_t>(v.size()); }
  double at(const std::vector<int64_t>& idx) const;  // multi-index read
};
Host to_host(const Tensor& t);

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;
using RefFn = std::function<Host(const std::vector<Host>&)>;
using InputFn = std::function<std::vector<Tensor>(Generator&, DType)>;

struct OpSpec {
  std::string op;       // the registered op name
  std::string variant;  // shown in failures, e.g. "broadcast (3,1)x(4)"
  std::vector<Shape> shapes;  // float inputs drawn U(lo, hi) unless `inputs` is set
  double lo = -1.0, hi = 1.0;
  InputFn inputs;             // custom inputs (indices, positive values, ...); float ones get grads
  OpFn fn;                    // the op under test
  RefFn reference;            // plain loops on host values
  bool differentiable = true;
  std::string no_grad_reason;  // required when !differentiable
  std::vector<int> grad_inputs;  // which inputs to gradcheck (default: every floating input)
  std::function<void()> errors;  // CHECK_THROWS_WITH... on bad shapes/dtypes
  double rtol32 = 1e-5, atol32 = 1e-5;  // f32 forward tolerance against the f64 reference
};

// Registers specs at static-init time: `static const bool reg = add_specs({...});`
bool add_specs(std::vector<OpSpec> specs);
const std::vector<OpSpec>& all_specs();

// The device under test (HH_DEVICE, default cpu).
Device test_device();
bool cuda_requested();

// Reference helpers.
Host unary_ref(const Host& x, const std::function<double(double)>& f);
Host binary_ref(const Host& a, const Host& b, const std::function<double(double, double)>& f);  // broadcasting
// Random float input on the CPU.
Tensor rand_input(const Shape& s, double lo, double hi, Generator& g, DType t);

// A (B,L) bool padding mask for attention tests: batch 0 has scattered holes (every 4th key from
// the third) and a padded tail of 3, batch 1 padded keys in front (its first 3 queries see no key
// at all), the others every key.
Tensor padding_test_mask(int64_t B, int64_t L);

// max |a - b| / max |b|, the denominator at least 1e-3 (a gradient that is zero up to rounding
// has no relative error): how the attention forms' tests compare a form with its reference.
double rel_err(const Tensor& a, const Tensor& b);
// Fresh leaves: a clone of each tensor with requires_grad, so each form gets its own gradients.
std::vector<Tensor> grad_leaves(const std::vector<Tensor>& base);

// Same values, non-contiguous layout: a transposed buffer for rank >= 2, every other element of
// a twice-as-long buffer for rank 1; scalars are returned as is.
Tensor non_contiguous(const Tensor& x);
// CHECKs |got - want| <= atol + rtol |want| elementwise (NaN where the reference has NaN), naming
// the worst element; the shapes must match.
void compare(const Tensor& got, const Host& want, double rtol, double atol, const std::string& label);

// Checks that `f` throws hh::Error whose message contains every fragment.
void check_throws(const std::function<void()>& f, const std::vector<std::string>& fragments);

// Central finite-difference gradient check of sum(w * fn(inputs)) in f64.
// tol is the relative tolerance (|a-n| <= tol·max(1,|n|)); callers loosening it say why.
void gradcheck(const OpFn& fn, const std::vector<Tensor>& inputs, const std::vector<int>& which,
               const std::string& label, double tol = 1e-6);

}  // namespace hh::test
