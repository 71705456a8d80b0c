// The CPU backend: Eigen for GEMM, OpenMP loops for the rest. Methods are defined per op family
// in core/cpu/*.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/backend.h"
#include "core/device.h"
#include "core/tensor.h"

namespace hh {

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu(); }
  std::shared_ptr<void> allocate(size_t nbytes) override;
  void copy_from_host(void* dst, const void* src, size_t nbytes) override;
  void copy_to_host(void* dst, const void* src, size_t nbytes) override;
  void synchronize() override {}

  void fill(const Tensor& out, double value) override;                        // cpu_copy.cpp
  void copy(const Tensor& dst, const Tensor& src) override;                    // cpu_copy.cpp
  void random(const Tensor& out, const RandomParams& p) override;              // cpu_copy.cpp

  void unary(UnaryOp op, const Tensor& x, const Tensor& y, const UnaryParams& p) override;  // cpu_elementwise.cpp
  void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy, const Tensor& gx,
                      const UnaryParams& p) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override;

  void reduce(ReduceOp op, const Tensor& x, const Tensor& values, const Tensor& indices) override;  // cpu_reduce.cpp
  void cumsum(const Tensor& x, const Tensor& out) override;

  void gemm(const Tensor& a, const Tensor& b, const Tensor& c, const GemmParams& p) override;  // cpu_gemm.cpp

  void softmax(const Tensor& x, const Tensor& y, bool log) override;  // cpu_nn.cpp
  void softmax_backward(const Tensor& y, const Tensor& gy, const Tensor& gx, bool log) override;
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                  const Tensor& mean, const Tensor& rstd) override;
  void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                           const Tensor& gy, const Tensor& gx, const Tensor& gweight, const Tensor& gbias) override;
  void rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) override;
  void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& gy,
                         const Tensor& gx, const Tensor& gweight) override;
  void cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyParams& p, const Tensor& loss,
                     const Tensor& lse) override;
  void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& lse, const Tensor& gloss,
                              const CrossEntropyParams& p, const Tensor& glogits) override;

  void index_select(const Tensor& x, const Tensor& index, const Tensor& out) override;  // cpu_index.cpp
  void index_add(const Tensor& out, const Tensor& index, const Tensor& src) override;
  void gather(const Tensor& x, const Tensor& index, const Tensor& out) override;
  void scatter_add(const Tensor& out, const Tensor& index, const Tensor& src) override;
  void triangle(const Tensor& x, const Tensor& out, int64_t k, bool upper) override;

  void linear_attention_causal(const Tensor& q, const Tensor& k, const Tensor& v, int64_t chunk, double eps,
                               const Tensor& y, const Tensor& den) override;  // cpu_attention.cpp
  void linear_attention_causal_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& y,
                                        const Tensor& den, const Tensor& gy, int64_t chunk, const Tensor& gq,
                                        const Tensor& gk, const Tensor& gv) override;
  void flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, bool causal,
                       double scale, const Tensor& out, const Tensor& lse) override;  // cpu_flash_attention.cpp
  void flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                const Tensor& out, const Tensor& lse, const Tensor& gout, bool causal, double scale,
                                const Tensor& gq, const Tensor& gk, const Tensor& gv) override;
  bool flash_attention_takes_views() const override { return true; }
  void hybrid_window_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, int64_t heads,
                               int64_t window, double scale, const Tensor& num, const Tensor& den,
                               const Tensor& m) override;  // cpu_attention.cpp
  void hybrid_window_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                        int64_t heads, int64_t window, double scale, const Tensor& m,
                                        const Tensor& gnum, const Tensor& gden, const Tensor& gq, const Tensor& gk,
                                        const Tensor& gv) override;
  bool flash_attention_takes_key_mask() const override { return true; }

  void add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias, double eps,
                      const Tensor& h, const Tensor& y, const Tensor& mean, const Tensor& rstd) override;  // cpu_fused.cpp
  void add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps, const Tensor& h,
                    const Tensor& y, const Tensor& rstd) override;
  void bias_gelu(const Tensor& x, const Tensor& bias, bool tanh_form, const Tensor& y) override;
  void bias_gelu_backward(const Tensor& x, const Tensor& bias, const Tensor& gy, bool tanh_form,
                          const Tensor& gx) override;
  void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, bool inverse, const Tensor& y) override;

  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWParams& p) override;  // cpu_optim.cpp
  void adamw_multi_step(const std::vector<AdamWTensor>& ts, const AdamWParams& p) override;  // cpu_optim.cpp
};

// Below this many elements a kernel runs on one thread (OpenMP start-up costs more).
constexpr int64_t kParallelGrain = 32768;

}  // namespace hh
