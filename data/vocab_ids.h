// Token ids read from a tokenizer file are bounded by the number of tokens before a table of
// max_id + 1 entries is allocated: ids must be 0..N-1, so an id of 2e8 among a few thousand tokens
// (which took 6 GB before it was refused; 1e9: std::bad_alloc) names the first missing id instead.
#pragma once
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace hh::data {

// -1 when max_id < the number of (id) entries (the dense table is then no larger than the file's
// own entries), else the smallest id in [0, max_id] that no entry has, found without the table.
template <typename Entries, typename IdOf>
int64_t first_missing_id(const Entries& entries, int64_t max_id, IdOf id_of) {
  if (max_id < static_cast<int64_t>(entries.size())) return -1;
  std::vector<int64_t> ids;
  ids.reserve(entries.size());
  for (const auto& e : entries) ids.push_back(id_of(e));
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  int64_t want = 0;
  for (int64_t id : ids) {
    if (id != want) break;
    ++want;
  }
  return want;  // <= the number of distinct ids <= max_id
}

}  // namespace hh::data
