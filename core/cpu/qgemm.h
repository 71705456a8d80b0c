// The int8 GEMM of inference weights (core/prepacked.h): y (M, N) f32 = x (M, K) f32 · wᵀ with w
// (N, K) quantized once per output channel and x quantized per row (token) at every call, both
// symmetric int8 in [-127, 127]:
//   xq[m, k] = round_half_even(x[m, k] · 127 / amax_m),  sx[m] = amax_m / 127   (amax_m = max_k |x[m, k]|)
//   y[m, n]  = fma(float(Σ_k xq[m, k] · wq[n, k]), sx[m] · sw[n], bias[n])
// The sum is exact in int32 (|Σ| ≤ 127² · K), so every path (scalar, AVX2, AVX-512 VNNI) gives the
// same bits: only the conversion to f32, the scale product and the fma round.
// A row with amax 0 is all zeros (sx = 0: y = bias); a row with a NaN or infinity gets sx = NaN,
// so its outputs are NaN, as an f32 GEMM's would be.
//
// Packed weight (every path reads the same layout): slivers of 32 output channels, each K padded
// to kp = K rounded up to 4 and split in groups of 4 consecutive k; group g of sliver s is 128
// bytes, 4 bytes (k = 4g..4g+3) per channel:
//   w[(s·kp/4 + g)·128 + j·4 + t] = wq[s·32 + j, 4g + t]   (0 past N or K)
// Activations: rows of kp bytes: xq as int8, or xq + 128 as uint8 for VNNI's unsigned × signed
// vpdpbusd (the kernel subtracts comp[n] = 128 · Σ_k wq[n, k] again). Pad bytes are 0 (int8) or
// 128 (uint8): both are xq = 0.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/cpu_isa.h"

namespace hh::qgemm {

constexpr int64_t kNR = 32;    // output channels per sliver
constexpr int64_t kGroup = 4;  // k per group

inline int64_t padded_k(int64_t k) { return (k + kGroup - 1) / kGroup * kGroup; }
inline int64_t padded_n(int64_t n) { return (n + kNR - 1) / kNR * kNR; }

struct Kernel {
  const char* name;
  bool u8_activations;  // xq + 128 as uint8 (VNNI) instead of xq as int8
  int64_t mr;           // rows per micro-tile
  // Rows [0, m) of x (M, k) f32 (row stride ldx) -> xq (m, kp) bytes, sx (m).
  void (*quantize)(const float* x, int64_t ldx, int64_t m, int64_t k, int64_t kp, uint8_t* xq, float* sx);
  // y tile (m <= mr rows, n <= 32 columns; row stride ldy) from m activation rows (row stride ldx
  // bytes) and one weight sliver; comp, sw: 32 entries of the sliver (padded); bias: n entries or null.
  void (*micro)(int64_t kp, const uint8_t* xq, int64_t ldx, const float* sx, int64_t m, const int8_t* w,
                const int32_t* comp, const float* sw, const float* bias, float* y, int64_t ldy, int64_t n);
};

// The kernels; nullptr where the compiler cannot target the ISA. The AVX-512 one needs VNNI as well.
const Kernel* scalar_kernel();
const Kernel* avx2_kernel();
const Kernel* avx512_vnni_kernel();
// The kernel for `isa`: AVX-512 VNNI when isa is avx512 and this machine has VNNI; AVX2 for avx2
// and for AVX-512 without VNNI; scalar otherwise.
const Kernel& kernel_for(CpuIsa isa);

// Shared by the kernels: the scale of one row and its reciprocal factor (see the header comment).
inline void row_scale(float amax, float& sx, float& inv) {
  if (!std::isfinite(amax)) {
    sx = __builtin_nanf("");
    inv = 0.0f;
  } else if (amax == 0.0f) {
    sx = 0.0f;
    inv = 0.0f;
  } else {
    sx = amax / 127.0f;
    inv = 127.0f / amax;
  }
}

// y (m, n) f32 (row stride ldy) = the product above for x (m, k) f32 (row stride ldx) and a packed
// weight (w, comp and sw padded to padded_n(n)); bias (n) or null. Threads as the f32 GEMM does.
void gemm(const Kernel& K, int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const int8_t* w,
          const int32_t* comp, const float* sw, const float* bias, float* y, int64_t ldy);

}  // namespace hh::qgemm
