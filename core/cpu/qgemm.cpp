// The int8 GEMM's driver and its scalar path (the arithmetic is in core/cpu/qgemm.h; the AVX2 and
// AVX-512 VNNI kernels are qgemm_avx2.cpp and qgemm_avx512.cpp).
//
// Loop nest: the rows are quantized once (in parallel when large), then c is cut into tasks of
// (a block of kMC rows) × (one 32-channel sliver), the row block outermost so that consecutive
// tasks of one thread reuse its activation block in L2 (kMC × kp bytes: 96 × 1536 = 144 KiB); a
// task runs the micro-kernel down its rows, mr at a time, over the whole depth (a sliver is
// kp × 32 bytes: 48 KiB at K = 1536, read from L2).
#include "core/cpu/qgemm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "core/cpu/parallel_for.h"
#include "core/error.h"

namespace hh::qgemm {
namespace {

constexpr int64_t kMC = 96;                 // rows per task
constexpr double kParallelWork = 1 << 18;   // multiply-adds below which one thread runs it all

void quantize_scalar(const float* x, int64_t ldx, int64_t m, int64_t k, int64_t kp, uint8_t* xq, float* sx) {
  for (int64_t r = 0; r < m; ++r) {
    const float* row = x + r * ldx;
    float amax = 0.0f;
    bool nan = false;  // std::max would drop a NaN
    for (int64_t i = 0; i < k; ++i) {
      const float v = std::fabs(row[i]);
      nan |= std::isnan(v);
      amax = std::max(amax, v);
    }
    if (nan) amax = NAN;
    float inv;
    row_scale(amax, sx[r], inv);
    auto* q = reinterpret_cast<int8_t*>(xq + r * kp);
    for (int64_t i = 0; i < k; ++i) {
      const float v = std::nearbyint(row[i] * inv);  // round half to even (the default mode)
      q[i] = static_cast<int8_t>(std::min(127.0f, std::max(-127.0f, v)));
    }
    for (int64_t i = k; i < kp; ++i) q[i] = 0;
    if (!std::isfinite(sx[r]))
      for (int64_t i = 0; i < kp; ++i) q[i] = 0;
  }
}

void micro_scalar(int64_t kp, const uint8_t* xq, int64_t ldx, const float* sx, int64_t m, const int8_t* w,
                  const int32_t* /*comp: int8 activations need none*/, const float* sw, const float* bias, float* y,
                  int64_t ldy, int64_t n) {
  for (int64_t r = 0; r < m; ++r) {
    const auto* a = reinterpret_cast<const int8_t*>(xq + r * ldx);
    int32_t acc[kNR] = {};
    for (int64_t g = 0; g < kp / kGroup; ++g) {
      const int8_t* b = w + g * kGroup * kNR;
      for (int64_t j = 0; j < kNR; ++j)
        for (int64_t t = 0; t < kGroup; ++t) acc[j] += int32_t(a[g * kGroup + t]) * int32_t(b[j * kGroup + t]);
    }
    for (int64_t j = 0; j < n; ++j)
      y[r * ldy + j] = std::fma(static_cast<float>(acc[j]), sx[r] * sw[j], bias ? bias[j] : 0.0f);
  }
}

const Kernel kScalar{"scalar", false, 4, &quantize_scalar, &micro_scalar};

bool has_vnni() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
  }();
  return yes;
#else
  return false;
#endif
}

// A scratch buffer that only grows (one per thread, as the f32 GEMM's packing buffers).
struct Scratch {
  void* p = nullptr;
  size_t cap = 0;
  void* get(size_t n) {
    if (n > cap) {
      std::free(p);
      p = std::aligned_alloc(64, (n + 63) / 64 * 64);
      HH_CHECK(p != nullptr, "int8 gemm: out of memory for a ", n, "-byte activation buffer");
      cap = n;
    }
    return p;
  }
  ~Scratch() { std::free(p); }
};
thread_local Scratch tls_scratch;

using cpu::parallel_for;

}  // namespace

const Kernel* scalar_kernel() { return &kScalar; }

const Kernel& kernel_for(CpuIsa isa) {
  if (isa >= CpuIsa::avx512 && has_vnni() && avx512_vnni_kernel() != nullptr) return *avx512_vnni_kernel();
  if (isa >= CpuIsa::avx2 && avx2_kernel() != nullptr) return *avx2_kernel();
  return kScalar;
}

void gemm(const Kernel& K, int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const int8_t* w,
          const int32_t* comp, const float* sw, const float* bias, float* y, int64_t ldy) {
  if (m == 0 || n == 0) return;
  const int64_t kp = padded_k(k), slivers = padded_n(n) / kNR;
  // Activations (m, kp) bytes, then their scales (m floats).
  auto* xq = static_cast<uint8_t*>(tls_scratch.get(static_cast<size_t>(m * kp + 64 + m * 4)));
  auto* sx = reinterpret_cast<float*>(xq + (m * kp + 63) / 64 * 64);
  const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const int threads = omp_in_parallel() || work <= kParallelWork ? 1 : omp_get_max_threads();

  const int64_t qrows = 64;  // rows quantized per task
  const int64_t qtasks = (m + qrows - 1) / qrows;
  auto quant = [&](int64_t t) {
    const int64_t r0 = t * qrows, rows = std::min(qrows, m - r0);
    K.quantize(x + r0 * ldx, ldx, rows, k, kp, xq + r0 * kp, sx + r0);
  };
  const int64_t blocks = (m + kMC - 1) / kMC;
  auto task = [&](int64_t t) {
    const int64_t b = t / slivers, s = t % slivers;
    const int64_t r0 = b * kMC, rows = std::min(kMC, m - r0), cols = std::min(kNR, n - s * kNR);
    const int8_t* ws = w + s * kp * kNR;
    for (int64_t ir = 0; ir < rows; ir += K.mr)
      K.micro(kp, xq + (r0 + ir) * kp, kp, sx + r0 + ir, std::min(K.mr, rows - ir), ws, comp + s * kNR, sw + s * kNR,
              bias ? bias + s * kNR : nullptr, y + (r0 + ir) * ldy + s * kNR, ldy, cols);
  };
  if (threads <= 1) {
    for (int64_t t = 0; t < qtasks; ++t) quant(t);
    for (int64_t t = 0; t < blocks * slivers; ++t) task(t);
  } else {
    if (qtasks > 1)
      parallel_for(qtasks, threads, quant);
    else
      quant(0);
    parallel_for(blocks * slivers, threads, task);
  }
}

}  // namespace hh::qgemm
