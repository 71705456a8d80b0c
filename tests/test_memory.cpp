// Memory accounting (core/memory.h): the CPU counters follow CpuBackend::allocate's rounded block
// sizes, drop when storage is freed, views allocate nothing, and reset_peak_memory works.
#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "autograd/ops.h"
#include "core/backend.h"
#include "core/cpu/cpu_allocator.h"
#include "core/memory.h"
#include "core/tensor.h"

using namespace hh;

namespace {
// CpuBackend::allocate rounds every block up to a multiple of 64 bytes (at least 64).
size_t rounded(size_t nbytes) { return nbytes == 0 ? 64 : (nbytes + 63) / 64 * 64; }
}  // namespace

TEST_CASE("memory: cpu allocation raises current and peak by the rounded size") {
  const Device cpu = Device::cpu();
  reset_peak_memory(cpu);
  const MemoryStats s0 = memory_stats(cpu);
  CHECK(s0.peak == s0.current);
  CHECK(s0.reserved >= s0.current);
  {
    Tensor a = empty({1000}, {DType::f32});  // 4000 bytes -> 4032
    const MemoryStats s1 = memory_stats(cpu);
    CHECK(s1.current == s0.current + rounded(4000));
    CHECK(s1.peak == s1.current);
    {
      Tensor b = empty({3}, {DType::u8});  // 3 bytes -> one 64-byte block
      CHECK(memory_stats(cpu).current == s1.current + 64);
      Tensor v = a.slice(0, 10, 500);  // a view shares storage: nothing new
      CHECK(memory_stats(cpu).current == s1.current + 64);
    }
    CHECK(memory_stats(cpu).current == s1.current);
    CHECK(memory_stats(cpu).peak == s1.current + 64);
  }
  const MemoryStats s2 = memory_stats(cpu);
  CHECK(s2.current == s0.current);
  CHECK(s2.peak == s0.current + rounded(4000) + 64);

  reset_peak_memory(cpu);
  CHECK(memory_stats(cpu).peak == s0.current);
}

TEST_CASE("memory: op results are counted and freed, peak records the high-water mark") {
  const Device cpu = Device::cpu();
  const size_t base = memory_stats(cpu).current;
  Tensor x = ones({256, 256}, {DType::f64});  // 512 KiB
  const size_t xb = rounded(256 * 256 * 8);
  CHECK(memory_stats(cpu).current == base + xb);
  reset_peak_memory(cpu);
  {
    Tensor y = add(x, 1.0);  // one new 512 KiB result (at least)
    CHECK(memory_stats(cpu).current >= base + 2 * xb);
  }
  CHECK(memory_stats(cpu).current == base + xb);
  CHECK(memory_stats(cpu).peak >= base + 2 * xb);
}

TEST_CASE("memory: counters stay exact under concurrent allocation") {
  const Device cpu = Device::cpu();
  const size_t base = memory_stats(cpu).current;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([] {
      for (int i = 0; i < 200; ++i) {
        Tensor a = empty({17 + i}, {DType::f32});
      }
    });
  for (auto& th : threads) th.join();
  CHECK(memory_stats(cpu).current == base);
}

TEST_CASE("memory: large cpu blocks are cached by size class and reused") {
  const Device cpu = Device::cpu();
  // Size classes: 64-byte multiples below 1 MiB, then 8 per octave.
  CHECK(cpu_alloc::block_size(0) == 64);
  CHECK(cpu_alloc::block_size(65) == 128);
  CHECK(cpu_alloc::block_size((1 << 20) - 64) == (1 << 20) - 64);
  CHECK(cpu_alloc::block_size(1 << 20) == (1 << 20));
  CHECK(cpu_alloc::block_size((1 << 20) + 1) == (1 << 20) + (1 << 17));
  CHECK(cpu_alloc::block_size(size_t{33} << 20) == size_t{36} << 20);  // 33 MiB -> 32 + 4 MiB
  for (size_t n : {size_t{1} << 20, (size_t{1} << 20) + 12345, size_t{5} << 21, size_t{100} << 20}) {
    const size_t b = cpu_alloc::block_size(n);
    CHECK(b >= n);
    CHECK(b <= n + n / 8 + 64);
  }

  const size_t saved_limit = cpu_alloc::cache_limit();  // 0 in sanitizer builds
  cpu_alloc::set_cache_limit(size_t{1} << 30);
  cpu_alloc::empty_cache();
  CHECK(cpu_alloc::cached_bytes() == 0);
  const size_t base = memory_stats(cpu).current;
  const void* first = nullptr;
  {
    Tensor a = empty({3 << 18}, {DType::f32});  // 3 MiB: cached when freed
    first = a.raw_data();
    CHECK(memory_stats(cpu).current == base + (size_t{3} << 20));
  }
  CHECK(memory_stats(cpu).current == base);             // in use: nothing
  CHECK(cpu_alloc::cached_bytes() == (size_t{3} << 20));  // held for reuse
  CHECK(memory_stats(cpu).reserved >= base + (size_t{3} << 20));
  {
    Tensor b = empty({(3 << 18) - 100}, {DType::f32});  // same size class: the cached block
    CHECK(b.raw_data() == first);
    CHECK(cpu_alloc::cached_bytes() == 0);
    b.data<float>()[b.numel() - 1] = 2.0f;  // the reused block is writable end to end
    CHECK(b.data<float>()[b.numel() - 1] == 2.0f);
    Tensor c = empty({4 << 18}, {DType::f32});  // another class: a new block
    CHECK(c.raw_data() != first);
  }
  CHECK(cpu_alloc::cached_bytes() == (size_t{7} << 20));
  CHECK(cpu_alloc::empty_cache() == (size_t{7} << 20));
  CHECK(cpu_alloc::cached_bytes() == 0);

  // Over the limit, freed blocks go straight back to the system.
  cpu_alloc::set_cache_limit(size_t{2} << 20);
  { Tensor d = empty({3 << 18}, {DType::f32}); }
  CHECK(cpu_alloc::cached_bytes() == 0);
  cpu_alloc::set_cache_limit(saved_limit);
}

#if !defined(HH_WITH_CUDA)
TEST_CASE("memory: cuda stats fail clearly in a CPU-only build") {
  CHECK_THROWS_WITH_AS(memory_stats(Device::cuda(0)), doctest::Contains("without CUDA"), Error);
  CHECK_THROWS_WITH_AS(reset_peak_memory(Device::cuda(0)), doctest::Contains("without CUDA"), Error);
}
#endif
