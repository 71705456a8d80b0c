// Associative recall generator (layout documented in data/associative_recall.h).
#include "data/associative_recall.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/error.h"

namespace hh {

const char* ar_style_name(ArStyle s) { return s == ArStyle::safari ? "safari" : "pairs"; }

ArStyle parse_ar_style(const std::string& name) {
  if (name == "pairs") return ArStyle::pairs;
  if (name == "safari") return ArStyle::safari;
  fail(str("associative_recall: unknown style '", name, "' (expected pairs or safari)"));
}

void validate(const ArConfig& c) {
  if (c.style == ArStyle::safari) {
    HH_CHECK(c.vocab >= 6, "associative_recall: the safari style needs vocab >= 6 (\"=>\", \".\", at least 2 keys "
             "and 2 values), got ", c.vocab);
    HH_CHECK(c.seq_len >= 4, "associative_recall: the safari style needs seq_len >= 4 (one key-value pair, \"=>\" "
             "and the query), got ", c.seq_len);
  } else {
    HH_CHECK(c.vocab >= 4, "associative_recall: vocab must be >= 4 (at least 2 keys and 2 values), got ", c.vocab);
    HH_CHECK(c.vocab % 2 == 0, "associative_recall: vocab must be even (keys and values are its two halves), got ",
             c.vocab);
    HH_CHECK(c.seq_len >= 3, "associative_recall: seq_len must be >= 3 (one key-value pair and the query), got ",
             c.seq_len);
  }
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
  // the map (K draws at most) + P context keys + 1 leading value + 1 query.
  return ar_num_keys(c) + ar_num_pairs(c) + 2;
}

ArSplit generate_ar_split(const ArConfig& c, int64_t n, uint64_t stream_offset) {
  validate(c);
  HH_CHECK(n >= 0, "associative_recall: number of samples must be >= 0, got ", n);
  const bool safari = c.style == ArStyle::safari;
  const int64_t L = c.seq_len, K = ar_num_keys(c), V = ar_num_values(c), P = ar_num_pairs(c);
  const int64_t tail = safari ? 2 : 1;  // "=>" q, or q
  const bool leading_value = (L - tail - 2 * P) == 1;
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
    std::vector<int64_t> present;                           // safari: distinct keys in the context
    std::vector<char> seen(static_cast<size_t>(K));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      Generator gen(c.seed, stream_offset + static_cast<uint64_t>(i) * per);
      if (safari) {  // each key its own value, with replacement
        for (int64_t k = 0; k < K; ++k) value_of[static_cast<size_t>(k)] = K + gen.next_int(0, V);
      } else {  // a fresh bijection keys -> values (Fisher-Yates over the value half)
        for (int64_t k = 0; k < K; ++k) value_of[static_cast<size_t>(k)] = K + k;
        for (int64_t k = K - 1; k > 0; --k) {
          int64_t j = gen.next_int(0, k + 1);
          std::swap(value_of[static_cast<size_t>(k)], value_of[static_cast<size_t>(j)]);
        }
      }
      int64_t* row = x + i * L;
      int64_t pos = 0;
      if (leading_value) row[pos++] = value_of[static_cast<size_t>(gen.next_int(0, K))];
      const int64_t first_pair = pos;
      present.clear();
      std::fill(seen.begin(), seen.end(), 0);
      for (int64_t p = 0; p < P; ++p) {
        int64_t key = gen.next_int(0, K);
        row[pos++] = key;
        row[pos++] = value_of[static_cast<size_t>(key)];
        if (safari && !seen[static_cast<size_t>(key)]) {  // only safari's query needs the distinct keys
          present.push_back(key);
          seen[static_cast<size_t>(key)] = 1;
        }
      }
      int64_t query;
      if (safari) {
        query = present[static_cast<size_t>(gen.next_int(0, static_cast<int64_t>(present.size())))];
        row[pos++] = ar_prefix_token(c);
      } else {
        query = row[first_pair + 2 * gen.next_int(0, P)];
      }
      row[L - 1] = query;
      y[i * L + (L - 1)] = value_of[static_cast<size_t>(query)];
    }
  }
  return out;
}

double ar_counting_baseline(const ArSplit& split, const ArConfig& c) {
  const int64_t N = split.inputs.size(0), L = split.inputs.size(1);
  HH_CHECK(L == c.seq_len, "ar_counting_baseline: rows of length ", L, " for a config of length ", c.seq_len);
  const auto x = to_vector<int64_t>(split.inputs), y = to_vector<int64_t>(split.targets);
  std::vector<int64_t> count(static_cast<size_t>(c.vocab));
  double hits = 0;
  for (int64_t i = 0; i < N; ++i) {
    std::fill(count.begin(), count.end(), 0);
    const int64_t* row = x.data() + i * L;
    for (int64_t p = 0; p + 1 < L; ++p)  // the values of the context (the last token is the query)
      if (ar_is_value(row[p], c)) ++count[static_cast<size_t>(row[p])];
    const int64_t most = *std::max_element(count.begin(), count.end());
    const int64_t ties = std::count(count.begin(), count.end(), most);
    const int64_t answer = y[static_cast<size_t>(i * L + L - 1)];
    HH_CHECK(ar_is_value(answer, c), "ar_counting_baseline: row ", i, "'s answer ", answer,
             " is not a value token of this config");
    if (most > 0 && count[static_cast<size_t>(answer)] == most) hits += 1.0 / static_cast<double>(ties);
  }
  return N ? hits / static_cast<double>(N) : 0.0;
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
