// CudaBackend's context and memory methods, the per-device registry behind cuda_backend(i), and
// the device queries that must work (returning false / 0) on machines without a GPU or driver.
#include "cuda/cuda_backend.h"

#include <array>
#include <string>
#include <vector>

#include "core/cuda_config.h"
#include "core/cuda_memory.h"
#include "core/cuda_module.h"
#include "core/cuda_stream.h"
#include "cuda/cuda_kernel_fill.h"

namespace hh {

namespace cuda {

DeviceGuard::DeviceGuard(int device) : device_(device) {
  HH_CUDA_CHECK(cudaGetDevice(&prev_), "cuda device guard");
  if (prev_ != device_) HH_CUDA_CHECK(cudaSetDevice(device_), "cuda device guard");
}

DeviceGuard::~DeviceGuard() {
  if (prev_ >= 0 && prev_ != device_) (void)cudaSetDevice(prev_);
}

// ---- streams ----

namespace {
constexpr int kMaxDevices = 64;
// This thread's current stream per device (null: the backend's default stream).
thread_local std::array<cudaStream_t, kMaxDevices> t_streams{};

size_t device_slot(int device) {
  HH_CHECK(device >= 0 && device < kMaxDevices, "cuda:", device, ": device index out of range (at most ", kMaxDevices,
           " devices)");
  return static_cast<size_t>(device);
}
}  // namespace

cudaStream_t thread_stream(int device) {
  return device >= 0 && device < kMaxDevices ? t_streams[static_cast<size_t>(device)] : nullptr;
}

cudaStream_t set_current_stream(int device, cudaStream_t stream) {
  cudaStream_t& slot = t_streams[device_slot(device)];
  cudaStream_t prev = slot;
  slot = stream;
  return prev;
}

StreamGuard::StreamGuard(int device, cudaStream_t stream) : device_(device), prev_(set_current_stream(device, stream)) {}
StreamGuard::~StreamGuard() { t_streams[static_cast<size_t>(device_)] = prev_; }

Stream::Stream(int device) : device_(device) {
  backend(device);  // checks the device exists
  DeviceGuard guard(device_);
  HH_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cuda stream create");
}

Stream::~Stream() {
  DeviceGuard guard(device_);
  (void)cudaStreamSynchronize(stream_);  // a destructor cannot throw; a failure here is sticky and seen later
  backend(device_).forget_stream(stream_);
  (void)cudaStreamDestroy(stream_);
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

CudaBackend::CudaBackend(int index) : index_(index), stream_(index, nullptr), allocator_(index) {
  cuda::DeviceGuard guard(index_);
  HH_CUDA_CHECK(cudaStreamCreateWithFlags(&default_stream_, cudaStreamNonBlocking), "cuda backend init");
  stream_ = cuda::CurrentStream(index_, default_stream_);
}

CudaBackend::~CudaBackend() {
  cuda::DeviceGuard guard(index_);
  for (auto& [s, b] : blas_) (void)cublasDestroy(b.handle);
  blas_.clear();
  if (default_stream_) (void)cudaStreamDestroy(default_stream_);
}

cublasHandle_t CudaBackend::cublas() {
  const cudaStream_t s = stream_;
  std::lock_guard<std::mutex> lock(blas_mu_);
  auto it = blas_.find(s);
  if (it != blas_.end()) return it->second.handle;
  HH_CHECK(!allocator_.capturing(cuda::stream_id(s)), "cuda:", index_,
           ": the first cuBLAS call on a stream happened during a CUDA graph capture; run the step once before "
           "capturing it (warm-up)");
  cuda::DeviceGuard guard(index_);
  // 32 MiB: the workspace cuBLAS recommends for Hopper (more than enough before it). Each stream
  // has its own, so concurrent GEMMs never share one.
  constexpr size_t kWorkspace = size_t(32) << 20;
  Blas b;
  cuda::check_cublas(cublasCreate(&b.handle), "gemm", "cublasCreate");
  try {
    b.workspace = allocator_.allocate(kWorkspace, cuda::stream_id(s));
    cuda::check_cublas(cublasSetStream(b.handle, s), "gemm", "cublasSetStream");
    cuda::check_cublas(cublasSetWorkspace(b.handle, b.workspace.get(), kWorkspace), "gemm", "cublasSetWorkspace");
  } catch (...) {
    (void)cublasDestroy(b.handle);
    throw;
  }
  blas_.emplace(s, b);
  return b.handle;
}

void CudaBackend::forget_stream(cudaStream_t s) {
  {
    std::lock_guard<std::mutex> lock(blas_mu_);
    auto it = blas_.find(s);
    if (it != blas_.end()) {
      cuda::DeviceGuard guard(index_);
      (void)cublasDestroy(it->second.handle);
      blas_.erase(it);  // the workspace goes back to s's cache, handed on below
    }
  }
  allocator_.retire_stream(cuda::stream_id(s), cuda::stream_id(default_stream_));
}

// ---- CudaBackend: memory ----

std::shared_ptr<void> CudaBackend::allocate(size_t nbytes) {
  cuda::DeviceGuard guard(index_);
  return allocator_.allocate(nbytes, cuda::stream_id(stream_));
}

// Host memory here is pageable: cudaMemcpyAsync stages it before returning, so the caller may
// free `src` at once; the device-side write stays ordered on the current stream.
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

// ---- the entry points declared in core/backend.h, core/cuda_memory.h and core/cuda_config.h ----
// Inside the module these are the real ones (the core's loader, core/cuda_module.cpp, defines the
// same set for programs and forwards to the table exported below).

Backend& cuda_backend(int index) { return cuda::backend(index); }
int cuda_device_count() { return cuda::device_count_info().count; }
bool cuda_available() { return cuda_device_count() > 0; }

MemoryStats cuda_memory_stats(int index) { return cuda::backend(index).allocator().stats(); }
void cuda_reset_peak(int index) { cuda::backend(index).allocator().reset_peak(); }
void cuda_empty_cache(int index) {
  CudaBackend& b = cuda::backend(index);
  cuda::DeviceGuard guard(index);
  HH_CUDA_CHECK(cudaDeviceSynchronize(), "cuda_empty_cache");  // every stream's kernels are done
  b.allocator().empty_cache();
}

std::shared_ptr<void> cuda_use_own_stream(int index) {
  // The guard owns the stream and the thread's previous setting; destroying it restores that
  // setting, then waits for and destroys the stream.
  struct Own {
    cuda::Stream stream;
    cuda::StreamGuard guard;
    explicit Own(int device) : stream(device), guard(device, stream.get()) {}
  };
  return std::make_shared<Own>(index);
}

namespace cuda {
std::vector<cuda_module::KernelEntry>& kernel_fills() {
  static std::vector<cuda_module::KernelEntry> fills;
  return fills;
}
}  // namespace cuda

}  // namespace hh

// The module's one exported entry point (core/cuda_module.h), looked up by the core's loader.
extern "C" const hh::cuda_module::Api* hh_cuda_module_api() {
  static const hh::cuda_module::Api api{
      hh::cuda_module::kAbiVersion, sizeof(hh::Tensor), &hh::cuda_backend,  &hh::cuda_device_count,
      &hh::cuda_memory_stats,       &hh::cuda_reset_peak, &hh::cuda_empty_cache, &hh::set_allow_tf32,
      &hh::allow_tf32,           &hh::cuda_use_own_stream, &hh::cuda_capture_graph,
      hh::cuda::kernel_fills().data(), hh::cuda::kernel_fills().size(),
  };
  return &api;
}
