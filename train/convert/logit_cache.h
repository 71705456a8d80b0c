// The teacher's top-k logit cache of logit distillation (RADLADS): before the stage the teacher runs
// once over the batches the stage will see, and each batch's K largest logits per scored position
// (values and token ids) and the log-sum-exp of its whole distribution at the stage's temperature go
// to one shard on disk (train/convert/hidden_store.h's ShardFolder: atomic writes, memory-mapped
// reads). The stage then trains on nn::topk_logit_distillation_loss against the shards: the top-k
// probabilities are exact and the rest of the mass is one "other" bucket.
//
// Every shard carries, in its safetensors metadata, the cache's fingerprint (the conversion's, K and
// T) and a checksum of the batch it was made from (input ids and scored positions): a shard is
// reused only when both match the batch it stands for, and rebuilt otherwise; a shard read for
// another batch is an error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "train/convert/hidden_store.h"

namespace hh::train {

enum class LogitCache { none, topk };
LogitCache parse_logit_cache(const std::string& s);  // "none" | "topk"
const char* logit_cache_name(LogitCache c);

// One batch's cached teacher, for its N scored positions (row-major over the batch's (B,L)).
struct TopkLogits {
  Tensor values;        // (N,K) f32: the teacher's K largest raw logits, descending
  Tensor indices;       // (N,K) i32: their token ids
  Tensor lse;           // (N) f64: logsumexp(teacher logits / T) over the whole vocabulary
  uint64_t batch = 0;   // the checksum of the batch it was made from (batch_checksum)
};

// The top-k of logits (N,V) (any device and dtype; 1 <= k <= V) and their log-sum-exp at
// temperature T, on the host (the logits are copied there): O(V) a row, rows in parallel; ties go
// to the lower id. A row with a NaN or +inf, or only -inf, is an error.
TopkLogits topk_logits(const Tensor& logits, int64_t k, double temperature);

// The cache's shards of one split: "<prefix>-<i>.safetensors" under `folder`.
class LogitShards {
 public:
  LogitShards(const std::string& folder, const std::string& prefix, std::string fingerprint);
  // Whether shard i is readable and holds this fingerprint's top-k of the batch with that checksum.
  bool valid(size_t i, uint64_t batch) const;
  // Writes shard i (atomically: once it returns the shard is on disk under its name); returns its
  // bytes of tensor data.
  int64_t put(size_t i, const TopkLogits& t) const;
  // Shard i on `device`; an error naming the shard when it is missing, damaged or of another batch.
  TopkLogits get(size_t i, uint64_t batch, Device device) const;
  void remove(size_t n) const;  // shards 0..n-1, if present
  const std::string& folder() const { return shards_.folder(); }
  std::string path(size_t i) const { return shards_.path(i); }

 private:
  std::vector<ShardFolder::Stamp> stamp(uint64_t batch) const;  // the fingerprint and the batch's checksum

  ShardFolder shards_;
  std::string fingerprint_;
};

// The fingerprint of a cache: the conversion's (model and data), K and T.
std::string logit_cache_fingerprint(const std::string& conversion, int64_t k, double temperature);

}  // namespace hh::train
