// Process-wide CPU thread count: one knob for the OpenMP loops of the CPU kernels and for Eigen's
// own GEMM threading (both default to OpenMP's default, usually the number of cores).
#pragma once

namespace hh {

// Sets the number of threads the CPU backend uses (n >= 1); throws hh::Error otherwise.
void set_num_threads(int n);
// The number of threads the CPU backend uses now.
int num_threads();

}  // namespace hh
