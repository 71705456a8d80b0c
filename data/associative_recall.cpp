// Associative recall generator (layout documented in data/associative_recall.h).
#include "data/associative_recall.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/error.h"

namespace hh {

void validate(const ArConfig& c) {
  HH_CHECK(c.vocab >= 4, "associative_recall: vocab must be >= 4 (at least 2 keys and 2 values), got ", c.vocab);
  HH_CHECK(c.vocab % 2 == 0, "associative_recall: vocab must be even (keys and values are its two halves), got ",
           c.vocab);
  HH_CHECK(c.seq_len >= 3, "associative_recall: seq_len must be >= 3 (one key-value pair and the query), got ",
           c.seq_len);
  HH_CHECK(c.seq_len <= (int64_t{1} << 24), "associative_recall: seq_len ", c.seq_len, " is unreasonably large");
  HH_CHECK(c.num_train >= 0, "associative_recall: num_train must be >= 0, got ", c.num_train);
  HH_CHECK(c.num_test >= 0, "associative_recall: num_test must be >= 0, got ", c.num_test);
  // Each split's stream must stay below the next stream's first block.
  const uint64_t per = static_cast<uint64_t>(ar_blocks_per_sample(c));
  const uint64_t most = static_cast<uint64_t>(std::max(c.num_train, c.num_test));
  HH_CHECK(most == 0 || per <= kArTestStreamOffset / most, "associative_recall: ", most, " samples of length ",
           c.seq_len, " exceed one Philox stream");
}

int64_t ar_blocks_per_sample(const ArConfig& c) {
  // map shuffle (K - 1 draws) + P context keys + 1 leading value (even L) + 1 query pair index.
  return ar_num_keys(c) + ar_num_pairs(c) + 2;
}

ArSplit generate_ar_split(const ArConfig& c, int64_t n, uint64_t stream_offset) {
  validate(c);
  HH_CHECK(n >= 0, "associative_recall: number of samples must be >= 0, got ", n);
  const int64_t L = c.seq_len, K = ar_num_keys(c), P = ar_num_pairs(c);
  const bool leading_value = (L % 2 == 0);
  const uint64_t per = static_cast<uint64_t>(ar_blocks_per_sample(c));

  ArSplit out;
  out.inputs = empty({n, L}, DType::i64);    // (N, L)
  out.targets = full({n, L}, static_cast<double>(kArIgnoreIndex), DType::i64);  // (N, L)
  if (n == 0) return out;
  int64_t* x = out.inputs.data<int64_t>();
  int64_t* y = out.targets.data<int64_t>();

  // Rows are independent (each has its own Philox offsets), so the result is the same for any
  // thread count.
#pragma omp parallel
  {
    std::vector<int64_t> value_of(static_cast<size_t>(K));  // the sequence's map key -> value
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      Generator gen(c.seed, stream_offset + static_cast<uint64_t>(i) * per);
      // Fresh bijection keys -> values (Fisher-Yates over the value half).
      for (int64_t k = 0; k < K; ++k) value_of[static_cast<size_t>(k)] = K + k;
      for (int64_t k = K - 1; k > 0; --k) {
        int64_t j = gen.next_int(0, k + 1);
        std::swap(value_of[static_cast<size_t>(k)], value_of[static_cast<size_t>(j)]);
      }
      int64_t* row = x + i * L;
      int64_t pos = 0;
      if (leading_value) row[pos++] = value_of[static_cast<size_t>(gen.next_int(0, K))];
      const int64_t first_pair = pos;
      for (int64_t p = 0; p < P; ++p) {
        int64_t key = gen.next_int(0, K);
        row[pos++] = key;
        row[pos++] = value_of[static_cast<size_t>(key)];
      }
      const int64_t query = row[first_pair + 2 * gen.next_int(0, P)];
      row[L - 1] = query;
      y[i * L + (L - 1)] = value_of[static_cast<size_t>(query)];
    }
  }
  return out;
}

ArDataset make_associative_recall(const ArConfig& c) {
  validate(c);
  ArDataset d;
  d.config = c;
  d.train = generate_ar_split(c, c.num_train, 0);
  d.test = generate_ar_split(c, c.num_test, kArTestStreamOffset);
  return d;
}

}  // namespace hh
