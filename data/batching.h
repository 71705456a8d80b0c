// Batcher: walks the rows of one or more host tensors that share their first dimension (inputs,
// targets, masks, ...) in mini-batches, reshuffled every epoch, with a cursor (epoch, position)
// that a checkpoint stores and restores to continue with exactly the next batch.
//
// The order of epoch e is a permutation drawn from Generator(seed, e * N) (N = number of rows),
// so it depends only on (seed, epoch): no RNG state beyond the cursor has to be saved.
//
// Typical use:
//   Batcher b({inputs, targets}, {/*batch_size*/ 32, /*shuffle*/ true, /*drop_last*/ false, seed});
//   for (int epoch = 0; epoch < E; ++epoch) {
//     Batch batch;
//     while (b.next(batch)) { ... batch.field(0) ... }   // false once the epoch is done; the
//   }                                                      // next call starts the next epoch
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace hh {

// Where the Batcher stands: `position` rows of epoch `epoch`'s order have been handed out.
struct BatchCursor {
  int64_t epoch = 0;
  int64_t position = 0;
  bool operator==(const BatchCursor& o) const { return epoch == o.epoch && position == o.position; }
};

struct Batch {
  std::vector<Tensor> fields;  // each (B, ...) with the row order of `rows`
  std::vector<int64_t> rows;   // the dataset rows in this batch
  int64_t epoch = 0;
  int64_t index = 0;           // batch number within the epoch
  const Tensor& field(size_t i) const;
  const Tensor& inputs() const { return field(0); }
  const Tensor& targets() const { return field(1); }
  int64_t size() const { return static_cast<int64_t>(rows.size()); }
};

struct BatcherOptions {
  int64_t batch_size = 32;
  bool shuffle = true;
  bool drop_last = false;  // drop the final short batch of an epoch
  uint64_t seed = 0;
};

// The row order of epoch `epoch` of an n-row dataset: 0..n-1, or a Fisher-Yates shuffle drawing
// n - 1 numbers from the epoch's own Philox stream [epoch·n, (epoch+1)·n) of `seed` (so every
// platform and a resumed run see the same order).
std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch);

// Batches of row indices with random access: batch i of the current epoch is rows(i). What
// tasks that build their own batch tensors (padding, tokenization, images) iterate over.
class RowBatches {
 public:
  RowBatches() = default;
  RowBatches(int64_t rows, int64_t batch_size, bool shuffle, uint64_t seed);
  int64_t size() const { return rows_ == 0 ? 0 : (rows_ + batch_ - 1) / batch_; }  // batches per epoch (last may be short)
  void set_epoch(int64_t epoch) { order_ = epoch_order(rows_, shuffle_, seed_, epoch); }
  std::vector<int64_t> rows(int64_t i) const;  // i in [0, size())

 private:
  int64_t rows_ = 0, batch_ = 1;
  bool shuffle_ = false;
  uint64_t seed_ = 0;
  std::vector<int64_t> order_;
};

// Copies rows `rows` of a host tensor x (N, ...) into a new contiguous tensor (len(rows), ...) of
// the same dtype. Any dtype; x may be non-contiguous (it is made contiguous first).
Tensor gather_rows(const Tensor& x, const std::vector<int64_t>& rows);

class Batcher {
 public:
  // fields: CPU tensors with the same size N >= 1 along dim 0.
  Batcher(std::vector<Tensor> fields, BatcherOptions options);
  Batcher(const Tensor& inputs, const Tensor& targets, BatcherOptions options)
      : Batcher(std::vector<Tensor>{inputs, targets}, options) {}

  // Fills `out` with the next batch of the current epoch and returns true; at the end of the
  // epoch returns false and moves the cursor to the start of the next epoch.
  bool next(Batch& out);

  int64_t num_rows() const { return num_rows_; }
  int64_t batches_per_epoch() const;
  int64_t epoch() const { return cursor_.epoch; }
  const BatcherOptions& options() const { return options_; }

  BatchCursor cursor() const { return cursor_; }
  // Restores a cursor from cursor(); position must lie in [0, N] (N = end of epoch).
  void set_cursor(const BatchCursor& c);

  // The row order of epoch e (identity when shuffle is off).
  std::vector<int64_t> epoch_order(int64_t epoch) const;

 private:
  void ensure_order();

  std::vector<Tensor> fields_;
  BatcherOptions options_;
  int64_t num_rows_ = 0;
  BatchCursor cursor_;
  std::vector<int64_t> order_;
  int64_t order_epoch_ = -1;  // epoch that order_ belongs to
};

}  // namespace hh
