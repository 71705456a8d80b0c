// The one doctest binary. HH_DEVICE=cpu|cuda picks the device under test; a CUDA run without a
// usable GPU exits 77, which CTest reports as skipped (never as passed).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/backend.h"
#include "core/cpu_isa.h"
#include "core/error.h"

int main(int argc, char** argv) {
  const char* dev = std::getenv("HH_DEVICE");
  if (dev && std::string(dev).rfind("cuda", 0) == 0 && !hh::cuda_available()) {
    std::printf("HH_DEVICE=%s but no usable CUDA device (or built without CUDA): all tests skipped\n", dev);
    return 77;
  }
  try {
    hh::cpu_isa();  // a bad HH_CPU_ISA is one clear error here, not a failure in every CPU test
  } catch (const hh::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  return ctx.run();
}
