// CUDA attention kernels against the CPU backend, through the Backend interface: the fused softmax
// attention (flash_attention and its backward, f32) and the chunked causal linear attention (f32
// and f64, with the running state in shared memory and, for large F, in global memory), at
// lengths and dims that are not multiples of the 64-wide tiles. They run when HH_DEVICE=cuda and
// are reported as skipped otherwise.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/backend.h"
#include "tests/cuda_compare.h"
#include "tests/op_table.h"

namespace hh::test {
namespace {

const bool kSkipCuda = !cuda_requested();

struct FlashCase {
  int64_t G, Lq, Lk, D, Dv;
  bool causal;
};

// Forward and backward on one backend: {out, lse, gq, gk, gv}.
std::vector<Tensor> run_flash(Backend& be, Device d, const FlashCase& c, const std::vector<Tensor>& in) {
  const DType t = DType::f32;
  Tensor q = place(in[0], d), k = place(in[1], d), v = place(in[2], d), go = place(in[3], d);
  Tensor out = like_on({c.G, c.Lq, c.Dv}, t, d), lse = like_on({c.G, c.Lq}, t, d);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  be.flash_attention(q, k, v, Tensor(), c.causal, scale, out, lse);
  Tensor gq = like_on(q.shape(), t, d), gk = like_on(k.shape(), t, d), gv = like_on(v.shape(), t, d);
  be.flash_attention_backward(q, k, v, Tensor(), out, lse, go, c.causal, scale, gq, gk, gv);
  return {out, lse, gq, gk, gv};
}

void check_flash(const FlashCase& c) {
  const std::string what = std::string(c.causal ? "causal" : "full") + " G" + std::to_string(c.G) + " Lq" +
                           std::to_string(c.Lq) + " Lk" + std::to_string(c.Lk) + " D" + std::to_string(c.D) + " Dv" +
                           std::to_string(c.Dv);
  const DType t = DType::f32;
  std::vector<Tensor> in = {input({c.G, c.Lq, c.D}, -2, 2, t, 1), input({c.G, c.Lk, c.D}, -2, 2, t, 2),
                            input({c.G, c.Lk, c.Dv}, -1, 1, t, 3), input({c.G, c.Lq, c.Dv}, -1, 1, t, 4)};
  std::vector<Tensor> want = run_flash(cpu(), Device::cpu(), c, in);
  std::vector<Tensor> got = run_flash(gpu(), test_device(), c, in);
  // floor 1: inputs are O(1), and at L = 1 gq, gk are pure cancellation (exactly 0 in exact arithmetic)
  const char* names[] = {"out", "lse", "gq", "gk", "gv"};
  for (size_t i = 0; i < want.size(); ++i) expect_close(got[i], want[i], 1e-4, 1e-5, what + " " + names[i], 1.0);
}

struct LinearCase {
  int64_t G, L, F, D, chunk;
};

// Forward and backward on one backend: {y, den, gq, gk, gv}.
std::vector<Tensor> run_linear(Backend& be, Device d, const LinearCase& c, DType t, const std::vector<Tensor>& in) {
  Tensor q = place(in[0], d), k = place(in[1], d), v = place(in[2], d), gy = place(in[3], d);
  Tensor y = like_on({c.G, c.L, c.D}, t, d), den = like_on({c.G, c.L}, t, d);
  be.linear_attention_causal(q, k, v, c.chunk, 1e-6, y, den);
  Tensor gq = like_on(q.shape(), t, d), gk = like_on(k.shape(), t, d), gv = like_on(v.shape(), t, d);
  be.linear_attention_causal_backward(q, k, v, y, den, gy, c.chunk, gq, gk, gv);
  return {y, den, gq, gk, gv};
}

void check_linear(const LinearCase& c, DType t) {
  const std::string what = std::string(dtype_name(t)) + " G" + std::to_string(c.G) + " L" + std::to_string(c.L) + " F" +
                           std::to_string(c.F) + " D" + std::to_string(c.D) + " chunk " + std::to_string(c.chunk);
  // positive features, like every feature map's output
  std::vector<Tensor> in = {input({c.G, c.L, c.F}, 0.05, 1, t, 5), input({c.G, c.L, c.F}, 0.05, 1, t, 6),
                            input({c.G, c.L, c.D}, -1, 1, t, 7), input({c.G, c.L, c.D}, -1, 1, t, 8)};
  std::vector<Tensor> want = run_linear(cpu(), Device::cpu(), c, t, in);
  std::vector<Tensor> got = run_linear(gpu(), test_device(), c, t, in);
  const double tol = t == DType::f64 ? 1e-10 : 1e-4;
  // gq, gk sum terms of size ~ |gy||v||φ| / den that cancel (at L = 1 almost completely): their floor.
  auto amax = [](const Tensor& x) {
    double m = 0;
    for (double e : to_vector<double>(x)) m = std::max(m, std::fabs(e));
    return m;
  };
  std::vector<double> den = to_vector<double>(want[1]);
  const double term = amax(in[3]) * amax(in[2]) * std::max(amax(in[0]), amax(in[1])) /
                      *std::min_element(den.begin(), den.end());
  const char* names[] = {"y", "den", "gq", "gk", "gv"};
  for (size_t i = 0; i < want.size(); ++i)
    expect_close(got[i], want[i], tol, tol / 10, what + " " + names[i], i == 2 || i == 3 ? term : 0.0);
}

}  // namespace

TEST_CASE("cuda: flash attention forward and backward vs cpu" * doctest::skip(kSkipCuda)) {
  for (bool causal : {false, true})
    for (int64_t L : {1, 33, 100, 257})
      for (int64_t D : {16, 64}) check_flash({3, L, L, D, D, causal});
  check_flash({2, 100, 33, 64, 40, false});    // Lk != Lq, Dv != D
  check_flash({2, 33, 257, 16, 16, false});    // more keys than queries
  check_flash({1, 130, 130, 128, 128, true});  // the widest head dim: 128-wide accumulator tiles
  check_flash({1, 65, 65, 100, 72, false});
  check_flash({2, 7, 0, 16, 16, false});  // no keys: out 0, lse -inf, gq 0
}

TEST_CASE("cuda: flash attention rejects what its kernel does not take" * doctest::skip(kSkipCuda)) {
  const Device d = test_device();
  auto msg = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  Tensor q64 = zeros({1, 4, 8}, {DType::f64, d}), o64 = zeros({1, 4, 8}, {DType::f64, d}),
         l64 = zeros({1, 4}, {DType::f64, d});
  std::string m = msg([&] { gpu().flash_attention(q64, q64, q64, Tensor(), false, 1.0, o64, l64); });
  CHECK(m.find("flash_attention") != std::string::npos);
  CHECK(m.find("f64") != std::string::npos);
  Tensor q = zeros({1, 4, 130}, {DType::f32, d}), o = zeros({1, 4, 130}, {DType::f32, d}),
         l = zeros({1, 4}, {DType::f32, d});
  m = msg([&] { gpu().flash_attention(q, q, q, Tensor(), false, 1.0, o, l); });
  CHECK(m.find("head dims up to 128") != std::string::npos);
  CHECK(m.find("(1, 4, 130)") != std::string::npos);
}

TEST_CASE("cuda: chunked causal linear attention forward and backward vs cpu" * doctest::skip(kSkipCuda)) {
  for (DType t : {DType::f32, DType::f64})
    for (int64_t L : {1, 33, 100, 257})
      for (int64_t F : {8, 33, 129})
        for (int64_t D : {16, 64}) check_linear({2, L, F, D, 64}, t);
  check_linear({2, 100, 33, 70, 16}, DType::f32);  // chunk 16, D over one 64-wide tile
  check_linear({1, 70, 9, 5, 3}, DType::f64);      // chunk 3
  check_linear({1, 40, 33, 16, 200}, DType::f32);  // chunk longer than the kernel's chunk cap
  // Taylor-sized features (F = 1 + D + D² for D = 64): the state no longer fits shared memory.
  check_linear({2, 100, 4161, 64, 64}, DType::f32);
  // The kernels cut each sequence into about 4·SMs / G segments of whole chunks: with few (batch·head)
  // rows every chunk is its own segment (above); with many, segments of several chunks and a
  // shorter last one (96 rows: 44 chunks of 16 in 6 segments on a 132-SM GPU; 38 of 8 in f64), and
  // with G above 4·SMs one sequential walk per row (P = 1).
  check_linear({96, 700, 16, 8, 16}, DType::f32);
  check_linear({96, 300, 8, 8, 8}, DType::f64);
  check_linear({600, 50, 8, 8, 16}, DType::f32);
}

TEST_CASE("cuda: the attention ops on the device match the cpu through autograd" * doctest::skip(kSkipCuda)) { check_sdpa_autograd({2, 3, 77, 32}); }

TEST_CASE("cuda: flash attention gives zeros and zero gradients for a row whose scores are all -inf" *
          doctest::skip(kSkipCuda)) {
  // f32 overflow: q_0·k_0 = -1e20·1e20 = -inf; causal query 0 sees only key 0 (decision in
  // docs/ARCHITECTURE.md: fully masked rows give zeros). Rows 1.. have O(1) scores. The query
  // tile spans 70 rows so a second tile runs too.
  const int64_t L = 70;
  std::vector<double> qv(L), kv(L);
  Generator g(8);
  auto r = to_vector<double>(uniform({2 * L}, -1, 1, g, {DType::f64}));
  for (int64_t i = 0; i < L; ++i) {
    qv[static_cast<size_t>(i)] = r[static_cast<size_t>(i)] * 1e-20;
    kv[static_cast<size_t>(i)] = r[static_cast<size_t>(L + i)];
  }
  qv[0] = -1e20;
  kv[0] = 1e20;
  std::vector<Tensor> in = {from_vector(qv, {1, L, 1}), from_vector(kv, {1, L, 1}),
                            input({1, L, 3}, -1, 1, DType::f32, 3), input({1, L, 3}, -1, 1, DType::f32, 4)};
  const FlashCase c{1, L, L, 1, 3, true};
  std::vector<Tensor> want = run_flash(cpu(), Device::cpu(), c, in);
  std::vector<Tensor> got = run_flash(gpu(), test_device(), c, in);
  auto out = to_vector<double>(got[0].to(Device::cpu()));
  for (int64_t j = 0; j < 3; ++j) CHECK(out[static_cast<size_t>(j)] == 0.0);
  for (size_t i = 2; i < got.size(); ++i)
    for (double x : to_vector<double>(got[i].to(Device::cpu()))) CHECK(std::isfinite(x));
  CHECK(to_vector<double>(got[2].to(Device::cpu()))[0] == 0.0);  // gq of the masked row
  const char* names[] = {"out", "lse", "gq", "gk", "gv"};
  for (size_t i = 0; i < want.size(); ++i)
    if (i != 2) expect_close(got[i], want[i], 1e-4, 1e-5, std::string("-inf row ") + names[i], 1.0);
  // gq rows 1.. are ~1e20 (k_0 = 1e20): compared relative to their own size.
  expect_close(got[2], want[2], 1e-4, 1e-5, "-inf row gq");
}

}  // namespace hh::test
