#include "core/backend.h"

#include "core/cpu/cpu_backend.h"

namespace hh {

Backend& backend_for(Device d) {
  static CpuBackend cpu;
  if (d.is_cpu()) return cpu;
  return cuda_backend(d.index);
}

}  // namespace hh
