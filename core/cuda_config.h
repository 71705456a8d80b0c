// Process-wide CUDA math settings: the core's interface, implemented by the CUDA module (through
// core/cuda_module.cpp) or core/cuda_stub.cpp. Plain header (no CUDA include).
#pragma once

namespace hh {

// TF32 tensor cores for f32 GEMM: faster, ~1e-3 relative error. Off by default so f32 results
// match the CPU to f32 precision.
void set_allow_tf32(bool on);
bool allow_tf32();

}  // namespace hh
