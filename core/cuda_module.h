// The CUDA backend is a separate shared module (libhedgehog_cuda.so, built from cuda/) that the
// core loads with dlopen the first time a CUDA device is asked for, so CPU-only programs neither
// link nor map cudart/cuBLAS. The module exports one C function returning the table below; the
// core's cuda_backend(), cuda_available(), ... (core/backend.h, core/cuda_memory.h,
// core/cuda_config.h, core/cuda_stream.h) forward to it.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/kernel.h"
#include "core/cuda_memory.h"
#include "core/cuda_stream.h"

namespace hh::cuda_module {

// Bump when Api changes; the loader refuses a module built with another value.
inline constexpr int kAbiVersion = 5;  // 2: use_own_stream, capture_graph; 3: Backend::flash_attention_takes_views/_takes_key_mask, the key_mask argument, hedgehog_features; 4: hybrid_window_attention; 5: the kernel table (core/kernel.h)
// (the Backend vtable is part of the ABI: the module implements it)
inline constexpr const char* kEntryPoint = "hh_cuda_module_api";
inline constexpr const char* kFileName = "libhedgehog_cuda.so";

// One CUDA fill of a core kernel slot (core/kernel.h): its name, the slot's function type (typeid
// name) and the function. New kernels travel here, so they need no ABI bump.
struct KernelEntry {
  const char* name;
  const char* signature;
  AnyKernelFn fn;
};

struct Api {
  int abi_version;
  size_t tensor_size;  // sizeof(Tensor) as the module saw it: a cheap layout check
  Backend& (*backend)(int index);
  int (*device_count)();
  MemoryStats (*memory_stats)(int index);
  void (*reset_peak)(int index);
  void (*empty_cache)(int index);
  void (*set_allow_tf32)(bool on);
  bool (*allow_tf32)();
  std::shared_ptr<void> (*use_own_stream)(int index);
  std::shared_ptr<CudaGraphReplay> (*capture_graph)(int index, const std::function<void()>& work);
  const KernelEntry* kernels;  // kernel_count entries, filled before the module returns the table
  size_t kernel_count;
};

using EntryPoint = const Api* (*)();

struct LoadResult {
  const Api* api = nullptr;  // null when no candidate loaded
  std::string path;          // the file that loaded
  std::string error;         // one line per path tried, with the reason it failed
};

// Tries each path in order (dlopen, entry point, ABI check); the first that passes wins.
LoadResult load(const std::vector<std::string>& paths);
// Where the core looks: $HH_CUDA_MODULE, the build tree and the install libdir baked in at
// configure time, then next to the running executable.
std::vector<std::string> search_paths();

}  // namespace hh::cuda_module
