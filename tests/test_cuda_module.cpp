// The CUDA backend is a module loaded at run time (core/cuda_module.h). These run in every pass:
// loading must fail with a message naming each path tried, never crash, and a CUDA build's own
// module must load (with or without a GPU).
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "core/backend.h"

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

#else

TEST_CASE("cuda stub: a CPU-only build says CUDA was not built") {
  CHECK_FALSE(cuda_available());
  CHECK(cuda_device_count() == 0);
  CHECK(cuda_unavailable_reason().find("built without CUDA") != std::string::npos);
}

#endif

}  // namespace
}  // namespace hh::test
