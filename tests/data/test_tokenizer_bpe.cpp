// BPE cost bounds (issue 27): the heap merge (BpeMerges::apply) against a straightforward
// reference merge on random words and merge tables (ties, repeated pairs, merges that replace an
// earlier one), and long inputs (200 KB of spaces, one 200 KB word) through every tokenizer,
// checked against HF `tokenizers` 0.23.3's ids. No timing is asserted.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <queue>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "data/tokenizer.h"
#include "data/tokenizer_gpt2.h"

using namespace hh;
using namespace hh::data;

namespace {

const std::string kDir = std::string(HH_SOURCE_DIR) + "/tests/fixtures/tokenizers/";

struct MergeRule {
  int32_t left, right, merged;
};

// The definition itself: while some adjacent pair is in the table, merge the one of lowest rank
// (rank = the index of the pair's last rule), the leftmost of equal ones. O(n^2).
std::vector<int32_t> reference_merge(const std::vector<MergeRule>& rules, std::vector<int32_t> sym) {
  std::map<std::pair<int32_t, int32_t>, std::pair<size_t, int32_t>> table;  // pair -> (rank, merged)
  for (size_t k = 0; k < rules.size(); ++k) table[{rules[k].left, rules[k].right}] = {k, rules[k].merged};
  for (;;) {
    size_t best = sym.size(), best_rank = 0;
    int32_t merged = -1;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      const auto it = table.find({sym[i], sym[i + 1]});
      if (it != table.end() && (best == sym.size() || it->second.first < best_rank)) {
        best = i;
        best_rank = it->second.first;
        merged = it->second.second;
      }
    }
    if (best == sym.size()) return sym;
    sym[best] = merged;
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
}

// The merge as it was before issue 27 (one binary heap holding every candidate), kept as a second
// reference for words too long for the O(n^2) one.
std::vector<int32_t> previous_heap_merge(const std::vector<MergeRule>& rules, std::vector<int32_t> sym) {
  std::map<std::pair<int32_t, int32_t>, std::pair<int32_t, int32_t>> table;  // pair -> (rank, merged)
  for (size_t k = 0; k < rules.size(); ++k) table[{rules[k].left, rules[k].right}] = {static_cast<int32_t>(k), rules[k].merged};
  const auto find = [&](int32_t a, int32_t b) -> const std::pair<int32_t, int32_t>* {
    const auto it = table.find({a, b});
    return it == table.end() ? nullptr : &it->second;
  };
  const int32_t n = static_cast<int32_t>(sym.size());
  std::priority_queue<std::pair<int32_t, int32_t>, std::vector<std::pair<int32_t, int32_t>>, std::greater<>> heap;
  std::vector<int32_t> prev(sym.size()), next(sym.size());
  for (int32_t i = 0; i < n; ++i) {
    prev[static_cast<size_t>(i)] = i - 1;
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
    if (i + 1 < n)
      if (const auto* m = find(sym[static_cast<size_t>(i)], sym[static_cast<size_t>(i) + 1])) heap.push({m->first, i});
  }
  while (!heap.empty()) {
    const auto [rank, pos] = heap.top();
    heap.pop();
    const size_t p = static_cast<size_t>(pos);
    if (sym[p] < 0 || next[p] < 0) continue;
    const auto* m = find(sym[p], sym[static_cast<size_t>(next[p])]);
    if (!m || m->first != rank) continue;
    sym[p] = m->second;
    sym[static_cast<size_t>(next[p])] = -1;
    next[p] = next[static_cast<size_t>(next[p])];
    if (next[p] >= 0) prev[static_cast<size_t>(next[p])] = pos;
    if (prev[p] >= 0)
      if (const auto* pm = find(sym[static_cast<size_t>(prev[p])], sym[p])) heap.push({pm->first, prev[p]});
    if (next[p] >= 0)
      if (const auto* qm = find(sym[p], sym[static_cast<size_t>(next[p])])) heap.push({qm->first, pos});
  }
  sym.erase(std::remove(sym.begin(), sym.end(), -1), sym.end());
  return sym;
}

std::vector<int32_t> heap_merge(const std::vector<MergeRule>& rules, std::vector<int32_t> sym) {
  BpeMerges merges;
  for (const MergeRule& r : rules) merges.add(r.left, r.right, r.merged);
  merges.apply(sym);
  return sym;
}

// FNV-1a over the ids' 32-bit values (the hashes below were computed so from HF's ids).
uint64_t fnv(const std::vector<int32_t>& ids) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t id : ids) {
    h ^= static_cast<uint32_t>(id);
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

}  // namespace

TEST_CASE("bpe merge: the heap merge equals the reference merge on random words and tables") {
  std::mt19937 rng(27);
  const auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  size_t words = 0, merged_words = 0;
  for (int table = 0; table < 400; ++table) {
    // Symbols 0..alphabet-1; each rule joins two known symbols into a new one, or (sometimes) into a
    // known one (two spellings of one token, as "ab"+"c" and "a"+"bc"), or repeats an earlier pair
    // (the later rule replaces it, as in HF).
    const int alphabet = uniform(1, 4);
    int32_t next_id = alphabet;
    std::vector<MergeRule> rules;
    const int n_rules = uniform(0, 14);
    for (int k = 0; k < n_rules; ++k) {
      if (!rules.empty() && uniform(0, 9) == 0) {
        MergeRule again = rules[static_cast<size_t>(uniform(0, static_cast<int>(rules.size()) - 1))];
        again.merged = uniform(0, 4) == 0 ? uniform(0, next_id - 1) : next_id++;
        rules.push_back(again);
        continue;
      }
      const int32_t a = uniform(0, next_id - 1), b = uniform(0, next_id - 1);
      rules.push_back({a, b, uniform(0, 5) == 0 ? uniform(0, next_id - 1) : next_id++});
    }
    for (int w = 0; w < 40; ++w) {
      std::vector<int32_t> word(static_cast<size_t>(uniform(0, 48)));
      const int bias = uniform(0, 2);  // 0: uniform letters; 1, 2: mostly symbol 0 (runs like "aaaa")
      for (int32_t& s : word) s = bias > 0 && uniform(0, 3) > 0 ? 0 : uniform(0, alphabet - 1);
      const std::vector<int32_t> want = reference_merge(rules, word);
      ++words;
      merged_words += want.size() < word.size();
      INFO("table ", table, ", word ", w);
      REQUIRE(heap_merge(rules, word) == want);
    }
  }
  CHECK(merged_words > words / 2);  // the tables do merge

  // Runs of one symbol under the powers-of-two table and the table that prefers odd runs.
  const std::vector<std::vector<MergeRule>> run_tables = {
      {{0, 0, 1}, {1, 1, 2}, {2, 2, 3}},             // a a -> aa, aa aa -> aaaa, ...
      {{0, 0, 1}, {1, 0, 2}, {0, 1, 3}, {2, 2, 4}},  // aa, aaa (aa a before a aa), aaaaaa
      {{1, 0, 2}, {0, 0, 1}, {0, 1, 3}}};            // a rank that is only reachable after a merge
  for (const auto& rules : run_tables)
    for (size_t n = 0; n <= 80; ++n) {
      INFO(n, " a's");
      const std::vector<int32_t> word(n, 0);
      REQUIRE(heap_merge(rules, word) == reference_merge(rules, word));
    }
}

TEST_CASE("bpe merge: long words (the counting-sort path) equal both references") {
  std::mt19937 rng(2027);
  const auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int table = 0; table < 24; ++table) {
    const int alphabet = uniform(1, 4);
    int32_t next_id = alphabet;
    std::vector<MergeRule> rules;
    for (int k = uniform(1, 40); k > 0; --k) {
      const int32_t a = uniform(0, next_id - 1), b = uniform(0, next_id - 1);
      rules.push_back({a, b, uniform(0, 5) == 0 ? uniform(0, next_id - 1) : next_id++});
    }
    std::vector<int32_t> word(static_cast<size_t>(uniform(4096, 30000)));
    const int bias = uniform(0, 2);
    for (int32_t& s : word) s = bias > 0 && uniform(0, 3) > 0 ? 0 : uniform(0, alphabet - 1);
    INFO("table ", table, ", ", word.size(), " symbols");
    const std::vector<int32_t> got = heap_merge(rules, word);
    REQUIRE(got == previous_heap_merge(rules, word));
    if (table < 3) {
      word.resize(4100);  // short enough for the O(n^2) definition
      REQUIRE(heap_merge(rules, word) == reference_merge(rules, word));
    }
  }
  const std::vector<MergeRule> runs = {{0, 0, 1}, {1, 0, 2}, {0, 1, 3}, {2, 2, 4}, {1, 1, 5}};
  const std::vector<int32_t> aaaa(100000, 0);
  CHECK(heap_merge(runs, aaaa) == previous_heap_merge(runs, aaaa));
}

TEST_CASE("bpe merge: a later rule for the same pair replaces the earlier, and stale candidates are skipped") {
  // (0 0) first ranked 0 -> 5, then re-added at rank 2 -> 6; (1 1) at rank 1 wins over it.
  const std::vector<MergeRule> rules = {{0, 0, 5}, {1, 1, 7}, {0, 0, 6}, {7, 6, 8}};
  const std::vector<int32_t> word = {1, 1, 0, 0, 0, 0};
  CHECK(reference_merge(rules, word) == std::vector<int32_t>{8, 6});
  CHECK(heap_merge(rules, word) == std::vector<int32_t>{8, 6});
}

TEST_CASE("bpe tokenizers: 200 KB of spaces and one 200 KB word tokenize as HF does") {
  // Expected: HF tokenizers 0.23.3, encode(text, add_special_tokens=False): the id count and the
  // FNV-1a hash of the ids (the helper above).
  const std::string spaces(200000, ' '), word = repeat("hedgehog", 25000),
                    mixed = repeat("the quick  brown fox 12345 ", 8000);
  struct Case {
    const char* folder;
    const std::string* text;
    size_t count;
    uint64_t hash;
  };
  const std::vector<Case> cases = {
      {"gpt2", &spaces, 200000, 0xb0217dd7efca0325ull},
      {"gpt2", &word, 75000, 0x524db478ba9cbd25ull},
      {"gpt2", &mixed, 56001, 0x63e3740fbfea0e2aull},
      {"bytebpe", &spaces, 25000, 0x5d37697cb97c4725ull},
      {"bytebpe", &word, 125000, 0x7f940d37afb4105ull},
      {"bytebpe", &mixed, 144001, 0x69ca0a548f867b8bull},
      {"llama", &spaces, 25000, 0x4f6167e884a8aeedull},
      {"llama", &word, 150001, 0x671ea6821ac8acdeull},
      {"llama", &mixed, 136000, 0x139e7b85dba7b99dull},
      {"llama_metaspace", &spaces, 25000, 0x4f5cafe884a0aa45ull},
      {"llama_metaspace", &word, 150001, 0x671ea6821ac8acdeull},
      {"llama_metaspace", &mixed, 136000, 0x139e7b85dba7b99dull},
      {"bert", &spaces, 0, 0xcbf29ce484222325ull},
      {"bert", &word, 1, 0xaf63bc4c8601b62cull},  // [UNK]: longer than max_input_chars_per_word
      {"bert", &mixed, 96000, 0x7fc90b4758f4ac25ull},
  };
  for (const Case& c : cases) {
    const auto tok = load_tokenizer(kDir + c.folder);
    const std::vector<int32_t> ids = tok->encode(*c.text, false);
    INFO(c.folder, ", text of ", c.text->size(), " bytes starting '", c.text->substr(0, 12), "'");
    CHECK(ids.size() == c.count);
    CHECK(fnv(ids) == c.hash);
  }
  // Llama's Prepend + Replace normalizer on spaces: "▁" x 200001 is 24999 "▁" x 8 tokens and one
  // of nine; decode gives the text back.
  const auto llama = load_tokenizer(kDir + "llama");
  const std::vector<int32_t> ids = llama->encode(spaces, false);
  REQUIRE(ids.size() == 25000);
  CHECK(llama->id_to_token(ids[0]) == repeat("\xE2\x96\x81", 8));
  CHECK(llama->id_to_token(ids.back()) == repeat("\xE2\x96\x81", 9));
  CHECK(llama->decode(ids) == spaces);
  CHECK(llama->decode(llama->encode(word, false)) == word);
}
