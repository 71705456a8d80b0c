// The CUDA backend: one CudaBackend per device owns that device's context (a default non-blocking
// stream, cuBLAS handles with their workspaces, the caching allocator). Every method makes its
// device current for the duration of the call (DeviceGuard) and enqueues on the calling thread's
// current stream of that device: the default stream unless the thread set one (StreamGuard, see
// the streams block below), so concurrent runs on their own threads and streams do not serialize.
// Kernels live in one .cu per op family (cuda_copy.cu, cuda_random.cu, ...), each with kernel ->
// launcher (foo_cuda) -> method; methods pass `stream_` (the current stream) to every launch.
#pragma once
#include <cublas_api.h>  // cublasHandle_t (cublas_v2.h is the API entry point)
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <driver_types.h>  // cudaStream_t

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/backend.h"
#include "core/device.h"
#include "core/tensor.h"
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
// ---- streams: the calling thread's current stream per device ----
// Each thread has, per device, a current stream: null (the backend's default stream) until set.
// Kernels, copies, cuBLAS calls and allocations of a CudaBackend method go to it.
cudaStream_t thread_stream(int device);  // null when the thread has not set one
// Sets this thread's current stream on `device` (null: back to the default); returns the previous.
cudaStream_t set_current_stream(int device, cudaStream_t stream);

// Makes `stream` this thread's current stream on `device`, restoring the previous on destruction.
class StreamGuard {
 public:
  StreamGuard(int device, cudaStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  cudaStream_t prev_;
};

// A non-blocking stream of its own on `device`. The destructor waits for it, drops the backend's
// cuBLAS handle for it, hands its cached blocks to the default stream and destroys it.
class Stream {
 public:
  explicit Stream(int device);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
};

// The stream a CudaBackend method enqueues on: converts to the calling thread's current stream of
// the device (or the default stream), each time it is used. Held by CudaBackend as `stream_`, so
// every launch written `<<<grid, block, smem, stream_>>>` follows the thread's stream.
class CurrentStream {
 public:
  CurrentStream(int device, cudaStream_t default_stream) : device_(device), default_(default_stream) {}
  operator cudaStream_t() const {  // implicit on purpose: it stands where a cudaStream_t goes
    cudaStream_t s = thread_stream(device_);
    return s ? s : default_;
  }

 private:
  int device_;
  cudaStream_t default_;
};

// The allocator's name for a stream.
inline StreamId stream_id(cudaStream_t s) { return reinterpret_cast<StreamId>(s); }
}  // namespace cuda

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::cuda(index_); }
  int index() const { return index_; }
  // The calling thread's current stream on this device (see the streams block above).
  cudaStream_t stream() const { return stream_; }
  cudaStream_t default_stream() const { return default_stream_; }
  // The cuBLAS handle of stream(): one per stream, created on first use (not during a graph
  // capture: warm up first), bound to that stream and to a workspace allocated on it.
  cublasHandle_t cublas();
  // Destroys stream s's cuBLAS handle and gives its cached blocks to the default stream (the
  // caller has synchronized s and destroys it next). cuda::Stream's destructor calls it.
  void forget_stream(cudaStream_t s);
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
  void flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, bool causal,
                       double scale, const Tensor& out, const Tensor& lse) override;
  void flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                const Tensor& out, const Tensor& lse, const Tensor& gout, bool causal, double scale,
                                const Tensor& gq, const Tensor& gk, const Tensor& gv) override;
  void hybrid_window_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask, int64_t heads,
                               int64_t window, double scale, const Tensor& num, const Tensor& den,
                               const Tensor& m) override;  // cuda_hybrid_window.cu
  void hybrid_window_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                        int64_t heads, int64_t window, double scale, const Tensor& m,
                                        const Tensor& gnum, const Tensor& gden, const Tensor& gq, const Tensor& gk,
                                        const Tensor& gv) override;

  // Fused transformer-block kernels (cuda_fused.cu).
  void add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias, double eps,
                      const Tensor& h, const Tensor& y, const Tensor& mean, const Tensor& rstd) override;
  void add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps, const Tensor& h,
                    const Tensor& y, const Tensor& rstd) override;
  void bias_gelu(const Tensor& x, const Tensor& bias, bool tanh_form, const Tensor& y) override;
  void bias_gelu_backward(const Tensor& x, const Tensor& bias, const Tensor& gy, bool tanh_form,
                          const Tensor& gx) override;
  void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, bool inverse, const Tensor& y) override;

  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWParams& p) override;  // cuda_optim.cu
  void adamw_multi_step(const std::vector<AdamWTensor>& ts, const AdamWParams& p) override;  // cuda_optim.cu

 private:
  struct Blas {
    cublasHandle_t handle = nullptr;
    std::shared_ptr<void> workspace;
  };

  int index_;
  cudaStream_t default_stream_ = nullptr;
  cuda::CurrentStream stream_;  // converts to the calling thread's current stream
  cuda::CachingAllocator allocator_;
  std::mutex blas_mu_;
  std::unordered_map<cudaStream_t, Blas> blas_;  // per stream
};

namespace cuda {
// The backend of device `index` (created on first use, never destroyed: tensors freed during
// static destruction still find their allocator). Throws when the device does not exist.
CudaBackend& backend(int index);
// The CUDA backend that owns t (throws naming `op` when t is not on a CUDA device).
CudaBackend& backend_of(const Tensor& t, const char* op);
}  // namespace cuda

}  // namespace hh
