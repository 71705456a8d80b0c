#include "core/cpu_isa.h"

#include <atomic>
#include <cstdlib>

#include "core/error.h"

namespace hh {

namespace {

CpuIsa detect() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // __builtin_cpu_supports checks CPUID and, for AVX and AVX-512, that the OS saves the wider
  // registers (XCR0), so a feature the kernel does not enable is reported as absent.
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return CpuIsa::scalar;
  if (!__builtin_cpu_supports("avx512f")) return CpuIsa::avx2;
  return CpuIsa::avx512;
#else
  return CpuIsa::scalar;
#endif
}

// -1 until first use; then the active CpuIsa.
std::atomic<int> g_active{-1};

CpuIsa from_env() {
  const char* env = std::getenv("HH_CPU_ISA");
  if (env == nullptr || *env == '\0' || std::string(env) == "auto") return cpu_isa_detected();
  const CpuIsa want = parse_cpu_isa(env);
  HH_CHECK(cpu_isa_supported(want), "HH_CPU_ISA=", env, ": this machine supports at most ",
           cpu_isa_name(cpu_isa_detected()));
  return want;
}

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::scalar: return "scalar";
    case CpuIsa::avx2: return "avx2";
    case CpuIsa::avx512: return "avx512";
  }
  return "?";
}

CpuIsa parse_cpu_isa(const std::string& name) {
  for (CpuIsa isa : {CpuIsa::scalar, CpuIsa::avx2, CpuIsa::avx512})
    if (name == cpu_isa_name(isa)) return isa;
  fail(str("unknown CPU ISA '", name, "' (expected scalar, avx2 or avx512)"));
}

CpuIsa cpu_isa_detected() {
  static const CpuIsa detected = detect();
  return detected;
}

CpuIsa cpu_isa() {
  int v = g_active.load(std::memory_order_relaxed);
  if (v < 0) {
    v = static_cast<int>(from_env());
    g_active.store(v, std::memory_order_relaxed);
  }
  return static_cast<CpuIsa>(v);
}

void set_cpu_isa(CpuIsa isa) {
  HH_CHECK(cpu_isa_supported(isa), "set_cpu_isa(", cpu_isa_name(isa), "): this machine supports at most ",
           cpu_isa_name(cpu_isa_detected()));
  g_active.store(static_cast<int>(isa), std::memory_order_relaxed);
}

}  // namespace hh
