// CudaBackend's context and memory methods, the per-device registry behind cuda_backend(i), and
// the device queries that must work (returning false / 0) on machines without a GPU or driver.
#include "cuda/cuda_backend.h"

#include <array>
#include <string>

#include "core/cuda_module.h"
#include "cuda/cuda_config.h"
#include "cuda/cuda_memory.h"

namespace hh {

namespace cuda {

DeviceGuard::DeviceGuard(int device) : device_(device) {
  HH_CUDA_CHECK(cudaGetDevice(&prev_), "cuda device guard");
  if (prev_ != device_) HH_CUDA_CHECK(cudaSetDevice(device_), "cuda device guard");
}

DeviceGuard::~DeviceGuard() {
  if (prev_ >= 0 && prev_ != device_) (void)cudaSetDevice(prev_);
}

namespace {

struct DeviceCount {
  int count = 0;
  std::string why;  // why there is no device, for the error message
};

const DeviceCount& device_count_info() {
  static const DeviceCount info = [] {
    DeviceCount d;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      d.why = str(cudaGetErrorName(err), ": ", cudaGetErrorString(err));
      return d;
    }
    d.count = n;
    if (n == 0) d.why = "the driver reports no CUDA device";
    return d;
  }();
  return info;
}

constexpr int kMaxDevices = 64;

}  // namespace

CudaBackend& backend(int index) {
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<CudaBackend*, kMaxDevices> backends{};
  const DeviceCount& info = device_count_info();
  HH_CHECK(info.count > 0, "cuda:", index, ": no CUDA device is available (", info.why, ")");
  HH_CHECK(index >= 0 && index < info.count && index < kMaxDevices, "cuda:", index, ": no such device (", info.count,
           " CUDA device", info.count == 1 ? "" : "s", " available)");
  std::call_once(once[static_cast<size_t>(index)],
                 [&] { backends[static_cast<size_t>(index)] = new CudaBackend(index); });  // never deleted
  return *backends[static_cast<size_t>(index)];
}

CudaBackend& backend_of(const Tensor& t, const char* op) {
  HH_CHECK(t.device().is_cuda(), op, ": expected a CUDA tensor, got one on ", t.device());
  return backend(t.device().index);
}

}  // namespace cuda

// ---- CudaBackend: context ----

CudaBackend::CudaBackend(int index) : index_(index), allocator_(index) {
  cuda::DeviceGuard guard(index_);
  HH_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cuda backend init");
}

CudaBackend::~CudaBackend() {
  cuda::DeviceGuard guard(index_);
  if (cublas_) (void)cublasDestroy(cublas_);
  cublas_workspace_.reset();
  if (stream_) (void)cudaStreamDestroy(stream_);
}

cublasHandle_t CudaBackend::cublas() {
  std::call_once(cublas_once_, [this] {
    cuda::DeviceGuard guard(index_);
    // 32 MiB: the workspace cuBLAS recommends for Hopper (more than enough before it).
    constexpr size_t kWorkspace = size_t(32) << 20;
    cublasHandle_t h = nullptr;
    cuda::check_cublas(cublasCreate(&h), "gemm", "cublasCreate");
    cublas_workspace_ = allocator_.allocate(kWorkspace);
    cuda::check_cublas(cublasSetStream(h, stream_), "gemm", "cublasSetStream");
    cuda::check_cublas(cublasSetWorkspace(h, cublas_workspace_.get(), kWorkspace), "gemm", "cublasSetWorkspace");
    cublas_ = h;
  });
  HH_CHECK(cublas_ != nullptr, "cuda:", index_, ": cuBLAS handle creation failed earlier");
  return cublas_;
}

// ---- CudaBackend: memory ----

std::shared_ptr<void> CudaBackend::allocate(size_t nbytes) {
  cuda::DeviceGuard guard(index_);
  return allocator_.allocate(nbytes);
}

// Host memory here is pageable: cudaMemcpyAsync stages it before returning, so the caller may
// free `src` at once; the device-side write stays ordered on this backend's stream.
void CudaBackend::copy_from_host(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  cuda::DeviceGuard guard(index_);
  HH_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, stream_), "copy_from_host");
}

void CudaBackend::copy_to_host(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  cuda::DeviceGuard guard(index_);
  HH_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream_), "copy_to_host");
  HH_CUDA_CHECK(cudaStreamSynchronize(stream_), "copy_to_host");
}

void CudaBackend::synchronize() {
  cuda::DeviceGuard guard(index_);
  HH_CUDA_CHECK(cudaStreamSynchronize(stream_), "synchronize");
}

// ---- the entry points declared in core/backend.h, cuda/cuda_memory.h and cuda/cuda_config.h ----
// Inside the module these are the real ones (the core's loader, core/cuda_module.cpp, defines the
// same set for programs and forwards to the table exported below).

Backend& cuda_backend(int index) { return cuda::backend(index); }
int cuda_device_count() { return cuda::device_count_info().count; }
bool cuda_available() { return cuda_device_count() > 0; }

MemoryStats cuda_memory_stats(int index) { return cuda::backend(index).allocator().stats(); }
void cuda_reset_peak(int index) { cuda::backend(index).allocator().reset_peak(); }
void cuda_empty_cache(int index) {
  CudaBackend& b = cuda::backend(index);
  b.synchronize();
  cuda::DeviceGuard guard(index);
  b.allocator().empty_cache();
}

}  // namespace hh

// The module's one exported entry point (core/cuda_module.h), looked up by the core's loader.
extern "C" const hh::cuda_module::Api* hh_cuda_module_api() {
  static const hh::cuda_module::Api api{
      hh::cuda_module::kAbiVersion, sizeof(hh::Tensor), &hh::cuda_backend,  &hh::cuda_device_count,
      &hh::cuda_memory_stats,       &hh::cuda_reset_peak, &hh::cuda_empty_cache, &hh::set_allow_tf32,
      &hh::allow_tf32,
  };
  return &api;
}
