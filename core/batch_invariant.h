// Batch-invariant arithmetic. While a BatchInvariant guard lives on a thread, the CPU GEMMs that
// thread calls compute every output row with the same operations whatever the number of rows: the
// packed f32 kernel at every shape it takes (its k order does not depend on M, on the tile that
// holds the row or on the thread split), and a plain loop in k order where it does not apply (f64,
// the scalar ISA, n or k below 4). A decode step's row is then bit-identical alone or among many
// requests: hh_serve's continuous batching, and nn::generate, which decodes the same way.
#pragma once

namespace hh {

class BatchInvariant {
 public:
  BatchInvariant() : prev_(active_) { active_ = true; }
  ~BatchInvariant() { active_ = prev_; }
  BatchInvariant(const BatchInvariant&) = delete;
  BatchInvariant& operator=(const BatchInvariant&) = delete;
  static bool active() { return active_; }

 private:
  bool prev_;
  inline static thread_local bool active_ = false;
};

}  // namespace hh
