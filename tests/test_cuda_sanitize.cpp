// Sanitizer-sized CUDA tests: the kernels whose full-size tests are too slow under
// compute-sanitizer (racecheck, initcheck, synccheck slow kernels down 10-1000x), at small shapes
// that still cover the partial tiles and chunks (L not a multiple of 64, chunk 16, the global-state
// path of the linear attention). Each case compares against the CPU backend. Select them with
//   HH_DEVICE=cuda hh_tests -tc="cuda sanitize:*"      (scripts/cuda-sanitize runs the tools)
// They run when HH_DEVICE=cuda and are reported as skipped otherwise.
//
// The caching allocator's bookkeeping is tested on host memory in tests/test_cuda_allocator.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/backend.h"
#include "tests/cuda_compare.h"
#include "tests/op_table.h"


namespace hh::test {
namespace {

const bool kSkipCuda = !cuda_requested();

// Runs f(backend, device) on the CPU and on the GPU and compares what it returns.
template <typename F>
void both(F&& f, double rtol, double atol, const std::string& what) {
  std::vector<Tensor> want = f(cpu(), Device::cpu());
  std::vector<Tensor> got = f(gpu(), test_device());
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) expect_close(got[i], want[i], rtol, atol, what + " #" + std::to_string(i));
}

std::string dims(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : "x") + std::to_string(x);
  return s;
}

// ---- the chunked causal linear attention ----

struct LinearCase {
  int64_t G, L, F, D, chunk;
};

void check_linear(const LinearCase& c, DType t) {
  const std::string what = std::string("linear attention ") + dtype_name(t) + " G,L,F,D " + dims({c.G, c.L, c.F, c.D}) +
                           " chunk " + std::to_string(c.chunk);
  // positive features, like every feature map's output
  std::vector<Tensor> in = {input({c.G, c.L, c.F}, 0.05, 1, t, 5), input({c.G, c.L, c.F}, 0.05, 1, t, 6),
                            input({c.G, c.L, c.D}, -1, 1, t, 7), input({c.G, c.L, c.D}, -1, 1, t, 8)};
  auto run = [&](Backend& be, Device d) {
    Tensor q = place(in[0], d), k = place(in[1], d), v = place(in[2], d), gy = place(in[3], d);
    Tensor y = like_on({c.G, c.L, c.D}, t, d), den = like_on({c.G, c.L}, t, d);
    be.linear_attention_causal(q, k, v, c.chunk, 1e-6, y, den);
    Tensor gq = like_on(q.shape(), t, d), gk = like_on(k.shape(), t, d), gv = like_on(v.shape(), t, d);
    be.linear_attention_causal_backward(q, k, v, y, den, gy, c.chunk, gq, gk, gv);
    return std::vector<Tensor>{y, den, gq, gk, gv};
  };
  std::vector<Tensor> want = run(cpu(), Device::cpu()), got = run(gpu(), test_device());
  // gq, gk sum terms of size ~ |gy||v||φ|/den that cancel: that size is their floor (inputs are
  // bounded by 1 and den >= 0.05·0.05, so 400 bounds it).
  const double tol = t == DType::f64 ? 1e-10 : 1e-4;
  const char* names[] = {"y", "den", "gq", "gk", "gv"};
  for (size_t i = 0; i < want.size(); ++i)
    expect_close(got[i], want[i], tol, tol / 10, what + " " + names[i], i == 2 || i == 3 ? 400.0 : 0.0);
}

// ---- the flash softmax attention (f32) ----

struct FlashCase {
  int64_t G, Lq, Lk, D, Dv;
  bool causal;
};

void check_flash(const FlashCase& c) {
  const std::string what = std::string("flash attention ") + (c.causal ? "causal" : "full") + " G,Lq,Lk,D,Dv " +
                           dims({c.G, c.Lq, c.Lk, c.D, c.Dv});
  const DType t = DType::f32;
  std::vector<Tensor> in = {input({c.G, c.Lq, c.D}, -2, 2, t, 1), input({c.G, c.Lk, c.D}, -2, 2, t, 2),
                            input({c.G, c.Lk, c.Dv}, -1, 1, t, 3), input({c.G, c.Lq, c.Dv}, -1, 1, t, 4)};
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  auto run = [&](Backend& be, Device d) {
    Tensor q = place(in[0], d), k = place(in[1], d), v = place(in[2], d), go = place(in[3], d);
    Tensor out = like_on({c.G, c.Lq, c.Dv}, t, d), lse = like_on({c.G, c.Lq}, t, d);
    be.flash_attention(q, k, v, Tensor(), c.causal, scale, out, lse);
    Tensor gq = like_on(q.shape(), t, d), gk = like_on(k.shape(), t, d), gv = like_on(v.shape(), t, d);
    be.flash_attention_backward(q, k, v, Tensor(), out, lse, go, c.causal, scale, gq, gk, gv);
    return std::vector<Tensor>{out, lse, gq, gk, gv};
  };
  std::vector<Tensor> want = run(cpu(), Device::cpu()), got = run(gpu(), test_device());
  // floor 1: inputs are O(1), and at L = 1 gq, gk are pure cancellation
  const char* names[] = {"out", "lse", "gq", "gk", "gv"};
  for (size_t i = 0; i < want.size(); ++i) expect_close(got[i], want[i], 1e-4, 1e-5, what + " " + names[i], 1.0);
}

}  // namespace

// B = 1, H = 2 (G = 2 blocks of rows); lengths around the 64-row chunks and tiles.
TEST_CASE("cuda sanitize: chunked causal linear attention forward and backward" * doctest::skip(kSkipCuda)) {
  for (DType t : {DType::f32, DType::f64})
    for (int64_t L : {1, 70, 130})
      for (int64_t D : {16, 32}) check_linear({2, L, 9, D, 64}, t);
  check_linear({2, 100, 33, 32, 16}, DType::f32);  // chunk 16
  check_linear({1, 70, 9, 5, 3}, DType::f64);      // chunk 3, D under one tile
  // F·(D+1) beyond the shared memory (227 KiB on an H100, 2049·33·4 = 270 KB): the global state.
  check_linear({1, 70, 2049, 32, 64}, DType::f32);
}

TEST_CASE("cuda sanitize: flash attention forward and backward" * doctest::skip(kSkipCuda)) {
  for (bool causal : {false, true})
    for (int64_t L : {1, 70, 130})
      for (int64_t D : {16, 32}) check_flash({2, L, L, D, D, causal});
  check_flash({2, 70, 33, 32, 24, false});  // Lk < Lq, Dv != D
  check_flash({2, 33, 130, 16, 16, false});  // more keys than queries
  check_flash({2, 7, 0, 16, 16, false});     // no keys: out 0, lse -inf, gq 0
}

TEST_CASE("cuda sanitize: attention through autograd" * doctest::skip(kSkipCuda)) { check_sdpa_autograd({1, 2, 70, 16}); }

TEST_CASE("cuda sanitize: softmax, norms, cross entropy, reductions and cumsum" * doctest::skip(kSkipCuda)) {
  for (DType t : {DType::f32, DType::f64}) {
    const double tol = t == DType::f32 ? 2e-4 : 1e-10;
    const std::string tn = dtype_name(t);
    for (int64_t r : {33, 300}) {
      // softmax with a masked entry and a fully masked row (NaN on both sides)
      std::vector<double> xv = to_vector<double>(input({3, r}, -5, 5, t, 21));
      xv[1] = -INFINITY;
      for (int64_t j = 0; j < r; ++j) xv[static_cast<size_t>(r + j)] = -INFINITY;
      Tensor x = from_vector(xv, {3, r}, t), gy = input({3, r}, -1, 1, t, 22);
      for (bool log : {false, true})
        both(
            [&](Backend& be, Device d) {
              Tensor y = like_on({3, r}, t, d), gx = like_on({3, r}, t, d);
              be.softmax(place(x, d), y, log);
              be.softmax_backward(y, place(gy, d), gx, log);
              return std::vector<Tensor>{y, gx};
            },
            tol, tol, std::string(log ? "log_softmax " : "softmax ") + tn + " 3x" + std::to_string(r));

      Tensor xn = input({5, r}, -2, 3, t, 23), gn = input({5, r}, -1, 1, t, 24);
      Tensor w = input({r}, 0.5, 1.5, t, 25), b = input({r}, -1, 1, t, 26);
      both(
          [&](Backend& be, Device d) {
            Tensor xd = place(xn, d), wd = place(w, d), bd = place(b, d);
            Tensor y = like_on({5, r}, t, d), mean = like_on({5}, t, d), rstd = like_on({5}, t, d);
            be.layer_norm(xd, wd, bd, 1e-5, y, mean, rstd);
            Tensor gx = like_on({5, r}, t, d), gw = like_on({r}, t, d), gb = like_on({r}, t, d);
            be.layer_norm_backward(xd, wd, mean, rstd, place(gn, d), gx, gw, gb);
            Tensor y2 = like_on({5, r}, t, d), r2 = like_on({5}, t, d), gx2 = like_on({5, r}, t, d),
                   gw2 = like_on({r}, t, d);
            be.rms_norm(xd, wd, 1e-6, y2, r2);
            be.rms_norm_backward(xd, wd, r2, place(gn, d), gx2, gw2);
            return std::vector<Tensor>{y, mean, rstd, gx, gw, gb, y2, r2, gx2, gw2};
          },
          tol, tol, "norms " + tn + " 5x" + std::to_string(r));

      Tensor logits = input({6, r}, -4, 4, t, 27), gloss = input({6}, 0.1, 1, t, 28);
      std::vector<int64_t> tv = to_vector<int64_t>(input({6}, 0, static_cast<double>(r), DType::i64, 29));
      tv[3] = -100;  // an ignored row
      Tensor target = from_vector(tv, {6});
      for (double smoothing : {0.0, 0.1})
        both(
            [&](Backend& be, Device d) {
              CrossEntropyParams p{-100, smoothing};
              Tensor ld = place(logits, d), td = place(target, d);
              Tensor loss = like_on({6}, t, d), lse = like_on({6}, t, d), g = like_on({6, r}, t, d);
              be.cross_entropy(ld, td, p, loss, lse);
              be.cross_entropy_backward(ld, td, lse, place(gloss, d), p, g);
              return std::vector<Tensor>{loss, lse, g};
            },
            tol, tol, "cross_entropy " + tn + " 6x" + std::to_string(r) + " smoothing " + std::to_string(smoothing));
    }
    for (const Shape& s : {Shape{3, 257, 2}, Shape{1, 3000, 1}, Shape{2, 33, 70}}) {
      Tensor x = input(s, -2, 2, t, 13), near_one = input(s, 0.999, 1.001, t, 14);
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min, ReduceOp::prod}) {
        const bool ext = op == ReduceOp::max || op == ReduceOp::min;
        both(
            [&](Backend& be, Device d) {
              Tensor v = like_on({s[0], s[2]}, t, d), idx = ext ? like_on({s[0], s[2]}, DType::i64, d) : Tensor();
              be.reduce(op, place(op == ReduceOp::prod ? near_one : x, d), v, idx);
              return ext ? std::vector<Tensor>{v, idx} : std::vector<Tensor>{v};
            },
            tol, tol, "reduce " + std::to_string(static_cast<int>(op)) + " " + tn + " " + shape_str(s));
      }
      both(
          [&](Backend& be, Device d) {
            Tensor out = like_on(s, t, d);
            be.cumsum(place(x, d), out);
            return std::vector<Tensor>{out};
          },
          tol, tol, "cumsum " + tn + " " + shape_str(s));
    }
  }
}

}  // namespace hh::test
