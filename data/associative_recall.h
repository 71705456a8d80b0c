// Associative recall (AR): the synthetic recall task of the Hedgehog paper (§3.2, App. B.1,
// Table 12; Ba et al. 2016). A sequence lists key-value pairs and ends with a query key; the model
// must predict the value paired with that key earlier in the same sequence.
//
// Two styles of sequence (ArConfig::style); both have a fresh association per sequence, so a model
// cannot memorize pairs across sequences and must read them from the context.
//
// pairs (the default; vocabulary V = config.vocab, even, no special tokens):
//   keys are tokens [0, V/2), values [V/2, V) (K = V/2 of each); each sequence draws a random
//   bijection key -> value. Layout of one row (L = config.seq_len, P = (L - 1) / 2 context pairs):
//     L odd  (L = 2P + 1):  k_0 m(k_0) k_1 m(k_1) ... k_{P-1} m(k_{P-1}) q
//     L even (L = 2P + 2):  m(k') k_0 m(k_0) ... k_{P-1} m(k_{P-1}) q
//   (the window starts inside a pair: position 0 holds the value of a random key k', consistent
//   with the sequence's map, so tokens strictly alternate key / value and the row ends with a key).
//   The context keys are drawn uniformly with replacement, so each key appears about P / K times
//   (V = 40, L = 128: P = 63, K = 20, about 3.15 times each); the query q is the key of a uniformly
//   chosen context pair (so frequent keys are asked more often).
//
// safari (the associative-recall generator of HazyResearch's safari repository, the H3/Hyena
//   synthetics that the Hedgehog paper's group used; V counts two special tokens):
//   keys are [0, K), values [K, V - 2) with K = (V - 2) / 2, "=>" is token V - 2 (the query
//   prefix) and "." token V - 1 (safari's no-op answer, never used: the query is always in the
//   context). Each key maps to a value drawn uniformly WITH replacement (two keys may share a
//   value). P = (L - 2) / 2 pairs; the row ends with "=>" and the query:
//     L even (L = 2P + 2):  k_0 m(k_0) ... k_{P-1} m(k_{P-1}) => q
//     L odd  (L = 2P + 3):  m(k') k_0 m(k_0) ... => q
//   q is uniform over the DISTINCT keys present. (V = 40, L = 128: K = 19 keys and 19 values,
//   P = 63, each key about 3.3 times.)
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
#include <string>

#include "core/tensor.h"

namespace hh {

constexpr int64_t kArIgnoreIndex = -100;
// First Philox block of the test split's stream (the training split starts at 0).
constexpr uint64_t kArTestStreamOffset = uint64_t{1} << 62;

enum class ArStyle { pairs, safari };  // see the layouts above

// "pairs" / "safari"; parse_ar_style throws hh::Error naming the flag value otherwise.
const char* ar_style_name(ArStyle s);
ArStyle parse_ar_style(const std::string& name);

struct ArConfig {
  int64_t vocab = 40;        // V: pairs: even, >= 4; safari: >= 4 (two special tokens, then keys and values)
  int64_t seq_len = 128;     // L: pairs >= 3, safari >= 4 (one pair, "=>" and the query)
  ArStyle style = ArStyle::pairs;
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

// Tokens that are neither keys nor values: safari's "=>" and "." (none in the pairs style).
inline int64_t ar_num_special(const ArConfig& c) { return c.style == ArStyle::safari ? 2 : 0; }
inline int64_t ar_num_keys(const ArConfig& c) { return (c.vocab - ar_num_special(c)) / 2; }
inline int64_t ar_num_values(const ArConfig& c) { return c.vocab - ar_num_special(c) - ar_num_keys(c); }
inline int64_t ar_num_pairs(const ArConfig& c) { return (c.seq_len - 1 - ar_num_special(c) / 2) / 2; }
inline int64_t ar_answer_position(const ArConfig& c) { return c.seq_len - 1; }
inline bool ar_is_key(int64_t token, const ArConfig& c) { return token >= 0 && token < ar_num_keys(c); }
inline bool ar_is_value(int64_t token, const ArConfig& c) {
  return token >= ar_num_keys(c) && token < ar_num_keys(c) + ar_num_values(c);
}
// safari's query prefix "=>" (-1 in the pairs style, which has none).
inline int64_t ar_prefix_token(const ArConfig& c) { return c.style == ArStyle::safari ? c.vocab - 2 : -1; }
// Philox blocks reserved per sample (an upper bound on the draws one sample makes).
int64_t ar_blocks_per_sample(const ArConfig& c);

// Generates `num_samples` rows from the Philox stream that starts at `stream_offset`.
ArSplit generate_ar_split(const ArConfig& config, int64_t num_samples, uint64_t stream_offset);

// The counting baseline: the accuracy of answering each row's query with the value seen most
// often in its context (ties shared evenly), which needs no recall at all: an attention that can
// only average the values it has seen reaches it. Rows of `split` as generated for `config`.
double ar_counting_baseline(const ArSplit& split, const ArConfig& config);

// Both splits: train from offset 0 (config.num_train rows), test from kArTestStreamOffset
// (config.num_test rows).
ArDataset make_associative_recall(const ArConfig& config);

}  // namespace hh
