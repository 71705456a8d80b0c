// Chunked causal linear attention on a CUDA device, for now through the CPU kernel: inputs are
// copied to the host, core/cpu/cpu_attention.cpp runs, results are copied back. Correct but
// slow; a fused CUDA kernel will replace it (it needs no change outside this file).
#include "core/cpu/cpu_backend.h"
#include "cuda/cuda_backend.h"

namespace hh {

namespace {

// Host copy of a contiguous device tensor (raw bytes, so any dtype).
Tensor to_host(CudaBackend& b, const Tensor& t, const char* op) {
  HH_CHECK(t.is_contiguous(), op, ": expected contiguous tensors, got shape ", t.shape(), " strides ", t.strides());
  Tensor h = empty(t.shape(), {t.dtype(), Device::cpu()});
  b.copy_to_host(h.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()) * itemsize(t.dtype()));
  return h;
}

void from_host(CudaBackend& b, const Tensor& dst, const Tensor& h, const char* op) {
  HH_CHECK(dst.is_contiguous(), op, ": expected a contiguous output, got shape ", dst.shape(), " strides ",
           dst.strides());
  b.copy_from_host(dst.raw_data(), h.raw_data(), static_cast<size_t>(h.numel()) * itemsize(h.dtype()));
  b.synchronize();  // h is freed on return
}

Tensor host_like(const Tensor& t) { return empty(t.shape(), {t.dtype(), Device::cpu()}); }

}  // namespace

void CudaBackend::linear_attention_causal(const Tensor& q, const Tensor& k, const Tensor& v, int64_t chunk,
                                          double eps, const Tensor& y, const Tensor& den) {
  const char* op = "linear_attention_causal";
  Tensor hy = host_like(y), hden = host_like(den);
  backend_for(Device::cpu())
      .linear_attention_causal(to_host(*this, q, op), to_host(*this, k, op), to_host(*this, v, op), chunk, eps, hy,
                               hden);
  from_host(*this, y, hy, op);
  from_host(*this, den, hden, op);
}

void CudaBackend::linear_attention_causal_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& y,
                                                   const Tensor& den, const Tensor& gy, int64_t chunk,
                                                   const Tensor& gq, const Tensor& gk, const Tensor& gv) {
  const char* op = "linear_attention_causal_backward";
  Tensor hgq = host_like(gq), hgk = host_like(gk), hgv = host_like(gv);
  backend_for(Device::cpu())
      .linear_attention_causal_backward(to_host(*this, q, op), to_host(*this, k, op), to_host(*this, v, op),
                                        to_host(*this, y, op), to_host(*this, den, op), to_host(*this, gy, op), chunk,
                                        hgq, hgk, hgv);
  from_host(*this, gq, hgq, op);
  from_host(*this, gk, hgk, op);
  from_host(*this, gv, hgv, op);
}

}  // namespace hh
