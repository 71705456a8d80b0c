// Feature-map properties (REFERENCE.md §2) and the distillation / diagnostics machinery.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>

#include "nn/diagnostics.h"
#include "nn/feature_maps.h"
#include "tests/op_table.h"
#include "train/optim.h"

using namespace hh;
using namespace hh::nn;

namespace {
std::shared_ptr<FeatureMap> fmap(const std::string& name, int64_t D = 6, int64_t F = 0, bool packed = false) {
  static Generator g(11);
  FeatureMapConfig c;
  c.name = name;
  c.heads = 2;
  c.head_dim = D;
  c.feature_dim = F;
  c.taylor_packed = packed;
  return make_feature_map(c, {g, Device::cpu(), DType::f64});
}
Tensor rand_x(int64_t L = 7, int64_t D = 6, uint64_t seed = 3) {
  Generator g(seed);
  return randn({2, 2, L, D}, g, {DType::f64});
}
}  // namespace

TEST_CASE("feature maps: output shapes and positivity where promised") {
  Tensor x = rand_x();
  FeatureContext ctx{0, 7};
  for (const auto& name : feature_map_names()) {
    SUBCASE(name.c_str()) {
      auto fm = fmap(name);
      Tensor pq = fm->forward(x, true, ctx), pk = fm->forward(x, false, ctx);
      CHECK(pq.shape() == Shape{2, 2, 7, fm->feature_dim()});
      CHECK(pk.shape() == pq.shape());
      auto v = to_vector<double>(pq);
      double mn = *std::min_element(v.begin(), v.end());
      bool strictly = name == "elu" || name == "performer" || name == "exp" || name == "hedgehog" ||
                      name == "hedgehog-exp" || name == "hedgehog-untrained";
      if (strictly) CHECK_MESSAGE(mn > 0, name, " min ", mn);
      if (name == "relu" || name == "cosformer" || name == "t2r" || name == "t2r-hh") CHECK(mn >= 0);
      if (name == "taylor") {  // φ(q)·φ(k) > 0 for every pair
        Tensor a = matmul(pq, transpose(pk, -1, -2));
        auto av = to_vector<double>(a);
        CHECK(*std::min_element(av.begin(), av.end()) > 0);
      }
    }
  }
  hh::test::check_throws([] { fmap("nope"); }, {"feature map", "nope"});
}

TEST_CASE("taylor: φ(q)·φ(k) = 1 + q·k/√D + (q·k)²/(2D), full and packed") {
  const int64_t D = 5;
  Tensor q = rand_x(4, D, 1), k = rand_x(4, D, 2);
  FeatureContext ctx{0, 4};
  for (bool packed : {false, true}) {
    auto fm = fmap("taylor", D, 0, packed);
    CHECK(fm->feature_dim() == (packed ? 1 + D + D * (D + 1) / 2 : 1 + D + D * D));
    Tensor got = matmul(fm->forward(q, true, ctx), transpose(fm->forward(k, false, ctx), -1, -2));
    Tensor qk = matmul(q, transpose(k, -1, -2));
    Tensor want = add(add(div(qk, std::sqrt(double(D))), div(square(qk), 2.0 * D)), 1.0);
    CHECK(max_abs_diff(got, want) < 1e-10);
  }
}

TEST_CASE("hedgehog: identity init gives [softmax(x), softmax(-x)]; joint option") {
  Tensor x = rand_x();
  FeatureContext ctx{0, 7};
  for (const std::string name : {"hedgehog", "hedgehog-untrained"}) {
    Tensor got = fmap(name)->forward(x, true, ctx);
    Tensor want = cat({softmax(x, -1), softmax(neg(x), -1)}, -1);
    CHECK(max_abs_diff(got, want) < 1e-12);
  }
  CHECK(fmap("hedgehog")->num_parameters() == 2 * 6 * 6 + 2 * 6);
  CHECK(fmap("hedgehog-untrained")->num_parameters() == 0);
  Generator g(1);
  FeatureMapConfig c;
  c.name = "hedgehog";
  c.heads = 2;
  c.head_dim = 6;
  c.joint_softmax = true;
  auto joint = make_feature_map(c, {g, Device::cpu(), DType::f64});
  CHECK(max_abs_diff(joint->forward(x, true, ctx), softmax(cat({mul(x, 2.0), mul(x, -2.0)}, -1), -1)) < 1e-12);
  c.untied = true;
  c.joint_softmax = false;
  auto untied = make_feature_map(c, {g, Device::cpu(), DType::f64});
  CHECK(untied->num_parameters() == 2 * (2 * 6 * 6 + 2 * 6));
}

TEST_CASE("hedgehog-exp and exp are stabilized but exact after normalization") {
  Tensor q = mul(rand_x(9, 6, 4), 30.0), k = mul(rand_x(9, 6, 5), 30.0);  // exp(30·x) overflows f32 unshifted
  FeatureContext ctx{0, 9};
  auto fm = fmap("exp");
  Tensor w = linear_attention_weights(fm->forward(q, true, ctx), fm->forward(k, false, ctx), true, 0.0);
  // Reference: softmax over exact log-features log φ(q)·φ(k) = logsumexp_f(q_f + k_f).
  Tensor logits = logsumexp(add(unsqueeze(q, -2), unsqueeze(k, -3)), {-1});  // (B,H,L,L)
  std::vector<double> mask(81, 0.0);
  for (int i = 0; i < 9; ++i)
    for (int j = i + 1; j < 9; ++j) mask[static_cast<size_t>(i * 9 + j)] = 1.0;
  Tensor want = softmax(masked_fill(logits, from_vector(mask, {9, 9}, {DType::boolean}), -1e300), -1);
  CHECK(max_abs_diff(w, want) < 1e-9);
}

TEST_CASE("performer: the random-feature estimate approaches softmax attention as m grows") {
  const int64_t D = 8;
  Generator g(2);
  Tensor q = mul(randn({1, 1, 16, D}, g, {DType::f64}), 0.5), k = mul(randn({1, 1, 16, D}, g, {DType::f64}), 0.5);
  Tensor soft = softmax_attention_weights(q, k, false, Tensor());
  FeatureContext ctx{0, 16};
  std::vector<double> err;
  for (int64_t m : {8, 128, 4096}) {
    double e = 0;
    for (uint64_t seed = 0; seed < 3; ++seed) {
      FeatureMapConfig c;
      c.name = "performer";
      c.heads = 1;
      c.head_dim = D;
      c.feature_dim = m;
      c.seed = seed;
      Generator ig(seed);
      auto fm = make_feature_map(c, {ig, Device::cpu(), DType::f64});
      e += max_abs_diff(linear_attention_weights(fm->forward(q, true, ctx), fm->forward(k, false, ctx), false, 0.0), soft);
    }
    err.push_back(e / 3);
  }
  CHECK(err[1] < err[0]);
  CHECK(err[2] < err[1]);
  CHECK(err[2] < 0.02);
}

TEST_CASE("cosformer: position reweighting and the decoding length check") {
  Tensor x = rand_x(4);
  auto fm = fmap("cosformer");
  Tensor phi = fm->forward(x, true, {0, 4});
  Tensor r = relu(x);
  // Position i (1-based) = 2: cos(π·2/8), sin(π·2/8) with M = 4.
  Tensor row = select(phi, 2, 1);
  Tensor want = cat({mul(select(r, 2, 1), std::cos(M_PI * 2 / 8)), mul(select(r, 2, 1), std::sin(M_PI * 2 / 8))}, -1);
  CHECK(max_abs_diff(row, want) < 1e-12);
  hh::test::check_throws([&] { fm->forward(slice(x, 2, 0, 1), true, {4, 0}); }, {"cosformer", "cosformer_length"});
}

TEST_CASE("feature maps: gradients (finite differences, f64)") {
  // Checked through the normalized weights φ(q)φ(k)ᵀ / rowsum (eps 0); φ alone and eps 1e-6 are
  // covered by the next test case.
  for (const std::string name : {"elu", "relu", "performer", "cosformer", "exp", "taylor", "t2r", "hedgehog", "hedgehog-exp"}) {
    SUBCASE(name.c_str()) {
      auto fm = fmap(name, 3, name == "performer" ? 4 : 0);
      // relu-type maps can zero a whole row: eps keeps 0/0 away (they have no shift to cancel).
      const bool relu_type = name == "relu" || name == "cosformer" || name == "t2r";
      const double eps = relu_type ? 0.1 : 0.0;
      const double tol = 1e-6;
      Tensor x = add(rand_x(3, 3, 8), relu_type ? 1.0 : 0.0), k = add(rand_x(3, 3, 9), relu_type ? 1.0 : 0.0);
      auto weights = [&](const Tensor& q, const Tensor& kk) {
        return linear_attention_weights(fm->forward(q, true, {0, 3}), fm->forward(kk, false, {0, 3}), true, eps);
      };
      hh::test::gradcheck([&](const std::vector<Tensor>& in) { return weights(in[0], in[1]); }, {x, k}, {0, 1}, name, tol);
      auto params = fm->named_parameters();
      if (!params.empty()) {  // and the map's own weights
        Tensor& w = fm->parameter(params[0].first);
        Tensor saved = w;
        hh::test::gradcheck(
            [&](const std::vector<Tensor>& in) {
              w = in[0];
              return weights(x, k);
            },
            {saved.detach()}, {0}, name + " weight", tol);
        w = saved;
      }
    }
  }
}

namespace {
// max over elements of |analytic - numeric| / max(1, |numeric|) for d sum(w·fn(inputs)) / d inputs[i],
// numeric = f64 central differences (h = 1e-6, truncation + rounding error ~1e-10).
double max_grad_error(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
                      const std::vector<int>& which) {
  std::vector<Tensor> xs;
  for (const Tensor& x : inputs) xs.push_back(clone(x).detach());
  for (int i : which) xs[static_cast<size_t>(i)].requires_grad_(true);
  Tensor y = fn(xs);
  Generator g(77);
  Tensor w = uniform(y.shape(), -1.0, 1.0, g, {DType::f64});
  sum(mul(y, w)).backward();
  double worst = 0;
  for (int i : which) {
    const Tensor& x = xs[static_cast<size_t>(i)];
    auto analytic = to_vector<double>(x.grad());
    auto base = to_vector<double>(x);
    for (size_t j = 0; j < base.size(); ++j) {
      auto eval = [&](double delta) {
        auto v = base;
        v[j] += delta;
        std::vector<Tensor> ys = xs;
        ys[static_cast<size_t>(i)] = from_vector(v, x.shape(), {DType::f64});
        NoGradGuard ng;
        return sum(mul(fn(ys), w)).item<double>();
      };
      const double h = 1e-6, numeric = (eval(h) - eval(-h)) / (2 * h);
      worst = std::max(worst, std::fabs(analytic[j] - numeric) / std::max(1.0, std::fabs(numeric)));
    }
  }
  return worst;
}
}  // namespace

TEST_CASE("feature maps: gradients of φ and of attention include the stabilizing shift (f64, eps 1e-6)") {
  // The exp-type maps subtract a max for stability. φ itself (performer's +1e-6) and the
  // attention's eps are not invariant to that shift, so the gradient must flow through it: checked
  // here on φ alone and on every attention form with the default eps, to 1e-7.
  const double eps = 1e-6, tol = 1e-7;
  const int64_t L = 5, D = 3;
  for (const std::string name : {"performer", "exp", "hedgehog-exp", "elu", "taylor", "hedgehog"}) {
    SUBCASE(name.c_str()) {
      auto fm = fmap(name, D, name == "performer" ? 4 : 0);
      Tensor q = mul(rand_x(L, D, 31), 1.5), k = mul(rand_x(L, D, 32), 1.5), v = rand_x(L, D, 33);
      FeatureContext ctx{0, L};
      double worst = 0;
      auto record_err = [&](const std::string& what, double e) {
        MESSAGE(name, " ", what, ": max relative gradient error ", e);
        CHECK_MESSAGE(e < tol, name, " ", what, ": ", e);
        worst = std::max(worst, e);
      };
      for (bool is_query : {true, false})
        record_err(is_query ? "phi(q)" : "phi(k)",
                   max_grad_error([&](const std::vector<Tensor>& in) { return fm->forward(in[0], is_query, ctx); }, {q},
                                  {0}));
      auto phis = [&](const std::vector<Tensor>& in) {
        return std::make_pair(fm->forward(in[0], true, ctx), fm->forward(in[1], false, ctx));
      };
      record_err("quadratic", max_grad_error(
                                  [&](const std::vector<Tensor>& in) {
                                    auto [pq, pk] = phis(in);
                                    return linear_attention_quadratic(pq, pk, in[2], true, eps);
                                  },
                                  {q, k, v}, {0, 1, 2}));
      record_err("chunked", max_grad_error(
                                [&](const std::vector<Tensor>& in) {
                                  auto [pq, pk] = phis(in);
                                  return linear_attention_causal(pq, pk, in[2], 2, eps);
                                },
                                {q, k, v}, {0, 1, 2}));
      record_err("noncausal", max_grad_error(
                                  [&](const std::vector<Tensor>& in) {
                                    auto [pq, pk] = phis(in);
                                    return linear_attention_noncausal(pq, pk, in[2], eps);
                                  },
                                  {q, k, v}, {0, 1, 2}));
      auto params = fm->named_parameters();
      if (!params.empty()) {  // the map's own weight, through the quadratic form
        Tensor& wt = fm->parameter(params[0].first);
        Tensor saved = wt;
        record_err("weight", max_grad_error(
                                 [&](const std::vector<Tensor>& in) {
                                   wt = in[0];
                                   Tensor pq = fm->forward(q, true, ctx), pk = fm->forward(k, false, ctx);
                                   return linear_attention_quadratic(pq, pk, v, true, eps);
                                 },
                                 {saved.detach()}, {0}));
        wt = saved;
      }
      MESSAGE(name, ": worst ", worst);
    }
  }
}

TEST_CASE("distillation: trained hedgehog maps match softmax far better than elu") {
  const int64_t D = 8, L = 24;
  Generator g(21);
  // Queries and keys with structure: keys near a few prototypes, queries near keys.
  Tensor k = mul(randn({2, 2, L, D}, g), 1.5), q = add(k, mul(randn({2, 2, L, D}, g), 0.3));
  Tensor teacher = softmax_attention_weights(q, k, true, Tensor());
  FeatureContext ctx{0, L};
  auto kl_of = [&](FeatureMap& fm) {
    NoGradGuard ng;
    return attention_kl(teacher, linear_attention_weights(fm.forward(q, true, ctx), fm.forward(k, false, ctx), true, 1e-6));
  };
  Generator ig(3);
  FeatureMapConfig c;
  c.heads = 2;
  c.head_dim = D;
  c.name = "elu";
  auto elu_map = make_feature_map(c, {ig});
  c.name = "hedgehog";
  auto hh_map = make_feature_map(c, {ig});
  double kl_elu = kl_of(*elu_map), kl_start = kl_of(*hh_map);
  train::AdamW opt(train::single_group(*hh_map, 0.0), 1e-2);
  for (int step = 0; step < 500; ++step) {
    Tensor student = linear_attention_weights(hh_map->forward(q, true, ctx), hh_map->forward(k, false, ctx), true, 1e-6);
    Tensor loss = sum(soft_cross_entropy_per_head(teacher, student));
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  double kl_end = kl_of(*hh_map);
  MESSAGE("KL elu ", kl_elu, ", hedgehog before ", kl_start, ", after ", kl_end);
  CHECK(kl_end < 0.5 * kl_start);
  CHECK(kl_end < 0.3 * kl_elu);
}

TEST_CASE("diagnostics: entropy, monotonicity, KL on known weights") {
  // Uniform rows over L keys have entropy log L; one-hot rows 0.
  Tensor uni = full({1, 1, 4, 4}, 0.25, {DType::f64});
  CHECK(attention_entropy(uni) == doctest::Approx(std::log(4.0)));
  Tensor hot = from_vector(std::vector<double>{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, {1, 1, 4, 4});
  CHECK(attention_entropy(hot) == doctest::Approx(0.0));
  Generator g(5);
  Tensor s = randn({1, 2, 6, 6}, g, {DType::f64});
  CHECK(attention_monotonicity(s, softmax(s, -1), false) == doctest::Approx(1.0));
  CHECK(attention_monotonicity(s, softmax(neg(s), -1), false) == doctest::Approx(-1.0));
  Tensor p = softmax(s, -1);
  CHECK(attention_kl(p, p) == doctest::Approx(0.0).epsilon(1e-12));
  CHECK(attention_kl(p, softmax(mul(s, 0.5), -1)) > 0.0);
  // KL variant of the distillation loss is zero when student == teacher.
  TraceRequest tr;
  tr.layers.push_back({p, p, Tensor(), Tensor(), Tensor()});
  CHECK(distillation_loss(tr, {true, false, 0.0}).item<double>() == doctest::Approx(0.0).epsilon(1e-9));
  CHECK(distillation_loss(tr, {false, false, 0.0}).item<double>() == doctest::Approx(2 * attention_entropy(p)));
}
