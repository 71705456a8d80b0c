// The CUDA backend is a module loaded at run time (core/cuda_module.h). These run in every pass:
// loading must fail with a message naming each path tried, never crash, and a CUDA build's own
// module must load (with or without a GPU).
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "core/backend.h"
#include "core/kernels/gated_linear.h"

#if defined(HH_WITH_CUDA)
#include "core/cuda_module.h"
#endif

namespace hh::test {
namespace {

#if defined(HH_WITH_CUDA)

TEST_CASE("cuda module: a missing module is reported with every path tried") {
  cuda_module::LoadResult r = cuda_module::load({"/nonexistent/a/libhedgehog_cuda.so", "/nonexistent/b.so"});
  CHECK(r.api == nullptr);
  CHECK(r.error.find("/nonexistent/a/libhedgehog_cuda.so: not found") != std::string::npos);
  CHECK(r.error.find("/nonexistent/b.so: not found") != std::string::npos);
}

TEST_CASE("cuda module: a file that is not a shared object is refused, not loaded") {
  const std::string path = "hh_test_not_a_module.so";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  std::fputs("not an ELF file\n", f);
  std::fclose(f);
  cuda_module::LoadResult r = cuda_module::load({"./" + path});
  std::remove(path.c_str());
  CHECK(r.api == nullptr);
  CHECK(r.error.find(path) != std::string::npos);
  CHECK(r.error.find("not found") == std::string::npos);  // it was found, and refused
}

TEST_CASE("cuda module: the build's module loads, with or without a GPU") {
  cuda_module::LoadResult r = cuda_module::load(cuda_module::search_paths());
  INFO(r.error);
  REQUIRE(r.api != nullptr);
  CHECK(r.api->abi_version == cuda_module::kAbiVersion);
  int n = -1;
  CHECK_NOTHROW(n = r.api->device_count());
  CHECK(n >= 0);
  CHECK(cuda_available() == (n > 0));
  CHECK(cuda_unavailable_reason().empty() == (n > 0));
}

TEST_CASE("cuda module: its kernel table fills the core's kernel slots by name and signature") {
  // Every fill has a unique name; the gated slots find theirs; a wrong name or signature is an
  // error naming the kernel (core/kernel.h).
  cuda_module::LoadResult r = cuda_module::load(cuda_module::search_paths());
  REQUIRE(r.api != nullptr);
  REQUIRE(r.api->kernel_count > 0);
  for (size_t i = 0; i < r.api->kernel_count; ++i)
    for (size_t j = i + 1; j < r.api->kernel_count; ++j)
      CHECK(std::string(r.api->kernels[i].name) != r.api->kernels[j].name);
  // (bools: doctest cannot print a function pointer)
  const bool forward = find_cuda_kernel("gated_linear_forward", kernels::gated_linear_forward.signature()) != nullptr;
  const bool step = find_cuda_kernel("gated_linear_step", kernels::gated_linear_step.signature()) != nullptr;
  CHECK(forward);
  CHECK(step);
  CHECK_THROWS_WITH(find_cuda_kernel("gated_linear_forward", kernels::gated_linear_step.signature()),
                    doctest::Contains("another signature"));
  CHECK_THROWS_WITH(find_cuda_kernel("no_such_kernel", "x"), doctest::Contains("no_such_kernel"));
}

#else

TEST_CASE("cuda stub: a CPU-only build says CUDA was not built") {
  CHECK_FALSE(cuda_available());
  CHECK(cuda_device_count() == 0);
  CHECK(cuda_unavailable_reason().find("built without CUDA") != std::string::npos);
}

TEST_CASE("cuda stub: a kernel slot called on CUDA names the kernel") {
  const Tensor x = zeros({1, 1, 1});
  CHECK_THROWS_WITH(kernels::gated_linear_step(Device::cuda(0), x, x, x, x, x, x, x),
                    doctest::Contains("gated_linear_step"));
}

#endif

}  // namespace
}  // namespace hh::test
