// The loader of the CUDA backend module (core/cuda_module.h) and the CUDA entry points of a CUDA
// build. CPU-only builds compile core/cuda_stub.cpp instead. The module is loaded once per
// process and never unloaded (tensors may hold its memory until exit).
#include "core/cuda_module.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "core/cuda_config.h"
#include "core/cuda_stream.h"

namespace hh {

namespace cuda_module {

namespace {

std::string exe_dir() {
  std::string buf(4096, '\0');
  ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return "";
  buf.resize(static_cast<size_t>(n));
  size_t slash = buf.rfind('/');
  return slash == std::string::npos ? "" : buf.substr(0, slash);
}

// Loads one file; returns the table or sets `why`.
const Api* try_load(const std::string& path, std::string& why) {
  if (access(path.c_str(), R_OK) != 0) {
    why = "not found";
    return nullptr;
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = dlerror();
    why = e ? e : "dlopen failed";
    return nullptr;
  }
  auto entry = reinterpret_cast<EntryPoint>(dlsym(handle, kEntryPoint));
  if (!entry) {
    why = str("no symbol ", kEntryPoint, " (not a hedgehog CUDA module)");
    return nullptr;
  }
  const Api* api = entry();
  if (!api || api->abi_version != kAbiVersion || api->tensor_size != sizeof(Tensor)) {
    why = str("built for another hedgehog version (ABI ", api ? api->abi_version : -1, ", expected ", kAbiVersion,
              ")");
    return nullptr;
  }
  return api;  // the handle stays open for the life of the process
}

const LoadResult& loaded() {
  static const LoadResult result = load(search_paths());
  return result;
}

const Api& api_or_throw(const std::string& what) {
  const LoadResult& r = loaded();
  if (!r.api) fail(str(what, ": the CUDA backend module (", kFileName, ") could not be loaded; tried:\n", r.error));
  return *r.api;
}

}  // namespace

LoadResult load(const std::vector<std::string>& paths) {
  LoadResult r;
  for (const std::string& p : paths) {
    std::string why;
    if (const Api* api = try_load(p, why)) {
      r.api = api;
      r.path = p;
      r.error.clear();
      return r;
    }
    r.error += str("  ", p, ": ", why, "\n");
  }
  if (paths.empty()) r.error = "  (no path to try)\n";
  return r;
}

std::vector<std::string> search_paths() {
  std::vector<std::string> paths;
  if (const char* env = std::getenv("HH_CUDA_MODULE"); env && *env) paths.emplace_back(env);
#ifdef HH_CUDA_MODULE_BUILD_PATH
  paths.emplace_back(HH_CUDA_MODULE_BUILD_PATH);
#endif
#ifdef HH_CUDA_MODULE_INSTALL_PATH
  paths.emplace_back(HH_CUDA_MODULE_INSTALL_PATH);
#endif
  std::string dir = exe_dir();
  if (!dir.empty()) paths.push_back(dir + "/" + kFileName);
  return paths;
}

}  // namespace cuda_module

// ---- the entry points declared in core/backend.h, core/cuda_memory.h and core/cuda_config.h ----
// The module defines the same set (cuda/cuda_backend.cpp) and links the core archive: its own
// definitions win there, so this file is never pulled into the module. Keep both sets identical.

Backend& cuda_backend(int index) { return cuda_module::api_or_throw(str("cuda:", index)).backend(index); }
AnyKernelFn find_cuda_kernel(const char* name, const char* signature) {
  const cuda_module::Api& api = cuda_module::api_or_throw(str("kernel ", name));
  for (size_t i = 0; i < api.kernel_count; ++i) {
    const cuda_module::KernelEntry& e = api.kernels[i];
    if (std::strcmp(e.name, name) != 0) continue;
    if (std::strcmp(e.signature, signature) != 0)
      fail(str("kernel ", name, ": the CUDA module fills it with another signature (", e.signature, ", expected ",
               signature, "): module and library are from different builds"));
    return e.fn;
  }
  fail(str("kernel ", name, ": the CUDA backend has no such kernel (", api.kernel_count, " kernels in ",
           cuda_module::kFileName, ")"));
}

int cuda_device_count() {
  const cuda_module::LoadResult& r = cuda_module::loaded();
  return r.api ? r.api->device_count() : 0;
}
bool cuda_available() { return cuda_device_count() > 0; }
std::string cuda_unavailable_reason() {
  const cuda_module::LoadResult& r = cuda_module::loaded();
  if (!r.api) return str("the CUDA backend module (", cuda_module::kFileName, ") could not be loaded; tried:\n", r.error);
  if (r.api->device_count() > 0) return "";
  try {
    r.api->backend(0);
  } catch (const Error& e) {
    return e.what();
  }
  return "no CUDA device is available";
}

MemoryStats cuda_memory_stats(int index) {
  return cuda_module::api_or_throw(str("cuda_memory_stats(", index, ")")).memory_stats(index);
}
void cuda_reset_peak(int index) { cuda_module::api_or_throw(str("cuda_reset_peak(", index, ")")).reset_peak(index); }
void cuda_empty_cache(int index) {
  cuda_module::api_or_throw(str("cuda_empty_cache(", index, ")")).empty_cache(index);
}
void set_allow_tf32(bool on) { cuda_module::api_or_throw("set_allow_tf32").set_allow_tf32(on); }
bool allow_tf32() { return cuda_module::api_or_throw("allow_tf32").allow_tf32(); }
std::shared_ptr<void> cuda_use_own_stream(int index) {
  return cuda_module::api_or_throw(str("cuda_use_own_stream(", index, ")")).use_own_stream(index);
}
std::shared_ptr<CudaGraphReplay> cuda_capture_graph(int index, const std::function<void()>& work) {
  return cuda_module::api_or_throw(str("cuda_capture_graph(", index, ")")).capture_graph(index, work);
}

}  // namespace hh
