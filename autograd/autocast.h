// Automatic mixed precision, as torch.autocast: inside an AutocastGuard, ops pick their compute
// dtype from a fixed list, and the model keeps f32 parameters ("master weights") and optimizer
// state. The state is thread-local (like grad mode), so concurrent runs on worker threads each
// set their own. Backward runs with autocast off: the casts autocast inserted are ordinary
// differentiable `to_dtype` nodes, so gradients come back to the f32 leaves in f32.
//
// The lists (torch's CUDA lists, restricted to the ops this engine has):
// - lower precision (inputs cast to the autocast dtype; f64 and integer inputs left alone):
//   matmul, linear, scaled_dot_product_attention, linear_attention_causal. The GEMMs run on
//   bf16 operands with f32 accumulation (cuBLAS tensor cores on CUDA; on the CPU the same
//   arithmetic: operands rounded to bf16, products summed in f32, the result rounded once);
//   the attention kernels read bf16 and keep their statistics and running state in f32.
// - f32 (bf16/f16 inputs cast up, f32 results): softmax, log_softmax, layer_norm, rms_norm,
//   cross_entropy, mse_loss (their statistics: max, sums, mean, variance, log-sum-exp), exp, log,
//   log1p, rsqrt, softplus, pow, reciprocal (range), sum and cumsum (long sums).
// - promote (operands of different floating dtypes cast to the widest): the binary ops and where.
//   So a residual stream that starts in f32 stays in f32 when a bf16 branch is added to it.
// Every other op runs in the dtype of its input (elementwise activations of a bf16 tensor give
// bf16, computed in f32 and rounded once).
#pragma once
#include <string>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace hh {

struct AutocastMode {
  static bool is_enabled();
  static DType dtype();  // the lower-precision dtype (bf16 or f16)
};

class AutocastGuard {
 public:
  // dtype must be bf16 or f16. AutocastGuard(DType::bf16, false) turns autocast off for a scope.
  explicit AutocastGuard(DType dtype = DType::bf16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
};

// The casts the op lists above call. Each returns its argument unchanged when autocast is off,
// the tensor is undefined, or the rule does not apply to its dtype.
Tensor autocast_lower(const Tensor& t);  // f32/f16/bf16 -> the autocast dtype
Tensor autocast_f32(const Tensor& t);    // bf16/f16 -> f32
// The widest floating dtype of a and b (f64 > f32 > bf16 = f16; bf16 with f16 gives f32), for
// the promote list; only called when their dtypes differ.
DType autocast_promote(DType a, DType b);

// The precision of a training or evaluation run, one flag in every app (--precision):
//   f32   everything in f32 (the default);
//   tf32  f32 tensors, cuBLAS f32 GEMMs on TF32 tensor cores (~1e-3 relative); CUDA only;
//   bf16  bf16 autocast around forward and loss, f32 master weights and optimizer state.
enum class Precision { f32, tf32, bf16 };
const char* precision_name(Precision p);
// Throws naming the value and the choices.
Precision parse_precision(const std::string& s);
// Throws when `p` cannot run on `d` (tf32 on the CPU), saying what to use instead.
void check_precision(Precision p, Device d);

// Autocast for the scope of a forward pass at precision p: bf16 autocast for Precision::bf16,
// nothing otherwise (tf32 is a process-wide cuBLAS setting: set_allow_tf32, core/cuda_config.h).
class PrecisionGuard {
 public:
  explicit PrecisionGuard(Precision p) : guard_(DType::bf16, p == Precision::bf16) {}

 private:
  AutocastGuard guard_;
};

}  // namespace hh
