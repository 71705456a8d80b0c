// NumPy's .npy format (version 1.0) for results people load with numpy.load: a little-endian f32
// or f64 array in C order, the header padded to 64 bytes as numpy writes it.
#pragma once
#include <string>

#include "core/tensor.h"

namespace hh {

// The bytes of an .npy file holding t (any device and float dtype; f64 stays '<f8', every other
// floating dtype is written as '<f4'). Integer tensors are written as '<i8'.
std::string npy_bytes(const Tensor& t);

}  // namespace hh
