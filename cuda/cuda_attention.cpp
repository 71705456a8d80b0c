// The CUDA backend's attention methods: argument checks, the device guard and dtype dispatch,
// then the launchers of cuda_attention.cu (chunked causal linear attention, f32/f64) and
// cuda_flash_attention.cu (fused softmax attention, f32, head dims up to 128).
#include <cstdint>
#include <limits>

#include "cuda/cuda_backend.h"

namespace hh {

namespace cuda {
// cuda_attention.cu (T = float, double)
template <typename T>
void linear_attention_causal_cuda(CudaBackend& be, const T* q, const T* k, const T* v, int64_t G, int L, int F, int D,
                                  int chunk, double eps, T* y, T* den, cudaStream_t stream);
template <typename T>
void linear_attention_causal_backward_cuda(CudaBackend& be, const T* q, const T* k, const T* v, const T* y,
                                           const T* den, const T* gy, int64_t G, int L, int F, int D, int chunk, T* gq,
                                           T* gk, T* gv, cudaStream_t stream);
// cuda_flash_attention.cu
void flash_attention_cuda(const float* q, const float* k, const float* v, int64_t G, int Lq, int Lk, int D, int Dv,
                          bool causal, float scale, float* out, float* lse, cudaStream_t stream);
void flash_attention_backward_cuda(CudaBackend& be, const float* q, const float* k, const float* v, const float* out,
                                   const float* lse, const float* gout, int64_t G, int Lq, int Lk, int D, int Dv,
                                   bool causal, float scale, float* gq, float* gk, float* gv, cudaStream_t stream);
}  // namespace cuda

namespace {

constexpr int kMaxFlashHeadDim = 128;

// Every tensor is on b's device, contiguous and of q's dtype.
void check_tensors(const CudaBackend& b, const char* op, const Tensor& q, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    HH_CHECK(t->device() == b.device(), op, ": got a tensor on ", t->device(), " on the ", b.device(), " backend");
    HH_CHECK(t->is_contiguous(), op, ": expected contiguous tensors, got shape ", t->shape(), " strides ",
             t->strides());
    HH_CHECK(t->dtype() == q.dtype(), op, ": expected ", q.dtype(), " tensors, got ", t->dtype());
  }
}

int to_int(int64_t n, const char* op, const char* what) {
  HH_CHECK(n <= std::numeric_limits<int>::max(), op, ": ", what, " = ", n, " is too large for the CUDA kernel");
  return static_cast<int>(n);
}

void check_flash(const CudaBackend& b, const char* op, const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                 std::initializer_list<const Tensor*> rest) {
  check_tensors(b, op, q, {&q, &k, &v});
  check_tensors(b, op, q, rest);
  HH_CHECK(q.dtype() == DType::f32, op, ": the CUDA kernel runs in f32, got ", q.dtype());
  HH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3 && k.size(0) == q.size(0) && v.size(0) == q.size(0) &&
               k.size(2) == q.size(2) && v.size(1) == k.size(1),
           op, ": q ", q.shape(), ", k ", k.shape(), ", v ", v.shape(), " do not fit (G,Lq,D), (G,Lk,D), (G,Lk,Dv)");
  HH_CHECK(q.size(2) <= kMaxFlashHeadDim && v.size(2) <= kMaxFlashHeadDim, op,
           ": the CUDA kernel takes head dims up to ", kMaxFlashHeadDim, ", got q ", q.shape(), " and v ", v.shape());
  HH_CHECK(!causal || q.size(1) == k.size(1), op, ": causal needs Lq == Lk, got q ", q.shape(), " and k ", k.shape());
}

}  // namespace

void CudaBackend::linear_attention_causal(const Tensor& q, const Tensor& k, const Tensor& v, int64_t chunk, double eps,
                                          const Tensor& y, const Tensor& den) {
  const char* op = "linear_attention_causal";
  check_tensors(*this, op, q, {&q, &k, &v, &y, &den});
  const int64_t G = q.size(0);
  const int L = to_int(q.size(1), op, "L"), F = to_int(q.size(2), op, "F"), D = to_int(v.size(2), op, "D");
  HH_CHECK(chunk > 0, op, ": chunk size must be positive, got ", chunk);
  if (G * L * D == 0) return;
  cuda::DeviceGuard guard(index_);
  if (F == 0) {  // no features: y = 0 / eps, den = eps
    fill(y, 0.0);
    fill(den, eps);
    return;
  }
  const int c = static_cast<int>(std::min<int64_t>(chunk, 1 << 20));
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::linear_attention_causal_cuda<T>(*this, q.data<T>(), k.data<T>(), v.data<T>(), G, L, F, D, c, eps, y.data<T>(),
                                          den.data<T>(), stream_);
  });
}

void CudaBackend::linear_attention_causal_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& y,
                                                   const Tensor& den, const Tensor& gy, int64_t chunk, const Tensor& gq,
                                                   const Tensor& gk, const Tensor& gv) {
  const char* op = "linear_attention_causal_backward";
  check_tensors(*this, op, q, {&q, &k, &v, &y, &den, &gy, &gq, &gk, &gv});
  const int64_t G = q.size(0);
  const int L = to_int(q.size(1), op, "L"), F = to_int(q.size(2), op, "F"), D = to_int(v.size(2), op, "D");
  HH_CHECK(chunk > 0, op, ": chunk size must be positive, got ", chunk);
  if (G * L == 0) return;
  cuda::DeviceGuard guard(index_);
  if (F == 0 || D == 0) {  // y does not depend on the inputs
    if (gq.numel() > 0) fill(gq, 0.0);
    if (gk.numel() > 0) fill(gk, 0.0);
    if (gv.numel() > 0) fill(gv, 0.0);
    return;
  }
  const int c = static_cast<int>(std::min<int64_t>(chunk, 1 << 20));
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::linear_attention_causal_backward_cuda<T>(*this, q.data<T>(), k.data<T>(), v.data<T>(), y.data<T>(),
                                                   den.data<T>(), gy.data<T>(), G, L, F, D, c, gq.data<T>(),
                                                   gk.data<T>(), gv.data<T>(), stream_);
  });
}

void CudaBackend::flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                  bool causal, double scale, const Tensor& out, const Tensor& lse) {
  const char* op = "flash_attention";
  HH_CHECK(!key_mask.defined(), op, ": the CUDA kernel takes no key mask (flash_attention_takes_key_mask is false)");
  check_flash(*this, op, q, k, v, causal, {&out, &lse});
  const int64_t G = q.size(0);
  const int Lq = to_int(q.size(1), op, "Lq"), Lk = to_int(k.size(1), op, "Lk");
  const int D = static_cast<int>(q.size(2)), Dv = static_cast<int>(v.size(2));
  if (G * Lq == 0) return;
  cuda::DeviceGuard guard(index_);
  cuda::flash_attention_cuda(q.data<float>(), k.data<float>(), v.data<float>(), G, Lq, Lk, D, Dv, causal,
                             static_cast<float>(scale), out.data<float>(), lse.data<float>(), stream_);
}

void CudaBackend::flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                           const Tensor& out, const Tensor& lse, const Tensor& gout, bool causal,
                                           double scale, const Tensor& gq, const Tensor& gk, const Tensor& gv) {
  const char* op = "flash_attention_backward";
  HH_CHECK(!key_mask.defined(), op, ": the CUDA kernel takes no key mask (flash_attention_takes_key_mask is false)");
  check_flash(*this, op, q, k, v, causal, {&out, &lse, &gout, &gq, &gk, &gv});
  const int64_t G = q.size(0);
  const int Lq = to_int(q.size(1), op, "Lq"), Lk = to_int(k.size(1), op, "Lk");
  const int D = static_cast<int>(q.size(2)), Dv = static_cast<int>(v.size(2));
  if (G == 0) return;
  cuda::DeviceGuard guard(index_);
  if (Lq == 0) {  // no queries: nothing reaches k and v
    if (gk.numel() > 0) fill(gk, 0.0);
    if (gv.numel() > 0) fill(gv, 0.0);
    return;
  }
  cuda::flash_attention_backward_cuda(*this, q.data<float>(), k.data<float>(), v.data<float>(), out.data<float>(),
                                      lse.data<float>(), gout.data<float>(), G, Lq, Lk, D, Dv, causal,
                                      static_cast<float>(scale), gq.data<float>(), gk.data<float>(), gv.data<float>(),
                                      stream_);
}

}  // namespace hh
