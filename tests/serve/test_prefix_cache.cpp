// The prefix state cache (serve/prefix_cache.h): prompts sharing a system prefix of 2.5 chunks give
// bit for bit the tokens and logits they give without the cache (segments at the chunk's multiples
// either way), for a linear, a hybrid, a gated and a softmax tiny model; a hit resumes at the
// longest cached boundary (the prefilled-token count); LRU eviction by bytes; bad arguments.
#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "nn/gate.h"
#include "nn/models/hf_model.h"
#include "nn/models/prefill_segments.h"
#include "serve/prefix_cache.h"
#include "tests/nn/models/decode_state_util.h"
#include "tests/nn/models/decoder_test_util.h"
#include "tests/op_table.h"

using namespace hh;
using namespace hh::nn;
using hh::serve::PrefixCache;
using hh::serve::prefill_with_cache;
using hh::test::hf_fixture;
using hh::test::test_device;

namespace {

constexpr int64_t kChunk = 8;

struct CacheCase {
  const char* fixture;
  const char* mixer;
  Gate gate;
};

std::shared_ptr<CausalLM> load(const CacheCase& c) {
  HFModelOptions o;
  o.device = test_device();
  o.mixer = parse_mixer(c.mixer, "test");
  o.gate = c.gate;
  o.window = 4;  // hybrid: the ring wraps inside a chunk
  o.chunk = 4;   // the ops' own chunk, apart from the cache's
  o.seed = 5;
  return load_causal_lm(hf_fixture(c.fixture), o);
}

struct Decoded {
  std::vector<int64_t> tokens;
  std::vector<float> logits;  // every step's logits, for a bitwise comparison
  int64_t prefilled = 0;
};

// The prompt through prefill_with_cache (cache may be null), then 20 greedy tokens.
Decoded decode(CausalLM& lm, const std::vector<int64_t>& prompt, PrefixCache* cache) {
  NoGradGuard ng;
  Decoded d;
  DecodeState st = lm.start_decoding();
  Tensor logits = prefill_with_cache(lm, prompt, st, cache, kChunk, &d.prefilled);
  for (int i = 0; i < 20; ++i) {
    const std::vector<float> row = to_vector<float>(reshape(logits, {-1}).to(DType::f32));
    d.logits.insert(d.logits.end(), row.begin(), row.end());
    const int64_t next = to_vector<int64_t>(argmax(reshape(logits, {-1}), 0))[0];
    d.tokens.push_back(next);
    logits = lm.step(from_vector(std::vector<int64_t>{next}, {1, 1}, {DType::i64}).to(test_device()), st);
  }
  return d;
}

std::vector<int64_t> concat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A system prefix of 2.5 chunks (20 tokens) and three requests after it.
const std::vector<int64_t> kSystem = {5, 17, 3, 42, 8, 8, 61, 2, 30, 11, 90, 4, 4, 27, 33, 71, 12, 9, 50, 6};
const std::vector<std::vector<int64_t>> kSuffixes = {{7, 19, 23, 1, 88}, {64, 3, 3, 15, 40, 2, 2, 9, 31}, {13}};

}  // namespace

TEST_CASE("prefix cache: the same tokens and logits, bit for bit, with and without the cache") {
  const std::vector<CacheCase> cases = {{"llama-tiny", "hedgehog", Gate::none},
                                        {"llama-tiny", "hybrid-hedgehog", Gate::none},
                                        {"llama-tiny", "hedgehog", Gate::gla},
                                        {"mistral-tiny", "softmax", Gate::none},  // KV caches, sliding window 5
                                        {"llama-tiny", "softmax", Gate::none},
                                        {"llama-tiny", "hedgehog", Gate::delta}};
  for (const CacheCase& c : cases) {
    const std::string label = std::string(c.fixture) + " " + c.mixer + " gate " + name(c.gate);
    CAPTURE(label);
    auto lm = load(c);
    PrefixCache cache(int64_t{64} << 20, kChunk);
    for (size_t r = 0; r < kSuffixes.size(); ++r) {
      CAPTURE(r);
      const std::vector<int64_t> prompt = concat(kSystem, kSuffixes[r]);
      const Decoded plain = decode(*lm, prompt, nullptr);
      const Decoded cached = decode(*lm, prompt, &cache);
      CHECK(cached.tokens == plain.tokens);
      CHECK(cached.logits == plain.logits);  // exact float equality
      CHECK(plain.prefilled == static_cast<int64_t>(prompt.size()));
      // The first request fills the cache; the next ones resume at 16, the longest boundary of
      // the shared 20 tokens (their own tokens start at 20).
      CHECK(cached.prefilled == (r == 0 ? static_cast<int64_t>(prompt.size()) : static_cast<int64_t>(prompt.size()) - 16));
    }
    const auto s = cache.stats();
    CHECK(s.lookups == 3);
    CHECK(s.hits == 2);
    CHECK(s.reused_tokens == 32);
  }
}

TEST_CASE("prefix cache: a hit resumes at the longest cached boundary, leaving a token to prefill") {
  auto lm = load({"llama-tiny", "hybrid-hedgehog", Gate::none});
  PrefixCache cache(int64_t{64} << 20, kChunk);
  const std::vector<int64_t> first = concat(kSystem, kSuffixes[1]);  // 29 tokens: boundaries 8, 16, 24
  int64_t n = 0;
  DecodeState st = lm->start_decoding();
  prefill_with_cache(*lm, first, st, &cache, kChunk, &n);
  CHECK(n == 29);
  CHECK(cache.stats().entries == 3);
  // The same 24 tokens and more: resumes at 24.
  PrefixCache::Hit hit = cache.lookup(concat(first, {1, 2}));
  CHECK(hit.tokens == 24);
  CHECK(hit.state.pos == 24);
  // Exactly the first 24 tokens: 24 would leave nothing to prefill, so 16.
  const std::vector<int64_t> first24(first.begin(), first.begin() + 24);
  CHECK(cache.lookup(first24).tokens == 16);
  // The resumed state is a copy: decoding from it leaves the cached one as it was.
  {
    NoGradGuard ng;
    PrefixCache::Hit h = cache.lookup(first24);
    DecodeState want = lm->start_decoding();
    lm->prefill(from_vector(std::vector<int64_t>(first.begin(), first.begin() + 8), {1, 8}, {DType::i64}).to(test_device()), want);
    lm->prefill(from_vector(std::vector<int64_t>(first.begin() + 8, first.begin() + 16), {1, 8}, {DType::i64}).to(test_device()), want);
    CHECK(hh::test::decode_state_err(h.state, want) == 0.0);
    for (int i = 0; i < 6; ++i) lm->step(from_vector(std::vector<int64_t>{3}, {1, 1}, {DType::i64}).to(test_device()), h.state);
    CHECK(hh::test::decode_state_err(cache.lookup(first24).state, want) == 0.0);
  }
  // A prompt that differs inside the first chunk: no hit.
  std::vector<int64_t> other = first;
  other[3] += 1;
  CHECK(cache.lookup(other).tokens == 0);
  // Shorter than a chunk: nothing to resume.
  CHECK(cache.lookup({5, 17, 3}).tokens == 0);
}

TEST_CASE("prefix cache: least recently used entries go first, by bytes") {
  NoGradGuard ng;
  auto lm = load({"llama-tiny", "hedgehog", Gate::none});  // a linear state: the same bytes at every boundary
  auto state_after = [&](const std::vector<int64_t>& ids) {
    DecodeState st = lm->start_decoding();
    lm->prefill(from_vector(ids, {1, static_cast<int64_t>(ids.size())}, {DType::i64}).to(test_device()), st);
    return st;
  };
  const std::vector<int64_t> a(kSystem.begin(), kSystem.begin() + 8);
  std::vector<int64_t> b = a, c = a;
  b[0] = 1;
  c[0] = 2;
  const DecodeState sa = state_after(a), sb = state_after(b), sc = state_after(c);
  const int64_t entry = held_state_bytes(sa) + 8 * static_cast<int64_t>(sizeof(int64_t));
  REQUIRE(entry > 0);
  CHECK(held_state_bytes(sb) == held_state_bytes(sa));
  PrefixCache cache(entry * 5 / 2, kChunk);  // two entries fit, not three
  cache.insert(a, sa);
  cache.insert(b, sb);
  CHECK(cache.stats().entries == 2);
  CHECK(cache.stats().bytes == 2 * entry);
  CHECK(cache.lookup(concat(a, {9})).tokens == 8);  // a is now the most recently used
  cache.insert(c, sc);                              // evicts b
  const auto s = cache.stats();
  CHECK(s.entries == 2);
  CHECK(s.evictions == 1);
  CHECK(s.bytes <= cache.budget_bytes());
  CHECK(cache.lookup(concat(b, {9})).tokens == 0);
  CHECK(cache.lookup(concat(a, {9})).tokens == 8);
  CHECK(cache.lookup(concat(c, {9})).tokens == 8);
  // An entry larger than the whole budget is not kept (and evicts nothing).
  PrefixCache tiny(entry - 1, kChunk);
  tiny.insert(a, sa);
  CHECK(tiny.stats().entries == 0);
}

TEST_CASE("prefix cache: a softmax model's entries grow with the prefix") {
  NoGradGuard ng;
  auto lm = load({"llama-tiny", "softmax", Gate::none});
  PrefixCache cache(int64_t{64} << 20, kChunk);
  DecodeState st = lm->start_decoding();
  prefill_with_cache(*lm, concat(kSystem, kSuffixes[0]), st, &cache, kChunk);
  const int64_t b8 = held_state_bytes(cache.lookup(std::vector<int64_t>(kSystem.begin(), kSystem.begin() + 9)).state);
  const int64_t b16 = held_state_bytes(cache.lookup(std::vector<int64_t>(kSystem.begin(), kSystem.begin() + 17)).state);
  CHECK(b16 == 2 * b8);  // KV caches of 16 tokens against 8
}

TEST_CASE("prefix cache: bad arguments are errors naming them") {
  CHECK_THROWS_WITH_AS(PrefixCache(0, 8), doctest::Contains("byte budget"), Error);
  CHECK_THROWS_WITH_AS(PrefixCache(100, 0), doctest::Contains("chunk"), Error);
  PrefixCache cache(1 << 20, 8);
  DecodeState st;
  st.pos = 5;
  CHECK_THROWS_WITH_AS(cache.insert({1, 2, 3, 4, 5}, st), doctest::Contains("boundary"), Error);
  st.pos = 7;
  CHECK_THROWS_WITH_AS(cache.insert({1, 2, 3, 4, 5, 6, 7, 8}, st), doctest::Contains("position 7"), Error);
  auto lm = load({"llama-tiny", "hedgehog", Gate::none});
  DecodeState fresh = lm->start_decoding();
  CHECK_THROWS_WITH_AS(prefill_with_cache(*lm, {1, 2}, fresh, &cache, 4), doctest::Contains("chunk 4"), Error);
  CHECK_THROWS_WITH_AS(prefill_with_cache(*lm, {}, fresh, &cache, 8), doctest::Contains("empty"), Error);
}

TEST_CASE("prefix cache: lookups and inserts from several threads") {
  NoGradGuard ng;
  auto lm = load({"llama-tiny", "hedgehog", Gate::none});
  DecodeState st = lm->start_decoding();
  const std::vector<int64_t> a(kSystem.begin(), kSystem.begin() + 8);
  lm->prefill(from_vector(a, {1, 8}, {DType::i64}).to(test_device()), st);
  const int64_t entry = held_state_bytes(st) + 8 * static_cast<int64_t>(sizeof(int64_t));
  PrefixCache cache(entry * 3, kChunk);  // three of the eight prefixes fit: evictions all along
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        std::vector<int64_t> p = a;
        p[0] = (t + i) % 8;
        if (i % 2 == 0) cache.insert(p, st);
        const PrefixCache::Hit h = cache.lookup(concat(p, {1}));
        if (h.tokens > 0) CHECK(h.state.pos == 8);
      }
    });
  for (auto& th : threads) th.join();
  const auto s = cache.stats();
  CHECK(s.lookups == 800);
  CHECK(s.entries <= 3);
  CHECK(s.bytes == s.entries * entry);
  CHECK(s.inserts - s.evictions == s.entries);
}
