// The CUDA backend: one CudaBackend per device owns that device's context (a non-blocking
// stream, a cuBLAS handle with its workspace, the caching allocator). Every method makes its
// device current for the duration of the call (DeviceGuard) and enqueues on its own stream, so
// there is no hidden global device or stream. Kernels live in one .cu per op family
// (cuda_copy.cu, cuda_random.cu, ...), each with kernel -> launcher (foo_cuda) -> method.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <mutex>

#include "core/backend.h"
#include "cuda/cuda_allocator.h"
#include "cuda/cuda_check.h"

namespace hh {

namespace cuda {
// Makes `device` current and restores the previous device on destruction.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1, device_;
};
}  // namespace cuda

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::cuda(index_); }
  int index() const { return index_; }
  cudaStream_t stream() const { return stream_; }
  // Created on first use, bound to stream() and to a workspace owned by this backend.
  cublasHandle_t cublas();
  cuda::CachingAllocator& allocator() { return allocator_; }

  // ---- memory (cuda_backend.cpp) ----
  std::shared_ptr<void> allocate(size_t nbytes) override;
  void copy_from_host(void* dst, const void* src, size_t nbytes) override;
  void copy_to_host(void* dst, const void* src, size_t nbytes) override;
  void synchronize() override;

  void fill(const Tensor& out, double value) override;             // cuda_copy.cu
  void copy(const Tensor& dst, const Tensor& src) override;        // cuda_copy.cu
  void random(const Tensor& out, const RandomParams& p) override;  // cuda_random.cu

  void unary(UnaryOp op, const Tensor& x, const Tensor& y, const UnaryParams& p) override;  // cuda_unary.cu
  void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy, const Tensor& gx,
                      const UnaryParams& p) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;  // cuda_binary.cu
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override;

  void reduce(ReduceOp op, const Tensor& x, const Tensor& values, const Tensor& indices) override;  // cuda_reduce.cu
  void cumsum(const Tensor& x, const Tensor& out) override;

  void gemm(const Tensor& a, const Tensor& b, const Tensor& c, const GemmParams& p) override;  // cuda_gemm.cu

  void softmax(const Tensor& x, const Tensor& y, bool log) override;  // cuda_softmax.cu
  void softmax_backward(const Tensor& y, const Tensor& gy, const Tensor& gx, bool log) override;
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                  const Tensor& mean, const Tensor& rstd) override;  // cuda_norm.cu
  void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                           const Tensor& gy, const Tensor& gx, const Tensor& gweight, const Tensor& gbias) override;
  void rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) override;
  void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& gy, const Tensor& gx,
                         const Tensor& gweight) override;
  void cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyParams& p, const Tensor& loss,
                     const Tensor& lse) override;  // cuda_loss.cu
  void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& lse, const Tensor& gloss,
                              const CrossEntropyParams& p, const Tensor& glogits) override;

  void index_select(const Tensor& x, const Tensor& index, const Tensor& out) override;  // cuda_index.cu
  void index_add(const Tensor& out, const Tensor& index, const Tensor& src) override;
  void gather(const Tensor& x, const Tensor& index, const Tensor& out) override;
  void scatter_add(const Tensor& out, const Tensor& index, const Tensor& src) override;
  void triangle(const Tensor& x, const Tensor& out, int64_t k, bool upper) override;

  // Checks in cuda_attention.cpp; kernels in cuda_attention.cu (chunked causal linear attention)
  // and cuda_flash_attention.cu (softmax attention, f32).
  void linear_attention_causal(const Tensor& q, const Tensor& k, const Tensor& v, int64_t chunk, double eps,
                               const Tensor& y, const Tensor& den) override;
  void linear_attention_causal_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& y,
                                        const Tensor& den, const Tensor& gy, int64_t chunk, const Tensor& gq,
                                        const Tensor& gk, const Tensor& gv) override;
  void flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, const Tensor& out,
                       const Tensor& lse) override;
  void flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                const Tensor& lse, const Tensor& gout, bool causal, double scale, const Tensor& gq,
                                const Tensor& gk, const Tensor& gv) override;

  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWParams& p) override;  // cuda_optim.cu
  void adamw_multi_step(const std::vector<AdamWTensor>& ts, const AdamWParams& p) override;  // cuda_optim.cu

 private:
  int index_;
  cudaStream_t stream_ = nullptr;
  cuda::CachingAllocator allocator_;
  std::once_flag cublas_once_;
  cublasHandle_t cublas_ = nullptr;
  std::shared_ptr<void> cublas_workspace_;
};

namespace cuda {
// The backend of device `index` (created on first use, never destroyed: tensors freed during
// static destruction still find their allocator). Throws when the device does not exist.
CudaBackend& backend(int index);
// The CUDA backend that owns t (throws naming `op` when t is not on a CUDA device).
CudaBackend& backend_of(const Tensor& t, const char* op);
}  // namespace cuda

}  // namespace hh
