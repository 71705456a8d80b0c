// Module registry, layers (forward + gradients), state_dict, freezing, checkpoints and resume.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>

#include "core/safetensors.h"
#include "nn/rope.h"
#include "nn/transformer.h"
#include "tests/op_table.h"
#include "train/checkpoint.h"

using namespace hh;
using namespace hh::nn;

namespace {
TransformerConfig tiny(const std::string& mixer) {
  TransformerConfig c;
  c.vocab = 11;
  c.dim = 8;
  c.layers = 2;
  c.heads = 2;
  c.head_dim = 4;
  c.mlp_hidden = 16;
  c.attention.mixer = nn::parse_mixer(mixer, "test");
  c.attention.chunk = 4;
  return c;
}
}  // namespace

TEST_CASE("Module: dotted names, counts, state_dict round trip, strict errors") {
  Generator g(1);
  DecoderLM lm(tiny("hedgehog"), {g});
  auto names = lm.named_parameters();
  CHECK(names.front().first == "embed.weight");
  bool found = false;
  for (auto& [n, t] : names) found |= n == "layers.1.attn.feature_map.weight";
  CHECK(found);
  CHECK(lm.parameter("layers.0.attn.q_proj.weight").shape() == Shape{8, 8});
  int64_t total = 0;
  for (auto& [n, t] : names) total += t.numel();
  CHECK(lm.num_parameters() == total);

  Generator g2(2);
  DecoderLM other(tiny("hedgehog"), {g2});
  std::map<std::string, Tensor> sd;
  for (auto& [n, t] : lm.state_dict()) sd[n] = t;
  other.load_state_dict(sd);
  for (auto& kv : other.state_dict()) {  // no structured binding: clang 14 cannot capture one in CHECK's lambda
    const std::string& n = kv.first;
    CHECK_MESSAGE(max_abs_diff(kv.second, sd[n]) == 0.0, n);
  }

  auto bad = sd;
  bad.erase("norm.ln.weight");
  bad["extra.weight"] = zeros({1});
  hh::test::check_throws([&] { other.load_state_dict(bad); }, {"missing keys [norm.ln.weight]", "unexpected keys [extra.weight]"});
  auto wrong = sd;
  wrong["embed.weight"] = zeros({3, 3});
  hh::test::check_throws([&] { other.load_state_dict(wrong); }, {"embed.weight", "(11, 8)", "(3, 3)"});
}

TEST_CASE("Module: freeze / unfreeze by pattern, train / eval") {
  Generator g(1);
  DecoderLM lm(tiny("hedgehog"), {g});
  int64_t all = lm.num_parameters(true);
  CHECK(lm.freeze("*") > 0);
  CHECK(lm.num_parameters(true) == 0);
  CHECK(lm.unfreeze("*.feature_map.*") == 4);
  CHECK(lm.num_parameters(true) == 2 * (2 * 4 * 4 + 2 * 4));
  CHECK(lm.num_parameters(true) < all);
  hh::test::check_throws([&] { lm.freeze("no.such.*"); }, {"freeze", "no.such.*"});
  lm.eval();
  for (auto& [n, m] : lm.named_modules()) CHECK((m ? m->is_training() : lm.is_training()) == false);
  CHECK(glob_match("layers.*.attn.*", "layers.3.attn.q_proj.weight"));
  CHECK(!glob_match("layers.*.mlp", "layers.3.attn"));
}

TEST_CASE("layers: forward against references and finite-difference gradients") {
  Generator g(3);
  Init init{g, Device::cpu(), DType::f64};
  Tensor x = randn({2, 3, 4}, g, {DType::f64});
  SUBCASE("Linear") {
    Linear lin(4, 5, true, init);
    Tensor want = add(matmul(x, transpose(lin.weight, 0, 1)), lin.bias);
    CHECK(max_abs_diff(lin.forward(x), want) < 1e-12);
    hh::test::gradcheck([&](auto in) { return linear(in[0], in[1], in[2]); }, {x, lin.weight, lin.bias}, {0, 1, 2}, "Linear");
  }
  SUBCASE("LayerNorm / RMSNorm") {
    LayerNorm ln(4, 1e-5, true, init);
    Tensor m = mean(x, {-1}, true), v = var(x, {-1}, 0, true);
    CHECK(max_abs_diff(ln.forward(x), div(sub(x, m), sqrt(add(v, 1e-5)))) < 1e-10);
    RMSNorm rms(4, 1e-6, init);
    CHECK(max_abs_diff(rms.forward(x), mul(x, rsqrt(add(mean(square(x), {-1}, true), 1e-6)))) < 1e-10);
    hh::test::gradcheck([&](auto in) { return layer_norm(in[0], in[1], in[2], 1e-5); }, {x, ln.weight, ln.bias}, {0, 1, 2}, "LayerNorm");
    hh::test::gradcheck([&](auto in) { return rms_norm(in[0], in[1], 1e-6); }, {x, rms.weight}, {0, 1}, "RMSNorm");
  }
  SUBCASE("MLP / SwiGLU / Embedding / RoPE") {
    MLP mlp(4, 6, Activation::gelu_erf, true, init);
    CHECK(max_abs_diff(mlp.forward(x), mlp.fc2->forward(gelu(mlp.fc1->forward(x)))) < 1e-12);
    hh::test::gradcheck([&](auto in) { return mlp.forward(in[0]); }, {x}, {0}, "MLP");
    SwiGLU sw(4, 6, init);
    hh::test::gradcheck([&](auto in) { return sw.forward(in[0]); }, {x}, {0}, "SwiGLU");
    Embedding emb(7, 3, init);
    Tensor ids = from_vector(std::vector<int64_t>{1, 6, 1}, {3});
    CHECK(max_abs_diff(select(emb.forward(ids), 0, 1), select(emb.weight, 0, 6)) == 0.0);
    Tensor h = randn({1, 2, 5, 4}, g, {DType::f64});
    hh::test::gradcheck([&](auto in) { return apply_rope(in[0], 3); }, {h}, {0}, "RoPE");
    // RoPE keeps norms and makes q·k depend only on the position difference.
    CHECK(max_abs_diff(sum(square(apply_rope(h, 0)), {-1}), sum(square(h), {-1})) < 1e-12);
    Tensor q = slice(h, 2, 0, 1), k = slice(h, 2, 1, 2);
    double d1 = sum(mul(apply_rope(q, 2), apply_rope(k, 5))).item<double>();
    double d2 = sum(mul(apply_rope(q, 10), apply_rope(k, 13))).item<double>();
    CHECK(d1 == doctest::Approx(d2).epsilon(1e-10));
  }
}

TEST_CASE("EncoderClassifier: masks and pooling") {
  TransformerConfig c = tiny("elu");
  c.positions = "learned";
  c.max_len = 8;
  Generator g(4);
  EncoderClassifier enc(c, 3, "mean", {g});
  Tensor ids = randint(0, 11, {2, 6}, g);
  std::vector<double> m(12, 1.0);
  m[10] = m[11] = 0;  // row 1: two padding tokens
  Tensor mask = from_vector(m, {2, 6}, {DType::boolean});
  Tensor y = enc.forward(ids, mask);
  CHECK(y.shape() == Shape{2, 3});
  // Changing padded tokens does not change the output.
  Tensor ids2 = clone(ids);
  copy_(slice(slice(ids2, 0, 1, 2), 1, 4, 6), full({1, 2}, 3.0, {DType::i64}));
  CHECK(max_abs_diff(enc.forward(ids2, mask), y) < 1e-6);
}

namespace {
// A few AdamW steps of a tiny LM on fixed random data.
void train_steps(DecoderLM& lm, train::AdamW& opt, int64_t from, int64_t to) {
  for (int64_t s = from; s < to; ++s) {
    Generator dg(100 + static_cast<uint64_t>(s));
    Tensor ids = randint(0, 11, {2, 7}, dg);
    Tensor loss = cross_entropy(reshape(lm.forward(ids), {-1, 11}), reshape(ids, {-1}));
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
}
}  // namespace

TEST_CASE("checkpoint: resume is bit-identical (N straight vs k, save, load, N-k)") {
  for (std::string mixer : {"hedgehog", "performer"}) {
    SUBCASE(mixer.c_str()) {
      Generator g1(9);
      DecoderLM a(tiny(mixer), {g1});
      train::AdamW oa(train::decay_groups(a, 0.01), 1e-2);
      train_steps(a, oa, 0, 6);

      Generator g2(9);
      DecoderLM b(tiny(mixer), {g2});
      train::AdamW ob(train::decay_groups(b, 0.01), 1e-2);
      train_steps(b, ob, 0, 3);
      std::string path = "/tmp/hh_test_ckpt_" + mixer + ".safetensors";
      Generator data_gen(5, 42);
      train::CheckpointMeta meta;
      meta.step = 3;
      meta.generators["data"] = &data_gen;
      meta.extra["config"] = "{\"mixer\":\"" + mixer + "\"}";
      train::save_checkpoint(path, b, &ob, meta);

      Generator g3(123);  // different init: everything must come from the file
      DecoderLM c(tiny(mixer), {g3});
      train::AdamW oc(train::decay_groups(c, 0.01), 1e-2);
      Generator restored(0, 0);
      train::CheckpointMeta m2;
      m2.generators["data"] = &restored;
      train::load_checkpoint(path, c, &oc, m2);
      CHECK(m2.step == 3);
      CHECK(restored.seed() == 5);
      CHECK(restored.offset() == 42);
      CHECK(m2.extra.at("config") == "{\"mixer\":\"" + mixer + "\"}");
      train_steps(c, oc, 3, 6);
      std::map<std::string, Tensor> resumed;
      for (auto& [n, t] : c.state_dict()) resumed[n] = t;
      for (auto& kv : a.state_dict()) {
        const std::string& n = kv.first;
        CHECK_MESSAGE(to_vector<double>(kv.second) == to_vector<double>(resumed.at(n)), n, " differs after resume");
      }
      std::remove(path.c_str());
    }
  }
}

TEST_CASE("checkpoint: a wrong file is a clear error") {
  Generator g(1);
  DecoderLM lm(tiny("elu"), {g});
  train::CheckpointMeta meta;
  hh::test::check_throws([&] { train::load_checkpoint("/tmp/definitely_missing.safetensors", lm, nullptr, meta); },
                         {"definitely_missing"});
  std::string path = "/tmp/hh_test_plain.safetensors";
  save_safetensors(path, {{"x", zeros({2})}});
  hh::test::check_throws([&] { train::load_checkpoint(path, lm, nullptr, meta); }, {"hedgehog.format"});
  std::remove(path.c_str());
}

TEST_CASE("DecoderLM: end-to-end gradients match finite differences (f64)") {
  for (std::string mixer : {"softmax", "hedgehog"}) {
    SUBCASE(mixer.c_str()) {
      TransformerConfig c = tiny(mixer);
      Generator g(12);
      DecoderLM lm(c, {g, Device::cpu(), DType::f64});
      Tensor ids = randint(0, 11, {2, 5}, g);
      Tensor tg = randint(0, 11, {2, 5}, g);
      for (const char* name : {"embed.weight", "layers.0.attn.q_proj.weight", "layers.0.attn.v_proj.weight",
                               "layers.1.mlp.fc1.weight", "layers.0.norm1.ln.weight", "lm_head.weight"}) {
        Tensor& w = lm.parameter(name);
        Tensor saved = w;
        hh::test::gradcheck(
            [&](const std::vector<Tensor>& in) {
              w = in[0];
              return cross_entropy(reshape(lm.forward(ids), {-1, 11}), reshape(tg, {-1}));
            },
            {saved.detach()}, {0}, std::string(mixer) + " " + name);
        w = saved;
      }
    }
  }
}

TEST_CASE("DecoderLM: a token never sees the future, for every gate, in the chunked training form") {
  // Logits at positions <= t must not move when tokens after t change: the whole model (gate
  // projections, kernels, blocks and chunks that straddle t) in f64, 70 tokens, chunk 32 (so
  // per-channel gates run sub-blocks of 16 and the change falls inside a chunk).
  for (Gate gate : {Gate::none, Gate::decay, Gate::gla, Gate::liger, Gate::delta}) {
    CAPTURE(name(gate));
    TransformerConfig c = tiny("hedgehog");
    c.max_len = 80;
    c.attention.chunk = 32;
    c.attention.gate = gate;
    Generator g(5);
    DecoderLM lm(c, {g});
    lm.to(DType::f64);
    const int64_t L = 70, t = 37;
    Generator ig(6);
    Tensor ids = randint(0, c.vocab, {1, L}, ig);
    std::vector<double> changed = to_vector<double>(ids);
    for (int64_t i = t + 1; i < L; ++i) changed[static_cast<size_t>(i)] = static_cast<double>((i * 7) % c.vocab);
    Tensor ids2 = from_vector(changed, {1, L}, {DType::i64});
    NoGradGuard ng;
    Tensor a = slice(lm.forward(ids), 1, 0, t + 1), b = slice(lm.forward(ids2), 1, 0, t + 1);
    // Not bitwise: Eigen's vectorized products peel elements by the operands' alignment, which
    // the allocator decides per run, so equal inputs may round differently (4e-16 seen). A leak
    // from a different token moves a logit by far more than 1e-12.
    CHECK(amax(abs(sub(a, b))).item<double>() <= 1e-12);
    Tensor later = slice(lm.forward(ids), 1, t + 1, L), later2 = slice(lm.forward(ids2), 1, t + 1, L);
    CHECK(amax(abs(sub(later, later2))).item<double>() > 0.0);  // the change reaches the later positions
  }
}
