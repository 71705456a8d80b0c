// A gated mixer's output (nn/gate.h GateOutput): parsed once; with group_norm every gate's mixer is
// the unnormalized gated attention (the delta rule as it is) followed by an RMSNorm per head over
// Dv (g_norm under feature_map), in each form and in decoding; a GPT-2 student saves
// hedgehog.gate_output and reloads to the same logits, its kept softmax layers have no g_norm; the
// default writes nothing new.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "autograd/ops.h"
#include "nn/attention.h"
#include "nn/gate.h"
#include "nn/models/hf_model.h"
#include "nn/models/hf_save.h"
#include "tests/nn/decode_checks.h"

using namespace hh;
using namespace hh::nn;
using namespace hh::test;
namespace fs = std::filesystem;

namespace {

// y (B,H,L,Dv) -> y / sqrt(mean(y², Dv) + eps) · w, composed from elementwise ops.
Tensor hand_rms_norm(const Tensor& y, const Tensor& w, double eps) {
  Tensor ms = div(sum(mul(y, y), {-1}, true), static_cast<double>(y.size(-1)));
  return mul(div(y, sqrt(add(ms, eps))), reshape(w, {1, 1, 1, w.size(0)}));
}

}  // namespace

TEST_CASE("gate output: parsed once, named back, refused without a gate") {
  CHECK(parse_gate_output("normalizer", "--gate-output") == GateOutput::normalizer);
  CHECK(parse_gate_output("groupnorm", "--gate-output") == GateOutput::group_norm);
  for (GateOutput o : {GateOutput::normalizer, GateOutput::group_norm}) CHECK(parse_gate_output(name(o), "x") == o);
  CHECK_THROWS_WITH_AS(parse_gate_output("layernorm", "--gate-output"),
                       doctest::Contains("--gate-output: unknown gate output 'layernorm' (expected normalizer, groupnorm)"),
                       Error);
  CHECK_THROWS_WITH_AS(parse_gate_output("groupnorm", {Gate::none}, "--gate-output"),
                       doctest::Contains("--gate-output: 'groupnorm' needs a gate"), Error);
  CHECK(parse_gate_output("groupnorm", {Gate::none, Gate::gla}, "--gate-output") == GateOutput::group_norm);
  CHECK(parse_gate_output("normalizer", {Gate::none}, "--gate-output") == GateOutput::normalizer);
  // The mixer refuses a group norm on an ungated map, and a config that disagrees with its map.
  Generator ig(1);
  const Mixer hedgehog = parse_mixer("hedgehog", "test");
  MixerConfig mc;
  mc.mixer = hedgehog;
  mc.gate_output = GateOutput::group_norm;
  CHECK_THROWS_WITH_AS(AttentionMixer(mc, make_mixer_feature_map(hedgehog, {}, 2, 4, {ig})),
                       doctest::Contains("gate output 'groupnorm' needs a gate"), Error);
  mc.gate = Gate::gla;
  CHECK_THROWS_WITH_AS(AttentionMixer(mc, make_mixer_feature_map(hedgehog, {}, 2, 4, {ig}, Gate::gla, 12)),
                       doctest::Contains("without g_norm"), Error);
}

TEST_CASE("gate output: group_norm is rms_norm over Dv of the unnormalized output, in every form") {
  const int64_t B = 2, H = 2, L = 7, D = 4, C = 12;
  const Mixer hedgehog = parse_mixer("hedgehog", "test");
  Generator g(5);
  const Tensor q = randn({B, H, L, D}, g, {DType::f64}), k = randn({B, H, L, D}, g, {DType::f64}),
               v = randn({B, H, L, D}, g, {DType::f64}), x = randn({B, L, C}, g, {DType::f64});
  const GateInput in{x, k};
  for (Gate gate : {Gate::decay, Gate::gla, Gate::liger, Gate::delta}) {
    CAPTURE(name(gate));
    Generator ig(3);
    auto fm = make_mixer_feature_map(hedgehog, {}, H, D, {ig, Device::cpu(), DType::f64}, gate, C,
                                     GateOutput::group_norm);
    auto& gm = dynamic_cast<GatedFeatureMap&>(*fm);
    REQUIRE(gm.g_norm != nullptr);
    CHECK(gm.g_norm->weight.shape() == Shape{D});
    CHECK(gm.g_norm->eps == 1e-5);
    int64_t named = 0;
    for (const auto& kv : gm.named_parameters()) named += kv.first == "g_norm.weight";
    CHECK(named == 1);
    // A weight other than 1, so that the test sees it.
    Generator wg(9);
    const Tensor w = add(rand({D}, wg, {DType::f64}), 0.5);
    {
      NoGradGuard ng;
      copy_(gm.g_norm->weight, w);
    }
    MixerConfig mc;
    mc.mixer = hedgehog;
    mc.gate = gate;
    mc.gate_output = GateOutput::group_norm;
    mc.chunk = 3;
    AttentionMixer mixer(mc, fm);
    // The unnormalized output, composed from the ops' reference forms.
    FeatureContext ctx{0, L};
    Tensor pq = fm->forward(q, true, ctx), pk = fm->forward(k, false, ctx), raw;
    if (gate == Gate::delta) {
      const DeltaGates dg = gm.delta_gates(in, DType::f64);
      raw = delta_attention_recurrent(delta_l2norm(pq), delta_l2norm(pk), v, dg.beta, dg.log_alpha, -1);
    } else {
      raw = gated_attention_quadratic(pq, pk, v, gm.log_gate(in, DType::f64), false);
    }
    const Tensor hand = hand_rms_norm(raw, w, 1e-5);
    for (LinearForm form : {LinearForm::chunked, LinearForm::quadratic, LinearForm::recurrent}) {
      CAPTURE(static_cast<int>(form));
      mixer.cfg.form = form;
      CHECK(max_diff(mixer.forward(q, k, v, Tensor(), nullptr, in), hand) < 1e-12);
    }
    // The normalizer's output is another function (the option changes the mixer).
    Generator ig2(3);
    MixerConfig plain = mc;
    plain.gate_output = GateOutput::normalizer;
    AttentionMixer normalized(plain, make_mixer_feature_map(hedgehog, {}, H, D, {ig2, Device::cpu(), DType::f64}, gate, C));
    CHECK(max_diff(normalized.forward(q, k, v, Tensor(), nullptr, in), hand) > 1e-3);
  }
}

TEST_CASE("gate output: with group_norm, decoding token by token equals the forward, padding too") {
  const int64_t B = 2, L = 8;
  Generator g(11);
  Tensor x = randn({B, L, 12}, g, {DType::f64});
  Tensor mask = ones({B, L}, {DType::f64});
  copy_(slice(slice(mask, 0, 1, 2), 1, 0, 2), zeros({1, 2}, {DType::f64}));  // row 1: left padding
  const Tensor key_mask = gt(mask, 0.5);
  for (Gate gate : {Gate::decay, Gate::gla, Gate::liger, Gate::delta}) {
    CAPTURE(name(gate));
    AttentionConfig c;
    c.dim = 12;
    c.heads = 2;
    c.head_dim = 4;
    c.mixer = parse_mixer("hedgehog", "test");
    c.gate = gate;
    c.gate_output = GateOutput::group_norm;
    c.chunk = 3;
    c.rope = true;
    Generator ig(3);
    Attention attn(c, {ig, Device::cpu(), DType::f64});
    std::map<std::string, Shape> shapes;
    for (const auto& kv : attn.named_parameters()) shapes[kv.first] = kv.second.shape();
    CHECK(shapes.at("feature_map.g_norm.weight") == Shape{4});
    Tensor y = attn.forward(x);
    attn.mixer.cfg.form = LinearForm::quadratic;
    Tensor yq = attn.forward(x, key_mask);
    attn.mixer.cfg.form = LinearForm::chunked;
    CHECK(max_diff(attn.forward(x, key_mask), yq) < 1e-12);
    NoGradGuard ng;
    DecodeCache st;
    const Tensor decoded = decode_each(attn, x, st);
    CHECK(st.pos() == L);
    CHECK(max_diff(decoded, y) < 1e-12);
  }
}

TEST_CASE("gate output: a GPT-2 student with groupnorm decodes like its forward, saves and reloads gate_output") {
  const std::string src = std::string(HH_SOURCE_DIR) + "/tests/fixtures/hf/gpt2-tiny";
  for (Gate gate : {Gate::gla, Gate::delta}) {
    CAPTURE(name(gate));
    HFModelOptions o;
    o.mixer = parse_mixer("hedgehog", "test");
    o.gate = gate;
    o.gate_output = GateOutput::group_norm;
    o.seed = 3;
    auto m = load_hf_model(src, o);
    auto* lm = dynamic_cast<CausalLM*>(m.get());
    REQUIRE(lm != nullptr);
    int64_t n = 0;
    for (const auto& kv : m->named_parameters()) n += kv.first.find(".feature_map.g_norm.weight") != std::string::npos;
    CHECK(n == 2);  // one per layer of gpt2-tiny
    Generator gen(2);
    const Tensor ids = randint(0, 50, {1, 9}, gen);
    NoGradGuard ng;
    Tensor logits = lm->forward(ids);
    CHECK(max_diff(decode_each(*lm, ids), logits) < 1e-4);

    const fs::path out = fs::temp_directory_path() / ("hh_gate_output_save_" + std::to_string(::getpid()));
    fs::remove_all(out);
    save_hf_model(*m, out.string(), src);
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(out / "config.json"));
    CHECK(cfg["hedgehog"]["gate_output"] == "groupnorm");
    auto back = load_hf_model(out.string());
    CHECK(back->options().gate_output == GateOutput::group_norm);
    CHECK(to_vector<float>(dynamic_cast<CausalLM&>(*back).forward(ids)) == to_vector<float>(logits));
    // Bad configs: an unknown output, and a group norm with no gate.
    cfg["hedgehog"]["gate_output"] = "layernorm";
    std::ofstream(out / "config.json") << cfg.dump();
    CHECK_THROWS_WITH_AS(load_hf_model(out.string()), doctest::Contains("gate_output: unknown gate output 'layernorm'"),
                         Error);
    cfg["hedgehog"]["gate_output"] = "groupnorm";
    cfg["hedgehog"].erase("gate");
    std::ofstream(out / "config.json") << cfg.dump();
    CHECK_THROWS_WITH_AS(load_hf_model(out.string()), doctest::Contains("gate_output 'groupnorm' needs a gate"), Error);
    fs::remove_all(out);
  }
  {
    // A kept softmax layer has no state and no g_norm, built so or kept after.
    HFModelOptions o;
    o.mixer = parse_mixer("hedgehog", "test");
    o.gate = Gate::gla;
    o.gate_output = GateOutput::group_norm;
    o.softmax_layers = {0};
    auto m = load_hf_model(src, o);
    auto count_g_norm = [&]() {
      int64_t n = 0;
      for (const auto& kv : m->named_parameters()) n += kv.first.find(".g_norm.") != std::string::npos;
      return n;
    };
    CHECK(count_g_norm() == 1);
    m->keep_softmax({1});
    CHECK(count_g_norm() == 0);
    Generator gen(4);
    NoGradGuard ng;
    CHECK(std::isfinite(sum(dynamic_cast<CausalLM&>(*m).forward(randint(0, 50, {1, 5}, gen))).item<double>()));
  }
  // The default output writes no gate_output key (older folders and configs unchanged).
  HFModelOptions o;
  o.mixer = parse_mixer("hedgehog", "test");
  o.gate = Gate::gla;
  auto m = load_hf_model(src, o);
  const fs::path out = fs::temp_directory_path() / ("hh_gate_output_default_" + std::to_string(::getpid()));
  fs::remove_all(out);
  save_hf_model(*m, out.string(), src);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(out / "config.json"));
  CHECK(cfg["hedgehog"].contains("gate"));
  CHECK_FALSE(cfg["hedgehog"].contains("gate_output"));
  fs::remove_all(out);
}
