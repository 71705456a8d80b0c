// Associative recall generator: layout, per-sequence maps, split freshness, determinism, errors.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <vector>

#include "core/error.h"
#include "data/associative_recall.h"

using namespace hh;

namespace {

struct Rows {
  int64_t n, L;
  std::vector<int64_t> x, y;
  const int64_t* row(int64_t i) const { return x.data() + i * L; }
};

Rows host(const ArSplit& s) {
  REQUIRE(s.inputs.dtype() == DType::i64);
  REQUIRE(s.targets.dtype() == DType::i64);
  REQUIRE(s.inputs.dim() == 2);
  REQUIRE(s.inputs.shape() == s.targets.shape());
  return {s.inputs.size(0), s.inputs.size(1), to_vector<int64_t>(s.inputs), to_vector<int64_t>(s.targets)};
}

// Checks every property the task promises for one split; returns the per-key occurrence counts
// summed over all rows.
std::vector<int64_t> check_split(const Rows& r, const ArConfig& c) {
  const int64_t K = c.vocab / 2, L = c.seq_len, P = (L - 1) / 2;
  const int64_t first_pair = (L % 2 == 0) ? 1 : 0;
  std::vector<int64_t> key_counts(static_cast<size_t>(K), 0);
  int64_t bad = 0;
  for (int64_t i = 0; i < r.n; ++i) {
    const int64_t* row = r.row(i);
    std::map<int64_t, int64_t> value_of, key_of;
    bool ok = true;
    if (first_pair == 1) ok = ok && ar_is_value(row[0], c);
    for (int64_t p = 0; p < P; ++p) {
      const int64_t k = row[first_pair + 2 * p], v = row[first_pair + 2 * p + 1];
      ok = ok && ar_is_key(k, c) && ar_is_value(v, c);
      if (!ok) break;
      key_counts[static_cast<size_t>(k)]++;
      auto [it, fresh] = value_of.emplace(k, v);
      ok = ok && (fresh || it->second == v);  // one value per key in the sequence
      auto [jt, fresh2] = key_of.emplace(v, k);
      ok = ok && (fresh2 || jt->second == k);  // and one key per value (a bijection)
    }
    const int64_t q = row[L - 1];
    ok = ok && ar_is_key(q, c) && value_of.count(q) == 1;  // the query occurs in the context
    if (ok) ok = r.y[static_cast<size_t>(i * L + L - 1)] == value_of[q];
    for (int64_t t = 0; t < L - 1 && ok; ++t) ok = r.y[static_cast<size_t>(i * L + t)] == kArIgnoreIndex;
    if (!ok) ++bad;
  }
  CHECK(bad == 0);
  return key_counts;
}

}  // namespace

TEST_CASE("ar data: paper setting layout, maps and targets") {
  ArConfig c;  // vocab 40, seq_len 128
  c.num_train = 600;
  c.num_test = 200;
  c.seed = 7;
  const ArDataset d = make_associative_recall(c);
  CHECK(d.train.inputs.shape() == Shape{600, 128});
  CHECK(d.test.inputs.shape() == Shape{200, 128});
  CHECK(ar_num_pairs(c) == 63);
  CHECK(ar_answer_position(c) == 127);
  const Rows tr = host(d.train), te = host(d.test);
  const auto counts = check_split(tr, c);
  check_split(te, c);

  // Keys drawn uniformly: each of the 20 keys about 63/20 = 3.15 times per sequence.
  for (int64_t k = 0; k < 20; ++k) {
    const double per_seq = static_cast<double>(counts[static_cast<size_t>(k)]) / 600.0;
    CHECK(per_seq > 2.9);
    CHECK(per_seq < 3.4);
  }
  // Every value shows up as an answer; answers are spread (no single value dominates).
  std::map<int64_t, int64_t> answers;
  for (int64_t i = 0; i < tr.n; ++i) answers[tr.y[static_cast<size_t>(i * 128 + 127)]]++;
  CHECK(answers.size() == 20);
  for (const auto& a : answers) CHECK(a.second < 80);  // mean 30
}

TEST_CASE("ar data: odd and even lengths, small vocab") {
  for (int64_t L : {3, 4, 9, 10, 33}) {
    ArConfig c;
    c.vocab = 6;
    c.seq_len = L;
    c.num_train = 300;
    c.num_test = 50;
    c.seed = 11;
    CAPTURE(L);
    const ArDataset d = make_associative_recall(c);
    const Rows tr = host(d.train);
    CHECK(tr.L == L);
    check_split(tr, c);
    check_split(host(d.test), c);
    if (L % 2 == 0) {
      // Strict alternation value, key, value, ..., key: position t is a key iff t is odd.
      for (int64_t t = 0; t < L; ++t) CHECK(ar_is_key(tr.row(5)[t], c) == (t % 2 == 1));
    } else {
      for (int64_t t = 0; t < L; ++t) CHECK(ar_is_key(tr.row(5)[t], c) == (t % 2 == 0));
    }
  }
}

TEST_CASE("ar data: the map is drawn per sequence") {
  ArConfig c;
  c.num_train = 200;
  c.num_test = 0;
  c.seed = 3;
  const Rows tr = host(make_associative_recall(c).train);
  // Key 0's value differs across sequences (a fixed global map would give one value).
  std::set<int64_t> values_of_key0;
  for (int64_t i = 0; i < tr.n; ++i)
    for (int64_t p = 0; p < 63; ++p)
      if (tr.row(i)[1 + 2 * p] == 0) values_of_key0.insert(tr.row(i)[2 + 2 * p]);
  CHECK(values_of_key0.size() >= 15);
}

TEST_CASE("ar data: test split has fresh associations") {
  ArConfig c;
  c.num_train = 1000;
  c.num_test = 300;
  c.seed = 5;
  const ArDataset d = make_associative_recall(c);
  const Rows tr = host(d.train), te = host(d.test);
  std::set<std::vector<int64_t>> train_rows;
  std::set<std::vector<int64_t>> train_maps;  // the full key->value map of each training sequence
  for (int64_t i = 0; i < tr.n; ++i) {
    train_rows.emplace(tr.row(i), tr.row(i) + tr.L);
    std::vector<int64_t> m(20, -1);
    for (int64_t p = 0; p < 63; ++p) m[static_cast<size_t>(tr.row(i)[1 + 2 * p])] = tr.row(i)[2 + 2 * p];
    train_maps.insert(m);
  }
  int64_t same_rows = 0, same_maps = 0;
  for (int64_t i = 0; i < te.n; ++i) {
    same_rows += train_rows.count(std::vector<int64_t>(te.row(i), te.row(i) + te.L));
    std::vector<int64_t> m(20, -1);
    for (int64_t p = 0; p < 63; ++p) m[static_cast<size_t>(te.row(i)[1 + 2 * p])] = te.row(i)[2 + 2 * p];
    same_maps += train_maps.count(m);
  }
  CHECK(same_rows == 0);
  CHECK(same_maps == 0);
  // The test split is its own stream, not a continuation or copy of the training stream.
  const Rows again = host(generate_ar_split(c, 300, kArTestStreamOffset));
  CHECK(again.x == te.x);
  const Rows first_train = host(generate_ar_split(c, 300, 0));
  CHECK(first_train.x != te.x);
}

TEST_CASE("ar data: deterministic from the seed") {
  ArConfig c;
  c.vocab = 10;
  c.seq_len = 21;
  c.num_train = 128;
  c.num_test = 32;
  c.seed = 42;
  const ArDataset a = make_associative_recall(c), b = make_associative_recall(c);
  CHECK(to_vector<int64_t>(a.train.inputs) == to_vector<int64_t>(b.train.inputs));
  CHECK(to_vector<int64_t>(a.train.targets) == to_vector<int64_t>(b.train.targets));
  CHECK(to_vector<int64_t>(a.test.inputs) == to_vector<int64_t>(b.test.inputs));
  // A row depends only on its index: a shorter split is a prefix of a longer one.
  const auto prefix = to_vector<int64_t>(generate_ar_split(c, 16, 0).inputs);
  const auto full = to_vector<int64_t>(a.train.inputs);
  CHECK(std::vector<int64_t>(full.begin(), full.begin() + 16 * 21) == prefix);
  c.seed = 43;
  const ArDataset other = make_associative_recall(c);
  CHECK(to_vector<int64_t>(other.train.inputs) != to_vector<int64_t>(a.train.inputs));
}

TEST_CASE("ar data: config errors") {
  auto with = [](auto change) {
    ArConfig c;
    c.num_train = 4;
    c.num_test = 4;
    change(c);
    return c;
  };
  CHECK_THROWS_WITH_AS(make_associative_recall(with([](ArConfig& c) { c.vocab = 41; })),
                       doctest::Contains("vocab must be even"), hh::Error);
  CHECK_THROWS_WITH_AS(make_associative_recall(with([](ArConfig& c) { c.vocab = 2; })),
                       doctest::Contains("vocab must be >= 4"), hh::Error);
  CHECK_THROWS_WITH_AS(make_associative_recall(with([](ArConfig& c) { c.seq_len = 2; })),
                       doctest::Contains("seq_len must be >= 3"), hh::Error);
  CHECK_THROWS_WITH_AS(make_associative_recall(with([](ArConfig& c) { c.num_train = -1; })),
                       doctest::Contains("num_train"), hh::Error);
  CHECK_THROWS_WITH_AS(make_associative_recall(with([](ArConfig& c) { c.num_test = -5; })),
                       doctest::Contains("num_test"), hh::Error);
  // An empty test split is allowed and has the right shape.
  const ArDataset d = make_associative_recall(with([](ArConfig& c) { c.num_test = 0; }));
  CHECK(d.test.inputs.shape() == Shape{0, 128});
  CHECK(d.train.inputs.shape() == Shape{4, 128});
}

TEST_CASE("ar data: the safari style (values with replacement, '=>' before the query)") {
  for (int64_t L : {4, 5, 10, 128}) {
    ArConfig c;  // vocab 40: '=>' 38, '.' 39, keys 0..18, values 19..37
    c.style = ArStyle::safari;
    c.seq_len = L;
    c.num_train = 400;
    c.num_test = 100;
    c.seed = 9;
    CAPTURE(L);
    CHECK(ar_num_keys(c) == 19);
    CHECK(ar_num_values(c) == 19);
    CHECK(ar_prefix_token(c) == 38);
    CHECK(ar_num_pairs(c) == (L - 2) / 2);
    const ArDataset d = make_associative_recall(c);
    for (const Rows& r : {host(d.train), host(d.test)}) {
      int64_t bad = 0, shared_values = 0;
      for (int64_t i = 0; i < r.n; ++i) {
        const int64_t* row = r.row(i);
        const int64_t first = L % 2;  // odd L: a leading value
        bool ok = r.row(i)[L - 2] == 38 && ar_is_key(row[L - 1], c);
        if (first == 1) ok = ok && ar_is_value(row[0], c);
        std::map<int64_t, int64_t> value_of;
        std::set<int64_t> values;
        for (int64_t p = 0; p < ar_num_pairs(c) && ok; ++p) {
          const int64_t k = row[first + 2 * p], v = row[first + 2 * p + 1];
          ok = ar_is_key(k, c) && ar_is_value(v, c);
          auto [it, fresh] = value_of.emplace(k, v);
          ok = ok && (fresh || it->second == v);  // one value per key in the sequence
          if (fresh) shared_values += !values.insert(v).second;
        }
        ok = ok && value_of.count(row[L - 1]) == 1 && r.y[static_cast<size_t>(i * L + L - 1)] == value_of[row[L - 1]];
        for (int64_t t = 0; t < L - 1 && ok; ++t) ok = r.y[static_cast<size_t>(i * L + t)] == kArIgnoreIndex;
        bad += !ok;
      }
      CHECK(bad == 0);
      if (L == 128) CHECK(shared_values > r.n);  // not a bijection: keys share values (~7 per row)
    }
  }
  // The query is uniform over the distinct keys present, not over pairs: a key that occurs once
  // is asked as often as one that occurs five times.
  ArConfig c;
  c.style = ArStyle::safari;
  c.num_train = 4000;
  c.num_test = 0;
  const Rows r = host(make_associative_recall(c).train);
  double asked_once = 0, present_once = 0, asked_many = 0, present_many = 0;
  for (int64_t i = 0; i < r.n; ++i) {
    std::map<int64_t, int64_t> count;
    for (int64_t p = 0; p < 63; ++p) count[r.row(i)[2 * p]]++;
    for (const auto& kc : count) {
      const bool asked = kc.first == r.row(i)[127];
      (kc.second == 1 ? present_once : present_many) += 1.0 / static_cast<double>(count.size());
      (kc.second == 1 ? asked_once : asked_many) += asked;
    }
  }
  CHECK(asked_once / present_once == doctest::Approx(asked_many / present_many).epsilon(0.15));
  CHECK_THROWS_WITH_AS(parse_ar_style("h3"), doctest::Contains("unknown style 'h3'"), hh::Error);
  c.vocab = 5;
  CHECK_THROWS_WITH_AS(make_associative_recall(c), doctest::Contains("vocab >= 6"), hh::Error);
}

TEST_CASE("ar data: the counting baseline") {
  ArConfig c;
  c.vocab = 8;  // keys 0..3, values 4..7
  c.seq_len = 9;
  // Context values 5, 6, 5, 7: the most frequent is 5. Row 0 asks key 0 (value 5): a hit; row 1
  // asks key 1 (value 6): a miss; row 2 has a two-way tie (5 and 6) and asks for 6: half a hit.
  ArSplit s;
  s.inputs = from_vector(std::vector<int64_t>{0, 5, 1, 6, 0, 5, 2, 7, 0,  //
                                              0, 5, 1, 6, 0, 5, 2, 7, 1,  //
                                              0, 5, 1, 6, 0, 5, 1, 6, 1},
                         {3, 9});
  s.targets = full({3, 9}, static_cast<double>(kArIgnoreIndex), DType::i64);
  auto t = to_vector<int64_t>(s.targets);
  t[8] = 5;
  t[17] = 6;
  t[26] = 6;
  s.targets = from_vector(t, {3, 9});
  CHECK(ar_counting_baseline(s, c) == doctest::Approx(1.5 / 3.0));
  t[26] = kArIgnoreIndex;  // a row without an answer is an error, not an out-of-range read
  s.targets = from_vector(t, {3, 9});
  CHECK_THROWS_WITH_AS(ar_counting_baseline(s, c), doctest::Contains("row 2's answer -100"), hh::Error);
  // The paper's setting: ~11% for the pairs style, ~16% for safari's (the paper's failing maps: 17%).
  ArConfig p;
  p.num_train = 0;
  p.num_test = 4000;
  const double pairs = ar_counting_baseline(make_associative_recall(p).test, p);
  p.style = ArStyle::safari;
  const double safari = ar_counting_baseline(make_associative_recall(p).test, p);
  CHECK(pairs == doctest::Approx(0.107).epsilon(0.1));
  CHECK(safari == doctest::Approx(0.158).epsilon(0.1));
}
