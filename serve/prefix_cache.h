// The prefix state cache (issue 33): a request whose prompt starts with tokens already prefilled
// (a shared system prompt) resumes from the decoding state saved at the longest chunk boundary of
// that prefix instead of recomputing it. Prompts are prefilled in segments ending at the multiples
// of the cache's chunk (nn::prefill_segments), with or without the cache, so a resumed prompt
// computes exactly the floats of a fresh one: the same tokens, bit for bit.
//
// Keyed by the token ids up to a boundary (a hash, then the whole ids compared, so a collision is
// never a hit); the value is a deep copy of the nn::DecodeState there. Its size is the bytes of
// its tensors plus the ids; the total stays within a byte budget by evicting the least recently
// used entries. Thread-safe: every method may be called from several threads. One cache serves one
// model (states of another model are not interchangeable).
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "nn/models/hf_model.h"

namespace hh::serve {

struct PrefixCacheStats {
  int64_t lookups = 0;
  int64_t hits = 0;             // lookups that found a cached boundary
  int64_t reused_tokens = 0;    // prompt tokens not prefilled thanks to hits
  int64_t inserts = 0;
  int64_t evictions = 0;        // entries dropped for the budget
  int64_t bytes = 0;            // held now
  int64_t entries = 0;          // held now
};

class PrefixCache {
 public:
  // budget_bytes > 0: the most the entries may hold together; chunk > 0: the boundary spacing in
  // tokens (the segments of every prefill through the cache). Errors name the bad argument.
  PrefixCache(int64_t budget_bytes, int64_t chunk = 256);

  int64_t chunk() const { return chunk_; }
  int64_t budget_bytes() const { return budget_; }

  struct Hit {
    int64_t tokens = 0;      // the cached prefix's length (a multiple of chunk()); 0 = no hit
    nn::DecodeState state;   // a deep copy of the state after those tokens (when tokens > 0)
  };
  // The longest cached boundary prefix of `prompt` that leaves at least one token to prefill (the
  // prompt's last logits come from a prefill); the entry becomes the most recently used.
  Hit lookup(const std::vector<int64_t>& prompt);

  // Saves a deep copy of `state`, the state after exactly `prefix` (state.pos == prefix.size(), a
  // multiple of chunk()). An entry already there is refreshed (most recently used); an entry larger
  // than the whole budget is not kept; older entries are evicted until the total fits.
  void insert(const std::vector<int64_t>& prefix, const nn::DecodeState& state);

  PrefixCacheStats stats() const;
  void clear();

 private:
  struct Entry {
    std::vector<int64_t> ids;
    uint64_t hash = 0;
    std::shared_ptr<const nn::DecodeState> state;  // shared so a lookup copies it outside the lock
    int64_t bytes = 0;
  };
  using Lru = std::list<Entry>;  // front = most recently used

  static uint64_t hash_of(const std::vector<int64_t>& ids, size_t n);
  // The entry for ids[0:n], or end(); the caller holds the lock.
  Lru::iterator find_locked(const std::vector<int64_t>& ids, size_t n, uint64_t hash);
  void erase_locked(Lru::iterator it);

  const int64_t budget_, chunk_;
  mutable std::mutex mu_;
  Lru lru_;
  std::unordered_multimap<uint64_t, Lru::iterator> index_;
  PrefixCacheStats stats_;
};

// Prefills `prompt` (batch 1) into `state` (fresh, from lm.start_decoding()) through `cache` (may
// be null: no cache, the same segments): resumes from the longest cached boundary, prefills the
// rest in chunk segments and saves the state at each boundary reached. Returns the last prompt
// position's logits (1,1,V); *prefilled (when given) gets the number of tokens actually run.
Tensor prefill_with_cache(nn::CausalLM& lm, const std::vector<int64_t>& prompt, nn::DecodeState& state,
                          PrefixCache* cache, int64_t chunk, int64_t* prefilled = nullptr);

}  // namespace hh::serve
