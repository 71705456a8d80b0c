// Storage: a reference-counted block of device memory. Tensors are views into one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"

namespace hh {

struct Storage {
  std::shared_ptr<void> data;  // the deleter gives the block back to its backend's allocator
  size_t nbytes = 0;
  Device device;
  // Bumped by every in-place write (copy_, optimizer steps) into any view of this block. Autograd
  // remembers it for each saved tensor and refuses to backward through a changed one.
  uint64_t version = 0;
};

}  // namespace hh
