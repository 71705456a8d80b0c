// Inference weights prepared once (core/prepacked.h): the f32 prepacked linear against the plain
// one (the same bits, every ISA path), the cache never handing out a stale pack (load_state_dict,
// copy_, SGD and AdamW steps, a replaced weight, an ISA change), the int8 kernel against an f64
// reference of the same quantized arithmetic on every ISA path (odd shapes, M = 1, N and K off
// the vector widths; the paths give the same bits), the per-channel quantization, and the refusals.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/cpu/qgemm.h"
#include "core/cpu_isa.h"
#include "core/parallel.h"
#include "core/prepacked.h"
#include "nn/layers.h"
#include "tests/isa_scope.h"
#include "train/optim.h"

using namespace hh;
using hh::test::IsaScope;
using hh::test::supported_isas;

namespace {


bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  const auto x = to_vector<float>(a), y = to_vector<float>(b);
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  return true;
}

// The f64 reference of the int8 product: x quantized per row as core/cpu/qgemm.h defines it (in
// f32, the definition), the sum exact, the scales and bias applied in f64.
std::vector<double> int8_reference(const std::vector<float>& x, int64_t m, int64_t k, const std::vector<int8_t>& wq,
                                   const std::vector<float>& sw, int64_t n, const std::vector<float>& bias,
                                   std::vector<double>* magnitude) {
  std::vector<double> y(static_cast<size_t>(m * n));
  magnitude->assign(y.size(), 0.0);
  for (int64_t r = 0; r < m; ++r) {
    float amax = 0.0f;
    for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(x[static_cast<size_t>(r * k + c)]));
    float sx, inv;
    qgemm::row_scale(amax, sx, inv);
    std::vector<int64_t> q(static_cast<size_t>(k));
    for (int64_t c = 0; c < k; ++c)
      q[static_cast<size_t>(c)] = static_cast<int64_t>(
          std::min(127.0f, std::max(-127.0f, std::nearbyint(x[static_cast<size_t>(r * k + c)] * inv))));
    for (int64_t j = 0; j < n; ++j) {
      int64_t acc = 0;
      for (int64_t c = 0; c < k; ++c) acc += q[static_cast<size_t>(c)] * wq[static_cast<size_t>(j * k + c)];
      const double s = static_cast<double>(sx) * static_cast<double>(sw[static_cast<size_t>(j)]);
      const double b = bias.empty() ? 0.0 : bias[static_cast<size_t>(j)];
      y[static_cast<size_t>(r * n + j)] = static_cast<double>(acc) * s + b;
      (*magnitude)[static_cast<size_t>(r * n + j)] = std::fabs(static_cast<double>(acc) * s) + std::fabs(b);
    }
  }
  return y;
}

}  // namespace

TEST_CASE("linear prepacked f32: the same bits as linear on every ISA path, odd shapes, threads") {
  IsaScope scope;
  Generator g(11);
  struct Case { int64_t m, n, k; };
  // Edge slivers (n off 16/32), depth blocks (k > 192), a grid split (large m·n·k), and M below the
  // packed engine's 4 rows (a decoding step): those rows get the bits they have among 8 rows of the
  // plain GEMM (where the packed engine runs), so a decoded token is computed as in a prefill.
  const std::vector<Case> cases = {{64, 384, 384}, {7, 33, 19}, {13, 70, 450}, {300, 129, 200},
                                   {2, 40, 40},  {1, 50, 70}, {1, 768, 2304}, {3, 130, 450}};
  for (CpuIsa isa : supported_isas()) {
    set_cpu_isa(isa);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (const Case& c : cases) {
        INFO("isa ", std::string(cpu_isa_name(isa)));
        CAPTURE(threads);
        CAPTURE(c.m);
        CAPTURE(c.n);
        CAPTURE(c.k);
        const Tensor x = randn({c.m, c.k}, g), w = randn({c.n, c.k}, g), b = randn({c.n}, g);
        NoGradGuard ng;
        WeightCache cache;
        for (const Tensor& bias : {b, Tensor()}) {
          // (The scalar path has no packed kernel: nothing is prepared, the plain GEMM runs.)
          const Tensor want = c.m >= 4 || isa == CpuIsa::scalar
                                  ? linear(x, w, bias)
                                  : slice(linear(cat({x, randn({8 - c.m, c.k}, g)}, 0), w, bias), 0, 0, c.m);
          CHECK(same_bits(linear(x, w, bias, cache, WeightFormat::f32), want));
          // A leading batch dim and a non-contiguous input (a transposed view) as well.
          const Tensor x3 = reshape(x, {1, c.m, c.k});
          CHECK(same_bits(linear(x3, w, bias, cache, WeightFormat::f32), reshape(want, {1, c.m, c.n})));
          const Tensor xt = transpose(contiguous(transpose(x, 0, 1)), 0, 1);
          CHECK(same_bits(linear(xt, w, bias, cache, WeightFormat::f32), want));
        }
        CHECK(cache.prepares() == 1);  // once, for all six products
      }
    }
  }
}

TEST_CASE("linear bf16 weights: the f32 product of the rounded weight, every ISA path, odd shapes, threads") {
  IsaScope scope;
  Generator g(15);
  struct Case { int64_t m, n, k; };
  // The f32 test's shapes (where the prepacked f32 weight runs, the bits must be its bits on the
  // weight rounded to bf16), then shapes it leaves to the plain GEMM (tiny n or k: bf16 still runs
  // packed there), against an f64 reference.
  const std::vector<Case> exact = {{64, 384, 384}, {7, 33, 19}, {13, 70, 450}, {300, 129, 200},
                                   {2, 40, 40},  {1, 50, 70}, {1, 768, 2304}, {3, 130, 450}};
  const std::vector<Case> small = {{1, 1, 1}, {2, 3, 1}, {5, 1, 7}, {1, 17, 3}, {9, 2, 500}};
  for (CpuIsa isa : supported_isas()) {
    set_cpu_isa(isa);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (bool is_exact : {true, false})
        for (const Case& c : is_exact ? exact : small) {
          INFO("isa ", std::string(cpu_isa_name(isa)));
          CAPTURE(threads);
          CAPTURE(c.m);
          CAPTURE(c.n);
          CAPTURE(c.k);
          // Weights with more mantissa than bf16 keeps, some past its range of exact integers.
          const Tensor x = randn({c.m, c.k}, g), w = mul(randn({c.n, c.k}, g), 3.7), b = randn({c.n}, g);
          const Tensor wr = w.to(DType::bf16).to(DType::f32);
          NoGradGuard ng;
          WeightCache cache, cache32;
          const auto xv = to_vector<float>(x), wv = to_vector<float>(wr), bv = to_vector<float>(b);
          for (const Tensor& bias : {b, Tensor()}) {
            const Tensor got = linear(x, w, bias, cache, WeightFormat::bf16);
            if (is_exact) {
              const Tensor want = isa == CpuIsa::scalar ? linear(x, wr, bias) : linear(x, wr, bias, cache32, WeightFormat::f32);
              CHECK(same_bits(got, want));
            }
            const auto gv = to_vector<float>(got);
            double worst = 0;
            for (int64_t r = 0; r < c.m; ++r)
              for (int64_t j = 0; j < c.n; ++j) {
                double ref = bias.defined() ? bv[static_cast<size_t>(j)] : 0.0, mag = std::fabs(ref);
                for (int64_t q = 0; q < c.k; ++q) {
                  const double t = static_cast<double>(xv[static_cast<size_t>(r * c.k + q)]) * wv[static_cast<size_t>(j * c.k + q)];
                  ref += t;
                  mag += std::fabs(t);
                }
                worst = std::max(worst, std::fabs(gv[static_cast<size_t>(r * c.n + j)] - ref) / (mag + 1e-30));
              }
            CHECK(worst <= (c.k + 2) * std::ldexp(1.0, -24));  // f32 sums of exact products
            CHECK(max_abs_diff(got, linear(x, w, bias)) > 0);  // and the weight was rounded
          }
          CHECK(cache.prepares() == 1);
        }
    }
  }
  // The prepared form is half the f32 one's bytes (on the packed paths).
  set_cpu_isa(supported_isas().back());
  const Tensor w = randn({96, 200}, g);
  if (cpu_isa() != CpuIsa::scalar)
    CHECK(prepare_weight(w, WeightFormat::bf16)->bytes * 2 == prepare_weight(w, WeightFormat::f32)->bytes);
  CHECK(parse_weight_format("bf16") == WeightFormat::bf16);
}

TEST_CASE("linear prepacked: a changed weight is never multiplied by its stale pack") {
  IsaScope scope;
  Generator g(12);
  nn::Linear lin(40, 24, true, nn::Init{g});
  const Tensor x = randn({16, 40}, g);
  auto forward = [&] {
    NoGradGuard ng;
    return lin.forward(x);
  };
  auto plain = [&] {
    NoGradGuard ng;
    return linear(x, lin.weight, lin.bias);
  };
  for (WeightFormat format : {WeightFormat::f32, WeightFormat::int8, WeightFormat::bf16}) {
    CAPTURE(weight_format_name(format));
    lin.weight_format = format;
    lin.weight_cache.clear();
    const Tensor before = forward();
    const int64_t prepares = lin.weight_cache.prepares();
    CHECK(same_bits(forward(), before));  // unchanged weight: the same pack
    CHECK(lin.weight_cache.prepares() == prepares);
    auto expect_new = [&](const char* what) {
      CAPTURE(what);
      const Tensor after = forward();
      if (format == WeightFormat::f32) {
        CHECK(same_bits(after, plain()));
      } else {
        const double scale = max_abs_diff(plain(), zeros_like(after));
        // int8 (or bf16) of the new weight: within 5% (0.5%) of the largest output
        CHECK(max_abs_diff(after, plain()) < (format == WeightFormat::int8 ? 0.05 : 0.005) * scale);
      }
      CHECK(max_abs_diff(after, before) > 1e-3);  // and the result did change
    };
    // load_state_dict (copy_ into the parameters).
    std::map<std::string, Tensor> state{{"weight", randn({24, 40}, g)}, {"bias", randn({24}, g)}};
    lin.load_state_dict(state);
    expect_new("load_state_dict");
    // An SGD step and an AdamW step (the multi-tensor kernel, which bumps the version itself).
    for (int opt = 0; opt < 2; ++opt) {
      const Tensor prev = forward();
      {
        Tensor loss = sum(mul(lin.forward(x), lin.forward(x)));
        loss.backward();
      }
      if (opt == 0) {
        train::SGD sgd(train::single_group(lin, 0.0), 0.05);
        sgd.step();
      } else {
        train::AdamW adam(train::single_group(lin, 0.0), 0.05);
        adam.step();
      }
      lin.zero_grad();
      CAPTURE(opt);
      const Tensor after = forward();
      CHECK(max_abs_diff(after, prev) > 1e-3);
      if (format == WeightFormat::f32) CHECK(same_bits(after, plain()));
    }
    // copy_ into a slice of the weight (a view: the same storage's version).
    {
      NoGradGuard ng;
      copy_(slice(lin.weight, 0, 3, 5), randn({2, 40}, g));
    }
    expect_new("copy_ into a view");
    // A replaced weight tensor (another storage, version 0 again).
    {
      NoGradGuard ng;
      lin.weight = randn({24, 40}, g);
    }
    expect_new("a replaced weight");
  }
  // An ISA change repacks f32 (the sliver width differs between AVX2 and AVX-512).
  lin.weight_format = WeightFormat::f32;
  for (CpuIsa isa : supported_isas()) {
    set_cpu_isa(isa);
    CHECK(same_bits(forward(), plain()));
  }
}

TEST_CASE("linear int8: the kernel against the f64 reference of its arithmetic, every ISA path, odd shapes") {
  IsaScope scope;
  Generator g(13);
  const std::vector<int64_t> ms = {1, 3, 8, 13, 100}, ns = {1, 31, 33, 70}, ks = {1, 3, 17, 64, 259};
  for (int64_t m : ms)
    for (int64_t n : ns)
      for (int64_t k : ks) {
        CAPTURE(m);
        CAPTURE(n);
        CAPTURE(k);
        Tensor x = randn({m, k}, g), w = mul(randn({n, k}, g), 0.1), b = randn({n}, g);
        // A row of zeros (scale 0: the bias alone) when there are several rows.
        if (m > 2) {
          NoGradGuard ng;
          copy_(slice(x, 0, 1, 2), zeros({1, k}));
        }
        auto prepared = prepare_weight(w, WeightFormat::int8);
        const std::vector<int8_t> wq = int8_values(*prepared);
        const std::vector<float> sw(prepared->scales.begin(), prepared->scales.begin() + n);
        std::vector<double> mag;
        const std::vector<double> ref = int8_reference(to_vector<float>(x), m, k, wq, sw, n, to_vector<float>(b), &mag);
        Tensor first;
        for (CpuIsa isa : supported_isas()) {
          set_cpu_isa(isa);
          INFO("isa ", std::string(cpu_isa_name(isa)));
          for (int threads : {1, 2}) {
            set_num_threads(threads);
            NoGradGuard ng;
            WeightCache cache;
            const Tensor y = linear(x, w, b, cache, WeightFormat::int8);
            const std::vector<float> got = to_vector<float>(y);
            double worst = 0;
            for (size_t i = 0; i < got.size(); ++i)
              worst = std::max(worst, std::fabs(got[i] - ref[i]) / (mag[i] + 1e-30));
            // Three f32 roundings (the int32 sum to f32, the scale product, the fma): ≤ 3·2⁻²⁴ of the magnitude.
            CHECK(worst <= 3.01 * std::ldexp(1.0, -24));  // (3.01: the products of the roundings)
            if (!first.defined())
              first = y;
            else
              CHECK(same_bits(y, first));  // every path and split: the same bits
          }
        }
      }
}

TEST_CASE("linear int8: large K near the int32 bound of the sum, and a non-finite row stays in its row") {
  IsaScope scope;
  // K = 4099 with every |x| and |w| at the extremes: |Σ| = 127² · K ≈ 6.6e7 (> 2^24: the f32 conversion rounds).
  const int64_t m = 5, n = 40, k = 4099;
  std::vector<float> xs(static_cast<size_t>(m * k)), ws(static_cast<size_t>(n * k));
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = (i % 7 == 3) ? -1.0f : 1.0f;
  for (size_t i = 0; i < ws.size(); ++i) ws[i] = (i % 5 == 1) ? -2.0f : 2.0f;
  Tensor x = from_vector(xs, {m, k}), w = from_vector(ws, {n, k});
  auto prepared = prepare_weight(w, WeightFormat::int8);
  std::vector<double> mag;
  const std::vector<float> sw(prepared->scales.begin(), prepared->scales.begin() + n);
  const std::vector<double> ref = int8_reference(xs, m, k, int8_values(*prepared), sw, n, {}, &mag);
  for (CpuIsa isa : supported_isas()) {
    set_cpu_isa(isa);
    INFO("isa ", std::string(cpu_isa_name(isa)));
    NoGradGuard ng;
    WeightCache cache;
    const std::vector<float> got = to_vector<float>(linear(x, w, Tensor(), cache, WeightFormat::int8));
    for (size_t i = 0; i < got.size(); ++i) CHECK(std::fabs(got[i] - ref[i]) <= 3.01 * std::ldexp(1.0, -24) * mag[i]);
  }
  // A NaN in row 2 of x: row 2 is NaN, the others are finite (an f32 GEMM's behaviour).
  xs[static_cast<size_t>(2 * k + 10)] = std::numeric_limits<float>::quiet_NaN();
  xs[static_cast<size_t>(4 * k + 1)] = std::numeric_limits<float>::infinity();
  x = from_vector(xs, {m, k});
  for (CpuIsa isa : supported_isas()) {
    set_cpu_isa(isa);
    INFO("isa ", std::string(cpu_isa_name(isa)));
    NoGradGuard ng;
    WeightCache cache;
    const std::vector<float> got = to_vector<float>(linear(x, w, Tensor(), cache, WeightFormat::int8));
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) CHECK(std::isfinite(got[static_cast<size_t>(r * n + j)]) == (r != 2 && r != 4));
  }
}

TEST_CASE("linear int8: per-channel quantization and the refusals") {
  Generator g(14);
  const Tensor w = randn({9, 21}, g);
  std::vector<int8_t> q;
  std::vector<float> s;
  quantize_per_channel(w.data<float>(), 9, 21, q, s);
  const auto wv = to_vector<float>(w);
  for (int64_t r = 0; r < 9; ++r) {
    float amax = 0;
    for (int64_t c = 0; c < 21; ++c) amax = std::max(amax, std::fabs(wv[static_cast<size_t>(r * 21 + c)]));
    CHECK(s[static_cast<size_t>(r)] == amax / 127.0f);
    for (int64_t c = 0; c < 21; ++c) {
      const size_t i = static_cast<size_t>(r * 21 + c);
      CHECK(std::abs(q[i]) <= 127);
      CHECK(std::fabs(wv[i] - q[i] * s[static_cast<size_t>(r)]) <= 0.5f * s[static_cast<size_t>(r)] * (1 + 1e-5f));
    }
  }
  // The values read back from the packed form are the ones quantized.
  CHECK(int8_values(*prepare_int8(q, s, 9, 21)) == q);
  CHECK(int8_values(*prepare_weight(w, WeightFormat::int8)) == q);
  // Hostile scales and values.
  auto refuses = [&](std::vector<int8_t> vals, std::vector<float> sc, const char* says) {
    CAPTURE(says);
    try {
      prepare_int8(vals, sc, 9, 21);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find(says) != std::string::npos);
    }
  };
  auto bad = s;
  bad[3] = std::numeric_limits<float>::quiet_NaN();
  refuses(q, bad, "scale 3 is nan");
  bad[3] = 0.0f;
  refuses(q, bad, "scale 3 is 0");
  bad[3] = -0.5f;
  refuses(q, bad, "expected a finite positive number");
  bad[3] = std::numeric_limits<float>::infinity();
  refuses(q, bad, "scale 3 is inf");
  refuses(q, std::vector<float>(8, 1.0f), "8 scales for 9 output channels");
  refuses(std::vector<int8_t>(10, 0), s, "10 values for a (9, 21) weight");
  auto q128 = q;
  q128[5] = -128;
  refuses(q128, s, "value 5 is -128");
  // A non-finite weight is refused when quantized (at load time), naming the row.
  Tensor wn = clone(w);
  {
    NoGradGuard ng;
    copy_(slice(slice(wn, 0, 4, 5), 1, 7, 8), full({1, 1}, std::numeric_limits<double>::quiet_NaN()));
  }
  CHECK_THROWS_WITH_AS(prepare_weight(wn, WeightFormat::int8), doctest::Contains("row 4 has a non-finite value"), Error);
  // The format names, parsed once at the edge.
  CHECK(parse_weight_format("int8") == WeightFormat::int8);
  CHECK(parse_weight_format("f32") == WeightFormat::f32);
  CHECK_THROWS_WITH_AS(parse_weight_format("int4"), doctest::Contains("expected f32, int8 or bf16"), Error);
}
