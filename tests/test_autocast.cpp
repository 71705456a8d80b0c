// bf16 autocast (autograd/autocast.h): which dtype each op list computes in, that the results
// equal the explicit casts they stand for, that gradients reach f32 leaves in f32 and backward
// runs outside autocast, the state's scoping, the half GEMM's f32 accumulation, and --precision's
// parsing. Whether bf16 training tracks f32 is tested in tests/train/test_lm_train.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "autograd/ops.h"
#include "core/backend.h"

namespace hh::test {
namespace {

Tensor rnd(const Shape& s, uint64_t seed, DType t = DType::f32) {
  Generator g(seed);
  return uniform(s, -1.0, 1.0, g, {DType::f64}).to(t);
}

double gap(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = to_vector<double>(a), y = to_vector<double>(b);
  REQUIRE(x.size() == y.size());
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

Tensor bf(const Tensor& t) { return t.to(DType::bf16); }

}  // namespace

TEST_CASE("autocast: the lower-precision list computes in bf16 and equals the explicit casts") {
  Tensor x = rnd({2, 5, 8}, 1), w = rnd({6, 8}, 2), b = rnd({6}, 3), m = rnd({8, 3}, 4);
  Tensor q = rnd({1, 2, 7, 4}, 5), k = rnd({1, 2, 7, 4}, 6), v = rnd({1, 2, 7, 3}, 7);
  Tensor pq = exp(rnd({1, 2, 7, 4}, 8)), pk = exp(rnd({1, 2, 7, 4}, 9));
  Tensor want_lin = linear(bf(x), bf(w), bf(b)), want_mm = matmul(bf(x), bf(m));
  Tensor want_sdpa = scaled_dot_product_attention(bf(q), bf(k), bf(v), true);
  Tensor want_la = linear_attention_causal(bf(pq), bf(pk), bf(v), 4);
  Tensor lin, mm, sdpa, la, mm64;
  {
    AutocastGuard autocast;
    lin = linear(x, w, b);
    mm = matmul(x, m);
    sdpa = scaled_dot_product_attention(q, k, v, true);
    la = linear_attention_causal(pq, pk, v, 4);
    mm64 = matmul(x.to(DType::f64), m.to(DType::f64));  // f64 is never lowered
  }
  for (const Tensor& t : {lin, mm, sdpa, la}) CHECK(t.dtype() == DType::bf16);
  CHECK(mm64.dtype() == DType::f64);
  CHECK(gap(lin, want_lin) == 0.0);
  CHECK(gap(mm, want_mm) == 0.0);
  CHECK(gap(sdpa, want_sdpa) == 0.0);
  CHECK(gap(la, want_la) == 0.0);
  // And they are not the f32 results: autocast did change the arithmetic.
  CHECK(gap(lin, linear(x, w, b)) > 0.0);
  CHECK(gap(lin, linear(x, w, b)) < 0.05);
}

TEST_CASE("autocast: the f32 list casts bf16 up and returns f32; other elementwise ops keep bf16") {
  Tensor xb = bf(rnd({4, 9}, 11)), w = rnd({9}, 12), bias = rnd({9}, 13);
  Tensor tgt = from_vector(std::vector<int64_t>{0, 3, 8, 2}, {4});
  AutocastGuard autocast;
  const Tensor x32 = xb.to(DType::f32);
  const Tensor sm = softmax(xb, -1), lsm = log_softmax(xb, -1), ln = layer_norm(xb, w, bias);
  const Tensor rn = rms_norm(xb, w), ce = cross_entropy(xb, tgt), mse = mse_loss(xb, x32);
  for (const Tensor& t : {sm, lsm, ln, rn, ce, mse}) CHECK(t.dtype() == DType::f32);
  CHECK(gap(sm, softmax(x32, -1)) == 0.0);
  CHECK(gap(ln, layer_norm(x32, w, bias)) == 0.0);
  CHECK(gap(ce, cross_entropy(x32, tgt)) == 0.0);
  CHECK(gelu(xb).dtype() == DType::bf16);
  CHECK(relu(xb).dtype() == DType::bf16);
  for (const Tensor& t : {exp(xb), log(exp(xb)), rsqrt(exp(xb)), sum(xb), cumsum(xb, 1)}) CHECK(t.dtype() == DType::f32);
  CHECK(gap(exp(xb), exp(x32)) == 0.0);
}

TEST_CASE("autocast: binary ops and where promote to the widest floating dtype") {
  Tensor a = rnd({3, 4}, 21), bb = bf(rnd({4}, 22));
  CHECK_THROWS_WITH_AS(add(a, bb), doctest::Contains("dtype mismatch"), Error);  // no autocast: an error
  AutocastGuard autocast;
  const Tensor s = add(a, bb);
  CHECK(s.dtype() == DType::f32);
  CHECK(gap(s, add(a, bb.to(DType::f32))) == 0.0);
  CHECK(mul(bb, a.to(DType::f64)).dtype() == DType::f64);
  CHECK(add(bb, bb).dtype() == DType::bf16);
  CHECK(add(bb, bb.to(DType::f16)).dtype() == DType::f32);  // neither half type holds the other
  CHECK(where(gt(a, 0.0), a, bb).dtype() == DType::f32);
  CHECK(lt(a, bb).dtype() == DType::boolean);
}

TEST_CASE("autocast: fused block ops follow the lists of the ops they fuse") {
  // A bf16 branch output (a linear's) meets f32 residuals, norm weights, biases and rope tables.
  Tensor res = rnd({2, 3, 8}, 61), branch = bf(rnd({2, 3, 8}, 62)), w = rnd({8}, 63), b = rnd({8}, 64);
  Tensor q = bf(rnd({2, 3, 4}, 65)), cos = rnd({3, 2}, 66), sin = rnd({3, 2}, 67);
  const Tensor b32 = branch.to(DType::f32);
  CHECK_THROWS_AS(add_layer_norm(res, branch, w, b), Error);  // without autocast: a dtype mismatch
  AutocastGuard autocast;
  const AddNormOut ln = add_layer_norm(res, branch, w, b), rn = add_rms_norm(res, branch, w);
  for (const Tensor& t : {ln.h, ln.y, rn.h, rn.y}) CHECK(t.dtype() == DType::f32);
  CHECK(gap(ln.y, layer_norm(add(res, b32), w, b)) < 1e-6);
  const Tensor g = bias_gelu(branch, b, "tanh");
  CHECK(g.dtype() == DType::f32);
  CHECK(gap(g, gelu(add(b32, b), "tanh")) < 1e-6);
  const Tensor r = rope(q, cos, sin);
  CHECK(r.dtype() == DType::f32);
  CHECK(gap(r, rope(q.to(DType::f32), cos, sin)) == 0.0);
}

TEST_CASE("autocast: gradients reach f32 leaves in f32, through the bf16 arithmetic") {
  Tensor x = rnd({5, 8}, 31), w = rnd({4, 8}, 32), b = rnd({4}, 33), g = rnd({5, 4}, 34);
  w.requires_grad_(true);
  b.requires_grad_(true);
  {
    AutocastGuard autocast;
    Tensor y = linear(x, w, b);  // bf16
    REQUIRE(y.dtype() == DType::bf16);
    sum(mul(y, g)).backward();  // inside the guard: the engine turns autocast off
  }
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == DType::f32);
  CHECK(b.grad().dtype() == DType::f32);
  // The weight gradient is gyᵀ·x computed from bf16 operands: gy = g rounded to bf16 (the product
  // y·g is f32 after promotion, and its gradient is cast to bf16 by the cast node), x in bf16.
  // Up to one bf16 rounding step (2^-8 relative): the two f32 sums may be taken in another order.
  const std::vector<double> got = to_vector<double>(w.grad());
  const std::vector<double> want = to_vector<double>(matmul(bf(g).to(DType::f32).t(), bf(x).to(DType::f32)));
  for (size_t i = 0; i < got.size(); ++i) CHECK(std::fabs(got[i] - want[i]) <= 0x1p-8 * std::fabs(want[i]) + 1e-30);
  CHECK(gap(w.grad(), matmul(g.t(), x)) < 0.05);
}

TEST_CASE("autocast: backward runs outside autocast") {
  // A graph built without autocast, differentiated inside a guard: its matmul backward must stay
  // in f32, so the gradient equals the one computed outside.
  Tensor a = rnd({6, 7}, 41), bm = rnd({7, 5}, 42);
  a.requires_grad_(true);
  Tensor y = matmul(a, bm);
  {
    AutocastGuard autocast;
    sum(mul(y, y)).backward();
  }
  const Tensor inside = a.grad().detach().clone();
  a.zero_grad();
  Tensor y2 = matmul(a, bm);
  sum(mul(y2, y2)).backward();
  CHECK(inside.dtype() == DType::f32);
  CHECK(gap(inside, a.grad()) == 0.0);
}

TEST_CASE("autocast: guards nest and restore; the state is per thread") {
  CHECK_FALSE(AutocastMode::is_enabled());
  {
    AutocastGuard on(DType::f16);
    CHECK(AutocastMode::is_enabled());
    CHECK(AutocastMode::dtype() == DType::f16);
    CHECK(matmul(rnd({2, 3}, 1), rnd({3, 2}, 2)).dtype() == DType::f16);
    bool other_thread = true;
    std::thread([&] { other_thread = AutocastMode::is_enabled(); }).join();
    CHECK_FALSE(other_thread);
    {
      AutocastGuard off(DType::bf16, false);
      CHECK_FALSE(AutocastMode::is_enabled());
      CHECK(matmul(rnd({2, 3}, 1), rnd({3, 2}, 2)).dtype() == DType::f32);
    }
    CHECK(AutocastMode::is_enabled());
    CHECK(AutocastMode::dtype() == DType::f16);
  }
  CHECK_FALSE(AutocastMode::is_enabled());
  CHECK_THROWS_WITH_AS([] { AutocastGuard guard(DType::f32); }(), doctest::Contains("must be bf16 or f16"), Error);
}

TEST_CASE("gemm: bf16 and f16 operands accumulate in f32 and round once") {
  // 4096 products of 1 · (1 + 2^-7), all exact in bf16: the f32 sum is 4128 (exact in bf16). A bf16
  // accumulator would stop growing at 512, where adding 1.0078 rounds to adding 2 or 0.
  for (DType t : {DType::bf16, DType::f16}) {
    const std::string name = dtype_name(t);
    CAPTURE(name);
    const int64_t K = 4096;
    Tensor a = full({1, 1, K}, 1.0, {t}), b = full({1, K, 1}, 1.0078125, {t});
    Tensor c = empty({1, 1, 1}, {t});
    backend_for(Device::cpu()).gemm(a, b, c, {});
    CHECK(c.item<double>() == 4128.0);
    // beta: c = 0.5 a·b + 2 c, and a transposed (column-major) operand.
    Tensor a2 = rnd({2, 3, 5}, 51, t), bt = rnd({2, 4, 5}, 52, t), c0 = rnd({2, 3, 4}, 53, t);
    Tensor c2 = c0.clone();
    backend_for(Device::cpu()).gemm(a2, bt.as_strided({2, 5, 4}, {20, 1, 5}, 0), c2, {0.5, 2.0});
    const Tensor want = add(mul(matmul(a2.to(DType::f64), transpose(bt.to(DType::f64), 1, 2)), 0.5),
                            mul(c0.to(DType::f64), 2.0));
    CHECK(c2.dtype() == t);
    // One rounding of an f32 result: within the unit roundoff of the half type (2^-8 relative for
    // bf16's 8 significant bits, 2^-11 for f16's 11).
    const std::vector<double> got = to_vector<double>(c2), ref = to_vector<double>(want);
    for (size_t i = 0; i < got.size(); ++i)
      CHECK(std::fabs(got[i] - ref[i]) <= (t == DType::bf16 ? 0x1p-8 : 0x1p-11) * std::fabs(ref[i]) + 1e-6);
  }
}

TEST_CASE("precision: names, parsing and the device check") {
  CHECK(parse_precision("f32") == Precision::f32);
  CHECK(parse_precision("tf32") == Precision::tf32);
  CHECK(parse_precision("bf16") == Precision::bf16);
  CHECK(std::string(precision_name(Precision::bf16)) == "bf16");
  CHECK_THROWS_WITH_AS(parse_precision("fp8"), doctest::Contains("unknown precision 'fp8'"), Error);
  CHECK_THROWS_WITH_AS(check_precision(Precision::tf32, Device::cpu()), doctest::Contains("use f32 or bf16"), Error);
  CHECK_NOTHROW(check_precision(Precision::bf16, Device::cpu()));
  {
    PrecisionGuard g(Precision::bf16);
    CHECK(AutocastMode::is_enabled());
  }
  PrecisionGuard g(Precision::f32);
  CHECK_FALSE(AutocastMode::is_enabled());
}

}  // namespace hh::test
