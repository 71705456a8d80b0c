// The hybrid mixer (hybrid-<map>: LoLCATs' sliding window + linear attention) through
// AttentionMixer / Attention / the HF models: the same numbers as hybrid_attention_quadratic,
// decoding equal to the forward, a window >= L is softmax, the window factor is a feature_map
// weight, and a GPT-2 fixture runs, decodes and saves/reloads as a hybrid.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "autograd/ops.h"
#include "nn/attention.h"
#include "nn/diagnostics.h"
#include "nn/models/hf_model.h"
#include "nn/models/hf_save.h"
#include "tests/nn/decode_checks.h"

using namespace hh;
using namespace hh::nn;
using namespace hh::test;
namespace fs = std::filesystem;

namespace {

// A hybrid mixer in f64 with its window factors moved off 0 (so wf differs per head and from 0.5).
AttentionMixer hybrid_mixer(const std::string& map, int64_t H, int64_t D, int64_t window, int64_t chunk = 3) {
  Generator ig(5);
  MixerConfig mc;
  mc.mixer = parse_mixer("hybrid-" + map, "test");
  mc.window = window;
  mc.chunk = chunk;
  AttentionMixer m(mc, make_mixer_feature_map(mc.mixer, FeatureMapConfig{}, H, D, {ig, Device::cpu(), DType::f64}));
  auto hm = std::dynamic_pointer_cast<HybridFeatureMap>(m.feature_map);
  REQUIRE(hm != nullptr);
  NoGradGuard ng;
  Generator pg(6);
  copy_(hm->window_factor, randn({H}, pg, {DType::f64}));
  return m;
}

}  // namespace

TEST_CASE("hybrid mixer: the window factor is a feature_map weight (init 0) next to the inner map's") {
  Generator g(1);
  AttentionConfig c;
  c.dim = 16;
  c.heads = 2;
  c.head_dim = 8;
  c.mixer = parse_mixer("hybrid-hedgehog", "test");
  Attention attn(c, {g});
  std::map<std::string, Tensor> params;
  for (const auto& [pname, t] : attn.named_parameters()) params[pname] = t;
  REQUIRE(params.count("feature_map.window_factor") == 1);
  CHECK(params.at("feature_map.window_factor").shape() == Shape{2});
  CHECK(to_vector<float>(params.at("feature_map.window_factor")) == std::vector<float>{0.f, 0.f});
  CHECK(params.count("feature_map.map.weight") == 1);
  for (const auto& kv : params) {  // clang 14 cannot capture a structured binding in doctest's macros
    const std::string& name = kv.first;
    CHECK_MESSAGE((name.rfind("feature_map.", 0) == 0 || name.find("_proj.") != std::string::npos), name);
  }
  CHECK(attn.mixer.is_hybrid());
  CHECK(attn.is_linear());
  CHECK(attn.feature_map->feature_dim() == 16);  // hedgehog: 2 x head_dim
}

TEST_CASE("hybrid mixer: forward equals hybrid_attention_quadratic (chunked path and traced path, key mask)") {
  Generator g(2);
  const int64_t B = 2, H = 3, L = 11, D = 4;
  Tensor q = randn({B, H, L, D}, g, {DType::f64}), k = randn({B, H, L, D}, g, {DType::f64}),
         v = randn({B, H, L, D}, g, {DType::f64});
  Tensor mask = ones({B, L}, {DType::f64});
  copy_(slice(slice(mask, 0, 1, 2), 1, 0, 3), zeros({1, 3}, {DType::f64}));  // row 1: left padding
  const Tensor key_mask = gt(mask, 0.5);
  for (const std::string map : {"hedgehog", "elu"})
    for (int64_t W : {1, 3, 4, 20}) {
      CAPTURE(map);
      CAPTURE(W);
      AttentionMixer m = hybrid_mixer(map, H, D, W);
      auto hm = std::static_pointer_cast<HybridFeatureMap>(m.feature_map);
      for (const Tensor& km : {Tensor(), key_mask}) {
        FeatureContext ctx{0, L, km};
        Tensor pq = hm->forward(q, true, ctx), pk = hm->forward(k, false, ctx);
        Tensor wf = sigmoid(hm->window_factor), lf = ones({H}, {DType::f64});
        Tensor want_w;
        Tensor want = hybrid_attention_quadratic(q, k, v, pq, pk, wf, lf, W, -1, km, &want_w);
        CHECK(max_diff(m.forward(q, k, v, km, nullptr), want) < 1e-12);
        TraceRequest tr;
        tr.teacher = true;
        tr.outputs = true;
        Tensor traced = m.forward(q, k, v, km, &tr);
        CHECK(max_diff(traced, want) < 1e-12);
        REQUIRE(tr.layers.size() == 1);
        CHECK(max_diff(tr.layers[0].weights, want_w) < 1e-12);
        CHECK(tr.layers[0].teacher.shape() == Shape{B, H, L, L});
      }
    }
}

TEST_CASE("hybrid mixer: token-by-token decoding equals the full forward (f64)") {
  Generator g(3);
  const int64_t B = 2, H = 2, L = 9, D = 4;
  Tensor q = randn({B, H, L, D}, g, {DType::f64}), k = randn({B, H, L, D}, g, {DType::f64}),
         v = randn({B, H, L, D}, g, {DType::f64});
  for (int64_t W : {1, 2, 4, 9, 64}) {
    CAPTURE(W);
    AttentionMixer m = hybrid_mixer("hedgehog", H, D, W);
    Tensor full = m.forward(q, k, v, Tensor(), nullptr);
    DecodeCache cache;
    std::vector<Tensor> ys;
    for (int64_t t = 0; t < L; ++t)
      ys.push_back(m.step(slice(q, 2, t, t + 1), slice(k, 2, t, t + 1), slice(v, 2, t, t + 1), cache));
    CHECK(cache.pos() == L);
    CHECK(max_diff(cat(ys, 2), full) < 1e-12);
  }
}

TEST_CASE("hybrid mixer: a window >= L is causal softmax attention (the window factor cancels)") {
  Generator g(4);
  const int64_t B = 1, H = 3, L = 7, D = 5;
  Tensor q = randn({B, H, L, D}, g, {DType::f64}), k = randn({B, H, L, D}, g, {DType::f64}),
         v = randn({B, H, L, D}, g, {DType::f64});
  Tensor soft = softmax_attention(q, k, v, true, Tensor());
  for (int64_t W : {7, 8, 100}) {
    CAPTURE(W);
    AttentionMixer m = hybrid_mixer("hedgehog", H, D, W);
    CHECK(max_diff(m.forward(q, k, v, Tensor(), nullptr), soft) < 1e-12);
  }
}

TEST_CASE("hybrid mixer: non-causal use, a bad window and the linear recurrent step are refused, naming the mixer") {
  Generator g(5);
  Tensor q = randn({1, 2, 4, 4}, g);
  MixerConfig mc;
  mc.mixer = parse_mixer("hybrid-elu", "test");
  mc.causal = false;
  Generator ig(1);
  AttentionMixer enc(mc, make_mixer_feature_map(mc.mixer, FeatureMapConfig{}, 2, 4, {ig}));
  CHECK_THROWS_WITH_AS(enc.forward(q, q, q, Tensor(), nullptr), doctest::Contains("mixer 'hybrid-elu' is causal only"),
                       Error);
  mc.causal = true;
  mc.window = 0;
  CHECK_THROWS_WITH_AS(AttentionMixer(mc, make_mixer_feature_map(mc.mixer, FeatureMapConfig{}, 2, 4, {ig})),
                       doctest::Contains("window must be >= 1"), Error);
  mc.window = 2;
  CHECK_THROWS_WITH_AS(AttentionMixer(mc, make_mixer_feature_map(parse_mixer("elu", "t"), FeatureMapConfig{}, 2, 4, {ig})),
                       doctest::Contains("needs a hybrid feature map"), Error);
  AttentionMixer dec(mc, make_mixer_feature_map(mc.mixer, FeatureMapConfig{}, 2, 4, {ig}));
  RecurrentState st;
  Tensor q1 = slice(q, 2, 0, 1);
  CHECK_THROWS_WITH_AS(dec.linear_step(q1, q1, q1, st), doctest::Contains("decodes with AttentionMixer::step"), Error);
}

TEST_CASE("hybrid mixer: GPT-2 tiny as hybrid-hedgehog runs, decodes like its forward, and saves/reloads identically") {
  const std::string src = std::string(HH_SOURCE_DIR) + "/tests/fixtures/hf/gpt2-tiny";
  HFModelOptions o;
  o.mixer = parse_mixer("hybrid-hedgehog", "test");
  o.window = 4;
  o.seed = 3;
  auto m = load_hf_model(src, o);
  auto* lm = dynamic_cast<CausalLM*>(m.get());
  REQUIRE(lm != nullptr);
  {  // move the window factors off 0 so a reload that drew fresh ones would be caught
    NoGradGuard ng;
    Generator pg(8);
    int64_t n = 0;
    for (auto& [pname, t] : m->named_parameters())
      if (pname.find(".feature_map.window_factor") != std::string::npos) {
        copy_(m->parameter(pname), randn(t.shape(), pg));
        ++n;
      }
    CHECK(n > 0);
  }
  Generator gen(2);
  const Tensor ids = randint(0, 50, {1, 9}, gen);
  NoGradGuard ng;
  Tensor logits = lm->forward(ids);
  CHECK(std::isfinite(sum(logits).item<double>()));
  CHECK(max_diff(decode_each(*lm, ids), logits) < 1e-4);

  const fs::path out = fs::temp_directory_path() / ("hh_hybrid_save_" + std::to_string(::getpid()));
  fs::remove_all(out);
  save_hf_model(*m, out.string(), src);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(out / "config.json"));
  CHECK(cfg["hedgehog"]["mixer"] == "hybrid-hedgehog");
  CHECK(cfg["hedgehog"]["window"] == 4);
  auto back = load_hf_model(out.string());
  CHECK(name(back->options().mixer) == "hybrid-hedgehog");
  CHECK(back->options().window == 4);
  CHECK(to_vector<float>(dynamic_cast<CausalLM&>(*back).forward(ids)) == to_vector<float>(logits));
  fs::remove_all(out);
}

TEST_CASE("attention transfer: the MSE alone traces outputs without any (L,L) matrix; both sums the terms") {
  Generator g(11);
  const int64_t B = 2, H = 2, L = 13, D = 4;
  Tensor q = randn({B, H, L, D}, g, {DType::f64}), k = randn({B, H, L, D}, g, {DType::f64}),
         v = randn({B, H, L, D}, g, {DType::f64});
  Tensor key_mask = ones({B, L}, {DType::boolean});
  {
    NoGradGuard ng;
    copy_(slice(select(key_mask, 0, 1), 0, 9, L), zeros({L - 9}, {DType::boolean}));
  }
  Tensor teacher = softmax_attention(q, k, v, true, key_mask);
  for (const std::string map : {"hedgehog", "hybrid-hedgehog"}) {
    CAPTURE(map);
    Generator ig(5);
    MixerConfig mc;
    mc.mixer = parse_mixer(map, "test");
    mc.window = 4;
    mc.chunk = 3;
    AttentionMixer m(mc, make_mixer_feature_map(mc.mixer, FeatureMapConfig{}, H, D, {ig, Device::cpu(), DType::f64}));
    const DistillOptions mse = transfer_options(Transfer::mse, 2.0), both = transfer_options(Transfer::both, 2.0);
    CHECK_FALSE(mse.weights);
    TraceRequest tm = distill_trace_request(mse), tb = distill_trace_request(both);
    Tensor ym = m.forward(q, k, v, key_mask, &tm), yb = m.forward(q, k, v, key_mask, &tb);
    REQUIRE(tm.layers.size() == 1);
    const AttentionTrace& a = tm.layers[0];
    CHECK_FALSE(a.weights.defined());  // the efficient forms ran: no weights, no teacher matrix
    CHECK_FALSE(a.teacher.defined());
    CHECK(max_diff(a.teacher_output, teacher) < 1e-12);  // the fused softmax of the same q, k, v
    CHECK(max_diff(tb.layers[0].teacher_output, teacher) < 1e-12);
    CHECK(max_diff(ym, yb) < 1e-12);  // chunked (mse) and quadratic (both) forms agree
    const double want_mse = 2.0 * mean(square(sub(ym, teacher))).item<double>();
    CHECK(distillation_loss(tm, mse).item<double>() == doctest::Approx(want_mse).epsilon(1e-12));
    const double xent = distillation_loss(tb, transfer_options(Transfer::xent, 0)).item<double>();
    CHECK(distillation_loss(tb, both).item<double>() == doctest::Approx(xent + want_mse).epsilon(1e-12));
    CHECK(distillation_loss_per_layer(tm, mse) == std::vector<double>{distillation_loss(tm, mse).item<double>()});
    // The MSE trains the feature map through the efficient form.
    distillation_loss(tm, mse).backward();
    double grad = 0;
    for (const auto& kv : m.feature_map->named_parameters())
      if (kv.second.grad().defined()) grad += sum(abs(kv.second.grad())).item<double>();
    CHECK(grad > 0);
  }
  CHECK_THROWS_WITH(parse_transfer("l2"), doctest::Contains("xent, mse or both"));
  CHECK_THROWS_WITH(transfer_options(Transfer::mse, 0), doctest::Contains("must be > 0"));
  DistillOptions none;
  none.weights = false;
  CHECK_THROWS_WITH(distill_trace_request(none), doctest::Contains("no loss term"));
}

TEST_CASE("hybrid mixer: the affine option weights the linear part by 1 - the window factor (LoLCATs)") {
  Generator g(21);
  const int64_t B = 1, H = 2, L = 11, D = 4;
  Tensor q = randn({B, H, L, D}, g, {DType::f64}), k = randn({B, H, L, D}, g, {DType::f64}),
         v = randn({B, H, L, D}, g, {DType::f64});
  Generator ig(5);
  MixerConfig mc;
  mc.mixer = parse_mixer("hybrid-hedgehog", "test");
  mc.window = 3;
  mc.chunk = 4;
  FeatureMapConfig fc;
  fc.hybrid_affine = true;
  AttentionMixer m(mc, make_mixer_feature_map(mc.mixer, fc, H, D, {ig, Device::cpu(), DType::f64}));
  auto hm = std::static_pointer_cast<HybridFeatureMap>(m.feature_map);
  REQUIRE(hm->affine);
  {
    NoGradGuard ng;
    Generator pg(6);
    copy_(hm->window_factor, randn({H}, pg, {DType::f64}));
  }
  Tensor wf = sigmoid(hm->window_factor);
  CHECK(max_diff(hm->linear_weight(DType::f64), sub(1.0, wf)) < 1e-15);
  FeatureContext ctx{0, L, Tensor()};
  Tensor want = hybrid_attention_quadratic(q, k, v, hm->forward(q, true, ctx), hm->forward(k, false, ctx), wf,
                                           sub(1.0, wf), 3, -1, Tensor());
  Tensor y = m.forward(q, k, v, Tensor(), nullptr);
  CHECK(max_diff(y, want) < 1e-12);
  DecodeCache cache;
  std::vector<Tensor> ys;
  for (int64_t t = 0; t < L; ++t)
    ys.push_back(m.step(slice(q, 2, t, t + 1), slice(k, 2, t, t + 1), slice(v, 2, t, t + 1), cache));
  CHECK(max_diff(cat(ys, 2), y) < 1e-12);
  // Without the option lf = 1: a different output, so the check above can fail.
  AttentionMixer plain(mc, make_mixer_feature_map(mc.mixer, FeatureMapConfig{}, H, D, {ig, Device::cpu(), DType::f64}));
  auto pm = std::static_pointer_cast<HybridFeatureMap>(plain.feature_map);
  {
    NoGradGuard ng;
    copy_(pm->window_factor, hm->window_factor);
    for (const auto& kv : hm->map->named_parameters()) copy_(pm->map->parameter(kv.first), kv.second);
  }
  CHECK(max_diff(plain.forward(q, k, v, Tensor(), nullptr), y) > 1e-3);
}
