// Caching allocator (see cuda_allocator.h). No CUDA call here: the device's BlockSource is in
// cuda_block_source.cpp, so this bookkeeping builds and is tested without the CUDA toolkit.
#include "cuda/cuda_allocator.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/error.h"

namespace hh::cuda {

namespace {

using FreeLists = std::unordered_map<size_t, std::vector<void*>>;  // bucket size -> free blocks

// Pops a free block of `size` from `lists`, or returns null.
void* take(FreeLists& lists, size_t size) {
  auto it = lists.find(size);
  if (it == lists.end() || it->second.empty()) return nullptr;
  void* p = it->second.back();
  it->second.pop_back();
  return p;
}

}  // namespace

// Everything the deleters need, shared with them so that a tensor outliving its allocator (a
// unit test's, or one alive at exit) still finds valid bookkeeping.
struct CachingAllocator::State {
  // A capture's private pool: its free blocks, and the count of all it owns (free or live).
  struct Pool {
    StreamId stream = 0;
    FreeLists free;
    PoolStats stats;
  };

  int device = 0;
  BlockSource source{};
  mutable std::mutex mu;
  std::unordered_map<StreamId, FreeLists> cached;  // the general cache, per stream
  std::unordered_set<void*> live;                  // blocks held by tensors
  std::unordered_map<PoolId, Pool> pools;          // live capture pools
  std::unordered_map<StreamId, PoolId> open;       // captures in progress: stream -> its pool
  PoolId next_pool = 1;
  size_t current = 0, peak = 0, reserved = 0;
  // Bumped by release_all: a deleter whose block was handed out in an earlier epoch finds its
  // block already freed and does nothing.
  uint64_t epoch = 0;
  bool caching = true;  // false after release_all, or when the source says not to cache
  bool registered_at_exit = false;

  void free_lists_locked(FreeLists& lists) {
    for (auto& [size, blocks] : lists) {
      for (void* p : blocks) {
        source.free(device, p);  // cudaFree synchronizes the device, so no queued kernel still reads it
        reserved -= size;
      }
      blocks.clear();
    }
  }
  void free_cached_locked() {
    for (auto& [stream, lists] : cached) free_lists_locked(lists);
    cached.clear();
  }

  void release_all() {
    std::lock_guard<std::mutex> lock(mu);
    free_cached_locked();
    for (auto& [id, pool] : pools) free_lists_locked(pool.free);
    pools.clear();
    open.clear();
    for (void* p : live) source.free(device, p);
    live.clear();
    current = reserved = 0;
    caching = false;
    ++epoch;
  }

  // The deleter of a block handed out in `from_epoch` for `stream`, from `pool` (0: none).
  void give_back(void* p, size_t size, StreamId stream, PoolId pool, uint64_t from_epoch) {
    std::lock_guard<std::mutex> lock(mu);
    if (from_epoch != epoch) return;  // release_all freed it already
    live.erase(p);
    current -= size;
    if (pool != 0) {
      auto it = pools.find(pool);
      if (it != pools.end()) {  // the graph may replay: the block stays its pool's
        it->second.free[size].push_back(p);
        it->second.stats.in_use -= size;
        return;
      }
      // the pool was released: the block joins its stream's cache like any other
    }
    if (caching) {
      cached[stream][size].push_back(p);
    } else {
      source.free(device, p);
      reserved -= size;
    }
  }
};

// ---- the exit hook ----

namespace {

// Calls release_all on every registered allocator when destroyed. It is a function-local static
// first used after a successful cudaMalloc, so it is destroyed before the CUDA runtime tears down
// (static destruction runs in reverse order of construction, and the runtime started earlier).
class ExitRelease {
 public:
  void add(const std::weak_ptr<CachingAllocator::State>& s) {
    std::lock_guard<std::mutex> lock(mu_);
    states_.push_back(s);
  }
  ~ExitRelease() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& w : states_)
      if (auto s = w.lock()) s->release_all();
  }

 private:
  std::mutex mu_;
  std::vector<std::weak_ptr<CachingAllocator::State>> states_;
};

}  // namespace

void CachingAllocator::register_release_at_exit(const std::shared_ptr<State>& state) {
  static ExitRelease hook;
  hook.add(state);
}

CachingAllocator::CachingAllocator(int device, BlockSource source) : state_(std::make_shared<State>()) {
  state_->device = device;
  state_->source = source;
  state_->caching = source.cache;
}

CachingAllocator::~CachingAllocator() { release_all(); }

size_t CachingAllocator::bucket_size(size_t nbytes) {
  constexpr size_t kSmallStep = 512, kLarge = size_t(1) << 20;
  if (nbytes < kLarge) return std::max(kSmallStep, (nbytes + kSmallStep - 1) / kSmallStep * kSmallStep);
  size_t pow2 = kLarge;
  while (pow2 * 2 <= nbytes) pow2 *= 2;
  const size_t step = pow2 / 4;
  return (nbytes + step - 1) / step * step;
}

std::shared_ptr<void> CachingAllocator::allocate(size_t nbytes, StreamId stream) {
  State& s = *state_;
  void* p = nullptr;
  uint64_t epoch = 0;
  bool register_at_exit = false;
  size_t size = 0;
  PoolId pool_id = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    size = s.caching ? bucket_size(nbytes) : std::max<size_t>(nbytes, 1);
    State::Pool* pool = nullptr;
    if (auto open = s.open.find(stream); open != s.open.end()) {
      pool_id = open->second;
      pool = &s.pools.at(pool_id);
      p = take(pool->free, size);
    }
    const bool new_to_pool = pool && !p;  // from the stream's cache or the driver: becomes the pool's
    if (!p && s.caching) {
      if (auto lists = s.cached.find(stream); lists != s.cached.end()) p = take(lists->second, size);
    }
    if (!p) {
      std::string why;
      BlockSource::Status st = s.source.alloc(s.device, size, &p, &why);
      // Give the cache back to the driver and retry, unless a capture is open: cudaFree would
      // invalidate it.
      if (st == BlockSource::Status::out_of_memory && s.open.empty()) {
        s.free_cached_locked();
        st = s.source.alloc(s.device, size, &p, &why);
      }
      if (st != BlockSource::Status::ok)
        fail(str("cuda:", s.device, " allocate: cudaMalloc of ", size, " bytes failed (", why, "); in use by tensors ",
                 s.current, " bytes, reserved ", s.reserved, " bytes",
                 s.open.empty() ? "" : " (a CUDA graph capture is open, so the cache could not be given back)"));
      s.reserved += size;
      register_at_exit = s.source.release_at_exit && !s.registered_at_exit;
      s.registered_at_exit = s.registered_at_exit || register_at_exit;
    }
    if (new_to_pool) {
      ++pool->stats.blocks;
      pool->stats.reserved += size;
    }
    if (pool) pool->stats.in_use += size;
    s.live.insert(p);
    s.current += size;
    s.peak = std::max(s.peak, s.current);
    epoch = s.epoch;
  }
  // Outside the lock: the hook's constructor must not run under s.mu (its destructor takes it).
  if (register_at_exit) register_release_at_exit(state_);
  std::shared_ptr<State> keep = state_;
  return std::shared_ptr<void>(
      p, [keep, size, stream, pool_id, epoch](void* q) { keep->give_back(q, size, stream, pool_id, epoch); });
}

// ---- graph capture ----

PoolId CachingAllocator::begin_capture(StreamId stream, PoolId share) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  HH_CHECK(s.caching, "cuda:", s.device,
           ": CUDA graph capture needs the caching allocator (it is off: HH_CUDA_CACHE=0, or the process is exiting)");
  HH_CHECK(s.open.count(stream) == 0, "cuda:", s.device, ": a CUDA graph capture is already open on this stream");
  PoolId id = share;
  if (share != 0) {
    auto it = s.pools.find(share);
    HH_CHECK(it != s.pools.end(), "cuda:", s.device, ": capture pool ", share,
             " is not live (its graph was destroyed); capture into a new pool instead");
    HH_CHECK(it->second.stream == stream, "cuda:", s.device, ": capture pool ", share,
             " belongs to another stream; a pool is shared only by captures on its own stream");
  } else {
    id = s.next_pool++;
    s.pools[id].stream = stream;
  }
  s.open[stream] = id;
  return id;
}

void CachingAllocator::end_capture(StreamId stream) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  HH_CHECK(s.open.erase(stream) == 1, "cuda:", s.device, ": end_capture: no CUDA graph capture is open on this stream");
}

void CachingAllocator::release_pool(PoolId pool) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.pools.find(pool);
  if (it == s.pools.end()) return;
  State::Pool& p = it->second;
  if (auto open = s.open.find(p.stream); open != s.open.end() && open->second == pool) s.open.erase(open);
  FreeLists& cache = s.cached[p.stream];
  for (auto& [size, blocks] : p.free) {
    std::vector<void*>& into = cache[size];
    into.insert(into.end(), blocks.begin(), blocks.end());
  }
  s.pools.erase(it);
}

PoolStats CachingAllocator::pool_stats(PoolId pool) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->pools.find(pool);
  HH_CHECK(it != state_->pools.end(), "cuda:", state_->device, ": capture pool ", pool, " is not live");
  return it->second.stats;
}

bool CachingAllocator::capturing(StreamId stream) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->open.count(stream) != 0;
}

bool CachingAllocator::capturing() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return !state_->open.empty();
}

// ---- the cache ----

void CachingAllocator::retire_stream(StreamId from, StreamId to) {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->cached.find(from);
  if (it == state_->cached.end() || from == to) return;
  FreeLists& into = state_->cached[to];  // (may rehash: `it` is not used after this)
  for (auto& [size, blocks] : state_->cached[from]) {
    std::vector<void*>& dst = into[size];
    dst.insert(dst.end(), blocks.begin(), blocks.end());
  }
  state_->cached.erase(from);
}

size_t CachingAllocator::cached_bytes(StreamId stream) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  size_t n = 0;
  if (auto it = state_->cached.find(stream); it != state_->cached.end())
    for (const auto& [size, blocks] : it->second) n += size * blocks.size();
  return n;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(state_->mu);
  HH_CHECK(state_->open.empty(), "cuda:", state_->device,
           ": empty_cache during a CUDA graph capture (cudaFree would invalidate it); end the capture first");
  state_->free_cached_locked();
}

void CachingAllocator::release_all() { state_->release_all(); }

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  MemoryStats m;
  m.current = state_->current;
  m.peak = state_->peak;
  m.reserved = state_->reserved;
  return m;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->peak = state_->current;
}

}  // namespace hh::cuda
