#include "serve/prefix_cache.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "nn/models/prefill_segments.h"

namespace hh::serve {

PrefixCache::PrefixCache(int64_t budget_bytes, int64_t chunk) : budget_(budget_bytes), chunk_(chunk) {
  HH_CHECK(budget_bytes > 0, "prefix cache: the byte budget must be positive, got ", budget_bytes);
  HH_CHECK(chunk > 0, "prefix cache: the chunk must be positive, got ", chunk);
}

uint64_t PrefixCache::hash_of(const std::vector<int64_t>& ids, size_t n) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the ids' bytes
  for (size_t i = 0; i < n; ++i) {
    auto x = static_cast<uint64_t>(ids[i]);
    for (int b = 0; b < 8; ++b, x >>= 8) h = (h ^ (x & 0xffu)) * 1099511628211ull;
  }
  return h;
}

PrefixCache::Lru::iterator PrefixCache::find_locked(const std::vector<int64_t>& ids, size_t n, uint64_t hash) {
  auto [lo, hi] = index_.equal_range(hash);
  for (auto it = lo; it != hi; ++it) {
    const std::vector<int64_t>& key = it->second->ids;  // the whole ids: a collision is not a hit
    if (key.size() == n && std::equal(key.begin(), key.end(), ids.begin())) return it->second;
  }
  return lru_.end();
}

void PrefixCache::erase_locked(Lru::iterator it) {
  auto [lo, hi] = index_.equal_range(it->hash);
  for (auto i = lo; i != hi; ++i)
    if (i->second == it) {
      index_.erase(i);
      break;
    }
  stats_.bytes -= it->bytes;
  --stats_.entries;
  lru_.erase(it);
}

PrefixCache::Hit PrefixCache::lookup(const std::vector<int64_t>& prompt) {
  std::shared_ptr<const nn::DecodeState> found;
  int64_t tokens = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.lookups;
    // Boundaries below the prompt's length, longest first: one token at least is left to prefill.
    const auto n_prompt = static_cast<int64_t>(prompt.size());
    for (int64_t n = (n_prompt - 1) / chunk_ * chunk_; n > 0; n -= chunk_) {
      auto it = find_locked(prompt, static_cast<size_t>(n), hash_of(prompt, static_cast<size_t>(n)));
      if (it == lru_.end()) continue;
      lru_.splice(lru_.begin(), lru_, it);  // most recently used
      found = it->state;
      tokens = n;
      ++stats_.hits;
      stats_.reused_tokens += n;
      break;
    }
  }
  Hit hit;
  if (found) {  // copied outside the lock; the shared pointer keeps an evicted entry alive meanwhile
    hit.tokens = tokens;
    hit.state = nn::clone_decode_state(*found);
  }
  return hit;
}

void PrefixCache::insert(const std::vector<int64_t>& prefix, const nn::DecodeState& state) {
  const auto n = static_cast<int64_t>(prefix.size());
  HH_CHECK(n > 0 && n % chunk_ == 0, "prefix cache: a prefix of ", n, " tokens is not at a boundary (a positive multiple of ",
           chunk_, ")");
  HH_CHECK(state.pos == n, "prefix cache: the state is at position ", state.pos, ", the prefix has ", n, " tokens");
  const uint64_t hash = hash_of(prefix, prefix.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = find_locked(prefix, prefix.size(), hash);
    if (it != lru_.end()) {  // the same prefix gives the same state: refresh it
      lru_.splice(lru_.begin(), lru_, it);
      return;
    }
  }
  const int64_t bytes = nn::held_state_bytes(state) + n * static_cast<int64_t>(sizeof(int64_t));
  if (bytes > budget_) return;  // would evict everything and still not fit
  auto copy = std::make_shared<const nn::DecodeState>(nn::clone_decode_state(state));  // outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  if (find_locked(prefix, prefix.size(), hash) != lru_.end()) return;  // another thread inserted it meanwhile
  while (!lru_.empty() && stats_.bytes + bytes > budget_) {
    erase_locked(std::prev(lru_.end()));
    ++stats_.evictions;
  }
  lru_.push_front(Entry{prefix, hash, std::move(copy), bytes});
  index_.emplace(hash, lru_.begin());
  stats_.bytes += bytes;
  ++stats_.entries;
  ++stats_.inserts;
}

PrefixCacheStats PrefixCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void PrefixCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  lru_.clear();
  index_.clear();
  stats_.bytes = 0;
  stats_.entries = 0;
}

Tensor prefill_with_cache(nn::CausalLM& lm, const std::vector<int64_t>& prompt, nn::DecodeState& state,
                          PrefixCache* cache, int64_t chunk, int64_t* prefilled) {
  HH_CHECK(!prompt.empty(), "prefix cache: the prompt is empty");
  HH_CHECK(state.pos == 0, "prefix cache: the prompt needs a fresh state, this one is at position ", state.pos);
  HH_CHECK(!cache || cache->chunk() == chunk, "prefix cache: chunk ", chunk, " is not the cache's ",
           cache ? cache->chunk() : 0);
  int64_t start = 0;
  if (cache) {
    PrefixCache::Hit hit = cache->lookup(prompt);
    if (hit.tokens > 0) {
      state = std::move(hit.state);
      start = hit.tokens;
    }
  }
  NoGradGuard ng;
  const auto L = static_cast<int64_t>(prompt.size());
  const std::vector<int64_t> rest(prompt.begin() + start, prompt.end());
  const Device dev = lm.options().device;
  const Tensor ids = from_vector(rest, {1, L - start}, {DType::i64}).to(dev);
  nn::BoundaryHook save;
  if (cache)
    save = [&](int64_t pos, const nn::DecodeState& st) {
      cache->insert(std::vector<int64_t>(prompt.begin(), prompt.begin() + pos), st);
    };
  Tensor logits = nn::prefill_segments(lm, ids, state, chunk, save);
  if (prefilled) *prefilled = L - start;
  return logits;
}

}  // namespace hh::serve
