// CUDA backend tests: every kernel family against the CPU backend, called through the Backend
// interface, at sizes that are not multiples of the block/tile sizes (1, 33, 1000, 4097 ...);
// Philox streams equal to the CPU's; the caching allocator's statistics. They run when
// HH_DEVICE=cuda and are reported as skipped otherwise. The availability test runs everywhere.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/backend.h"
#include "tests/op_table.h"

#if defined(HH_WITH_CUDA)
#include "core/cuda_config.h"
#include "core/cuda_memory.h"
#endif

namespace hh::test {
namespace {

const bool kSkipCuda = !cuda_requested();

Backend& cpu() { return backend_for(Device::cpu()); }
Backend& gpu() { return backend_for(test_device()); }
Tensor on_gpu(const Tensor& t) { return t.to(test_device()).detach(); }
Tensor like_on(const Tensor& t, Device d) { return empty(t.shape(), {t.dtype(), d}); }

// Uniform floats or integers in [lo, hi) on the CPU, in dtype t.
Tensor input(const Shape& s, double lo, double hi, DType t, uint64_t seed) {
  Generator g(seed);
  if (is_floating(t)) return uniform(s, lo, hi, g, {DType::f64}).to(t);
  return randint(static_cast<int64_t>(lo), static_cast<int64_t>(hi), s, g, {DType::i64}).to(t);
}

// Elementwise |got - want| <= atol + rtol |want|, NaN only where the CPU has NaN, same infinities.
void expect_close(const Tensor& got, const Tensor& want, double rtol, double atol, const std::string& what) {
  REQUIRE_MESSAGE(got.shape() == want.shape(), what, ": shape ", shape_str(got.shape()), " vs ",
                  shape_str(want.shape()));
  std::vector<double> g = to_vector<double>(got), w = to_vector<double>(want);
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok;
    if (std::isnan(w[i]) || std::isnan(g[i]))
      ok = std::isnan(w[i]) && std::isnan(g[i]);
    else if (std::isinf(w[i]) || std::isinf(g[i]))
      ok = g[i] == w[i];
    else
      ok = std::fabs(g[i] - w[i]) <= atol + rtol * std::fabs(w[i]);
    if (!ok && bad++ == 0) first = static_cast<int64_t>(i);
  }
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", g.size(), " elements differ; first at ", first, ": cuda ",
                first >= 0 ? g[static_cast<size_t>(first)] : 0.0, " cpu ",
                first >= 0 ? w[static_cast<size_t>(first)] : 0.0);
}
void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  expect_close(got, want, 0.0, 0.0, what);
}

// Runs f(backend, device) on the CPU and on the GPU; f returns the tensors to compare.
template <typename F>
void both(F&& f, double rtol, double atol, const std::string& what) {
  std::vector<Tensor> want = f(cpu(), Device::cpu());
  std::vector<Tensor> got = f(gpu(), test_device());
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CHECK(got[i].device() == test_device());
    expect_close(got[i], want[i], rtol, atol, what + " output " + std::to_string(i));
  }
}

// The message of the hh::Error that f throws ("" when it does not throw).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Tensor place(const Tensor& t, Device d) { return d.is_cpu() ? t : on_gpu(t); }

}  // namespace

TEST_CASE("cuda: availability queries never throw") {
  bool avail = false;
  int count = -1;
  CHECK_NOTHROW(avail = cuda_available());
  CHECK_NOTHROW(count = cuda_device_count());
  CHECK(count >= 0);
  CHECK(avail == (count > 0));
  if (count == 0) {
    std::string msg = error_of([] { cuda_backend(0); });
    CHECK(msg.find("cuda:0") != std::string::npos);
  } else {
    std::string msg = error_of([&] { cuda_backend(count + 3); });
    CHECK(msg.find("no such device") != std::string::npos);
  }
}

TEST_CASE("cuda: Philox streams equal the CPU's" * doctest::skip(kSkipCuda)) {
  for (int64_t n : {1, 3, 33, 1000, 4097}) {
    for (uint64_t offset : {0ull, 1ull, 7ull, 1000003ull}) {
      const std::string at = "n=" + std::to_string(n) + " offset=" + std::to_string(offset);
      auto draw = [&](RandomParams p, DType t) {
        p.seed = 0x5eed1234abcdull;
        p.offset = offset;
        return [p, t, n](Backend& b, Device d) {
          Tensor out = empty({n}, {t, d});
          b.random(out, p);
          return std::vector<Tensor>{out};
        };
      };
      both(draw({RandomKind::uniform, 0.0, 1.0}, DType::f32), 0, 0, "rand f32 " + at);
      both(draw({RandomKind::uniform, 0.0, 1.0}, DType::f64), 0, 0, "rand f64 " + at);
      // lo + span * u may or may not be fused on the CPU (build flags): one rounding apart.
      both(draw({RandomKind::uniform, -2.0, 3.0}, DType::f32), 2e-7, 1e-6, "uniform f32 " + at);
      both(draw({RandomKind::uniform, -2.0, 3.0}, DType::f64), 1e-15, 1e-15, "uniform f64 " + at);
      // Box-Muller's log/cos come from different libms (ulp-level differences in f64).
      both(draw({RandomKind::normal, 0.0, 1.0}, DType::f32), 1e-6, 1e-6, "randn f32 " + at);
      both(draw({RandomKind::normal, 0.5, 2.0}, DType::f64), 1e-12, 1e-12, "normal f64 " + at);
      both(draw({RandomKind::randint, -5.0, 17.0}, DType::i64), 0, 0, "randint i64 " + at);
      both(draw({RandomKind::randint, 0.0, 1000.0}, DType::i32), 0, 0, "randint i32 " + at);
    }
  }
  // Through the public API: same generator state, same numbers, generators advance alike.
  Generator gc(77, 5), gd(77, 5);
  expect_equal(rand({33, 31}, gd, {DType::f32, test_device()}), rand({33, 31}, gc, {DType::f32}), "rand()");
  expect_close(randn({1000}, gd, {DType::f32, test_device()}), randn({1000}, gc, {DType::f32}), 1e-6, 1e-6, "randn()");
  expect_equal(randint(3, 9, {4097}, gd, {DType::i64, test_device()}), randint(3, 9, {4097}, gc), "randint()");
  expect_equal(bernoulli({1000}, 0.3, gd, {DType::f32, test_device()}), bernoulli({1000}, 0.3, gc), "bernoulli()");
  CHECK(gc.offset() == gd.offset());
}

#if defined(HH_WITH_CUDA)
TEST_CASE("cuda: caching allocator statistics" * doctest::skip(kSkipCuda)) {
  const int dev = test_device().index;
  gpu().synchronize();
  const MemoryStats s0 = cuda_memory_stats(dev);
  CHECK(s0.peak >= s0.current);
  CHECK(s0.reserved >= s0.current);
  {
    Tensor a = empty({1 << 18}, {DType::f32, test_device()});  // 1 MiB
    const MemoryStats s1 = cuda_memory_stats(dev);
    CHECK(s1.current >= s0.current + (size_t(1) << 20));
    CHECK(s1.peak >= s1.current);
    {
      Tensor b = empty({1}, {DType::u8, test_device()});  // one byte takes one 512-byte bucket
      CHECK(cuda_memory_stats(dev).current == s1.current + 512);
    }
    CHECK(cuda_memory_stats(dev).current == s1.current);
  }
  const MemoryStats s2 = cuda_memory_stats(dev);
  CHECK(s2.current == s0.current);
  CHECK(s2.peak >= s0.current + (size_t(1) << 20));
  {
    Tensor again = empty({1 << 18}, {DType::f32, test_device()});  // served from the cache
    CHECK(cuda_memory_stats(dev).reserved == s2.reserved);
  }
  cuda_reset_peak(dev);
  CHECK(cuda_memory_stats(dev).peak == cuda_memory_stats(dev).current);
  cuda_empty_cache(dev);
  const MemoryStats s3 = cuda_memory_stats(dev);
  CHECK(s3.reserved == s3.current);
  CHECK_FALSE(allow_tf32());
}
#endif

TEST_CASE("cuda: fill, copy and casts between every dtype pair" * doctest::skip(kSkipCuda)) {
  const std::vector<DType> all = {DType::f32, DType::f64, DType::bf16, DType::f16,
                                  DType::i32, DType::i64, DType::u8,   DType::boolean};
  for (DType from : all) {
    // Values every dtype holds (0..100, fractions for floats): negative floats to u8 would be UB.
    Tensor src = input({33, 65}, 0, 100, from, 1);
    if (from == DType::boolean) src = input({33, 65}, 0, 2, DType::i64, 2).to(DType::boolean);
    for (DType to : all) {
      const std::string what = std::string("copy ") + dtype_name(from) + " -> " + dtype_name(to);
      both(
          [&](Backend& b, Device d) {
            Tensor s = place(src, d);
            Tensor contiguous = empty({33, 65}, {to, d});
            b.copy(contiguous, s);
            // Transposed source into a strided destination (every other column of a wider buffer).
            Tensor buf = zeros({65, 66}, {to, d});
            Tensor dst = buf.as_strided({65, 33}, {66, 2}, 0);
            b.copy(dst, s.as_strided({65, 33}, {1, 65}, 0));
            return std::vector<Tensor>{contiguous, buf};
          },
          0, 0, what);
    }
    both(
        [&](Backend& b, Device d) {
          Tensor t = zeros({4097}, {from, d});
          b.fill(t.as_strided({1365}, {3}, 1), 2.5);  // strided fill
          Tensor u = empty({1}, {from, d});
          b.fill(u, -1.0);
          return std::vector<Tensor>{t, u};
        },
        0, 0, std::string("fill ") + dtype_name(from));
  }
}

TEST_CASE("cuda: unary forward and backward for every op" * doctest::skip(kSkipCuda)) {
  struct Case {
    UnaryOp op;
    UnaryParams p;
    bool positive;  // domain (0.1, 2) instead of (-2, 2)
  };
  const std::vector<Case> cases = {
      {UnaryOp::neg, {}, false},
      {UnaryOp::abs, {}, false},
      {UnaryOp::exp, {}, false},
      {UnaryOp::log, {}, true},
      {UnaryOp::log1p, {}, true},
      {UnaryOp::sqrt, {}, true},
      {UnaryOp::rsqrt, {}, true},
      {UnaryOp::square, {}, false},
      {UnaryOp::sin, {}, false},
      {UnaryOp::cos, {}, false},
      {UnaryOp::tanh, {}, false},
      {UnaryOp::sigmoid, {}, false},
      {UnaryOp::relu, {}, false},
      {UnaryOp::elu, {1.5, 0}, false},
      {UnaryOp::gelu_erf, {}, false},
      {UnaryOp::gelu_tanh, {}, false},
      {UnaryOp::silu, {}, false},
      {UnaryOp::softplus, {2.0, 3.0}, false},
      {UnaryOp::clamp, {-0.5, 0.7}, false},
      {UnaryOp::pow_scalar, {2.5, 0}, true},
      {UnaryOp::add_scalar, {0.25, 0}, false},
      {UnaryOp::mul_scalar, {-3.0, 0}, false},
      {UnaryOp::rdiv_scalar, {2.0, 0}, true},
      {UnaryOp::sign, {}, false},
  };
  for (const Case& c : cases) {
    for (DType t : {DType::f32, DType::f64}) {
      for (int64_t n : {1, 33, 4097}) {
        const double rtol = t == DType::f32 ? 2e-6 : 1e-13;
        const std::string what =
            "unary op " + std::to_string(static_cast<int>(c.op)) + " " + dtype_name(t) + " n=" + std::to_string(n);
        Tensor x = input({n}, c.positive ? 0.1 : -2.0, 2.0, t, 3 + static_cast<uint64_t>(n));
        Tensor gy = input({n}, -1.0, 1.0, t, 4);
        both(
            [&](Backend& b, Device d) {
              Tensor xd = place(x, d), y = like_on(x, d), gx = like_on(x, d);
              b.unary(c.op, xd, y, c.p);
              b.unary_backward(c.op, xd, y, place(gy, d), gx, c.p);
              return std::vector<Tensor>{y, gx};
            },
            rtol, rtol, what);
      }
    }
  }
}

TEST_CASE("cuda: binary ops with broadcasting and where" * doctest::skip(kSkipCuda)) {
  const std::vector<BinaryOp> ops = {BinaryOp::add,     BinaryOp::sub,     BinaryOp::mul, BinaryOp::div, BinaryOp::pow,
                                     BinaryOp::maximum, BinaryOp::minimum, BinaryOp::eq,  BinaryOp::ne,  BinaryOp::lt,
                                     BinaryOp::le,      BinaryOp::gt,      BinaryOp::ge};
  const Shape out_shape = {33, 7, 5};
  for (DType t : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    const bool fp = is_floating(t);
    Tensor a = input({33, 1, 5}, fp ? 0.1 : -4, fp ? 3.0 : 5, t, 5);
    Tensor b = input({1, 7, 5}, fp ? -2.0 : -3, fp ? 2.0 : 4, t, 6);
    Tensor big = input({5, 7, 33}, fp ? 0.1 : -4, fp ? 3.0 : 5, t, 7);
    Tensor s = input({1}, 1, 3, t, 8);
    for (BinaryOp op : ops) {
      const std::string what = "binary op " + std::to_string(static_cast<int>(op)) + " " + dtype_name(t);
      const DType out_t = is_comparison(op) ? DType::boolean : t;
      both(
          [&](Backend& be, Device d) {
            Tensor ad = place(a, d), bd = place(b, d), bigd = place(big, d), sd = place(s, d);
            // broadcast x broadcast
            Tensor o1 = empty(out_shape, {out_t, d});
            be.binary(op, ad.as_strided(out_shape, {5, 0, 1}, 0), bd.as_strided(out_shape, {0, 5, 1}, 0), o1);
            // transposed x contiguous-scalar
            Tensor o2 = empty(out_shape, {out_t, d});
            be.binary(op, bigd.as_strided(out_shape, {1, 33, 231}, 0), sd.as_strided(out_shape, {0, 0, 0}, 0), o2);
            // scalar x contiguous, and contiguous x contiguous
            Tensor o3 = empty({4097}, {out_t, d}), o4 = empty({1155}, {out_t, d});
            Tensor long_in = place(input({4097}, fp ? 0.5 : 1, 3, t, 9), d);
            be.binary(op, sd.as_strided({4097}, {0}, 0), long_in, o3);
            Tensor flat = bigd.as_strided({1155}, {1}, 0);
            be.binary(op, flat, flat, o4);
            return std::vector<Tensor>{o1, o2, o3, o4};
          },
          fp ? 1e-6 : 0, fp ? 1e-6 : 0, what);
    }
  }
  for (DType t : {DType::f32, DType::f16, DType::i64, DType::boolean}) {
    Tensor cond = input({33, 1}, 0, 2, DType::i64, 10).to(DType::boolean);
    Tensor a = input({33, 65}, -5, 5, DType::f64, 11).to(t), b = input({65}, -5, 5, DType::f64, 12).to(t);
    both(
        [&](Backend& be, Device d) {
          Tensor out = empty({33, 65}, {t, d});
          be.where(place(cond, d).as_strided({33, 65}, {1, 0}, 0), place(a, d),
                   place(b, d).as_strided({33, 65}, {0, 1}, 0), out);
          return std::vector<Tensor>{out};
        },
        0, 0, std::string("where ") + dtype_name(t));
  }
}

TEST_CASE("cuda: reductions and cumsum over (O,R,I)" * doctest::skip(kSkipCuda)) {
  const std::vector<Shape> shapes = {{1, 1, 1},   {3, 33, 1},   {2, 1000, 1}, {1, 100003, 1}, {4, 4097, 3},
                                     {2, 33, 70}, {1, 5000, 2}, {3, 1, 33},   {2, 0, 3}};
  const std::vector<ReduceOp> ops = {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min, ReduceOp::prod};
  for (DType t : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    for (const Shape& s : shapes) {
      // Integers from a small range tie a lot: argmax/argmin must pick the first index.
      Tensor x = is_floating(t) ? input(s, -2.0, 2.0, t, 13) : input(s, -3, 4, t, 13);
      Tensor near_one = is_floating(t) ? input(s, 0.999, 1.001, t, 14) : input(s, 1, 2, t, 14);
      for (ReduceOp op : ops) {
        const bool ext = op == ReduceOp::max || op == ReduceOp::min;
        if (op == ReduceOp::mean && !is_floating(t)) continue;
        if (ext && s[1] == 0) continue;
        const std::string what =
            "reduce op " + std::to_string(static_cast<int>(op)) + " " + dtype_name(t) + " " + shape_str(s);
        both(
            [&](Backend& be, Device d) {
              Tensor xd = place(op == ReduceOp::prod ? near_one : x, d);
              Tensor v = empty({s[0], s[2]}, {t, d});
              Tensor idx = ext ? empty({s[0], s[2]}, {DType::i64, d}) : Tensor();
              be.reduce(op, xd, v, idx);
              Tensor v2 = empty({s[0], s[2]}, {t, d});
              be.reduce(op, xd, v2, Tensor());  // values only
              return ext ? std::vector<Tensor>{v, idx, v2} : std::vector<Tensor>{v, v2};
            },
            is_floating(t) ? 1e-5 : 0, is_floating(t) ? 1e-5 : 0, what);
      }
      both(
          [&](Backend& be, Device d) {
            Tensor out = like_on(x, d);
            be.cumsum(place(x, d), out);
            return std::vector<Tensor>{out};
          },
          is_floating(t) ? 1e-5 : 0, is_floating(t) ? 1e-4 : 0, std::string("cumsum ") + dtype_name(t) + shape_str(s));
    }
  }
  // NaN wins max and min, at its first position.
  std::vector<double> v(100, 1.0);
  v[40] = NAN;
  v[70] = NAN;
  v[10] = 5.0;
  Tensor x = from_vector(v, {1, 100, 1});
  both(
      [&](Backend& be, Device d) {
        Tensor mx = empty({1, 1}, {DType::f32, d}), ix = empty({1, 1}, {DType::i64, d});
        Tensor mn = empty({1, 1}, {DType::f32, d}), in = empty({1, 1}, {DType::i64, d});
        be.reduce(ReduceOp::max, place(x, d), mx, ix);
        be.reduce(ReduceOp::min, place(x, d), mn, in);
        return std::vector<Tensor>{mx, ix, mn, in};
      },
      0, 0, "reduce with NaN");
}

TEST_CASE("cuda: gemm with transposed and batch-broadcast operands" * doctest::skip(kSkipCuda)) {
  struct Dims {
    int64_t bt, m, n, k;
  };
  // bf16/f16: cuBLAS on tensor cores with f32 accumulation against the CPU reference (the same
  // arithmetic in another summation order); each result is rounded once, so two f32 sums that
  // straddle a rounding boundary may land one step apart (2^-7 relative for bf16's 8 significant
  // bits, 2^-10 for f16's 11), plus the f32 sums' own difference.
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (Dims g : {Dims{1, 1, 1, 1}, Dims{3, 33, 17, 65}, Dims{2, 128, 257, 31}, Dims{1, 5, 7, 0}}) {
      Tensor a = input({g.bt, g.m, g.k}, -1, 1, t, 15), b = input({g.bt, g.k, g.n}, -1, 1, t, 16);
      Tensor at = input({g.bt, g.k, g.m}, -1, 1, t, 17), bt = input({g.bt, g.n, g.k}, -1, 1, t, 18);
      Tensor b1 = input({1, g.k, g.n}, -1, 1, t, 19), c0 = input({g.bt, g.m, g.n}, -1, 1, t, 20);
      const double f32_tol = 1e-5 * static_cast<double>(g.k + 1);
      const double one_step = t == DType::bf16 ? 0x1p-7 : 0x1p-10;
      const double rtol = t == DType::f64 ? 1e-12 : t == DType::f32 ? f32_tol : one_step + f32_tol;
      const double atol = t == DType::f64 ? 1e-12 : f32_tol;
      const std::string what = std::string("gemm ") + dtype_name(t) + " bt=" + std::to_string(g.bt) +
                               " m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k);
      both(
          [&](Backend& be, Device d) {
            const Shape as = {g.bt, g.m, g.k}, bs = {g.bt, g.k, g.n}, cs = {g.bt, g.m, g.n};
            Tensor ad = place(a, d), bd = place(b, d);
            Tensor atd = place(at, d).as_strided(as, {g.k * g.m, 1, g.m}, 0);  // column-major a
            Tensor btd = place(bt, d).as_strided(bs, {g.n * g.k, 1, g.k}, 0);  // column-major b
            Tensor b1d = place(b1, d).as_strided(bs, {0, g.n, 1}, 0);          // one b for the batch
            Tensor c1 = empty(cs, {t, d}), c2 = empty(cs, {t, d}), c3 = empty(cs, {t, d});
            be.gemm(ad, bd, c1, {});
            be.gemm(atd, btd, c2, {});
            be.gemm(ad, b1d, c3, {});
            Tensor c4 = place(c0, d).clone().detach();  // alpha a·b + beta c, b column-major
            be.gemm(ad, btd, c4, {0.5, 2.0});
            return std::vector<Tensor>{c1, c2, c3, c4};
          },
          rtol, atol, what);
    }
  }
}

TEST_CASE("cuda: softmax and log-softmax forward and backward" * doctest::skip(kSkipCuda)) {
  for (DType t : {DType::f32, DType::f64}) {
    for (int64_t n : {1, 33}) {
      for (int64_t r : {1, 33, 1000, 4097}) {
        Tensor x = input({n, r}, -5, 5, t, 21), gy = input({n, r}, -1, 1, t, 22);
        if (r > 1) {  // a masked entry and, with several rows, one fully masked row (NaN like torch)
          std::vector<double> v = to_vector<double>(x);
          v[1] = -INFINITY;
          if (n > 1)
            for (int64_t j = 0; j < r; ++j) v[static_cast<size_t>(r + j)] = -INFINITY;
          x = from_vector(v, {n, r}, t);
        }
        for (bool log : {false, true}) {
          const std::string what = std::string(log ? "log_softmax " : "softmax ") + dtype_name(t) + " " +
                                   std::to_string(n) + "x" + std::to_string(r);
          const double tol = t == DType::f32 ? 1e-5 : 1e-12;
          both(
              [&](Backend& be, Device d) {
                Tensor xd = place(x, d), y = like_on(x, d), gx = like_on(x, d);
                be.softmax(xd, y, log);
                // Backward from a finite y (the masked rows give NaN on both sides anyway).
                be.softmax_backward(y, place(gy, d), gx, log);
                return std::vector<Tensor>{y, gx};
              },
              tol, tol, what);
        }
      }
    }
  }
}

TEST_CASE("cuda: layer_norm and rms_norm forward and backward" * doctest::skip(kSkipCuda)) {
  for (DType t : {DType::f32, DType::f64}) {
    for (int64_t n : {1, 33, 257}) {
      for (int64_t c : {1, 33, 1000, 4097}) {
        Tensor x = input({n, c}, -2, 3, t, 23), gy = input({n, c}, -1, 1, t, 24);
        Tensor w = input({c}, 0.5, 1.5, t, 25), bias = input({c}, -1, 1, t, 26);
        const double tol = t == DType::f32 ? 2e-4 : 1e-10;
        const std::string dims = std::string(dtype_name(t)) + " " + std::to_string(n) + "x" + std::to_string(c);
        for (bool affine : {false, true}) {
          both(
              [&](Backend& be, Device d) {
                Tensor xd = place(x, d), wd = affine ? place(w, d) : Tensor(), bd = affine ? place(bias, d) : Tensor();
                Tensor y = like_on(x, d), mean = empty({n}, {t, d}), rstd = empty({n}, {t, d});
                be.layer_norm(xd, wd, bd, 1e-5, y, mean, rstd);
                Tensor gx = like_on(x, d), gw = empty({c}, {t, d}), gb = empty({c}, {t, d});
                be.layer_norm_backward(xd, wd, mean, rstd, place(gy, d), gx, gw, gb);
                Tensor y2 = like_on(x, d), r2 = empty({n}, {t, d}), gx2 = like_on(x, d), gw2 = empty({c}, {t, d});
                be.rms_norm(xd, wd, 1e-6, y2, r2);
                be.rms_norm_backward(xd, wd, r2, place(gy, d), gx2, gw2);
                Tensor gx3 = like_on(x, d);  // no parameter gradients wanted
                be.layer_norm_backward(xd, wd, mean, rstd, place(gy, d), gx3, Tensor(), Tensor());
                return std::vector<Tensor>{y, mean, rstd, gx, gw, gb, y2, r2, gx2, gw2, gx3};
              },
              tol, tol, "norms " + dims + (affine ? " affine" : ""));
        }
      }
    }
  }
}

TEST_CASE("cuda: cross_entropy with smoothing, ignore_index and bad targets" * doctest::skip(kSkipCuda)) {
  for (DType t : {DType::f32, DType::f64}) {
    for (int64_t n : {1, 33}) {
      for (int64_t v : {2, 33, 1000, 4097}) {
        Tensor logits = input({n, v}, -4, 4, t, 27), gloss = input({n}, 0.1, 1, t, 28);
        std::vector<int64_t> tv = to_vector<int64_t>(input({n}, 0, static_cast<double>(v), DType::i64, 29));
        if (n > 1) tv[3] = -100;  // ignored row
        Tensor target = from_vector(tv, {n});
        for (double smoothing : {0.0, 0.1}) {
          CrossEntropyParams p{-100, smoothing};
          const double tol = t == DType::f32 ? 1e-5 : 1e-12;
          both(
              [&](Backend& be, Device d) {
                Tensor ld = place(logits, d), td = place(target, d);
                Tensor loss = empty({n}, {t, d}), lse = empty({n}, {t, d}), g = like_on(logits, d);
                be.cross_entropy(ld, td, p, loss, lse);
                be.cross_entropy_backward(ld, td, lse, place(gloss, d), p, g);
                return std::vector<Tensor>{loss, lse, g};
              },
              tol, tol,
              std::string("cross_entropy ") + dtype_name(t) + " " + std::to_string(n) + "x" + std::to_string(v) +
                  " smoothing " + std::to_string(smoothing));
        }
      }
    }
  }
  // An out-of-range target: the same message as the CPU, naming the first bad row.
  Tensor logits = input({40, 33}, -1, 1, DType::f32, 30);
  std::vector<int64_t> tv(40, 1);
  tv[17] = 33;
  tv[29] = -7;
  Tensor target = from_vector(tv, {40});
  auto run = [&](Backend& be, Device d, bool backward) {
    return error_of([&] {
      Tensor ld = place(logits, d), td = place(target, d);
      Tensor loss = empty({40}, {DType::f32, d}), lse = zeros({40}, {DType::f32, d});
      if (!backward) be.cross_entropy(ld, td, {}, loss, lse);
      Tensor g = like_on(logits, d), gl = ones({40}, {DType::f32, d});
      if (backward) be.cross_entropy_backward(ld, td, lse, gl, {}, g);
    });
  };
  for (bool backward : {false, true}) {
    const std::string want = run(cpu(), Device::cpu(), backward);
    CHECK(want.find("row 17") != std::string::npos);
    CHECK(run(gpu(), test_device(), backward) == want);
  }
}

TEST_CASE("cuda: index_select, index_add, gather, scatter_add, triangle" * doctest::skip(kSkipCuda)) {
  const int64_t O = 3, R = 33, I = 65, K = 40;
  for (DType it : {DType::i32, DType::i64}) {
    Tensor index = input({K}, 0, R, DType::i64, 31).to(it);  // duplicates on purpose
    Tensor full_index = input({O, K, I}, 0, R, DType::i64, 32).to(it);
    for (DType t : {DType::f32, DType::f64, DType::i64, DType::f16, DType::boolean}) {
      const std::string what = std::string(dtype_name(t)) + " index " + dtype_name(it);
      Tensor x = input({O, R, I}, -3, 3, DType::f64, 33).to(t);
      both(
          [&](Backend& be, Device d) {
            Tensor out = empty({O, K, I}, {t, d}), g = empty({O, K, I}, {t, d});
            be.index_select(place(x, d), place(index, d), out);
            be.gather(place(x, d), place(full_index, d), g);
            return std::vector<Tensor>{out, g};
          },
          0, 0, "index_select/gather " + what);
      if (t == DType::f16 || t == DType::boolean) continue;  // not accumulate dtypes
      Tensor src = input({O, K, I}, -3, 3, DType::f64, 34).to(t);
      both(
          [&](Backend& be, Device d) {
            Tensor acc1 = place(x, d).clone().detach(), acc2 = place(x, d).clone().detach();
            be.index_add(acc1, place(index, d), place(src, d));
            be.scatter_add(acc2, place(full_index, d), place(src, d));
            return std::vector<Tensor>{acc1, acc2};
          },
          1e-5, 1e-5, "index_add/scatter_add " + what);
    }
    // Range errors: the CPU's message, naming the first offender; nothing written.
    std::vector<int64_t> bad(K, 2);
    bad[5] = R;
    bad[9] = -1;
    Tensor bad_index = from_vector(bad, {K}).to(it);
    Tensor x = input({O, R, I}, -3, 3, DType::f32, 35), src = input({O, K, I}, -3, 3, DType::f32, 36);
    for (int which = 0; which < 2; ++which) {
      auto run = [&](Backend& be, Device d) {
        Tensor acc = place(x, d).clone().detach();
        std::string msg = error_of([&] {
          if (which == 0) be.index_select(place(x, d), place(bad_index, d), empty({O, K, I}, {DType::f32, d}));
          if (which == 1) be.index_add(acc, place(bad_index, d), place(src, d));
        });
        return std::make_pair(msg, acc);
      };
      auto [want, acc_c] = run(cpu(), Device::cpu());
      auto [got, acc_g] = run(gpu(), test_device());
      CHECK(want.find("index 33") != std::string::npos);
      CHECK(got == want);
      expect_equal(acc_g, acc_c, "index_add leaves out untouched on a range error");
    }
  }
  for (DType t : {DType::f32, DType::i64, DType::bf16}) {
    Tensor x = input({2, 33, 70}, -3, 3, DType::f64, 37).to(t);
    for (int64_t k : {-40, -2, 0, 3, 100}) {
      for (bool upper : {false, true}) {
        both(
            [&](Backend& be, Device d) {
              Tensor out = like_on(x, d);
              be.triangle(place(x, d), out, k, upper);
              return std::vector<Tensor>{out};
            },
            0, 0, std::string("triangle ") + dtype_name(t) + " k=" + std::to_string(k) + (upper ? " upper" : " lower"));
      }
    }
  }
}

TEST_CASE("cuda: fused AdamW step" * doctest::skip(kSkipCuda)) {
  for (DType t : {DType::f32, DType::f64}) {
    for (int64_t n : {1, 33, 4097}) {
      Tensor p0 = input({n}, -1, 1, t, 38), m0 = input({n}, -0.1, 0.1, t, 39), v0 = input({n}, 0, 0.01, t, 40);
      both(
          [&](Backend& be, Device d) {
            Tensor p = place(p0, d).clone().detach(), m = place(m0, d).clone().detach(),
                   v = place(v0, d).clone().detach();
            for (int64_t step = 1; step <= 3; ++step) {
              Tensor g = place(input({n}, -1, 1, t, 41 + static_cast<uint64_t>(step)), d);
              AdamWParams ap;
              ap.lr = 1e-2;
              ap.weight_decay = 0.1;
              ap.step = step;
              be.adamw_step(p, g, m, v, ap);
            }
            return std::vector<Tensor>{p, m, v};
          },
          t == DType::f32 ? 1e-5 : 1e-12, t == DType::f32 ? 1e-6 : 1e-14, std::string("adamw ") + dtype_name(t));
    }
  }
}

}  // namespace hh::test
