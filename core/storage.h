// Storage: a reference-counted block of device memory. Tensors are views into one.
#pragma once
#include <cstddef>
#include <memory>

#include "core/device.h"

namespace hh {

struct Storage {
  std::shared_ptr<void> data;  // the deleter gives the block back to its backend's allocator
  size_t nbytes = 0;
  Device device;
};

}  // namespace hh
