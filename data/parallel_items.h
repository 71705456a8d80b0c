// The generators' work loop: item(i) for every i in [0, n) on `threads` threads (0 = every core),
// in dynamic chunks, with a progress bar (core/progress.h) when `label` is not empty. An item that
// throws does not stop the others; after all have run, the error of the lowest failing index is
// thrown, so the outcome does not depend on the thread count.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "core/progress.h"

namespace hh::data {

template <class Item>
void parallel_items(int64_t n, int threads, const std::string& label, Item&& item) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::atomic<int64_t> done{0};
  std::unique_ptr<Progress> progress;
  if (!label.empty()) {
    ProgressOptions po;
    po.label = label;
    po.total = n;
    progress = std::make_unique<Progress>(po);
  }
#pragma omp parallel for schedule(dynamic, 4) num_threads(threads > 0 ? threads : num_threads())
  for (int64_t i = 0; i < n; ++i) {
    try {
      item(i);
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(i)] = e.what();
    }
    ++done;
    if (progress) {
#pragma omp critical(hh_parallel_items_progress)
      progress->update(done.load());  // in the critical section, so the counts never go back
    }
  }
  for (const std::string& e : errors)
    if (!e.empty()) fail(e);
  if (progress) progress->finish();
}

}  // namespace hh::data
