// The one doctest binary. HH_DEVICE=cpu|cuda picks the device under test; a CUDA run without a
// usable GPU exits 77, which CTest reports as skipped (never as passed).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/backend.h"

int main(int argc, char** argv) {
  const char* dev = std::getenv("HH_DEVICE");
  if (dev && std::string(dev).rfind("cuda", 0) == 0 && !hh::cuda_available()) {
    std::printf("HH_DEVICE=%s but no usable CUDA device (or built without CUDA): all tests skipped\n", dev);
    return 77;
  }
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  return ctx.run();
}
