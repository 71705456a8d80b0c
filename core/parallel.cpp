// set_num_threads / num_threads: OpenMP's default team size plus Eigen's GEMM thread count.
#include "core/parallel.h"

#include <omp.h>

#include <Eigen/Core>

#include "core/error.h"

namespace hh {

void set_num_threads(int n) {
  HH_CHECK(n >= 1, "set_num_threads: expected a positive thread count, got ", n);
  // Eigen's lazily initialised statics (cache sizes, thread count) must exist before several
  // threads call into Eigen at once (the batched GEMM does); initParallel() does exactly that.
  Eigen::initParallel();
  omp_set_num_threads(n);
  // Eigen would follow omp_get_max_threads() by default; setting it explicitly keeps the two in
  // step even if someone else changes OpenMP's setting later.
  Eigen::setNbThreads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace hh
