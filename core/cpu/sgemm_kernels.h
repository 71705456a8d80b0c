// The packed f32 GEMM's per-ISA pieces (BLIS-style; the driver loop is in cpu_gemm.cpp).
// Each ISA's file compiles its functions with a target attribute, not with per-file -m flags,
// so nothing it shares with other files (inline functions, templates) is built for a wider ISA
// than the baseline: a machine without AVX2 never runs an AVX2 instruction by accident.
//
// Packed layouts: an A block (mc, kc) becomes slivers of mr rows, k-major:
//   dst[(s·kc + k)·mr + r] = a[s·mr + r, k], rows past mc zero (pack_a may write 8 floats of slack);
// a B sliver (kc, n <= nr) becomes dst[k·nr + j], columns past n zero.
#pragma once
#include <cstdint>

#include "core/cpu_isa.h"

namespace hh::sgemm {

// The depth of a packed block, the same for every ISA: an element of c is the same chain of fused
// multiply-adds over k on each path (a block's products summed in k order from zero, then added
// to c: alpha·acc, or beta·c + alpha·acc fused), so the AVX2 and AVX-512 kernels give the same bits
// and a result does not depend on which of the two a machine has (issue 35: the demos' tables of
// an AVX2 machine differed from an AVX-512 machine's). 192: a 32-wide AVX-512 B sliver is 24 KiB
// (L1 is 32-48 KiB), a 16-wide AVX2 one 12 KiB.
constexpr int64_t kDepthBlock = 192;

struct Kernel {
  const char* name;
  int64_t mr, nr;  // micro-tile of c
  int64_t kc;      // depth of a packed block (a B sliver of kc × nr stays in L1)
  int64_t mc;      // rows of A packed per block (in L2)
  int64_t nc;      // columns of B packed at once (in L3)
  void (*pack_a)(const float* a, int64_t rs, int64_t cs, int64_t mc, int64_t kc, float* dst);
  void (*pack_b)(const float* b, int64_t rs, int64_t cs, int64_t kc, int64_t n, float* dst);
  // c tile (m <= mr, n <= nr; row stride ldc) = alpha · a_sliver · b_sliver + beta · c;
  // beta == 0 never reads c (a fresh output may hold NaN garbage).
  void (*micro)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t m, int64_t n, float alpha,
                float beta);
  // A bf16 sliver (count = kc · nr values in bf16_column's order) -> the f32 sliver (dst 64-byte
  // aligned, pack_b's layout): exact.
  void (*widen_bf16)(const uint16_t* src, int64_t count, float* dst);
  // A c tile of m <= kFewRows rows (a decoding step): micro's arithmetic for those rows only (the
  // same bits), with B an f32 sliver (rows) or a bf16 one (rows_bf16, widened in registers).
  void (*rows)(int64_t kc, const float* a, const void* b, float* c, int64_t ldc, int64_t m, int64_t n, float alpha,
               float beta);
  void (*rows_bf16)(int64_t kc, const float* a, const void* b, float* c, int64_t ldc, int64_t m, int64_t n,
                    float alpha, float beta);
};
constexpr int64_t kFewRows = 3;

// nullptr where the compiler cannot target the ISA (non-x86 builds).
const Kernel* avx2_kernel();
const Kernel* avx512_kernel();

// The packed kernel for `isa`; nullptr for CpuIsa::scalar (Eigen's GEMM runs instead).
inline const Kernel* kernel_for(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::avx512: return avx512_kernel();
    case CpuIsa::avx2: return avx2_kernel();
    case CpuIsa::scalar: return nullptr;
  }
  return nullptr;
}

// Which engine an f32 product of this size runs on now: the kernel's name, or "eigen".
const char* engine_for(int64_t m, int64_t n, int64_t k);

// ---- a B operand packed once (inference weights: core/prepacked.h) ----
// The whole of B (k, n) in K's slivers, every depth block after the one before: depth block p
// (rows k0 = p·kc_max .. k0 + kc, kc = min(K.kc, k − k0)) starts at dst + k0·np, np = n rounded up
// to K.nr, and holds the slivers s = 0 .. np/nr − 1 of kc × nr each (pack_b's layout):
//   dst[k0·np + s·kc·nr + (kk − k0)·nr + j] = b[kk, s·nr + j], 0 past n.
// So the sliver the driver packs for columns jc.. at depth pc sits at dst + pc·np + (jc/nr)·kc·nr.
int64_t prepacked_b_floats(const Kernel& K, int64_t k, int64_t n);  // k · np
void prepack_b(const Kernel& K, const float* b, int64_t rsb, int64_t csb, int64_t k, int64_t n, float* dst);
// c (m, n; row stride ldc) = a (m, k; strides rsa, csa) · B + beta c, B from prepack_b with the same
// K, threaded like the packed GEMM (a grid of independent tiles). The same micro-kernel and depth
// blocks as the unpacked GEMM, so the same bits.
void gemm_prepacked(const Kernel& K, int64_t m, int64_t n, int64_t k, const float* a, int64_t rsa, int64_t csa,
                    const float* bpre, float beta, float* c, int64_t ldc);
// The same with B prepacked in bf16: prepack_b's layout, each element rounded to bf16 (round to
// nearest even), the nr values of each sliver row in bf16_column's order. Each sliver is widened to
// f32 (exact) just before the micro-kernel uses it (a decoding step's rows widen in registers), so
// the result has the bits of gemm_prepacked on the widened B, with half the bytes of B read.
// Within a row of nr bf16 values, position p holds column bf16_column(p, nr): pairs (j, nr/2 + j), so
// each 32-bit word is two columns and one shift (w << 16) and one mask (w & 0xFFFF0000) widen a
// vector of them into columns 0..nr/2-1 and nr/2..nr-1, in order (AVX-512F and AVX2 alike).
inline int64_t bf16_column(int64_t p, int64_t nr) { return (p % 2) * (nr / 2) + p / 2; }
void gemm_prepacked_bf16(const Kernel& K, int64_t m, int64_t n, int64_t k, const float* a, int64_t rsa, int64_t csa,
                         const uint16_t* bpre, float beta, float* c, int64_t ldc);
// Whether the packed engine takes an (m, n, k) product now (what gemm decides, BatchInvariant included).
bool packed_applies(int64_t m, int64_t n, int64_t k);

}  // namespace hh::sgemm
