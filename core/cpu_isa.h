// The instruction-set paths of the CPU kernels. One build runs on any x86-64: the library is
// compiled for the baseline ISA, and the kernels that have hand-written AVX2/FMA or AVX-512
// versions pick one at run time, the best this machine and its OS support. HH_CPU_ISA=scalar|
// avx2|avx512 (or set_cpu_isa) caps the choice, so every path a machine has can be tested there.
#pragma once
#include <string>

namespace hh {

// Ordered: each path needs everything the one before it needs. `scalar` is the portable baseline
// (compiler-vectorized for the target's default ISA: SSE2 on x86-64).
enum class CpuIsa { scalar, avx2, avx512 };

const char* cpu_isa_name(CpuIsa isa);
// Parses "scalar", "avx2" or "avx512"; throws hh::Error naming the valid values otherwise.
CpuIsa parse_cpu_isa(const std::string& name);
// The best path this machine supports (avx2 means AVX2 + FMA; avx512 means AVX-512F as well).
CpuIsa cpu_isa_detected();
inline bool cpu_isa_supported(CpuIsa isa) { return isa <= cpu_isa_detected(); }
// The path the kernels use now: the detected one, or the cap set by HH_CPU_ISA / set_cpu_isa.
CpuIsa cpu_isa();
// Caps the kernels at `isa` for the whole process; throws hh::Error if this machine lacks it.
void set_cpu_isa(CpuIsa isa);

}  // namespace hh
