// The CpuBackend methods whose kernels have a baseline and an AVX2+FMA copy
// (core/cpu/cpu_kernels.h): each picks the copy on cpu_isa() at every call.
#include "core/cpu/cpu_backend.h"
#include "core/cpu/cpu_kernels.h"

namespace hh {

void CpuBackend::unary(UnaryOp op, const Tensor& x, const Tensor& y, const UnaryParams& p) {
  with_cpu_kernels([&](auto kernels) { kernels.unary(op, x, y, p); });
}
void CpuBackend::unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy, const Tensor& gx,
                                const UnaryParams& p) {
  with_cpu_kernels([&](auto kernels) { kernels.unary_backward(op, x, y, gy, gx, p); });
}
void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  with_cpu_kernels([&](auto kernels) { kernels.binary(op, a, b, out); });
}
void CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  with_cpu_kernels([&](auto kernels) { kernels.where(cond, a, b, out); });
}
void CpuBackend::softmax(const Tensor& x, const Tensor& y, bool log) {
  with_cpu_kernels([&](auto kernels) { kernels.softmax(x, y, log); });
}
void CpuBackend::softmax_backward(const Tensor& y, const Tensor& gy, const Tensor& gx, bool log) {
  with_cpu_kernels([&](auto kernels) { kernels.softmax_backward(y, gy, gx, log); });
}
void CpuBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                            const Tensor& mean, const Tensor& rstd) {
  with_cpu_kernels([&](auto kernels) { kernels.layer_norm(x, weight, bias, eps, y, mean, rstd); });
}
void CpuBackend::layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                                     const Tensor& gy, const Tensor& gx, const Tensor& gweight, const Tensor& gbias) {
  with_cpu_kernels([&](auto kernels) { kernels.layer_norm_backward(x, weight, mean, rstd, gy, gx, gweight, gbias); });
}
void CpuBackend::rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) {
  with_cpu_kernels([&](auto kernels) { kernels.rms_norm(x, weight, eps, y, rstd); });
}
void CpuBackend::rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& gy,
                                   const Tensor& gx, const Tensor& gweight) {
  with_cpu_kernels([&](auto kernels) { kernels.rms_norm_backward(x, weight, rstd, gy, gx, gweight); });
}
void CpuBackend::cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyParams& p,
                               const Tensor& loss, const Tensor& lse) {
  with_cpu_kernels([&](auto kernels) { kernels.cross_entropy(logits, target, p, loss, lse); });
}
void CpuBackend::cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& lse,
                                        const Tensor& gloss, const CrossEntropyParams& p, const Tensor& glogits) {
  with_cpu_kernels([&](auto kernels) { kernels.cross_entropy_backward(logits, target, lse, gloss, p, glogits); });
}
void CpuBackend::linear_attention_causal(const Tensor& q, const Tensor& k, const Tensor& v, int64_t chunk, double eps,
                                         const Tensor& y, const Tensor& den) {
  with_cpu_kernels([&](auto kernels) { kernels.linear_attention_causal(q, k, v, chunk, eps, y, den); });
}
void CpuBackend::linear_attention_causal_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& y,
                                                  const Tensor& den, const Tensor& gy, int64_t chunk, const Tensor& gq,
                                                  const Tensor& gk, const Tensor& gv) {
  with_cpu_kernels(
      [&](auto kernels) { kernels.linear_attention_causal_backward(q, k, v, y, den, gy, chunk, gq, gk, gv); });
}
void CpuBackend::hybrid_window_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                         int64_t heads, int64_t window, double scale, const Tensor& num,
                                         const Tensor& den, const Tensor& m) {
  with_cpu_kernels(
      [&](auto kernels) { kernels.hybrid_window_attention(q, k, v, key_mask, heads, window, scale, num, den, m); });
}
void CpuBackend::hybrid_window_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                  const Tensor& key_mask, int64_t heads, int64_t window, double scale,
                                                  const Tensor& m, const Tensor& gnum, const Tensor& gden,
                                                  const Tensor& gq, const Tensor& gk, const Tensor& gv) {
  with_cpu_kernels([&](auto kernels) {
    kernels.hybrid_window_attention_backward(q, k, v, key_mask, heads, window, scale, m, gnum, gden, gq, gk, gv);
  });
}
void CpuBackend::flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, bool causal,
                                 double scale, const Tensor& out, const Tensor& lse) {
  with_cpu_kernels([&](auto kernels) { kernels.flash_attention(q, k, v, key_mask, causal, scale, out, lse); });
}
void CpuBackend::flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                          const Tensor& out, const Tensor& lse, const Tensor& gout, bool causal,
                                          double scale, const Tensor& gq, const Tensor& gk, const Tensor& gv) {
  with_cpu_kernels([&](auto kernels) {
    kernels.flash_attention_backward(q, k, v, key_mask, out, lse, gout, causal, scale, gq, gk, gv);
  });
}

void CpuBackend::add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                                double eps, const Tensor& h, const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  with_cpu_kernels([&](auto kernels) { kernels.add_layer_norm(x, residual, weight, bias, eps, h, y, mean, rstd); });
}
void CpuBackend::add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps,
                              const Tensor& h, const Tensor& y, const Tensor& rstd) {
  with_cpu_kernels([&](auto kernels) { kernels.add_rms_norm(x, residual, weight, eps, h, y, rstd); });
}
void CpuBackend::bias_gelu(const Tensor& x, const Tensor& bias, bool tanh_form, const Tensor& y) {
  with_cpu_kernels([&](auto kernels) { kernels.bias_gelu(x, bias, tanh_form, y); });
}
void CpuBackend::bias_gelu_backward(const Tensor& x, const Tensor& bias, const Tensor& gy, bool tanh_form,
                                    const Tensor& gx) {
  with_cpu_kernels([&](auto kernels) { kernels.bias_gelu_backward(x, bias, gy, tanh_form, gx); });
}
void CpuBackend::rope(const Tensor& x, const Tensor& cos, const Tensor& sin, bool inverse, const Tensor& y) {
  with_cpu_kernels([&](auto kernels) { kernels.rope(x, cos, sin, inverse, y); });
}

}  // namespace hh
