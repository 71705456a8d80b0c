// Gated linear mixers (nn/gate.h) through nn::Attention / AttentionMixer / GPT-2: the gate parsed
// once, the log gates each gate builds (RetNet's decays, GLA's projection, Liger's pooled key),
// the chunked forward equal to the quadratic and recurrent forms and to token-by-token decoding,
// GLA's gate weights under feature_map, and a GPT-2 fixture that saves and reloads its gate.
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

using namespace hh;
using namespace hh::nn;
namespace fs = std::filesystem;

namespace {

double max_diff(const Tensor& a, const Tensor& b) {
  NoGradGuard ng;
  return amax(abs(sub(a.to(DType::f64), b.to(DType::f64)))).item<double>();
}

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

TEST_CASE("gate: parsed once, named back, delta refused until built") {
  for (const char* n : {"none", "decay", "gla", "liger", "delta"}) CHECK(name(parse_gate(n, "--gate")) == n);
  CHECK_THROWS_WITH_AS(parse_gate("mamba", "--gate"),
                       doctest::Contains("--gate: unknown gate 'mamba' (expected none, decay, gla, liger, delta)"),
                       Error);
  CHECK_THROWS_WITH_AS(check_gate_built(Gate::delta, "--gate"), doctest::Contains("--gate delta: not built yet"),
                       Error);
  CHECK_NOTHROW(check_gate_built(Gate::gla, "--gate"));
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
    std::vector<Tensor> ys;
    for (int64_t t = 0; t < L; ++t) ys.push_back(attn.step(slice(x, 1, t, t + 1), st));
    CHECK(st.pos() == L);
    CHECK(max_diff(cat(ys, 1), y) < 1e-12);
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
  CHECK_THROWS_WITH_AS(Attention(c, {ig}), doctest::Contains("delta: not built yet"), Error);
  c = gated_config(Gate::decay);
  c.causal = false;
  Attention enc(c, {ig});
  Generator g(2);
  CHECK_THROWS_WITH_AS(enc.forward(randn({1, 4, 12}, g)), doctest::Contains("gate 'decay' is causal only"), Error);
}

TEST_CASE("gated mixer: GPT-2 tiny with hedgehog+gla runs, decodes like its forward, and saves/reloads its gate") {
  const std::string src = std::string(HH_SOURCE_DIR) + "/tests/fixtures/hf/gpt2-tiny";
  HFModelOptions o;
  o.mixer = parse_mixer("hedgehog", "test");
  o.gate = Gate::gla;
  o.seed = 3;
  auto m = load_hf_model(src, o);
  auto* lm = dynamic_cast<CausalLM*>(m.get());
  REQUIRE(lm != nullptr);
  int64_t n = 0;
  for (const auto& kv : m->named_parameters()) n += kv.first.find(".feature_map.gate_up.weight") != std::string::npos;
  CHECK(n > 0);
  Generator gen(2);
  const Tensor ids = randint(0, 50, {1, 9}, gen);
  NoGradGuard ng;
  Tensor logits = lm->forward(ids);
  CHECK(std::isfinite(sum(logits).item<double>()));
  DecodeState st = lm->start_decoding();
  std::vector<Tensor> steps;
  for (int64_t t = 0; t < 9; ++t) steps.push_back(lm->step(slice(ids, 1, t, t + 1), st));
  CHECK(max_diff(cat(steps, 1), logits) < 1e-4);

  const fs::path out = fs::temp_directory_path() / ("hh_gated_save_" + std::to_string(::getpid()));
  fs::remove_all(out);
  save_hf_model(*m, out.string(), src);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(out / "config.json"));
  CHECK(cfg["hedgehog"]["mixer"] == "hedgehog");
  CHECK(cfg["hedgehog"]["gate"] == "gla");
  auto back = load_hf_model(out.string());
  CHECK(back->options().gate == Gate::gla);
  CHECK(to_vector<float>(dynamic_cast<CausalLM&>(*back).forward(ids)) == to_vector<float>(logits));
  cfg["hedgehog"]["gate"] = "delta";
  std::ofstream(out / "config.json") << cfg.dump();
  CHECK_THROWS_WITH_AS(load_hf_model(out.string()), doctest::Contains("gate delta: not built yet"), Error);
  fs::remove_all(out);
}
