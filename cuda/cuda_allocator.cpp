// Caching allocator (see cuda_allocator.h).
#include "cuda/cuda_allocator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/error.h"

namespace hh::cuda {

// Everything the deleters need, shared with them so that a tensor outliving its allocator (a
// unit test's, or one alive at exit) still finds valid bookkeeping.
struct CachingAllocator::State {
  int device = 0;
  BlockSource source{};
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> cached;  // bucket size -> free blocks
  std::unordered_set<void*> live;                         // blocks held by tensors
  size_t current = 0, peak = 0, reserved = 0;
  // Bumped by release_all: a deleter whose block was handed out in an earlier epoch finds its
  // block already freed and does nothing.
  uint64_t epoch = 0;
  bool caching = true;  // false after release_all, or when the source says not to cache
  bool registered_at_exit = false;

  void free_cached_locked() {
    for (auto& [size, blocks] : cached) {
      for (void* p : blocks) {
        source.free(device, p);  // cudaFree synchronizes the device, so no queued kernel still reads it
        reserved -= size;
      }
      blocks.clear();
    }
  }

  void release_all() {
    std::lock_guard<std::mutex> lock(mu);
    free_cached_locked();
    for (void* p : live) source.free(device, p);
    live.clear();
    current = reserved = 0;
    caching = false;
    ++epoch;
  }

  // The deleter of a block handed out in `from_epoch`.
  void give_back(void* p, size_t size, uint64_t from_epoch) {
    std::lock_guard<std::mutex> lock(mu);
    if (from_epoch != epoch) return;  // release_all freed it already
    live.erase(p);
    current -= size;
    if (caching) {
      cached[size].push_back(p);
    } else {
      source.free(device, p);
      reserved -= size;
    }
  }
};

namespace {

// ---- the CUDA block source ----

// cudaFree during process shutdown, after the runtime or the context is gone, fails with one of
// these; the driver reclaims the memory with the context, so there is nothing to report.
bool is_shutdown_error(cudaError_t err) {
  return err == cudaErrorCudartUnloading || err == cudaErrorContextIsDestroyed || err == cudaErrorDeviceUninitialized;
}

BlockSource::Status cuda_alloc(int /*device*/, size_t nbytes, void** p, std::string* why) {
  // The caller (CudaBackend::allocate) has made the device current.
  const cudaError_t err = cudaMalloc(p, nbytes);
  if (err == cudaSuccess) return BlockSource::Status::ok;
  (void)cudaGetLastError();  // clear the error state before the caller retries
  *why = cudaGetErrorString(err);
  return err == cudaErrorMemoryAllocation ? BlockSource::Status::out_of_memory : BlockSource::Status::failed;
}

void cuda_free(int device, void* p) {
  // Deleters and the exit hook run with any device current: switch for the call (cudaFree takes
  // any device's pointer under unified addressing, but the switch keeps the call unambiguous).
  int prev = -1;
  const bool switched = cudaGetDevice(&prev) == cudaSuccess && prev != device && cudaSetDevice(device) == cudaSuccess;
  const cudaError_t err = cudaFree(p);
  if (switched) (void)cudaSetDevice(prev);
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();
  if (!is_shutdown_error(err))  // a deleter cannot throw: say it instead
    std::fprintf(stderr, "hedgehog: cuda:%d cudaFree(%p) failed: %s\n", device, p, cudaGetErrorString(err));
}

// ---- the exit hook ----

// Calls release_all on every registered allocator when destroyed. It is a function-local static
// first used after a successful cudaMalloc, so it is destroyed before the CUDA runtime tears down
// (static destruction runs in reverse order of construction, and the runtime started earlier).
class ExitRelease {
 public:
  void add(const std::weak_ptr<CachingAllocator::State>& s) {
    std::lock_guard<std::mutex> lock(mu_);
    states_.push_back(s);
  }
  ~ExitRelease();

 private:
  std::mutex mu_;
  std::vector<std::weak_ptr<CachingAllocator::State>> states_;
};

ExitRelease& exit_release() {
  static ExitRelease hook;
  return hook;
}

ExitRelease::~ExitRelease() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& w : states_)
    if (auto s = w.lock()) s->release_all();
}

}  // namespace

BlockSource cuda_blocks() {
  const char* env = std::getenv("HH_CUDA_CACHE");
  const std::string v = env ? env : "1";
  HH_CHECK(v == "0" || v == "1", "HH_CUDA_CACHE must be 0 (no caching allocator) or 1 (the default), got '", v, "'");
  return {cuda_alloc, cuda_free, true, v == "1"};
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

std::shared_ptr<void> CachingAllocator::allocate(size_t nbytes) {
  State& s = *state_;
  void* p = nullptr;
  uint64_t epoch = 0;
  bool register_at_exit = false;
  size_t size = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    size = s.caching ? bucket_size(nbytes) : std::max<size_t>(nbytes, 1);
    auto it = s.cached.find(size);
    if (it != s.cached.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
    } else {
      std::string why;
      BlockSource::Status st = s.source.alloc(s.device, size, &p, &why);
      if (st == BlockSource::Status::out_of_memory) {  // give the cache back to the driver and retry
        s.free_cached_locked();
        st = s.source.alloc(s.device, size, &p, &why);
      }
      if (st != BlockSource::Status::ok)
        fail(str("cuda:", s.device, " allocate: cudaMalloc of ", size, " bytes failed (", why, "); in use by tensors ",
                 s.current, " bytes, reserved ", s.reserved, " bytes"));
      s.reserved += size;
      register_at_exit = s.source.release_at_exit && !s.registered_at_exit;
      s.registered_at_exit = s.registered_at_exit || register_at_exit;
    }
    s.live.insert(p);
    s.current += size;
    s.peak = std::max(s.peak, s.current);
    epoch = s.epoch;
  }
  // Outside the lock: the hook's constructor must not run under s.mu (its destructor takes it).
  if (register_at_exit) exit_release().add(state_);
  std::shared_ptr<State> keep = state_;
  return std::shared_ptr<void>(p, [keep, size, epoch](void* q) { keep->give_back(q, size, epoch); });
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(state_->mu);
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
