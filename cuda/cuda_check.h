// Error checks for CUDA runtime and cuBLAS calls: failures throw hh::Error naming the op, the
// failing call and the CUDA error string.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/error.h"

namespace hh::cuda {

inline void check_cuda(cudaError_t err, const char* op, const char* call) {
  if (err != cudaSuccess)
    fail(str(op, ": CUDA error ", cudaGetErrorName(err), ": ", cudaGetErrorString(err), " (in ", call, ")"));
}

inline const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "unknown cuBLAS status";
}

inline void check_cublas(cublasStatus_t s, const char* op, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS) fail(str(op, ": cuBLAS error ", cublas_status_name(s), " (in ", call, ")"));
}

}  // namespace hh::cuda

// HH_CUDA_CHECK(call, op): throws hh::Error("op: CUDA error <name>: <text> (in call)") on failure.
#define HH_CUDA_CHECK(call, op) ::hh::cuda::check_cuda((call), (op), #call)
