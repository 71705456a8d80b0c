// Gated linear mixers (nn/gate.h) through nn::Attention / AttentionMixer / GPT-2: the gate parsed
// once, the log gates each gate builds (RetNet's decays, GLA's projection, Liger's pooled key),
// the chunked forward equal to the quadratic and recurrent forms and to token-by-token decoding,
// GLA's gate weights under feature_map, and a GPT-2 fixture that saves and reloads its gate; the
// delta gate (Gated DeltaNet's rule) likewise: its weights, its chunked forward against the op's
// recurrent form, padding, decoding, GPT-2.
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

AttentionConfig gated_config(Gate gate, LinearForm form = LinearForm::chunked) {
  AttentionConfig c;
  c.dim = 12;
  c.heads = 2;
  c.head_dim = 4;
  c.mixer = parse_mixer("hedgehog", "test");
  c.gate = gate;
  c.form = form;
  c.chunk = 3;
  c.rope = true;
  return c;
}

}  // namespace

TEST_CASE("gate: parsed once, named back") {
  for (const char* n : {"none", "decay", "gla", "liger", "delta"}) CHECK(name(parse_gate(n, "--gate")) == n);
  CHECK_THROWS_WITH_AS(parse_gate("mamba", "--gate"),
                       doctest::Contains("--gate: unknown gate 'mamba' (expected none, decay, gla, liger, delta)"),
                       Error);
  CHECK(gated_label("hedgehog", Gate::gla) == "hedgehog+gla");
  CHECK(gated_label("hedgehog", Gate::none) == "hedgehog");
}

TEST_CASE("gate: RetNet's decays, Liger's pooled key and GLA's projection") {
  const std::vector<double> d = retnet_log_decays(3);
  REQUIRE(d.size() == 3);
  for (int h = 0; h < 3; ++h) CHECK(std::exp(d[static_cast<size_t>(h)]) == doctest::Approx(1 - std::pow(2.0, -5 - h)));
  // Liger with F = D: logsigmoid(k) / 16 itself; F = 2D: each key value feeds two channels.
  Generator g(7);
  Tensor k = randn({1, 2, 3, 4}, g, {DType::f64});
  auto logsig16 = [](double x) { return -std::log1p(std::exp(-x)) / 16; };
  const std::vector<double> kv = to_vector<double>(k), same = to_vector<double>(liger_log_gate(k, 4)),
                            twice = to_vector<double>(liger_log_gate(k, 8));
  for (size_t i = 0; i < kv.size(); ++i) {
    CHECK(same[i] == doctest::Approx(logsig16(kv[i])).epsilon(1e-12));
    CHECK(twice[2 * i] == doctest::Approx(logsig16(kv[i])).epsilon(1e-12));
    CHECK(twice[2 * i + 1] == doctest::Approx(logsig16(kv[i])).epsilon(1e-12));
  }
  // F = 2 < D = 4: channel i averages keys 2i, 2i+1.
  const std::vector<double> pooled = to_vector<double>(liger_log_gate(k, 2));
  CHECK(pooled[0] == doctest::Approx(logsig16((kv[0] + kv[1]) / 2)).epsilon(1e-12));
  CHECK(pooled[1] == doctest::Approx(logsig16((kv[2] + kv[3]) / 2)).epsilon(1e-12));
  // GLA: its gate weights sit under feature_map, and its log gates are <= 0 and data-dependent.
  Generator ig(1);
  Attention attn(gated_config(Gate::gla), {ig});
  std::map<std::string, Shape> shapes;
  for (const auto& kv2 : attn.named_parameters()) shapes[kv2.first] = kv2.second.shape();
  REQUIRE(shapes.count("feature_map.gate_down.weight") == 1);
  CHECK(shapes.at("feature_map.gate_down.weight") == Shape{kGlaGateRank, 12});
  CHECK(shapes.at("feature_map.gate_up.weight") == Shape{2 * 8, kGlaGateRank});  // H·F, F = 2·head_dim
  CHECK(shapes.at("feature_map.gate_up.bias") == Shape{2 * 8});
  CHECK(shapes.count("feature_map.map.weight") == 1);
  const auto& gm = static_cast<const GatedFeatureMap&>(*attn.feature_map);
  Tensor x = randn({2, 5, 12}, g);
  Tensor la = gm.log_gate(GateInput{x, Tensor()}, DType::f32);
  CHECK(la.shape() == Shape{2, 2, 5, 8});
  CHECK(amax(la).item<double>() <= 0);
  CHECK(amax(la).item<double>() > amin(la).item<double>());
}

TEST_CASE("gated mixer: chunked forward equals the quadratic and recurrent forms, and decoding equals the forward") {
  const int64_t B = 2, L = 8;
  Generator g(11);
  Tensor x = randn({B, L, 12}, g, {DType::f64});
  Tensor mask = ones({B, L}, {DType::f64});
  copy_(slice(slice(mask, 0, 1, 2), 1, 0, 2), zeros({1, 2}, {DType::f64}));  // row 1: left padding
  const Tensor key_mask = gt(mask, 0.5);
  for (Gate gate : {Gate::decay, Gate::gla, Gate::liger}) {
    CAPTURE(name(gate));
    Generator ig(3);
    Attention attn(gated_config(gate), {ig, Device::cpu(), DType::f64});
    Tensor y = attn.forward(x);
    CHECK(y.shape() == Shape{B, L, 12});
    for (LinearForm form : {LinearForm::quadratic, LinearForm::recurrent}) {
      attn.mixer.cfg.form = form;
      CHECK(max_diff(attn.forward(x), y) < 1e-12);
    }
    attn.mixer.cfg.form = LinearForm::quadratic;
    Tensor yq = attn.forward(x, key_mask);
    attn.mixer.cfg.form = LinearForm::chunked;
    CHECK(max_diff(attn.forward(x, key_mask), yq) < 1e-12);
    TraceRequest tr;
    tr.weights = true;
    CHECK(max_diff(attn.forward(x, Tensor(), &tr), y) < 1e-12);
    REQUIRE(tr.layers.size() == 1);
    CHECK(tr.layers[0].weights.shape() == Shape{B, 2, L, L});
    NoGradGuard ng;
    DecodeCache st;
    const Tensor decoded = decode_each(attn, x, st);
    CHECK(st.pos() == L);
    CHECK(max_diff(decoded, y) < 1e-12);
  }
}

TEST_CASE("gated mixer: a gate needs a causal linear mixer, naming the gate") {
  Generator ig(1);
  AttentionConfig c = gated_config(Gate::gla);
  c.mixer = Mixer::softmax();
  CHECK_THROWS_WITH_AS(Attention(c, {ig}), doctest::Contains("gate 'gla' needs a linear mixer"), Error);
  c.mixer = parse_mixer("hybrid-hedgehog", "test");
  CHECK_THROWS_WITH_AS(Attention(c, {ig}), doctest::Contains("not 'hybrid-hedgehog'"), Error);
  c = gated_config(Gate::delta);
  c.mixer = Mixer::softmax();
  CHECK_THROWS_WITH_AS(Attention(c, {ig}), doctest::Contains("gate 'delta' needs a linear mixer"), Error);
  c = gated_config(Gate::delta);
  c.causal = false;
  Attention enc_delta(c, {ig});
  Generator g0(2);
  CHECK_THROWS_WITH_AS(enc_delta.forward(randn({1, 4, 12}, g0)), doctest::Contains("gate 'delta' is causal only"),
                       Error);
  c = gated_config(Gate::decay);
  c.causal = false;
  Attention enc(c, {ig});
  Generator g(2);
  CHECK_THROWS_WITH_AS(enc.forward(randn({1, 4, 12}, g)), doctest::Contains("gate 'decay' is causal only"), Error);
}

TEST_CASE("gated mixer: GPT-2 tiny with hedgehog+gla and +delta runs, decodes like its forward, and saves/reloads its gate") {
  const std::string src = std::string(HH_SOURCE_DIR) + "/tests/fixtures/hf/gpt2-tiny";
  for (Gate gate : {Gate::gla, Gate::delta}) {
    CAPTURE(name(gate));
    HFModelOptions o;
    o.mixer = parse_mixer("hedgehog", "test");
    o.gate = gate;
    o.seed = 3;
    auto m = load_hf_model(src, o);
    auto* lm = dynamic_cast<CausalLM*>(m.get());
    REQUIRE(lm != nullptr);
    // The gate's weights are new weights under feature_map.
    const std::string own = gate == Gate::gla ? ".feature_map.gate_up.weight" : ".feature_map.A_log";
    int64_t n = 0;
    for (const auto& kv : m->named_parameters()) n += kv.first.find(own) != std::string::npos;
    CHECK(n > 0);
    Generator gen(2);
    const Tensor ids = randint(0, 50, {1, 9}, gen);
    NoGradGuard ng;
    Tensor logits = lm->forward(ids);
    CHECK(std::isfinite(sum(logits).item<double>()));
    CHECK(max_diff(decode_each(*lm, ids), logits) < 1e-4);

    const fs::path out = fs::temp_directory_path() / ("hh_gated_save_" + std::to_string(::getpid()));
    fs::remove_all(out);
    save_hf_model(*m, out.string(), src);
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(out / "config.json"));
    CHECK(cfg["hedgehog"]["mixer"] == "hedgehog");
    CHECK(cfg["hedgehog"]["gate"] == name(gate));
    auto back = load_hf_model(out.string());
    CHECK(back->options().gate == gate);
    CHECK(to_vector<float>(dynamic_cast<CausalLM&>(*back).forward(ids)) == to_vector<float>(logits));
    // Bad configs: an unknown gate, and a gate on softmax attention.
    cfg["hedgehog"]["gate"] = "deltanet";
    std::ofstream(out / "config.json") << cfg.dump();
    CHECK_THROWS_WITH_AS(load_hf_model(out.string()), doctest::Contains("unknown gate 'deltanet'"), Error);
    cfg["hedgehog"]["gate"] = name(gate);
    cfg["hedgehog"]["mixer"] = "softmax";
    std::ofstream(out / "config.json") << cfg.dump();
    CHECK_THROWS_AS(load_hf_model(out.string()), Error);
    fs::remove_all(out);
  }
}

TEST_CASE("delta mixer: its weights under feature_map, initialized as fla's GatedDeltaNet") {
  Generator ig(1);
  Attention attn(gated_config(Gate::delta), {ig, Device::cpu(), DType::f64});
  std::map<std::string, Tensor> p;
  for (const auto& kv : attn.named_parameters()) p[kv.first] = kv.second;
  REQUIRE(p.count("feature_map.a_proj.weight") == 1);
  CHECK(p.at("feature_map.a_proj.weight").shape() == Shape{2, 12});
  CHECK(p.at("feature_map.b_proj.weight").shape() == Shape{2, 12});
  CHECK(p.count("feature_map.a_proj.bias") == 0);
  CHECK(p.count("feature_map.map.weight") == 1);
  for (double a : to_vector<double>(exp(p.at("feature_map.A_log")))) CHECK((a > 0 && a <= 16));
  for (double dt : to_vector<double>(softplus(p.at("feature_map.dt_bias")))) CHECK((dt >= 1e-4 - 1e-12 && dt <= 0.1 + 1e-12));
  // β in (0,1) and log α <= 0 per head, data-dependent.
  const auto& gm = static_cast<const GatedFeatureMap&>(*attn.feature_map);
  Generator g(5);
  const DeltaGates dg = gm.delta_gates(GateInput{randn({2, 5, 12}, g, {DType::f64}), Tensor()}, DType::f64);
  CHECK(dg.beta.shape() == Shape{2, 2, 5});
  CHECK(dg.log_alpha.shape() == Shape{2, 2, 5});
  CHECK(amin(dg.beta).item<double>() > 0);
  CHECK(amax(dg.beta).item<double>() < 1);
  CHECK(amax(dg.log_alpha).item<double>() < 0);
  CHECK(amax(dg.log_alpha).item<double>() > amin(dg.log_alpha).item<double>());
  CHECK_THROWS_WITH_AS(gm.delta_gates(GateInput{}, DType::f64), doctest::Contains("gate delta: needs the layer input"),
                       Error);
  // delta_l2norm: unit rows (fla's eps 1e-6 under the root).
  Tensor u = delta_l2norm(randn({3, 7}, g, {DType::f64}));
  for (double r : to_vector<double>(sum(mul(u, u), {-1}))) CHECK(r == doctest::Approx(1).epsilon(1e-6));
}

TEST_CASE("delta mixer: chunked forward equals the op's recurrent form and the materialized weights, with padding, and decoding equals the forward") {
  const int64_t B = 2, L = 8;
  Generator g(11);
  Tensor x = randn({B, L, 12}, g, {DType::f64});
  Tensor mask = ones({B, L}, {DType::f64});
  copy_(slice(slice(mask, 0, 1, 2), 1, 0, 3), zeros({1, 3}, {DType::f64}));  // row 1: three pads on the left
  const Tensor key_mask = gt(mask, 0.5);
  Generator ig(3);
  Attention attn(gated_config(Gate::delta), {ig, Device::cpu(), DType::f64});  // chunk 3: L is no multiple
  Tensor y = attn.forward(x);
  CHECK(y.shape() == Shape{B, L, 12});
  CHECK(std::isfinite(sum(y).item<double>()));
  Tensor ym = attn.forward(x, key_mask);
  attn.mixer.cfg.form = LinearForm::recurrent;  // delta_attention_recurrent
  const double rec = max_diff(attn.forward(x), y), rec_masked = max_diff(attn.forward(x, key_mask), ym);
  MESSAGE("delta mixer, f64: chunked vs recurrent ", rec, ", with padding ", rec_masked);
  CHECK(rec < 1e-10);
  CHECK(rec_masked < 1e-10);
  attn.mixer.cfg.form = LinearForm::quadratic;  // y = W v, W the rule on identity values
  CHECK(max_diff(attn.forward(x, key_mask), ym) < 1e-10);
  attn.mixer.cfg.form = LinearForm::chunked;
  TraceRequest tr;
  tr.weights = true;
  CHECK(max_diff(attn.forward(x, Tensor(), &tr), y) < 1e-10);
  REQUIRE(tr.layers.size() == 1);
  CHECK(tr.layers[0].weights.shape() == Shape{B, 2, L, L});
  // Gradients reach the new weights (A_log, dt_bias, a_proj, b_proj) and agree between the forms.
  Tensor w = randn({B, L, 12}, g, {DType::f64});
  auto grads = [&](LinearForm form) {
    attn.mixer.cfg.form = form;
    attn.zero_grad();
    sum(mul(attn.forward(x, key_mask), w)).backward();
    std::vector<Tensor> out;
    for (const char* n : {"feature_map.A_log", "feature_map.dt_bias", "feature_map.a_proj.weight",
                          "feature_map.b_proj.weight", "q_proj.weight"})
      for (const auto& kv : attn.named_parameters())
        if (kv.first == n) out.push_back(kv.second.grad().detach());
    return out;
  };
  const std::vector<Tensor> gc = grads(LinearForm::chunked), gr = grads(LinearForm::recurrent);
  REQUIRE(gc.size() == 5);
  REQUIRE(gr.size() == 5);
  for (size_t i = 0; i < gc.size(); ++i) {
    CAPTURE(i);
    CHECK(amax(abs(gc[i])).item<double>() > 1e-8);
    CHECK(max_diff(gc[i], gr[i]) < 1e-10);
  }
  attn.mixer.cfg.form = LinearForm::chunked;
  // The mask changes the padded row only; without RoPE its real tokens see only each other, as
  // the unpadded sequence.
  CHECK(max_diff(slice(ym, 0, 0, 1), slice(y, 0, 0, 1)) < 1e-12);
  CHECK(max_diff(slice(ym, 0, 1, 2), slice(y, 0, 1, 2)) > 1e-6);
  AttentionConfig c = gated_config(Gate::delta);
  c.rope = false;
  Generator ig2(3);
  Attention plain(c, {ig2, Device::cpu(), DType::f64});
  Tensor real = slice(slice(x, 0, 1, 2), 1, 3, L);  // row 1's real tokens alone
  Tensor padded = plain.forward(x, key_mask);
  CHECK(max_diff(slice(slice(padded, 0, 1, 2), 1, 3, L), plain.forward(real)) < 1e-12);
  // Decoding: the delta state, token by token, counted by pos().
  NoGradGuard ng;
  DecodeCache st;
  const Tensor decoded = decode_each(attn, x, st);
  CHECK(st.pos() == L);
  CHECK(st.linear.delta.tokens == L);
  CHECK(st.linear.delta.S.shape() == Shape{B, 2, 8, 4});  // (B,H,F,D): hedgehog's F = 2·head_dim
  CHECK(max_diff(decoded, y) < 1e-12);
}
