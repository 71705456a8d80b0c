// Associative recall (AR): the synthetic recall task of the Hedgehog paper (§3.2, App. B.1,
// Table 12; Ba et al. 2016). A sequence lists key-value pairs and ends with a query key; the model
// must predict the value paired with that key earlier in the same sequence.
//
// Vocabulary (V = config.vocab, even, no special tokens):
//   keys   are tokens [0, V/2)        (K = V/2 keys)
//   values are tokens [V/2, V)        (K values)
// Every sequence draws its own random bijection key -> value (a fresh association per sequence),
// so a model cannot memorize pairs across sequences and must read them from the context.
//
// Layout of one row of `inputs` (L = config.seq_len, P = (L - 1) / 2 context pairs):
//   L odd  (L = 2P + 1):  k_0 m(k_0) k_1 m(k_1) ... k_{P-1} m(k_{P-1}) q
//   L even (L = 2P + 2):  m(k') k_0 m(k_0) ... k_{P-1} m(k_{P-1}) q
//     (the window starts inside a pair: position 0 holds the value of a random key k', consistent
//      with the sequence's map, so tokens strictly alternate key / value and the row ends with a key)
// The context keys k_i are drawn uniformly with replacement from the K keys, so each key appears
// about P / K times (paper setting V = 40, L = 128: P = 63, K = 20, about 3.15 times each).
// The query q is the key of a uniformly chosen context pair, so it always occurs in the context.
//
// `targets` has the same (N, L) shape: kArIgnoreIndex (-100) everywhere except the last position
// L - 1 (whose input is the query), which holds m(q). This is the next-token layout: a causal
// model's output at position L - 1 is scored by cross-entropy with ignore_index -100, and the
// metric is accuracy on that one position (ar_answer_position).
//
// Determinism: everything comes from hh::Generator(seed, offset). Sample i of the training split
// uses offsets starting at i * ar_blocks_per_sample(config); the test split uses the same seed
// from offset kArTestStreamOffset, a disjoint Philox stream, so its associations are fresh.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hh {

constexpr int64_t kArIgnoreIndex = -100;
// First Philox block of the test split's stream (the training split starts at 0).
constexpr uint64_t kArTestStreamOffset = uint64_t{1} << 62;

struct ArConfig {
  int64_t vocab = 40;        // V: even, >= 4 (V/2 keys and V/2 values)
  int64_t seq_len = 128;     // L: >= 3 (one pair and the query)
  int64_t num_train = 10000;
  int64_t num_test = 2000;
  uint64_t seed = 0;
};

struct ArSplit {
  Tensor inputs;   // (N, L) i64, token ids
  Tensor targets;  // (N, L) i64, kArIgnoreIndex except column L-1 = the query's value
};

struct ArDataset {
  ArConfig config;
  ArSplit train;
  ArSplit test;
};

// Throws hh::Error naming the offending field when the config is unusable.
void validate(const ArConfig& config);

inline int64_t ar_num_keys(const ArConfig& c) { return c.vocab / 2; }
inline int64_t ar_num_pairs(const ArConfig& c) { return (c.seq_len - 1) / 2; }
inline int64_t ar_answer_position(const ArConfig& c) { return c.seq_len - 1; }
inline bool ar_is_key(int64_t token, const ArConfig& c) { return token >= 0 && token < c.vocab / 2; }
inline bool ar_is_value(int64_t token, const ArConfig& c) { return token >= c.vocab / 2 && token < c.vocab; }
// Philox blocks reserved per sample (an upper bound on the draws one sample makes).
int64_t ar_blocks_per_sample(const ArConfig& c);

// Generates `num_samples` rows from the Philox stream that starts at `stream_offset`.
ArSplit generate_ar_split(const ArConfig& config, int64_t num_samples, uint64_t stream_offset);

// Both splits: train from offset 0 (config.num_train rows), test from kArTestStreamOffset
// (config.num_test rows).
ArDataset make_associative_recall(const ArConfig& config);

}  // namespace hh
