// The CPU ISA paths a test loops over (core/cpu_isa.h): the ones this machine has, each missing one
// named in a doctest MESSAGE, and a scope that puts the process's ISA cap and thread count back
// when a test ends (even by an exception).
#pragma once
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/cpu_isa.h"
#include "core/parallel.h"

namespace hh::test {

struct IsaScope {
  CpuIsa prev = cpu_isa();
  int threads = num_threads();
  ~IsaScope() {
    set_cpu_isa(prev);
    set_num_threads(threads);
  }
};

inline std::vector<CpuIsa> supported_isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::scalar, CpuIsa::avx2, CpuIsa::avx512}) {
    if (cpu_isa_supported(isa)) {
      out.push_back(isa);
    } else {
      const std::string note = std::string("CPU ISA path '") + cpu_isa_name(isa) + "' not tested: this machine lacks it";
      MESSAGE(note);
    }
  }
  return out;
}

}  // namespace hh::test
