// .npy writer (core/npy.h).
#include "core/npy.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace hh {

std::string npy_bytes(const Tensor& t) {
  const bool f64 = t.dtype() == DType::f64, ints = !is_floating(t.dtype());
  const DType as = ints ? DType::i64 : f64 ? DType::f64 : DType::f32;
  const Tensor host = t.to(Device::cpu()).to(as).contiguous();
  std::string shape = "(";
  for (int64_t d : host.shape()) shape += std::to_string(d) + ", ";
  if (host.dim() > 1) shape.resize(shape.size() - 2);  // numpy writes (3,) for one dim, (2, 3) for two
  if (host.dim() == 1) shape.resize(shape.size() - 1);
  shape += ")";
  std::string header = std::string("{'descr': '") + (ints ? "<i8" : f64 ? "<f8" : "<f4") +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  const size_t fixed = 10;  // magic (6) + version (2) + header length (2)
  header.append((64 - (fixed + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  const uint16_t len = static_cast<uint16_t>(header.size());
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>(len >> 8);
  out += header;
  const size_t bytes = static_cast<size_t>(host.numel()) * itemsize(as);
  const size_t at = out.size();
  out.resize(at + bytes);
  if (bytes > 0) std::memcpy(&out[at], host.raw_data(), bytes);  // x86-64 and arm64: little-endian
  return out;
}

}  // namespace hh
