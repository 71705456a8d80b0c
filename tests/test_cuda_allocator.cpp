// The CUDA caching allocator's bookkeeping (cuda/cuda_allocator.h) on host memory: reuse per
// stream, graph-capture pools, release at exit, no double free. The bookkeeping makes no CUDA
// call, so these run in every build, with or without CUDA or a GPU. At the end, CUDA-graph
// capture and replay on a GPU (HH_DEVICE=cuda only; skipped otherwise).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/cuda_stream.h"
#include "cuda/cuda_allocator.h"
#include "tests/cuda_compare.h"
#include "tests/op_table.h"

namespace hh::test {
namespace {

// The host block source's record. Function pointers carry no state, so it is one object for the
// tests below, reset by each.
struct HostHeap {
  std::map<void*, size_t> held;  // allocated and not yet freed
  int allocs = 0, frees = 0, bad_frees = 0;
  size_t limit = SIZE_MAX, in_use = 0;  // above `limit` bytes, alloc reports out of memory
};
HostHeap& heap() {
  static HostHeap h;
  return h;
}

cuda::BlockSource::Status host_alloc(int /*device*/, size_t nbytes, void** p, std::string* why) {
  HostHeap& h = heap();
  if (h.in_use + nbytes > h.limit) {
    *why = "host test limit";
    return cuda::BlockSource::Status::out_of_memory;
  }
  *p = std::malloc(nbytes);
  h.held[*p] = nbytes;
  h.in_use += nbytes;
  ++h.allocs;
  return cuda::BlockSource::Status::ok;
}

void host_free(int /*device*/, void* p) {
  HostHeap& h = heap();
  auto it = h.held.find(p);
  if (it == h.held.end()) {  // a double free (or a foreign pointer): counted, not performed
    ++h.bad_frees;
    return;
  }
  h.in_use -= it->second;
  h.held.erase(it);
  std::free(p);
  ++h.frees;
}

cuda::BlockSource host_blocks(bool cache = true) {
  heap() = HostHeap{};
  return {host_alloc, host_free, false, cache};
}


constexpr cuda::StreamId kS1 = 0x1000, kS2 = 0x2000;  // two streams (opaque ids)

// Allocates n blocks of `bytes` on `stream` and returns them (held).
std::vector<std::shared_ptr<void>> hold(cuda::CachingAllocator& a, int n, size_t bytes, cuda::StreamId stream) {
  std::vector<std::shared_ptr<void>> v;
  for (int i = 0; i < n; ++i) v.push_back(a.allocate(bytes, stream));
  return v;
}

std::set<void*> addresses(const std::vector<std::shared_ptr<void>>& v) {
  std::set<void*> s;
  for (const auto& b : v) s.insert(b.get());
  return s;
}

}  // namespace

TEST_CASE("cuda allocator: a freed block is reused for the same bucket") {
  cuda::CachingAllocator a(0, host_blocks());
  void* first = nullptr;
  {
    std::shared_ptr<void> b = a.allocate(1000);
    first = b.get();
    CHECK(a.stats().current == 1024);
  }
  CHECK(a.stats().current == 0);
  CHECK(a.stats().reserved == 1024);
  std::shared_ptr<void> again = a.allocate(600);  // same 1024-byte bucket
  CHECK(again.get() == first);
  CHECK(heap().allocs == 1);
  std::shared_ptr<void> other = a.allocate(2000);
  CHECK(heap().allocs == 2);
  CHECK(cuda::CachingAllocator::bucket_size(1) == 512);
  CHECK(cuda::CachingAllocator::bucket_size((size_t(1) << 20) + 1) == (size_t(5) << 18));
}

TEST_CASE("cuda allocator: release_all frees cached and live blocks exactly once") {
  cuda::CachingAllocator a(0, host_blocks());
  std::shared_ptr<void> live = a.allocate(1000);
  a.allocate(5000).reset();  // cached
  REQUIRE(heap().held.size() == 2);
  a.release_all();
  CHECK(heap().held.empty());
  CHECK(heap().frees == 2);
  CHECK(a.stats().current == 0);
  CHECK(a.stats().reserved == 0);
  live.reset();  // its block is gone already: the deleter must not free it again
  CHECK(heap().frees == 2);
  CHECK(heap().bad_frees == 0);
  CHECK(a.stats().current == 0);

  // After release_all nothing is cached: a block has the exact size and is freed as soon as its
  // tensor dies.
  std::shared_ptr<void> late = a.allocate(1000);
  CHECK(heap().allocs == 3);
  CHECK(a.stats().reserved == 1000);
  late.reset();
  CHECK(heap().held.empty());
  CHECK(a.stats().reserved == 0);
  a.release_all();  // idempotent
  CHECK(heap().bad_frees == 0);
}

TEST_CASE("cuda allocator: a block outliving its allocator is freed once, with the allocator") {
  std::shared_ptr<void> survivor;
  {
    cuda::CachingAllocator a(0, host_blocks());
    survivor = a.allocate(100);
    a.allocate(100).reset();  // cached
  }
  CHECK(heap().held.empty());
  survivor.reset();  // the allocator is gone: its shared bookkeeping is still valid
  CHECK(heap().frees == 2);
  CHECK(heap().bad_frees == 0);
}

TEST_CASE("cuda allocator: out of memory gives the cache back and retries, then names the sizes") {
  cuda::CachingAllocator a(7, host_blocks());
  heap().limit = 4096;
  a.allocate(2048).reset();  // cached: 2048 of the 4096 bytes
  std::shared_ptr<void> big = a.allocate(3000);  // 3072 does not fit beside it: cache freed, retried
  CHECK(big != nullptr);
  CHECK(heap().frees == 1);
  CHECK(a.stats().reserved == 3072);
  check_throws([&] { a.allocate(3000); }, {"cuda:7", "3072 bytes", "host test limit", "in use by tensors 3072"});
  CHECK(a.stats().current == 3072);
}

TEST_CASE("cuda allocator: without the cache, blocks have the exact size and are freed at once") {
  cuda::CachingAllocator a(0, host_blocks(false));
  std::shared_ptr<void> b = a.allocate(1000);
  CHECK(heap().held.at(b.get()) == 1000);
  CHECK(a.stats().current == 1000);
  b.reset();
  CHECK(heap().held.empty());
  CHECK(a.stats().reserved == 0);
  a.allocate(0).reset();  // a zero-byte tensor still gets a distinct block
  CHECK(heap().allocs == 2);
  CHECK(heap().bad_frees == 0);
}

TEST_CASE("cuda allocator: a freed block is reused only by an allocation on its own stream") {
  cuda::CachingAllocator a(0, host_blocks());
  void* first = nullptr;
  {
    std::shared_ptr<void> b = a.allocate(1000, kS1);
    first = b.get();
  }
  CHECK(a.cached_bytes(kS1) == 1024);
  CHECK(a.cached_bytes(kS2) == 0);
  // Another stream's kernels may still read the block: stream 2 gets a new one.
  std::shared_ptr<void> other = a.allocate(1000, kS2);
  CHECK(other.get() != first);
  CHECK(heap().allocs == 2);
  // The same stream gets it back, with no new device allocation.
  std::shared_ptr<void> same = a.allocate(1000, kS1);
  CHECK(same.get() == first);
  CHECK(heap().allocs == 2);
  // Freed on another thread's watch, the block still goes back to the stream it was made for.
  other.reset();
  CHECK(a.cached_bytes(kS2) == 1024);
  CHECK(a.allocate(1000, kS1).get() != first);  // `same` holds it; stream 1 does not get stream 2's
  CHECK(heap().allocs == 3);
  CHECK(a.stats().reserved == 3 * 1024);
}

TEST_CASE("cuda allocator: a retired stream's cached blocks go to another stream") {
  cuda::CachingAllocator a(0, host_blocks());
  std::shared_ptr<void> late = a.allocate(1000, kS2);
  void* cached = a.allocate(1000, kS2).get();  // freed at once: stream 2's cache
  a.retire_stream(kS2, kS1);
  CHECK(a.cached_bytes(kS2) == 0);
  CHECK(a.cached_bytes(kS1) == 1024);
  CHECK(a.allocate(1000, kS1).get() == cached);
  late.reset();  // a tensor outliving its stream returns to that stream's cache
  CHECK(a.cached_bytes(kS2) == 1024);
  a.retire_stream(kS2, kS2);  // no-op
  CHECK(a.cached_bytes(kS2) == 1024);
  CHECK(heap().allocs == 2);
}

TEST_CASE("cuda allocator: out of memory frees every stream's cache and retries") {
  cuda::CachingAllocator a(0, host_blocks());
  heap().limit = 4096;
  a.allocate(1024, kS1).reset();
  a.allocate(1024, kS2).reset();
  std::shared_ptr<void> big = a.allocate(3000, kS1);  // 3072 + 2048 > 4096: both caches go
  CHECK(heap().frees == 2);
  CHECK(a.cached_bytes(kS1) == 0);
  CHECK(a.cached_bytes(kS2) == 0);
  CHECK(a.stats().reserved == 3072);
}

TEST_CASE("cuda allocator: a capture takes its blocks from a private pool, never another stream's cache") {
  cuda::CachingAllocator a(0, host_blocks());
  // Warm-up on the capturing stream leaves its blocks in that stream's cache; another stream
  // caches blocks of the same sizes.
  std::set<void*> warm = addresses(hold(a, 3, 1000, kS1));
  std::set<void*> foreign = addresses(hold(a, 3, 1000, kS2));
  REQUIRE(heap().allocs == 6);
  const cuda::PoolId pool = a.begin_capture(kS1);
  CHECK(pool != 0);
  CHECK(a.capturing(kS1));
  CHECK_FALSE(a.capturing(kS2));
  std::vector<std::shared_ptr<void>> captured = hold(a, 3, 1000, kS1);
  for (const auto& b : captured) {
    CHECK(warm.count(b.get()) == 1);  // the warm-up's blocks: no new device allocation
    CHECK(foreign.count(b.get()) == 0);
  }
  CHECK(heap().allocs == 6);
  // Past what warm-up left, a capture allocates new memory, never stream 2's cached blocks.
  std::shared_ptr<void> extra = a.allocate(1000, kS1);
  CHECK(foreign.count(extra.get()) == 0);
  CHECK(heap().allocs == 7);
  // A block freed during the capture goes back to the pool and is reused within it.
  void* freed = captured[0].get();
  captured[0].reset();
  CHECK(a.cached_bytes(kS1) == 0);
  CHECK(a.allocate(1000, kS1).get() == freed);  // (and freed again at once: back to the pool)
  // Other streams allocate as usual during the capture, and never get a pool block.
  std::vector<std::shared_ptr<void>> side = hold(a, 4, 1000, kS2);
  for (const auto& b : side) {
    CHECK(warm.count(b.get()) == 0);
    CHECK(b.get() != extra.get());
  }
  const cuda::PoolStats ps = a.pool_stats(pool);
  CHECK(ps.blocks == 4);
  CHECK(ps.reserved == 4 * 1024);
  CHECK(ps.in_use == 3 * 1024);  // captured[1], captured[2], extra
  a.end_capture(kS1);
  CHECK_FALSE(a.capturing());
  a.release_pool(pool);
}

TEST_CASE("cuda allocator: a finished capture's blocks keep their addresses until the pool is released") {
  cuda::CachingAllocator a(0, host_blocks());
  const cuda::PoolId pool = a.begin_capture(kS1);
  std::set<void*> graph;  // every address the graph's kernels use
  {
    std::vector<std::shared_ptr<void>> step = hold(a, 2, 5000, kS1);
    std::shared_ptr<void> out = a.allocate(100, kS1);
    graph = addresses(step);
    graph.insert(out.get());
    a.end_capture(kS1);
  }  // every tensor of the capture dies: its blocks stay the pool's (a replay writes them)
  REQUIRE(graph.size() == 3);
  const int allocs = heap().allocs;
  CHECK(a.pool_stats(pool).in_use == 0);
  CHECK(a.pool_stats(pool).reserved == 2 * 5120 + 512);
  CHECK(a.cached_bytes(kS1) == 0);
  // After the capture, no allocation on any stream gets an address of the graph.
  for (cuda::StreamId s : {kS1, kS2}) {
    std::vector<std::shared_ptr<void>> later = hold(a, 2, 5000, s);
    later.push_back(a.allocate(100, s));
    for (const auto& b : later) CHECK(graph.count(b.get()) == 0);
  }
  CHECK(heap().allocs == allocs + 6);
  // A second capture of the same step into the same pool finds the same addresses, with no new
  // device allocation.
  CHECK(a.begin_capture(kS1, pool) == pool);
  {
    std::vector<std::shared_ptr<void>> again = hold(a, 2, 5000, kS1);
    again.push_back(a.allocate(100, kS1));
    CHECK(addresses(again) == graph);
  }
  a.end_capture(kS1);
  CHECK(heap().allocs == allocs + 6);

  // Destroying the graph gives the blocks to the capturing stream's cache.
  a.release_pool(pool);
  CHECK(a.cached_bytes(kS1) == 2 * 5120 + 512 + 2 * 5120 + 512);  // the pool's and the later ones
  check_throws([&] { a.pool_stats(pool); }, {"capture pool", "not live"});
  std::vector<std::shared_ptr<void>> reused = hold(a, 4, 5000, kS1);
  reused.push_back(a.allocate(100, kS1));
  std::set<void*> got = addresses(reused);
  for (void* p : graph) CHECK(got.count(p) == 1);  // the graph's blocks are ordinary cache again
  CHECK(heap().allocs == allocs + 6);              // all five from the cache
  a.release_pool(pool);                // released already: ignored
  CHECK(heap().bad_frees == 0);
}

TEST_CASE("cuda allocator: a tensor outliving its capture pool goes to its stream's cache") {
  cuda::CachingAllocator a(0, host_blocks());
  const cuda::PoolId pool = a.begin_capture(kS1);
  std::shared_ptr<void> survivor = a.allocate(1000, kS1);
  a.end_capture(kS1);
  a.release_pool(pool);
  CHECK(a.cached_bytes(kS1) == 0);
  void* p = survivor.get();
  survivor.reset();
  CHECK(a.cached_bytes(kS1) == 1024);
  CHECK(a.allocate(1000, kS1).get() == p);
  CHECK(a.stats().current == 0);
  CHECK(a.stats().reserved == 1024);
  CHECK(heap().allocs == 1);
}

TEST_CASE("cuda allocator: capture misuse is refused with a clear error") {
  cuda::CachingAllocator a(3, host_blocks());
  const cuda::PoolId pool = a.begin_capture(kS1);
  check_throws([&] { a.begin_capture(kS1); }, {"cuda:3", "already open on this stream"});
  check_throws([&] { a.begin_capture(kS2, pool); }, {"capture pool", "another stream"});
  check_throws([&] { a.end_capture(kS2); }, {"end_capture", "no CUDA graph capture is open"});
  check_throws([&] { a.empty_cache(); }, {"empty_cache", "capture"});
  // Out of memory during a capture: the cache is not freed (cudaFree would break the capture).
  a.allocate(1000, kS2).reset();
  heap().limit = heap().in_use + 600;
  check_throws([&] { a.allocate(1000, kS1); }, {"cudaMalloc of 1024 bytes failed", "capture is open"});
  CHECK(heap().frees == 0);
  // release_pool on an open capture (a failed one) closes it.
  a.release_pool(pool);
  CHECK_FALSE(a.capturing());
  check_throws([&] { a.begin_capture(kS1, pool); }, {"not live"});
  a.empty_cache();
  CHECK(heap().frees == 1);

  cuda::CachingAllocator uncached(0, host_blocks(false));
  check_throws([&] { uncached.begin_capture(kS1); }, {"needs the caching allocator", "HH_CUDA_CACHE=0"});
}

TEST_CASE("cuda allocator: release_all frees capture pools and live pool blocks exactly once") {
  cuda::CachingAllocator a(0, host_blocks());
  a.begin_capture(kS1);
  std::shared_ptr<void> live = a.allocate(1000, kS1);
  a.allocate(2000, kS1).reset();  // in the pool, free
  a.allocate(3000, kS2).reset();  // stream 2's cache
  REQUIRE(heap().held.size() == 3);
  a.release_all();
  CHECK(heap().held.empty());
  CHECK(heap().frees == 3);
  CHECK_FALSE(a.capturing());
  live.reset();
  CHECK(heap().bad_frees == 0);
  CHECK(a.stats().current == 0);
  CHECK(a.stats().reserved == 0);
}

// ---- on a GPU: capture and replay through the allocator's pools ----

TEST_CASE("cuda graph: a captured step replays on new inputs written into its input tensor" *
          doctest::skip(!cuda_requested())) {
  const Device d = test_device();
  const Tensor w_cpu = input({16, 16}, -1, 1, DType::f32, 2);
  Tensor x = place(input({8, 16}, -1, 1, DType::f32, 1), d), w = place(w_cpu, d);
  auto step = [&] { return softmax(matmul(x, w), -1) + x; };
  step();  // warm-up: the cuBLAS handle and the cache
  Tensor y;
  std::shared_ptr<CudaGraphReplay> g = cuda_capture_graph(d.index, [&] { y = step(); });
  for (uint64_t seed : {3, 4, 5}) {
    const Tensor xn = input({8, 16}, -1, 1, DType::f32, seed);
    copy_(x, place(xn, d));  // new input, in the tensor the capture read
    const size_t reserved = cuda_memory_stats(d.index).reserved;
    g->replay();
    CHECK(cuda_memory_stats(d.index).reserved == reserved);  // a replay allocates nothing
    expect_close(y, softmax(matmul(xn, w_cpu), -1) + xn, 1e-5, 1e-6, "replay, input seed " + std::to_string(seed));
  }
  // Eager work after the capture gets none of the graph's memory: y survives it.
  Tensor eager = step() * 3.0;
  g->replay();
  expect_close(y, softmax(matmul(input({8, 16}, -1, 1, DType::f32, 5), w_cpu), -1) + input({8, 16}, -1, 1, DType::f32, 5),
               1e-5, 1e-6, "replay after eager work");
}

TEST_CASE("cuda graph: work that synchronizes during a capture fails clearly and leaves no capture open" *
          doctest::skip(!cuda_requested())) {
  const Device d = test_device();
  Tensor x = place(input({4, 4}, -1, 1, DType::f32, 1), d);
  (void)(x * x);  // warm-up
  check_throws([&] { cuda_capture_graph(d.index, [&] { (void)(x * x).to(Device::cpu()); }); }, {"CUDA error"});
  // The stream and the allocator work as before.
  expect_close(x * x, input({4, 4}, -1, 1, DType::f32, 1) * input({4, 4}, -1, 1, DType::f32, 1), 1e-6, 1e-7,
               "after a failed capture");
}

TEST_CASE("cuda graph: a random draw inside a capture is refused (every replay would repeat it)" *
          doctest::skip(!cuda_requested())) {
  const Device d = test_device();
  Tensor x = place(input({4, 4}, -1, 1, DType::f32, 1), d);
  Generator gen(7);
  (void)dropout(x, 0.5, true, gen);  // warm-up
  check_throws([&] { cuda_capture_graph(d.index, [&] { (void)dropout(x, 0.5, true, gen); }); },
               {"inside a CUDA graph capture", "repeat"});
  (void)dropout(x, 0.5, true, gen);  // eager draws still work
}

}  // namespace hh::test
