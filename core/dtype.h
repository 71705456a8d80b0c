// Element types: f32 is the compute type; f64 for references and gradient checks; bf16/f16 are
// storage types (cast to compute); i32/i64 indices; u8 and bool masks; i8 the values of int8
// weights as stored (safetensors I8; core/prepacked.h).
#pragma once
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>

#include "core/error.h"

#if defined(__CUDACC__)
#define HH_HOST_DEVICE __host__ __device__
#else
#define HH_HOST_DEVICE
#endif

namespace hh {

enum class DType : uint8_t { f32, f64, bf16, f16, i32, i64, u8, boolean, i8 };

inline size_t itemsize(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
    case DType::boolean: return 1;
    case DType::i8: return 1;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
    case DType::i8: return "i8";
  }
  return "?";
}

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

inline bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16;
}
// Types the compute kernels run in (bf16/f16 are cast to f32 first).
inline bool is_compute_float(DType t) { return t == DType::f32 || t == DType::f64; }
inline bool is_integral(DType t) {
  return t == DType::i32 || t == DType::i64 || t == DType::u8 || t == DType::boolean || t == DType::i8;
}

// 16-bit storage types. Conversions round to nearest even, as PyTorch does.
struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

HH_HOST_DEVICE inline float bf16_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
HH_HOST_DEVICE inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}
HH_HOST_DEVICE inline float f16_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while (!(mant & 0x400u)) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      u = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}
HH_HOST_DEVICE inline uint16_t float_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (absu >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absu < 0x38800000u) {  // subnormal or zero in f16
    if (absu < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t exp = absu >> 23, mant = (absu & 0x7fffffu) | 0x800000u;
    uint32_t shift = 113 - exp + 13;  // 126 - exp + 1 ... aligns to f16 subnormal
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t rounded = absu + 0xfffu + ((absu >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
}

// Compile-time mapping from C++ type to DType.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::i8; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };
template <> struct dtype_of<bf16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<f16> { static constexpr DType value = DType::f16; };

template <typename T> struct type_tag { using type = T; };

// Calls f(type_tag<T>{}) for the compute float types; names the op when the dtype is not one.
template <typename F>
auto dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return f(type_tag<float>{});
    case DType::f64: return f(type_tag<double>{});
    default: fail(str(op, ": expected a f32 or f64 tensor, got ", dtype_name(t)));
  }
}

// Calls f(type_tag<T>{}) for every dtype (bf16/f16 as their storage structs).
template <typename F>
auto dispatch_all(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(type_tag<float>{});
    case DType::f64: return f(type_tag<double>{});
    case DType::bf16: return f(type_tag<bf16>{});
    case DType::f16: return f(type_tag<f16>{});
    case DType::i32: return f(type_tag<int32_t>{});
    case DType::i64: return f(type_tag<int64_t>{});
    case DType::u8: return f(type_tag<uint8_t>{});
    case DType::boolean: return f(type_tag<bool>{});
    case DType::i8: return f(type_tag<int8_t>{});
  }
  fail("dispatch_all: bad dtype");
}

// Scalar conversion through double/float, used by copy/cast kernels.
template <typename T> HH_HOST_DEVICE inline double to_double(T v) { return static_cast<double>(v); }
template <> HH_HOST_DEVICE inline double to_double<bf16>(bf16 v) { return bf16_to_float(v.bits); }
template <> HH_HOST_DEVICE inline double to_double<f16>(f16 v) { return f16_to_float(v.bits); }
template <typename T> HH_HOST_DEVICE inline T from_double(double v) { return static_cast<T>(v); }
template <> HH_HOST_DEVICE inline bool from_double<bool>(double v) { return v != 0.0; }
template <> HH_HOST_DEVICE inline bf16 from_double<bf16>(double v) { return bf16{float_to_bf16(static_cast<float>(v))}; }
template <> HH_HOST_DEVICE inline f16 from_double<f16>(double v) { return f16{float_to_f16(static_cast<float>(v))}; }

}  // namespace hh
