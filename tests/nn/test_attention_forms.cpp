// Every linear-attention form against the quadratic form (values and gradients), for φ outputs of
// every feature map; causality; recurrent decoding against the full forward.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "nn/attention.h"
#include "nn/transformer.h"
#include "tests/op_table.h"

using namespace hh;
using namespace hh::nn;

namespace {

// Relative RMS error ‖a-b‖ / ‖b‖.
double rel_rms(const Tensor& a, const Tensor& b) {
  auto x = to_vector<double>(a), y = to_vector<double>(b);
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

struct Phi {
  Tensor q, k, v;
};

// φ(q), φ(k) from a real feature map on random q, k (B=2, H=2, L=37, D=8).
Phi make_phi(const std::string& name, DType dt, uint64_t seed = 1) {
  Generator g(seed);
  FeatureMapConfig c;
  c.name = name;
  c.heads = 2;
  c.head_dim = 8;
  c.feature_dim = name == "performer" ? 32 : 0;
  Generator ig(seed + 1);
  auto fm = make_feature_map(c, {ig, Device::cpu(), dt});
  Tensor q = randn({2, 2, 37, 8}, g, {dt}), k = randn({2, 2, 37, 8}, g, {dt}), v = randn({2, 2, 37, 5}, g, {dt});
  NoGradGuard ng;
  FeatureContext ctx{0, 37};
  return {fm->forward(q, true, ctx).detach(), fm->forward(k, false, ctx).detach(), v};
}

const std::vector<std::string> kMaps = {"elu",    "relu", "performer", "cosformer",   "exp",       "taylor",
                                        "t2r",    "hedgehog", "hedgehog-exp", "hedgehog-untrained"};

}  // namespace

TEST_CASE("linear attention forms agree with the quadratic form (f32 values)") {
  for (const auto& name : kMaps) {
    SUBCASE(name.c_str()) {
      Phi p = make_phi(name, DType::f32);
      Tensor ref = linear_attention_quadratic(p.q, p.k, p.v, true, 1e-6);
      for (int64_t chunk : {1, 8, 64})
        CHECK_MESSAGE(rel_rms(linear_attention_causal(p.q, p.k, p.v, chunk, 1e-6), ref) < 1e-4, name, " chunk ", chunk);
      CHECK(rel_rms(linear_attention_recurrent(p.q, p.k, p.v, 1e-6), ref) < 1e-4);
      Tensor ref_nc = linear_attention_quadratic(p.q, p.k, p.v, false, 1e-6);
      CHECK(rel_rms(linear_attention_noncausal(p.q, p.k, p.v, 1e-6), ref_nc) < 1e-4);
    }
  }
}

TEST_CASE("linear attention forms agree in gradients (f64 tight, f32 1e-4)") {
  for (DType dt : {DType::f64, DType::f32}) {
    for (const auto& name : {std::string("hedgehog"), std::string("elu"), std::string("taylor")}) {
      Phi p = make_phi(name, dt, 3);
      Generator g(9);
      Tensor w = randn(p.v.shape(), g, {dt});
      auto grads = [&](auto form) {
        Tensor q = p.q.detach().requires_grad_(), k = p.k.detach().requires_grad_(), v = p.v.detach().requires_grad_();
        sum(mul(form(q, k, v), w)).backward();
        return std::vector<Tensor>{q.grad(), k.grad(), v.grad()};
      };
      auto ref = grads([](auto q, auto k, auto v) { return linear_attention_quadratic(q, k, v, true, 1e-6); });
      auto chunked = grads([](auto q, auto k, auto v) { return linear_attention_causal(q, k, v, 8, 1e-6); });
      auto rec = grads([](auto q, auto k, auto v) { return linear_attention_recurrent(q, k, v, 1e-6); });
      double tol = dt == DType::f64 ? 1e-10 : 1e-4;
      for (int i = 0; i < 3; ++i) {
        CHECK_MESSAGE(rel_rms(chunked[i], ref[i]) < tol, name, " ", dtype_name(dt), " chunked grad ", i);
        CHECK_MESSAGE(rel_rms(rec[i], ref[i]) < tol, name, " ", dtype_name(dt), " recurrent grad ", i);
      }
      auto nc_ref = grads([](auto q, auto k, auto v) { return linear_attention_quadratic(q, k, v, false, 1e-6); });
      auto nc = grads([](auto q, auto k, auto v) { return linear_attention_noncausal(q, k, v, 1e-6); });
      for (int i = 0; i < 3; ++i) CHECK(rel_rms(nc[i], nc_ref[i]) < tol);
    }
  }
}

TEST_CASE("linear attention: padded keys are excluded in every form") {
  Phi p = make_phi("hedgehog", DType::f64, 5);
  std::vector<double> m(2 * 37, 1.0);
  for (int i = 30; i < 37; ++i) m[static_cast<size_t>(37 + i)] = 0.0;  // batch 1: last 7 keys are padding
  Tensor mask = from_vector(m, {2, 37}, {DType::boolean});
  Tensor ref = linear_attention_quadratic(p.q, p.k, p.v, false, 1e-6, mask);
  CHECK(rel_rms(linear_attention_noncausal(p.q, p.k, p.v, 1e-6, mask), ref) < 1e-10);
  // Same as dropping the padded keys outright for batch 1.
  Tensor q1 = slice(p.q, 0, 1, 2), k1 = slice(slice(p.k, 0, 1, 2), 2, 0, 30), v1 = slice(slice(p.v, 0, 1, 2), 2, 0, 30);
  Tensor a = matmul(q1, transpose(k1, -1, -2));
  Tensor want = matmul(div(a, add(sum(a, {-1}, true), 1e-6)), v1);
  CHECK(rel_rms(slice(ref, 0, 1, 2), want) < 1e-10);
}

TEST_CASE("softmax and linear attention modules are causal") {
  for (std::string mixer : {"softmax", "hedgehog", "elu", "taylor"}) {
    SUBCASE(mixer.c_str()) {
      Generator g(4);
      AttentionConfig c;
      c.dim = 16;
      c.heads = 2;
      c.head_dim = 8;
      c.mixer = nn::parse_mixer(mixer, "test");
      c.chunk = 4;
      c.rope = true;
      Attention attn(c, {g});
      Tensor x = randn({1, 10, 16}, g);
      Tensor y1 = attn.forward(x);
      Tensor x2 = clone(x);
      copy_(slice(x2, 1, 7, 10), randn({1, 3, 16}, g));  // change only the future of position 6
      Tensor y2 = attn.forward(x2);
      CHECK(max_abs_diff(slice(y1, 1, 0, 7), slice(y2, 1, 0, 7)) < 1e-6);
      CHECK(max_abs_diff(slice(y1, 1, 7, 10), slice(y2, 1, 7, 10)) > 1e-4);
    }
  }
}

TEST_CASE("Attention: chunked, quadratic and recurrent forms give the same module output") {
  Generator g(6);
  AttentionConfig c;
  c.dim = 16;
  c.heads = 2;
  c.head_dim = 8;
  c.mixer = nn::parse_mixer("hedgehog", "test");
  c.chunk = 3;
  c.rope = true;
  Attention attn(c, {g});
  Tensor x = randn({2, 11, 16}, g);
  Tensor y = attn.forward(x);
  attn.cfg.form = LinearForm::quadratic;
  CHECK(rel_rms(attn.forward(x), y) < 1e-4);
  attn.cfg.form = LinearForm::recurrent;
  CHECK(rel_rms(attn.forward(x), y) < 1e-4);
  TraceRequest tr;
  tr.weights = true;
  attn.forward(x, Tensor(), &tr);
  REQUIRE(tr.layers.size() == 1);
  CHECK(tr.layers[0].weights.shape() == Shape{2, 2, 11, 11});
}

TEST_CASE("DecoderLM: token-by-token decoding matches the full forward for every mixer") {
  TransformerConfig c;
  c.vocab = 13;
  c.dim = 16;
  c.layers = 2;
  c.heads = 2;
  c.head_dim = 8;
  c.mlp_hidden = 32;
  c.attention.mixer = nn::parse_mixer("hedgehog", "test");
  c.attention.chunk = 4;
  Generator g(7);
  Tensor ids = randint(0, 13, {2, 9}, g);
  // Every mixer decodes token by token as its forward: linear (O(1) state), hybrid (window ring +
  // linear state, window shorter than the sequence), softmax (KV cache).
  for (const std::string mixer : {"hedgehog", "hybrid-hedgehog", "softmax"}) {
    CAPTURE(mixer);
    TransformerConfig s = c;
    s.attention.mixer = nn::parse_mixer(mixer, "test");
    s.attention.window = 3;
    Generator g2(7);
    DecoderLM m(s, {g2});
    m.eval();
    Tensor want = m.forward(ids);
    std::vector<DecodeCache> states;
    std::vector<Tensor> steps;
    for (int64_t t = 0; t < 9; ++t) steps.push_back(m.step(slice(ids, 1, t, t + 1), states));
    CHECK(states[0].pos() == 9);
    CHECK(rel_rms(cat(steps, 1), want) < 1e-4);
  }
}

TEST_CASE("softmax attention: a sliding window of W sees the last W keys, in the forward and in decoding") {
  Generator g(12);
  const int64_t B = 2, H = 2, L = 9, D = 4, W = 3;
  Tensor q = randn({B, H, L, D}, g, DType::f64), k = randn({B, H, L, D}, g, DType::f64),
         v = randn({B, H, L, D}, g, DType::f64);
  // Reference: query i attends (unmasked) to keys max(0, i-W+1) .. i.
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < L; ++i) {
    const int64_t j0 = std::max<int64_t>(0, i - W + 1);
    rows.push_back(softmax_attention(slice(q, 2, i, i + 1), slice(k, 2, j0, i + 1), slice(v, 2, j0, i + 1), false,
                                     Tensor()));
  }
  const Tensor want = cat(rows, 2);
  Tensor weights;
  CHECK(rel_rms(softmax_attention(q, k, v, true, Tensor(), nullptr, W), want) < 1e-12);
  CHECK(rel_rms(softmax_attention(q, k, v, true, Tensor(), &weights, W), want) < 1e-12);
  CHECK(to_vector<double>(weights)[static_cast<size_t>(8 * L + 5)] == 0.0);  // query 8, key 5: out of the window
  CHECK(rel_rms(softmax_attention(q, k, v, true, Tensor()), want) > 1e-3);   // the window matters here
  // A window of L or more hides nothing: the plain causal result (the fused kernel).
  CHECK(rel_rms(softmax_attention(q, k, v, true, Tensor(), nullptr, L), softmax_attention(q, k, v, true, Tensor())) <
        1e-12);
  // Decoding keeps W keys and gives the same rows.
  MixerConfig mc;
  mc.sliding_window = W;
  AttentionMixer m(mc, nullptr);
  CHECK(rel_rms(m.forward(q, k, v, Tensor(), nullptr), want) < 1e-12);
  DecodeCache cache;
  std::vector<Tensor> ys;
  for (int64_t t = 0; t < L; ++t)
    ys.push_back(m.step(slice(q, 2, t, t + 1), slice(k, 2, t, t + 1), slice(v, 2, t, t + 1), cache));
  CHECK(rel_rms(cat(ys, 2), want) < 1e-12);
  CHECK(cache.k.size(2) == W);
  CHECK(cache.pos() == L);
  // Non-causal attention has no sliding window; nor has a negative one.
  CHECK_THROWS_WITH_AS(softmax_attention(q, k, v, false, Tensor(), nullptr, W),
                       doctest::Contains("a sliding window (3) needs causal attention"), hh::Error);
  mc.sliding_window = -1;
  CHECK_THROWS_WITH_AS(AttentionMixer(mc, nullptr), doctest::Contains("a sliding window needs causal attention"),
                       hh::Error);
}

TEST_CASE("AttentionMixer: one-token decoding (KV cache for softmax, recurrent state for linear) matches the forward") {
  Generator g(11);
  const int64_t B = 2, H = 3, L = 6, D = 4;
  Tensor q = randn({B, H, L, D}, g), k = randn({B, H, L, D}, g), v = randn({B, H, L, D}, g);
  for (const std::string mixer : {"softmax", "hedgehog", "elu"}) {
    CAPTURE(mixer);
    Generator ig(3);
    MixerConfig mc;
    mc.mixer = nn::parse_mixer(mixer, "test");
    AttentionMixer m(mc, make_mixer_feature_map(mc.mixer, FeatureMapConfig{}, H, D, {ig}));
    Tensor full = m.forward(q, k, v, Tensor(), nullptr);  // (B,H,L,D) causal
    DecodeCache cache;
    std::vector<Tensor> ys;
    for (int64_t t = 0; t < L; ++t)
      ys.push_back(m.step(slice(q, 2, t, t + 1), slice(k, 2, t, t + 1), slice(v, 2, t, t + 1), cache));
    CHECK(cache.pos() == L);
    CHECK(rel_rms(cat(ys, 2), full) < 1e-5);
  }
  MixerConfig bad;
  bad.causal = false;
  AttentionMixer enc(bad, nullptr);
  DecodeCache c;
  CHECK_THROWS_WITH_AS(enc.step(slice(q, 2, 0, 1), slice(k, 2, 0, 1), slice(v, 2, 0, 1), c),
                       doctest::Contains("decoding needs a causal model"), hh::Error);
}

TEST_CASE("softmax KV cache: grows in place, and a copied cache that steps too copies on write") {
  Generator g(13);
  const int64_t B = 2, H = 2, D = 4, L = 40;
  for (int64_t W : {int64_t{0}, int64_t{5}}) {
    CAPTURE(W);
    Tensor q = randn({B, H, L, D}, g, DType::f64), k = randn({B, H, L, D}, g, DType::f64),
           v = randn({B, H, L, D}, g, DType::f64);
    const Tensor k2 = randn({B, H, L, D}, g, DType::f64), v2 = randn({B, H, L, D}, g, DType::f64);
    MixerConfig mc;
    mc.sliding_window = W;
    AttentionMixer m(mc, nullptr);
    // Row t's reference: the query over the keys it sees, as contiguous tensors (what a cat held).
    const auto want = [&](const Tensor& keys, const Tensor& values, int64_t t) {
      const int64_t j0 = W > 0 ? std::max<int64_t>(0, t - W + 1) : 0;
      return softmax_attention(slice(q, 2, t, t + 1), contiguous(slice(keys, 2, j0, t + 1)),
                               contiguous(slice(values, 2, j0, t + 1)), false, Tensor());
    };
    const auto one = [](const Tensor& t, int64_t i) { return slice(t, 2, i, i + 1); };
    DecodeCache cache;
    std::vector<const Storage*> storages;
    for (int64_t t = 0; t < 20; ++t) {
      const Tensor y = m.step(one(q, t), one(k, t), one(v, t), cache);
      CHECK(to_vector<double>(y) == to_vector<double>(want(k, v, t)));  // the same bits as over a cat
      if (storages.empty() || storages.back() != cache.k.storage().get()) storages.push_back(cache.k.storage().get());
    }
    CHECK(storages.size() <= 4);  // moved a few times in 20 steps, not once per step
    // A shallow copy (the tensors shared) steps with other keys: each continues its own sequence.
    DecodeCache other = cache;
    const Tensor seen = contiguous(cache.k);
    Tensor kb = cat({slice(k, 2, 0, 20), slice(k2, 2, 20, L)}, 2), vb = cat({slice(v, 2, 0, 20), slice(v2, 2, 20, L)}, 2);
    for (int64_t t = 20; t < L; ++t) {
      const Tensor ya = m.step(one(q, t), one(k, t), one(v, t), cache);
      const Tensor yb = m.step(one(q, t), one(k2, t), one(v2, t), other);
      CHECK(to_vector<double>(ya) == to_vector<double>(want(k, v, t)));
      CHECK(to_vector<double>(yb) == to_vector<double>(want(kb, vb, t)));
      if (t == 20) {
        CHECK(cache.k.storage() != other.k.storage());  // one of them moved out
        CHECK(to_vector<double>(contiguous(slice(other.k, 2, 0, other.k.size(2) - 1))) ==
              to_vector<double>(W > 0 ? slice(seen, 2, 1, seen.size(2)).contiguous() : seen));
      }
    }
    CHECK(cache.pos() == L);
    CHECK(cache.k.size(2) == (W > 0 ? W : L));
  }
}
