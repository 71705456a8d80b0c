// parallel_for: body(i) for i in [0, n) on `threads` OpenMP threads (static schedule), for the CPU
// kernels' own splits (the GEMMs' tile grids and batches). An exception must not leave an OpenMP
// region: the first one thrown is kept and rethrown after it. Private to core/cpu.
#pragma once
#include <omp.h>

#include <cstdint>
#include <exception>

namespace hh::cpu {

template <typename F>
void parallel_for(int64_t n, int threads, const F& body) {
  std::exception_ptr error;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    try {
      body(i);
    } catch (...) {
#pragma omp critical(hh_parallel_for_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace hh::cpu
