// Batcher: per-epoch shuffled mini-batches with a resumable cursor (see data/batching.h).
#include "data/batching.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "core/error.h"
#include "core/generator.h"

namespace hh {

const Tensor& Batch::field(size_t i) const {
  HH_CHECK(i < fields.size(), "Batch::field: index ", i, " out of range for a batch with ", fields.size(), " fields");
  return fields[i];
}

Tensor gather_rows(const Tensor& x, const std::vector<int64_t>& rows) {
  HH_CHECK(x.defined(), "gather_rows: undefined tensor");
  HH_CHECK(x.dim() >= 1, "gather_rows: expected a tensor with at least one dimension, got shape ", x.shape());
  HH_CHECK(x.device().is_cpu(), "gather_rows: expected a CPU tensor (datasets live on the host), got ", x.device());
  const Tensor src = x.is_contiguous() ? x : x.contiguous();
  const int64_t n = src.size(0);
  Shape shape = src.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  Tensor out = empty(shape, {src.dtype(), Device::cpu()});
  const size_t row_bytes = static_cast<size_t>(n == 0 ? 0 : src.numel() / n) * itemsize(src.dtype());
  const char* s = static_cast<const char*>(src.raw_data());
  char* d = static_cast<char*>(out.raw_data());
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t r = rows[i];
    HH_CHECK(r >= 0 && r < n, "gather_rows: row ", r, " out of range for shape ", src.shape());
    if (row_bytes > 0) std::memcpy(d + i * row_bytes, s + static_cast<size_t>(r) * row_bytes, row_bytes);
  }
  return out;
}

Batcher::Batcher(std::vector<Tensor> fields, BatcherOptions options) : options_(options) {
  HH_CHECK(!fields.empty(), "Batcher: needs at least one tensor");
  HH_CHECK(options.batch_size >= 1, "Batcher: batch_size must be >= 1, got ", options.batch_size);
  for (size_t i = 0; i < fields.size(); ++i) {
    const Tensor& f = fields[i];
    HH_CHECK(f.defined(), "Batcher: field ", i, " is an undefined tensor");
    HH_CHECK(f.dim() >= 1, "Batcher: field ", i, " must have a batch dimension, got shape ", f.shape());
    HH_CHECK(f.device().is_cpu(), "Batcher: field ", i, " must be a CPU tensor, got ", f.device());
    HH_CHECK(f.size(0) == fields[0].size(0), "Batcher: field ", i, " has shape ", f.shape(),
             " but field 0 has shape ", fields[0].shape(), " (first dimensions must match)");
  }
  num_rows_ = fields[0].size(0);
  HH_CHECK(num_rows_ >= 1, "Batcher: the dataset is empty (shape ", fields[0].shape(), ")");
  HH_CHECK(!options.drop_last || options.batch_size <= num_rows_, "Batcher: drop_last with batch_size ",
           options.batch_size, " > ", num_rows_, " rows would give no batches");
  fields_.reserve(fields.size());
  for (auto& f : fields) fields_.push_back(f.is_contiguous() ? f : f.contiguous());
}

int64_t Batcher::batches_per_epoch() const {
  const int64_t b = options_.batch_size;
  return options_.drop_last ? num_rows_ / b : (num_rows_ + b - 1) / b;
}

std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  HH_CHECK(epoch >= 0 && n >= 0, "epoch_order: negative epoch ", epoch, " or row count ", n);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!shuffle) return order;
  // Fisher-Yates with N - 1 draws from the epoch's own stream [e*N, (e+1)*N).
  Generator gen(seed, static_cast<uint64_t>(epoch) * static_cast<uint64_t>(n));
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = gen.next_int(0, i + 1);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

std::vector<int64_t> Batcher::epoch_order(int64_t epoch) const {
  HH_CHECK(epoch >= 0, "Batcher::epoch_order: negative epoch ", epoch);
  return hh::epoch_order(num_rows_, options_.shuffle, options_.seed, epoch);
}

RowBatches::RowBatches(int64_t rows, int64_t batch_size, bool shuffle, uint64_t seed)
    : rows_(rows), batch_(batch_size), shuffle_(shuffle), seed_(seed) {
  HH_CHECK(rows >= 0 && batch_size >= 1, "RowBatches: need rows >= 0 and batch size >= 1, got ", rows, " and ",
           batch_size);
  set_epoch(0);
}

std::vector<int64_t> RowBatches::rows(int64_t i) const {
  HH_CHECK(i >= 0 && i < size(), "RowBatches: batch ", i, " outside [0, ", size(), ")");
  const auto b = order_.begin() + i * batch_;
  return std::vector<int64_t>(b, b + std::min(batch_, rows_ - i * batch_));
}

void Batcher::ensure_order() {
  if (order_epoch_ == cursor_.epoch) return;
  order_ = epoch_order(cursor_.epoch);
  order_epoch_ = cursor_.epoch;
}

void Batcher::set_cursor(const BatchCursor& c) {
  HH_CHECK(c.epoch >= 0, "Batcher::set_cursor: negative epoch ", c.epoch);
  HH_CHECK(c.position >= 0 && c.position <= num_rows_, "Batcher::set_cursor: position ", c.position,
           " outside [0, ", num_rows_, "]");
  cursor_ = c;
}

bool Batcher::next(Batch& out) {
  const int64_t b = options_.batch_size;
  const int64_t end = options_.drop_last ? (num_rows_ / b) * b : num_rows_;
  if (cursor_.position >= end) {
    cursor_.epoch += 1;
    cursor_.position = 0;
    return false;
  }
  ensure_order();
  const int64_t start = cursor_.position;
  const int64_t stop = std::min(start + b, end);
  out.rows.assign(order_.begin() + start, order_.begin() + stop);
  out.fields.clear();
  out.fields.reserve(fields_.size());
  for (const Tensor& f : fields_) out.fields.push_back(gather_rows(f, out.rows));
  out.epoch = cursor_.epoch;
  out.index = start / b;
  cursor_.position = stop;
  return true;
}

}  // namespace hh
