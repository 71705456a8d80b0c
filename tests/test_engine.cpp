// The autograd engine (shared sub-graphs, accumulation, grad mode, detach, explicit gradients,
// retain_graph, 100,000-op chains), the Philox generator streams and their statistics, the
// f16/bf16 conversions, and Tensor printing.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "autograd/ops.h"
#include "nn/layers.h"
#include "tests/op_table.h"
#include "train/optim.h"

namespace hh::test {
namespace {

Tensor leaf(std::vector<double> v) {
  Shape s{static_cast<int64_t>(v.size())};
  return from_vector(v, s, DType::f64).requires_grad_();
}

std::vector<double> grad_of(const Tensor& x) {
  REQUIRE(x.grad().defined());
  return to_vector<double>(x.grad());
}

struct Moments {
  double mean = 0, var = 0;
};
Moments moments(const std::vector<double>& v) {
  Moments m;
  for (double e : v) m.mean += e;
  m.mean /= static_cast<double>(v.size());
  for (double e : v) m.var += (e - m.mean) * (e - m.mean);
  m.var /= static_cast<double>(v.size() - 1);
  return m;
}

}  // namespace

// ---------------------------------------------------------------- engine

TEST_CASE("engine: a tensor used twice receives the sum of both gradients") {
  Tensor x = leaf({1, -2, 3});
  sum(add(mul(x, 2.0), mul(x, 3.0))).backward();
  CHECK(grad_of(x) == std::vector<double>{5, 5, 5});

  Tensor y = leaf({1, -2, 3});
  sum(mul(y, y)).backward();  // both inputs of one node
  CHECK(grad_of(y) == std::vector<double>{2, -4, 6});

  // Diamond: a feeds b twice and c once; every path is summed exactly once.
  Tensor z = leaf({0.5, 2});
  Tensor a = mul(z, 3.0);
  Tensor b = add(a, a);
  sum(add(b, mul(a, z))).backward();  // d/dz [6z + 3z^2] = 6 + 6z
  CHECK(grad_of(z) == std::vector<double>{9, 18});
}

TEST_CASE("engine: a node of several outputs gets their gradients in one call, per output") {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}).reshape({3, 2});
  std::vector<Tensor> p = unbind(x, 0);  // one node, three outputs
  REQUIRE(p.size() == 3);
  CHECK(p[0].grad_fn() == p[2].grad_fn());
  CHECK(p[0].grad_fn()->num_outputs == 3);
  CHECK((p[0].grad_output() == 0 && p[1].grad_output() == 1 && p[2].grad_output() == 2));
  // Output 0 used twice (summed in its slot), output 2 once, output 1 never (zero).
  Tensor l = leaf({1, 2, 3, 4, 5, 6});
  std::vector<Tensor> q = unbind(l.reshape({3, 2}), 0);
  sum(add(add(mul(q[0], 2.0), q[2]), q[0])).backward();
  CHECK(grad_of(l) == std::vector<double>{3, 3, 0, 0, 1, 1});
  // Backward from one output alone (the root is output 1 of the node).
  Tensor m = leaf({1, 2, 3, 4, 5, 6});
  unbind(m.reshape({3, 2}), 0)[1].backward(ones({2}, {DType::f64}));
  CHECK(grad_of(m) == std::vector<double>{0, 0, 1, 1, 0, 0});
  // The gradient buffer is laid out like the input: a piece of a permuted view scatters into the
  // permuted memory order, and the reshape back to the leaf's shape is a view.
  Tensor w = leaf({1, 2, 3, 4, 5, 6});
  std::vector<Tensor> cols = unbind(transpose(w.reshape({3, 2}), 0, 1), 0);  // (2,3) -> two (3,)
  sum(mul(cols[1], 10.0)).backward();
  CHECK(grad_of(w) == std::vector<double>{0, 10, 0, 10, 0, 10});
}

TEST_CASE("engine: gradients accumulate across backward calls until zero_grad") {
  Tensor x = leaf({1, 2});
  sum(mul(x, 3.0)).backward();
  sum(mul(x, 3.0)).backward();
  CHECK(grad_of(x) == std::vector<double>{6, 6});
  x.zero_grad();
  CHECK(!x.grad().defined());
  sum(mul(x, x)).backward();
  CHECK(grad_of(x) == std::vector<double>{2, 4});
}

TEST_CASE("engine: NoGradGuard records nothing; detach cuts the graph") {
  Tensor x = leaf({1, 2});
  {
    NoGradGuard guard;
    Tensor y = mul(x, 2.0);
    CHECK(!y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    CHECK(!GradMode::is_enabled());
  }
  CHECK(GradMode::is_enabled());
  Tensor y = mul(x, 2.0);
  CHECK(y.requires_grad());
  CHECK(y.grad_fn() != nullptr);

  Tensor d = detach(mul(x, 5.0));
  CHECK(!d.requires_grad());
  CHECK(d.grad_fn() == nullptr);
  sum(add(mul(x, 2.0), d)).backward();
  CHECK(grad_of(x) == std::vector<double>{2, 2});  // nothing flows through the detached branch
  check_throws([&] { sum(d).backward(); }, {"backward: tensor does not require grad"});
}

TEST_CASE("engine: non-scalar outputs need an explicit gradient of the same shape") {
  Tensor x = leaf({1, 2, 3});
  Tensor y = mul(x, x);
  check_throws([&] { y.backward(); }, {"backward: grad can be implied only for a one-element output", "(3,)"});
  check_throws([&] { y.backward(ones({2}, DType::f64)); }, {"backward: gradient shape (2,)", "(3,)"});
  y.backward(from_vector(std::vector<double>{1, 0.5, -2}, {3}, DType::f64));
  CHECK(grad_of(x) == std::vector<double>{2, 2, -12});
}

TEST_CASE("engine: retain_graph allows a second backward; without it the second one throws") {
  Tensor x = leaf({1, 2});
  Tensor y = sum(mul(x, x));
  y.backward(Tensor(), true);
  y.backward();
  CHECK(grad_of(x) == std::vector<double>{4, 8});
  check_throws([&] { y.backward(); }, {"second time", "retain_graph"});
}

TEST_CASE("engine: an in-place write to a saved tensor makes backward throw, naming the op") {
  SUBCASE("a leaf written after use (grad would be 0, true 6)") {
    Tensor x = leaf({3});
    Tensor y = mul(x, x);  // saves x
    {
      NoGradGuard ng;  // the only way to write into a leaf that requires grad
      copy_(x, from_vector(std::vector<double>{0}, {1}, DType::f64));
    }
    check_throws([&] { y.backward(ones({1}, DType::f64)); },
                 {"backward", "a tensor saved by mul was modified in place after it was saved",
                  "version 1, expected 0"});
  }
  SUBCASE("y = 2x written through a detached alias after y*y saved it") {
    Tensor x = leaf({4.5});
    Tensor y = mul(x, 2.0);
    Tensor z = mul(y, y);
    copy_(y.detach(), from_vector(std::vector<double>{9}, {1}, DType::f64));  // same storage as y
    check_throws([&] { z.backward(ones({1}, DType::f64)); }, {"saved by mul", "modified in place"});
  }
  SUBCASE("a saved output (exp) written in place") {
    Tensor x = leaf({1, 2});
    Tensor y = exp(x);
    Tensor loss = sum(y);
    copy_(y.detach(), zeros({2}, DType::f64));
    check_throws([&] { loss.backward(); }, {"saved by exp", "version 1, expected 0"});
  }
  SUBCASE("writing a tensor an op did not save is fine") {
    Tensor x = leaf({1, 2});
    Tensor c = from_vector(std::vector<double>{5, 6}, {2}, DType::f64);
    Tensor y = sum(add(x, c));  // add saves neither input
    copy_(c, zeros({2}, DType::f64));
    y.backward();
    CHECK(grad_of(x) == std::vector<double>{1, 1});
  }
}

TEST_CASE("engine: copy_ into a tensor that requires grad is refused while grad mode is on") {
  // copy_ is not differentiable: into y = 2x it would silently give dL/dx = 36 where the true
  // gradient is 0 (the copy cut y off x); into a leaf it would change a tensor the graph reads.
  Tensor x = leaf({4.5});
  Tensor y = mul(x, 2.0);
  Tensor nine = from_vector(std::vector<double>{9}, {1}, DType::f64);
  check_throws([&] { copy_(y, nine); }, {"copy_", "requires grad", "NoGradGuard"});
  check_throws([&] { copy_(x, nine); }, {"copy_", "requires grad"});
  check_throws([&] { copy_(slice(x, 0, 0, 1), nine); }, {"copy_", "requires grad"});
  NoGradGuard ng;  // what optimizers and load_state_dict do
  copy_(x, nine);
  CHECK(to_vector<double>(x) == std::vector<double>{9});
}

TEST_CASE("engine: optimizer steps write parameters in place; training loops are unaffected") {
  for (bool adamw : {true, false}) {
    Generator g(3);
    nn::Linear lin(3, 2, true, {g});
    std::unique_ptr<train::Optimizer> opt;
    if (adamw)
      opt = std::make_unique<train::AdamW>(train::single_group(lin, 0.0), 1e-2);
    else
      opt = std::make_unique<train::SGD>(train::single_group(lin, 0.0), 1e-2, 0.9);
    Tensor x = randn({4, 3}, g);
    for (int step = 0; step < 3; ++step) {  // forward, backward, step: never throws
      Tensor loss = sum(square(lin.forward(x)));
      opt->zero_grad();
      loss.backward();
      opt->step();
    }
    // A graph kept across a step read the old weight: its second backward must not run.
    Tensor loss = sum(square(lin.forward(x)));
    loss.backward(Tensor(), true);
    opt->step();
    check_throws([&] { loss.backward(); }, {"saved by linear", "modified in place"});
  }
}

TEST_CASE("engine: a chain of 100,000 ops backprops and tears down without recursion") {
  const int n = 100000;
  Tensor x = full({1}, 1.0, DType::f64).requires_grad_();
  {
    Tensor y = x;
    for (int i = 0; i < n; ++i) y = mul(y, 1.0001);
    CHECK(y.item<double>() == doctest::Approx(std::pow(1.0001, n)).epsilon(1e-9));
    y.backward();
  }  // the released chain is destroyed here
  CHECK(x.grad().item<double>() == doctest::Approx(std::pow(1.0001, n)).epsilon(1e-9));

  // A chain whose nodes still hold their saved tensors (no backward) is torn down as well.
  {
    Tensor y = x;
    for (int i = 0; i < n; ++i) y = add(y, x);
    CHECK(y.item<double>() == n + 1);
  }
}

// ---------------------------------------------------------------- RNG

TEST_CASE("generator: same seed and offset give the same stream; others differ") {
  Generator a(42), b(42), c(42, 1), d(43);
  auto ra = to_vector<double>(rand({1000}, a)), rb = to_vector<double>(rand({1000}, b));
  auto rc = to_vector<double>(rand({1000}, c)), rd = to_vector<double>(rand({1000}, d));
  CHECK(ra == rb);
  int same_c = 0, same_d = 0;
  for (size_t i = 0; i < ra.size(); ++i) {
    same_c += ra[i] == rc[i];
    same_d += ra[i] == rd[i];
  }
  CHECK(same_c < 5);
  CHECK(same_d < 5);
  // Offset 1 is the same stream shifted by one block (4 f32 uniforms).
  for (size_t i = 0; i + 4 < ra.size(); ++i) REQUIRE(rc[i] == ra[i + 4]);
  CHECK(to_vector<double>(randn({64}, a)) == to_vector<double>(randn({64}, b)));
  for (double v : ra) {
    REQUIRE(v > 0.0);
    REQUIRE(v <= 1.0);
  }
}

TEST_CASE("generator: draws advance the offset by whole blocks") {
  Generator g(7);
  rand({16}, g);
  CHECK(g.offset() == 4);  // 4 f32 uniforms per block
  rand({16}, g, {DType::f64});
  CHECK(g.offset() == 12);  // 2 f64 uniforms per block
  randn({5}, g);
  CHECK(g.offset() == 15);  // 2 normals per block, rounded up

  // Two draws of n (a multiple of 4) are one draw of 2n.
  Generator g1(11), g2(11);
  auto first = to_vector<double>(rand({8}, g1)), second = to_vector<double>(rand({8}, g1));
  auto both = to_vector<double>(rand({16}, g2));
  first.insert(first.end(), second.begin(), second.end());
  CHECK(first == both);
  // Otherwise the second draw starts at the next whole block.
  Generator g3(11);
  rand({5}, g3);
  auto tail = to_vector<double>(rand({3}, g3));
  CHECK(tail == std::vector<double>(both.begin() + 8, both.begin() + 11));
}

TEST_CASE("generator: rand, randn, randint and bernoulli statistics") {
  const int64_t n = 100000;
  Generator g(2024);
  Moments u = moments(to_vector<double>(rand({n}, g)));
  CHECK(std::fabs(u.mean - 0.5) < 0.005);
  CHECK(std::fabs(u.var - 1.0 / 12) < 0.002);

  Moments u2 = moments(to_vector<double>(uniform({n}, -2.0, 4.0, g, {DType::f64})));
  CHECK(std::fabs(u2.mean - 1.0) < 0.03);
  CHECK(std::fabs(u2.var - 3.0) < 0.08);

  auto z = to_vector<double>(randn({n}, g));
  Moments m = moments(z);
  CHECK(std::fabs(m.mean) < 0.015);
  CHECK(std::fabs(m.var - 1.0) < 0.02);
  int64_t within1 = 0;
  for (double v : z) within1 += std::fabs(v) < 1.0;
  CHECK(std::fabs(static_cast<double>(within1) / n - 0.6827) < 0.008);  // normal, not just unit variance

  auto ri = to_vector<int64_t>(randint(0, 10, {n}, g));
  std::vector<int64_t> counts(10, 0);
  for (int64_t v : ri) {
    REQUIRE(v >= 0);
    REQUIRE(v < 10);
    ++counts[static_cast<size_t>(v)];
  }
  for (int64_t c : counts) CHECK(std::abs(c - n / 10) < 600);

  auto bern = to_vector<double>(bernoulli({n}, 0.3, g));
  double ones_count = 0;
  for (double v : bern) {
    REQUIRE((v == 0.0 || v == 1.0));
    ones_count += v;
  }
  CHECK(std::fabs(ones_count / n - 0.3) < 0.008);
}

// ---------------------------------------------------------------- f16 / bf16

TEST_CASE("f16 conversions: known values, subnormals, specials, round to nearest even") {
  auto bits_of = [](float f) { return float_to_f16(f); };
  CHECK(bits_of(1.0f) == 0x3C00);
  CHECK(bits_of(-2.5f) == 0xC100);
  CHECK(bits_of(65504.0f) == 0x7BFF);
  CHECK(bits_of(65519.0f) == 0x7BFF);
  CHECK(bits_of(65520.0f) == 0x7C00);  // halfway to 65536: rounds to even, which is inf
  CHECK(bits_of(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK(bits_of(-std::numeric_limits<float>::infinity()) == 0xFC00);
  uint16_t nan = bits_of(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan & 0x7C00) == 0x7C00);
  CHECK((nan & 0x03FF) != 0);
  CHECK(std::isnan(f16_to_float(nan)));
  // Subnormals: smallest normal, largest subnormal, smallest subnormal; 6.1e-5 is subnormal in f16.
  CHECK(bits_of(6.103515625e-05f) == 0x0400);
  CHECK(bits_of(6.1e-5f) == 0x03FF);
  CHECK(f16_to_float(0x03FF) == 1023.0f * std::ldexp(1.0f, -24));
  CHECK(f16_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(bits_of(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(bits_of(std::ldexp(1.0f, -25)) == 0x0000);         // tie: rounds to even 0
  CHECK(bits_of(3 * std::ldexp(1.0f, -25)) == 0x0002);     // tie between 1 and 2 ulps: even
  CHECK(bits_of(-std::ldexp(1.0f, -24)) == 0x8001);
  // Normal rounding: ulp(1) = 2^-10.
  CHECK(bits_of(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);
  CHECK(bits_of(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);
  CHECK(bits_of(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3C01);
  for (uint16_t h : {0x3C00, 0xC100, 0x7BFF, 0x0400, 0x03FF, 0x0001, 0x7C00, 0xFC00, 0x8000})
    CHECK(float_to_f16(f16_to_float(h)) == h);

  // The same through tensors (copy/cast kernels).
  const double inf = std::numeric_limits<double>::infinity();
  Tensor t = from_vector(std::vector<double>{1.0, -2.5, 65504, 6.1e-5, inf, std::nan("")}, {6}, DType::f16);
  auto back = to_vector<double>(t);
  CHECK(back[0] == 1.0);
  CHECK(back[1] == -2.5);
  CHECK(back[2] == 65504);
  CHECK(back[3] == 1023 * std::ldexp(1.0, -24));
  CHECK(back[4] == inf);
  CHECK(std::isnan(back[5]));
}

TEST_CASE("bf16 conversions: known values, specials, round to nearest even") {
  CHECK(float_to_bf16(1.0f) == 0x3F80);
  CHECK(float_to_bf16(-2.5f) == 0xC020);
  CHECK(float_to_bf16(65504.0f) == 0x4780);  // 8 significant bits: 65504 rounds to 65536
  CHECK(float_to_bf16(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);
  CHECK(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);
  CHECK(float_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3F81);
  CHECK(bf16_to_float(0x0001) == std::ldexp(1.0f, -133));  // f32 subnormals survive
  CHECK(float_to_bf16(std::ldexp(1.0f, -133)) == 0x0001);
  for (uint16_t b : {0x3F80, 0xC020, 0x4780, 0x7F80, 0xFF80, 0x0001, 0x8000})
    CHECK(float_to_bf16(bf16_to_float(b)) == b);
  Tensor t = from_vector(std::vector<double>{1.0, -2.5, 65504, 3.0 + 1.0 / 128}, {4}, DType::bf16);
  CHECK(to_vector<double>(t) == std::vector<double>{1.0, -2.5, 65536, 3.0});  // 3+1/128 is a tie: even
}

// ---------------------------------------------------------------- printing

TEST_CASE("Tensor::str prints like PyTorch") {
  CHECK(from_vector(std::vector<double>{1, 2.5, -3, 4}, {2, 2}).str() ==
        "tensor([[1.0000, 2.5000],\n        [-3.0000, 4.0000]], dtype=f32)");
  CHECK(arange(3, DType::i64).str() == "tensor([0, 1, 2], dtype=i64)");
  CHECK(arange(10).str() == "tensor([0.0000, 1.0000, 2.0000, ..., 7.0000, 8.0000, 9.0000], dtype=f32)");
  CHECK(scalar_tensor(3.5).str() == "tensor(3.5000, dtype=f32)");
  CHECK(from_vector(std::vector<double>{1, 2}, {2}).requires_grad_().str() ==
        "tensor([1.0000, 2.0000], dtype=f32, requires_grad=true)");
  CHECK(zeros({2, 1, 2}, DType::f64).str() == "tensor([[[0.0000, 0.0000]],\n        [[0.0000, 0.0000]]], dtype=f64)");
  // A non-contiguous view prints in logical order.
  CHECK(arange(4).reshape({2, 2}).t().str() == "tensor([[0.0000, 2.0000],\n        [1.0000, 3.0000]], dtype=f32)");
  CHECK(Tensor().str() == "tensor(undefined)");
}

}  // namespace hh::test
