// CPU memory, fill, strided copy/cast, and Philox random fills.
#include <cstdlib>
#include <cstring>

#include "core/cpu/cpu_allocator.h"
#include "core/cpu/cpu_backend.h"
#include "core/cpu/strided.h"
#include "core/memory.h"
#include "core/philox.h"

namespace hh {

std::shared_ptr<void> CpuBackend::allocate(size_t nbytes) {
  // 64-byte aligned (vector loads); large blocks come from and go back to the block cache.
  const size_t block = cpu_alloc::block_size(nbytes);
  void* p = cpu_alloc::allocate(nbytes);
  detail::cpu_memory_allocated(block);  // core/memory.h counters (current, peak)
  return std::shared_ptr<void>(p, [block](void* q) {
    cpu_alloc::release(q, block);
    detail::cpu_memory_freed(block);
  });
}

void CpuBackend::copy_from_host(void* dst, const void* src, size_t nbytes) { std::memcpy(dst, src, nbytes); }
void CpuBackend::copy_to_host(void* dst, const void* src, size_t nbytes) { std::memcpy(dst, src, nbytes); }

void CpuBackend::fill(const Tensor& out, double value) {
  dispatch_all(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v = from_double<T>(value);
    StridedLoop<1> loop({&out});
    int64_t outer = loop.outer();
#pragma omp parallel for if (out.numel() > kParallelGrain)
    for (int64_t o = 0; o < outer; ++o)
      loop.run(o, [&](auto p, auto s, int64_t n) {
        T* d = reinterpret_cast<T*>(p[0]);
        for (int64_t i = 0; i < n; ++i) d[i * s[0]] = v;
      });
  });
}

namespace {
template <typename D, typename S>
void copy_typed(const Tensor& dst, const Tensor& src) {
  StridedLoop<2> loop({&dst, &src});
  int64_t outer = loop.outer();
#pragma omp parallel for if (dst.numel() > kParallelGrain)
  for (int64_t o = 0; o < outer; ++o)
    loop.run(o, [&](auto p, auto s, int64_t n) {
      D* d = reinterpret_cast<D*>(p[0]);
      const S* x = reinterpret_cast<const S*>(p[1]);
      if constexpr (std::is_same_v<D, S>) {
        if (s[0] == 1 && s[1] == 1) {
          std::memcpy(d, x, static_cast<size_t>(n) * sizeof(D));
          return;
        }
        for (int64_t i = 0; i < n; ++i) d[i * s[0]] = x[i * s[1]];
      } else if constexpr (std::is_arithmetic_v<D> && std::is_arithmetic_v<S> && !std::is_same_v<D, bool>) {
        for (int64_t i = 0; i < n; ++i) d[i * s[0]] = static_cast<D>(x[i * s[1]]);
      } else {
        for (int64_t i = 0; i < n; ++i) d[i * s[0]] = from_double<D>(to_double<S>(x[i * s[1]]));
      }
    });
}
}  // namespace

void CpuBackend::copy(const Tensor& dst, const Tensor& src) {
  dispatch_all(dst.dtype(), [&](auto dtag) {
    dispatch_all(src.dtype(), [&](auto stag) {
      copy_typed<typename decltype(dtag)::type, typename decltype(stag)::type>(dst, src);
    });
  });
}

void CpuBackend::random(const Tensor& out, const RandomParams& p) {
  int64_t n = out.numel();
  const uint64_t seed = p.seed, offset = p.offset;
  switch (p.kind) {
    case RandomKind::uniform:
      if (out.dtype() == DType::f32) {
        float* d = out.data<float>();
        const float lo = static_cast<float>(p.a), span = static_cast<float>(p.b - p.a);
#pragma omp parallel for if (n > kParallelGrain)
        for (int64_t i = 0; i < n; ++i) d[i] = lo + span * philox_uniform_at(seed, offset, i);
      } else {
        HH_CHECK(out.dtype() == DType::f64, "random uniform: f32 or f64 output expected, got ", out.dtype());
        double* d = out.data<double>();
#pragma omp parallel for if (n > kParallelGrain)
        for (int64_t i = 0; i < n; ++i) d[i] = p.a + (p.b - p.a) * philox_uniform64_at(seed, offset, i);
      }
      break;
    case RandomKind::normal:
      dispatch_float(out.dtype(), "random normal", [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* d = out.data<T>();
#pragma omp parallel for if (n > kParallelGrain)
        for (int64_t i = 0; i < n; ++i) d[i] = static_cast<T>(p.a + p.b * philox_normal_at(seed, offset, i));
      });
      break;
    case RandomKind::randint: {
      const int64_t lo = static_cast<int64_t>(p.a);
      const uint64_t range = static_cast<uint64_t>(static_cast<int64_t>(p.b) - lo);
      auto draw = [&](int64_t i) {
        return lo + static_cast<int64_t>(static_cast<uint64_t>(philox_word_at(seed, offset, i)) % range);
      };
      if (out.dtype() == DType::i64) {
        int64_t* d = out.data<int64_t>();
        for (int64_t i = 0; i < n; ++i) d[i] = draw(i);
      } else {
        int32_t* d = out.data<int32_t>();
        for (int64_t i = 0; i < n; ++i) d[i] = static_cast<int32_t>(draw(i));
      }
      break;
    }
  }
}

}  // namespace hh
