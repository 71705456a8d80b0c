// Op-table rows for the fused attention ops (chunked causal linear attention, softmax attention),
// and the fused softmax attention held against the composed one (matmul + masked softmax + matmul)
// at a length that spans several tiles.
#include <cmath>
#include <limits>
#include <vector>

#include "core/backend.h"
#include "core/parallel.h"
#include "nn/attention.h"
#include "tests/op_table.h"

namespace hh::test {
namespace {

// Plain causal linear attention: y_i = Σ_{j<=i} (q_i·k_j) v_j / (Σ_{j<=i} q_i·k_j + eps).
Host causal_linear_ref(const std::vector<Host>& in, double eps) {
  const Host &q = in[0], &k = in[1], &v = in[2];
  const int64_t B = q.shape[0], H = q.shape[1], L = q.shape[2], F = q.shape[3], D = v.shape[3];
  Host out{v.shape, std::vector<double>(v.v.size())};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        double den = eps;
        std::vector<double> num(static_cast<size_t>(D), 0.0);
        for (int64_t j = 0; j <= i; ++j) {
          double a = 0;
          for (int64_t f = 0; f < F; ++f) a += q.at({b, h, i, f}) * k.at({b, h, j, f});
          den += a;
          for (int64_t d = 0; d < D; ++d) num[static_cast<size_t>(d)] += a * v.at({b, h, j, d});
        }
        for (int64_t d = 0; d < D; ++d)
          out.v[static_cast<size_t>(((b * H + h) * L + i) * D + d)] = num[static_cast<size_t>(d)] / den;
      }
  return out;
}

OpSpec spec(const std::string& variant, Shape qs, Shape vs, int64_t chunk) {
  OpSpec s;
  s.op = "linear_attention_causal";
  s.variant = variant;
  s.shapes = {qs, qs, vs};
  s.lo = 0.05;  // positive features, like every feature map's output
  s.hi = 1.0;
  s.fn = [chunk](const std::vector<Tensor>& x) { return linear_attention_causal(x[0], x[1], x[2], chunk, 1e-6); };
  s.reference = [](const std::vector<Host>& in) { return causal_linear_ref(in, 1e-6); };
  s.errors = [] {
    Tensor q = ones({1, 1, 4, 3}), v = ones({1, 1, 5, 2});
    check_throws([&] { linear_attention_causal(q, q, v); }, {"linear_attention_causal", "(1, 1, 5, 2)"});
    check_throws([&] { linear_attention_causal(q, ones({1, 1, 4, 2}), ones({1, 1, 4, 2})); },
                 {"linear_attention_causal", "(1, 1, 4, 3)", "(1, 1, 4, 2)"});
    check_throws([&] { linear_attention_causal(q, q, ones({1, 1, 4, 2}), 0); }, {"linear_attention_causal", "chunk"});
    check_throws([&] { linear_attention_causal(q, q, ones({1, 1, 4, 2}, DType::f64)); },
                 {"linear_attention_causal", "f32", "f64"});
  };
  return s;
}

const bool reg = add_specs({
    spec("one chunk", {1, 2, 5, 3}, {1, 2, 5, 2}, 64),
    spec("chunk 2, ragged tail", {2, 1, 7, 3}, {2, 1, 7, 4}, 2),
    spec("chunk 1", {1, 1, 4, 2}, {1, 1, 4, 3}, 1),
});

// ---- softmax attention ----

// Plain softmax attention: out_i = Σ_j softmax_j(scale q_i·k_j) v_j over j < Lk (j <= i when causal).
Host sdpa_ref(const std::vector<Host>& in, bool causal, double scale) {
  const Host &q = in[0], &k = in[1], &v = in[2];
  const int64_t B = q.shape[0], H = q.shape[1], Lq = q.shape[2], D = q.shape[3], Lk = k.shape[2], Dv = v.shape[3];
  const double s = scale < 0 ? 1.0 / std::sqrt(static_cast<double>(D)) : scale;
  Host out{{B, H, Lq, Dv}, std::vector<double>(static_cast<size_t>(B * H * Lq * Dv))};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        const int64_t n = causal ? i + 1 : Lk;
        std::vector<double> w(static_cast<size_t>(n));
        double mx = -std::numeric_limits<double>::infinity(), total = 0;
        for (int64_t j = 0; j < n; ++j) {
          double a = 0;
          for (int64_t d = 0; d < D; ++d) a += q.at({b, h, i, d}) * k.at({b, h, j, d});
          w[static_cast<size_t>(j)] = a * s;
          mx = std::max(mx, a * s);
        }
        for (double& x : w) total += (x = std::exp(x - mx));
        for (int64_t c = 0; c < Dv; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < n; ++j) acc += w[static_cast<size_t>(j)] * v.at({b, h, j, c});
          out.v[static_cast<size_t>(((b * H + h) * Lq + i) * Dv + c)] = acc / total;
        }
      }
  return out;
}

OpSpec sdpa_spec(const std::string& variant, Shape qs, Shape ks, Shape vs, bool causal, double scale = -1) {
  OpSpec s;
  s.op = "scaled_dot_product_attention";
  s.variant = variant;
  s.shapes = {qs, ks, vs};
  s.lo = -1.5;
  s.hi = 1.5;
  s.fn = [causal, scale](const std::vector<Tensor>& x) {
    return scaled_dot_product_attention(x[0], x[1], x[2], causal, scale);
  };
  s.reference = [causal, scale](const std::vector<Host>& in) { return sdpa_ref(in, causal, scale); };
  s.errors = [] {
    const char* op = "scaled_dot_product_attention";
    Tensor q = ones({1, 2, 4, 3});
    check_throws([&] { scaled_dot_product_attention(q, ones({1, 2, 4, 2}), ones({1, 2, 4, 3}), false); },
                 {op, "(1, 2, 4, 2)", "(1, 2, 4, 3)"});
    check_throws([&] { scaled_dot_product_attention(q, q, ones({1, 2, 5, 3}), false); }, {op, "(1, 2, 5, 3)"});
    check_throws([&] { scaled_dot_product_attention(q, ones({1, 2, 6, 3}), ones({1, 2, 6, 3}), true); },
                 {op, "causal", "(1, 2, 4, 3)", "(1, 2, 6, 3)"});
    check_throws([&] { scaled_dot_product_attention(ones({2, 4, 3}), q, q, false); }, {op, "(2, 4, 3)"});
    check_throws([&] { scaled_dot_product_attention(q, q, ones({1, 2, 4, 3}, DType::f64), false); },
                 {op, "f32", "f64"});
    check_throws([&] { scaled_dot_product_attention(q, q, q, false, 0.0); }, {op, "scale"});
  };
  return s;
}

const bool reg_sdpa = add_specs({
    sdpa_spec("causal", {2, 1, 6, 3}, {2, 1, 6, 3}, {2, 1, 6, 4}, true),
    sdpa_spec("full, Lk != Lq", {1, 2, 5, 3}, {1, 2, 4, 3}, {1, 2, 4, 2}, false),
    sdpa_spec("L = 1", {1, 1, 1, 4}, {1, 1, 1, 4}, {1, 1, 1, 3}, true),
    sdpa_spec("explicit scale", {1, 1, 3, 2}, {1, 1, 7, 2}, {1, 1, 7, 3}, false, 0.9),
    // 70 = one full 64-row tile + a ragged one, in queries and in keys
    sdpa_spec("causal, L = 70 spans two tiles", {1, 1, 70, 2}, {1, 1, 70, 2}, {1, 1, 70, 2}, true),
    sdpa_spec("full, L = 70 spans two tiles", {1, 1, 70, 2}, {1, 1, 70, 2}, {1, 1, 70, 2}, false),
});

// softmax(scale q kᵀ, masked above the diagonal when causal) v from primitive ops.
// Softmax attention on a packed projection: x (B,L,3,H,D), the layout of a fused q/k/v projection
// (GPT-2's c_attn), permuted to (3,B,H,L,D) and unbound into q, k, v views: one unbind node whose
// gradient buffer the three attention gradients fill.
OpSpec packed_spec(const std::string& variant, Shape xs, bool causal) {
  OpSpec s;
  s.op = "unbind";
  s.variant = "q, k, v of a packed projection into scaled_dot_product_attention, " + variant;
  s.shapes = {xs};
  s.lo = -1.5;
  s.hi = 1.5;
  s.fn = [causal](const std::vector<Tensor>& x) {
    std::vector<Tensor> qkv = unbind(permute(x[0], {2, 0, 3, 1, 4}), 0);
    return scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], causal);
  };
  s.reference = [causal](const std::vector<Host>& in) {
    const Host& x = in[0];
    const int64_t B = x.shape[0], L = x.shape[1], H = x.shape[3], D = x.shape[4];
    std::vector<Host> qkv(3, Host{{B, H, L, D}, std::vector<double>(static_cast<size_t>(B * H * L * D))});
    for (int64_t w = 0; w < 3; ++w)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t l = 0; l < L; ++l)
            for (int64_t d = 0; d < D; ++d)
              qkv[static_cast<size_t>(w)].v[static_cast<size_t>(((b * H + h) * L + l) * D + d)] = x.at({b, l, w, h, d});
    return sdpa_ref(qkv, causal, -1);
  };
  s.errors = [] { check_throws([] { unbind(zeros({}), 0); }, {"unbind: cannot unbind a 0-d tensor"}); };
  return s;
}

const bool reg_packed = add_specs({
    packed_spec("causal", {2, 6, 3, 2, 3}, true),
    // 6 groups: the CPU backward's one-pass scheme on 2 threads; 70 = two tiles
    packed_spec("full, L = 70, 6 groups", {2, 70, 3, 3, 4}, false),
});

Tensor sdpa_composed(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  Tensor s = mul(matmul(q, transpose(k, -2, -1)), 1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  if (causal) {
    const int64_t L = q.size(-2);
    Tensor i = arange(L).reshape({L, 1}), j = arange(L).reshape({1, L});
    s = masked_fill(s, gt(j, i), -std::numeric_limits<double>::infinity());
  }
  return matmul(softmax(s, -1), v);
}

}  // namespace

TEST_CASE("scaled_dot_product_attention: fused vs composed at L = 300 (values and gradients)") {
  for (DType t : {DType::f64, DType::f32})
    for (bool causal : {true, false}) {
      INFO(dtype_name(t) << (causal ? " causal" : " full"));
      Generator g(5);
      std::vector<Tensor> base = {uniform({2, 2, 300, 16}, -2, 2, g, {t}), uniform({2, 2, 300, 16}, -2, 2, g, {t}),
                                  uniform({2, 2, 300, 8}, -1, 1, g, {t})};
      Tensor w = uniform({2, 2, 300, 8}, -1, 1, g, {t});
      auto leaves = [&] {
        std::vector<Tensor> xs;
        for (const Tensor& x : base) xs.push_back(x.clone().requires_grad_(true));
        return xs;
      };
      std::vector<Tensor> xf = leaves(), xc = leaves();
      Tensor yf = scaled_dot_product_attention(xf[0], xf[1], xf[2], causal);
      Tensor yc = sdpa_composed(xc[0], xc[1], xc[2], causal);
      const double tol = t == DType::f64 ? 1e-12 : 2e-6;  // outputs are O(1): f32 rounding
      CHECK_MESSAGE(max_abs_diff(yf, yc) <= tol, "values differ by ", max_abs_diff(yf, yc));
      sum(mul(yf, w)).backward();
      sum(mul(yc, w)).backward();
      for (size_t i = 0; i < 3; ++i) {
        INFO("gradient of input " << i);
        REQUIRE(xf[i].grad().defined());
        const double d = max_abs_diff(xf[i].grad(), xc[i].grad());
        CHECK_MESSAGE(d <= 5 * tol, "gradients differ by ", d);
      }
    }
}

TEST_CASE("scaled_dot_product_attention: the CPU backward's one-pass and two-pass schemes give the same bits") {
  // The CPU backward runs one pass per (batch, head) group when there are at least two groups per
  // thread, else two passes over tiles. Every head of x16 holds the same data as x1's single head,
  // so each must get x1's gradients bit for bit (lengths that end mid-tile, causal and full).
  if (test_device().is_cuda()) return;  // the CPU kernel's schemes
  struct ThreadsScope {
    int saved = num_threads();
    ~ThreadsScope() { set_num_threads(saved); }
  } scope;
  set_num_threads(2);  // 1 group: the two passes; 16 groups: one pass
  for (bool causal : {true, false}) {
    INFO((causal ? "causal" : "full"));
    Generator g(11);
    std::vector<Tensor> one = {uniform({1, 1, 150, 16}, -2, 2, g), uniform({1, 1, 150, 16}, -2, 2, g),
                               uniform({1, 1, 150, 8}, -1, 1, g)};
    Tensor w1 = uniform({1, 1, 150, 8}, -1, 1, g);
    std::vector<Tensor> x1, x16;
    for (const Tensor& x : one) {
      x1.push_back(x.clone().requires_grad_(true));
      x16.push_back(contiguous(expand(x, {1, 16, -1, -1})).requires_grad_(true));
    }
    sum(mul(scaled_dot_product_attention(x1[0], x1[1], x1[2], causal), w1)).backward();
    sum(mul(scaled_dot_product_attention(x16[0], x16[1], x16[2], causal), expand(w1, {1, 16, -1, -1}))).backward();
    for (size_t i = 0; i < 3; ++i) {
      INFO("gradient of input " << i);
      const Host a = to_host(x1[i].grad()), b = to_host(x16[i].grad());
      const size_t n = a.v.size();
      REQUIRE(b.v.size() == 16 * n);
      size_t differ = 0;
      for (size_t h = 0; h < 16; ++h)
        for (size_t j = 0; j < n; ++j) differ += b.v[h * n + j] != a.v[j];
      CHECK(differ == 0);
    }
  }
}

TEST_CASE("scaled_dot_product_attention: head views of a packed projection need no copies and give the same bits") {
  // x (B,L,3,H,D) as a fused q/k/v projection lays it out. The op on x's head views (unbound by one
  // node, or three selects) must give what it gives on contiguous copies, bit for bit; on the CPU
  // the output comes back in (B,L,H,D) memory order, so merging the heads is a view.
  Generator g(21);
  const int64_t B = 2, L = 70, H = 3, D = 8;
  Tensor base = uniform({B, L, 3, H, D}, -1.5, 1.5, g), w = uniform({B, H, L, D}, -1, 1, g);
  auto run = [&](int mode, Tensor& grad) {
    Tensor x = base.clone().requires_grad_(true);
    Tensor qkv = permute(x, {2, 0, 3, 1, 4});  // (3,B,H,L,D) view
    Tensor y;
    if (mode == 0) {
      std::vector<Tensor> parts = unbind(qkv, 0);
      y = scaled_dot_product_attention(parts[0], parts[1], parts[2], true);
    } else if (mode == 1) {
      y = scaled_dot_product_attention(select(qkv, 0, 0), select(qkv, 0, 1), select(qkv, 0, 2), true);
    } else {
      y = scaled_dot_product_attention(contiguous(select(qkv, 0, 0)), contiguous(select(qkv, 0, 1)),
                                       contiguous(select(qkv, 0, 2)), true);
    }
    if (!test_device().is_cuda() && mode < 2) CHECK(transpose(y, 1, 2).is_contiguous());
    sum(mul(y, w)).backward();
    grad = x.grad();
    return y;
  };
  Tensor g0, g1, g2;
  const Host y0 = to_host(run(0, g0)), y1 = to_host(run(1, g1)), y2 = to_host(run(2, g2));
  CHECK(y0.v == y2.v);
  CHECK(y1.v == y2.v);
  CHECK(to_host(g0).v == to_host(g2).v);
  CHECK(to_host(g1).v == to_host(g2).v);
}

TEST_CASE("scaled_dot_product_attention: a key mask in the fused kernel equals the composed weights") {
  // Padding keys (whole 64-key tiles of them, and single ones) are never attended; batch 1 has no
  // real key in its first tile and batch 2 none at all (zeros, no gradient). Causal and full,
  // f64 and f32, against softmax_attention's materialized path.
  if (!backend_for(test_device()).flash_attention_takes_key_mask()) return;
  const int64_t B = 3, H = 2, L = 150, D = 8;
  std::vector<uint8_t> keep(static_cast<size_t>(B * L));
  for (int64_t l = 0; l < L; ++l) {
    keep[static_cast<size_t>(l)] = l < 100 && l % 7 != 3;            // a padded tail and scattered holes
    keep[static_cast<size_t>(L + l)] = l >= 64 && l < 140;           // nothing in the first tile
    keep[static_cast<size_t>(2 * L + l)] = 0;                        // no real key
  }
  Tensor mask = to_dtype(from_vector(std::vector<int64_t>(keep.begin(), keep.end()), {B, L}), DType::boolean);
  for (DType t : {DType::f64, DType::f32})
    for (bool causal : {false, true}) {
      INFO(dtype_name(t) << (causal ? " causal" : " full"));
      Generator g(31);
      std::vector<Tensor> base = {uniform({B, H, L, D}, -2, 2, g, {t}), uniform({B, H, L, D}, -2, 2, g, {t}),
                                  uniform({B, H, L, D}, -1, 1, g, {t})};
      Tensor w = uniform({B, H, L, D}, -1, 1, g, {t});
      auto leaves = [&] {
        std::vector<Tensor> xs;
        for (const Tensor& x : base) xs.push_back(x.clone().requires_grad_(true));
        return xs;
      };
      std::vector<Tensor> xf = leaves(), xc = leaves();
      Tensor yf = scaled_dot_product_attention(xf[0], xf[1], xf[2], causal, -1, mask);
      Tensor yc = matmul(nn::softmax_attention_weights(xc[0], xc[1], causal, mask), xc[2]);
      const double tol = t == DType::f64 ? 1e-12 : 2e-6;
      CHECK_MESSAGE(max_abs_diff(yf, yc) <= tol, "values differ by ", max_abs_diff(yf, yc));
      sum(mul(yf, w)).backward();
      sum(mul(yc, w)).backward();
      for (size_t i = 0; i < 3; ++i) {
        INFO("gradient of input " << i);
        const double d = max_abs_diff(xf[i].grad(), xc[i].grad());
        CHECK_MESSAGE(d <= 5 * tol, "gradients differ by ", d);
      }
      // The batch with no real key: zero output.
      CHECK(max_abs_diff(select(yf, 0, 2), zeros({H, L, D}, {t})) == 0.0);
    }
  check_throws([&] { scaled_dot_product_attention(ones({1, 1, 4, 2}), ones({1, 1, 4, 2}), ones({1, 1, 4, 2}), false, -1,
                                                  ones({1, 5})); },
               {"scaled_dot_product_attention", "key mask", "(1, 5)"});
}

TEST_CASE("softmax attention: a query with every allowed key masked gets zeros, never the future") {
  // Decision (docs/ARCHITECTURE.md): a fully masked row outputs zeros (as FlashAttention) and
  // passes no gradient. Before, the composed path averaged all values, future ones included.
  Generator g(4);
  const int64_t L = 4, D = 3;
  Tensor q = uniform({1, 2, L, D}, -1, 1, g, {DType::f64}), k = uniform({1, 2, L, D}, -1, 1, g, {DType::f64});
  Tensor v = uniform({1, 2, L, D}, -1, 1, g, {DType::f64});
  Tensor mask = from_vector(std::vector<double>{0, 1, 1, 1}, {1, L}, {DType::boolean});  // key 0 padded
  std::vector<Tensor> in{q.requires_grad_(), k.requires_grad_(), v.requires_grad_()};
  Tensor w;
  Tensor y = nn::softmax_attention(in[0], in[1], in[2], true, mask, &w);
  // Query 0 may only see key 0, which is masked: zeros. Every other row sums to one over j <= i.
  auto wv = to_vector<double>(w), yv = to_vector<double>(y);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < L; ++i) {
      double row = 0;
      for (int64_t j = 0; j < L; ++j) {
        double a = wv[static_cast<size_t>((h * L + i) * L + j)];
        row += a;
        if (j > i || j == 0) CHECK_MESSAGE(a == 0.0, "head ", h, " query ", i, " sees key ", j);
      }
      CHECK(row == doctest::Approx(i == 0 ? 0.0 : 1.0));
      if (i == 0)
        for (int64_t c = 0; c < D; ++c) CHECK(yv[static_cast<size_t>((h * L) * D + c)] == 0.0);
    }
  // The gradient is that of the function computed (the zero rows are constant).
  auto fn = [&](const std::vector<Tensor>& t) { return nn::softmax_attention(t[0], t[1], t[2], true, mask); };
  gradcheck(fn, {q, k, v}, {0, 1, 2}, "fully masked row");
}

TEST_CASE("scaled_dot_product_attention: a row whose scores are all -inf gives zeros and zero gradients") {
  // f32 overflow: q_0·k_0 = -1e20·1e20 = -inf, and causal query 0 sees only key 0.
  const int64_t L = 5;
  std::vector<double> qv{-1e20, 0.3e-20, -0.7e-20, 1.1e-20, 0.2e-20}, kv{1e20, 0.5, -0.4, 0.9, -1.3};
  Generator g(8);
  Tensor v = uniform({1, 1, L, 2}, -1, 1, g).requires_grad_();
  Tensor q = from_vector(qv, {1, 1, L, 1}).requires_grad_(), k = from_vector(kv, {1, 1, L, 1}).requires_grad_();
  Tensor y = scaled_dot_product_attention(q, k, v, true);
  auto yv = to_vector<double>(y);
  CHECK(yv[0] == 0.0);
  CHECK(yv[1] == 0.0);
  Tensor gy = uniform(y.shape(), -1, 1, g);
  y.backward(gy);
  // Same function through the composed path (padding mask of all ones forces it).
  Tensor q2 = q.detach().clone().requires_grad_(), k2 = k.detach().clone().requires_grad_();
  Tensor v2 = v.detach().clone().requires_grad_();
  Tensor y2 = nn::softmax_attention(q2, k2, v2, true, ones({1, L}, {DType::boolean}));
  y2.backward(gy);
  CHECK(max_abs_diff(y, y2) < 1e-6);
  for (auto [a, b] : {std::make_pair(q, q2), std::make_pair(k, k2), std::make_pair(v, v2)}) {
    REQUIRE(a.grad().defined());
    auto ga = to_vector<double>(a.grad()), gb = to_vector<double>(b.grad());
    for (size_t i = 0; i < ga.size(); ++i) {
      CHECK(std::isfinite(ga[i]));
      CHECK(std::fabs(ga[i] - gb[i]) <= 1e-4 * (1 + std::fabs(gb[i])));
    }
  }
  CHECK(to_vector<double>(q.grad())[0] == 0.0);
  CHECK(to_vector<double>(v.grad())[0] == doctest::Approx(to_vector<double>(v2.grad())[0]));
}

TEST_CASE("scaled_dot_product_attention: no keys gives zeros; bf16 runs in f32") {
  Tensor q = ones({1, 1, 3, 2}).requires_grad_(true), k = empty({1, 1, 0, 2}), v = empty({1, 1, 0, 4});
  Tensor y = scaled_dot_product_attention(q, k, v, false);
  CHECK(y.shape() == Shape{1, 1, 3, 4});
  for (double x : to_vector<double>(y)) CHECK(x == 0.0);
  y.sum().backward();
  REQUIRE(q.grad().defined());
  for (double x : to_vector<double>(q.grad())) CHECK(x == 0.0);
  Generator g(9);
  Tensor a = uniform({1, 2, 5, 4}, -1, 1, g);
  Tensor yb = scaled_dot_product_attention(a.to(DType::bf16), a.to(DType::bf16), a.to(DType::bf16), true);
  CHECK(yb.dtype() == DType::bf16);
  CHECK(max_abs_diff(yb.to(DType::f32), scaled_dot_product_attention(a, a, a, true)) < 2e-2);
}

}  // namespace hh::test
