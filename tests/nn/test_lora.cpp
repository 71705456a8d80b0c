// LoRA adapters (nn/lora.h): identity at init, the forward formula, PEFT names, training only the
// adapters, merging, and the errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "nn/lora.h"
#include "nn/transformer.h"
#include "tests/op_table.h"

using namespace hh;
using namespace hh::nn;

namespace {

TransformerConfig tiny_lm() {
  TransformerConfig c;
  c.vocab = 11;
  c.dim = 8;
  c.layers = 2;
  c.heads = 2;
  c.head_dim = 4;
  c.mlp_hidden = 16;
  c.attention.mixer = nn::Mixer::softmax();
  return c;
}

Tensor tiny_ids() { return from_vector(std::vector<int64_t>{1, 4, 2, 9, 0, 3, 7, 5, 5, 10}, {2, 5}); }

std::set<std::string> names_of(const Module& m) {
  std::set<std::string> out;
  for (auto& kv : m.state_dict()) out.insert(kv.first);
  return out;
}

// Writes random values into every adapter tensor (as a few optimizer steps would), without autograd.
void perturb_adapters(Module& m, Generator& g) {
  NoGradGuard ng;
  for (auto& kv : m.named_parameters())
    if (kv.first.find(".lora_") != std::string::npos) copy_(kv.second, mul(randn(kv.second.shape(), g), 0.3));
}

// A BERT-style tree: encoder.layer.N.attention.self.{query,key,value}, encoder.layer.N.output.dense.
struct ToySelf : Module {
  explicit ToySelf(Init init) {
    query = register_module("query", std::make_shared<Linear>(6, 6, true, init));
    key = register_module("key", std::make_shared<Linear>(6, 6, true, init));
    value = register_module("value", std::make_shared<Linear>(6, 6, true, init));
  }
  Tensor forward(const Tensor& x) const {
    return add(add(query->forward(x), mul(key->forward(x), 0.5)), value->forward(x));
  }
  std::shared_ptr<Linear> query, key, value;
};
struct ToyAttention : Module {
  explicit ToyAttention(Init init) { self = register_module("self", std::make_shared<ToySelf>(init)); }
  std::shared_ptr<ToySelf> self;
};
struct ToyOutput : Module {
  explicit ToyOutput(Init init) { dense = register_module("dense", std::make_shared<Linear>(6, 6, true, init)); }
  std::shared_ptr<Linear> dense;
};
struct ToyLayer : Module {
  explicit ToyLayer(Init init) {
    attention = register_module("attention", std::make_shared<ToyAttention>(init));
    output = register_module("output", std::make_shared<ToyOutput>(init));
  }
  std::shared_ptr<ToyAttention> attention;
  std::shared_ptr<ToyOutput> output;
};
struct ToyEncoder : Module {
  ToyEncoder(int64_t layers, Init init) {
    layer = register_module("layer", std::make_shared<ModuleList<ToyLayer>>());
    for (int64_t i = 0; i < layers; ++i) layer->push_back(std::make_shared<ToyLayer>(init));
  }
  std::shared_ptr<ModuleList<ToyLayer>> layer;
};
struct ToyBert : Module {
  explicit ToyBert(Init init) { encoder = register_module("encoder", std::make_shared<ToyEncoder>(2, init)); }
  Tensor forward(const Tensor& x) const {
    Tensor h = x;
    for (auto& l : *encoder->layer) h = l->output->dense->forward(relu(l->attention->self->forward(h)));
    return h;
  }
  std::shared_ptr<ToyEncoder> encoder;
};

}  // namespace

TEST_CASE("lora: a fresh adapter leaves a DecoderLM's output bit-exact, PEFT names and init") {
  Generator g(1);
  DecoderLM lm(tiny_lm(), {g});
  Tensor ids = tiny_ids();
  Tensor before = lm.forward(ids);
  std::set<std::string> base_names = names_of(lm);

  LoraConfig cfg;
  cfg.rank = 2;
  cfg.alpha = 4;
  Generator ga(7);
  CHECK(apply_lora(lm, cfg, {ga}) == 8);  // q, k, v, o in each of 2 layers
  // B = 0, so the adapter term is exactly 0 and y + 0 == y.
  CHECK(max_abs_diff(lm.forward(ids), before) == 0.0);

  std::set<std::string> names = names_of(lm);
  CHECK(names.size() == base_names.size() + 16);
  for (const auto& n : base_names) CHECK_MESSAGE(names.count(n) == 1, n);
  for (const std::string proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
    std::string prefix = "layers.1.attn." + proj;
    bool found = false;
    for (auto& kv : lm.state_dict()) {
      if (kv.first == prefix + ".lora_A.weight") {
        found = true;
        CHECK(kv.second.shape() == Shape{2, 8});  // (r, in)
        // kaiming_uniform(a=√5) on (r, in) is U(-1/√in, 1/√in); in = 8.
        std::vector<double> a = to_vector<double>(kv.second);
        double amax = 0;
        for (double v : a) amax = std::max(amax, std::fabs(v));
        CHECK(amax <= 1.0 / std::sqrt(8.0));
        CHECK(amax > 0.0);
      }
      if (kv.first == prefix + ".lora_B.weight") {
        CHECK(kv.second.shape() == Shape{8, 2});  // (out, r)
        CHECK(max_abs_diff(kv.second, zeros({8, 2})) == 0.0);
      }
    }
    CHECK_MESSAGE(found, prefix);
  }
  auto a0 = lm.blocks->operator[](0)->attn->q_proj->lora_A;
  REQUIRE(a0 != nullptr);
  CHECK(lm.blocks->operator[](0)->attn->q_proj->lora_scaling == 2.0);  // alpha / r = 4 / 2
}

TEST_CASE("lora: forward is x Wᵀ + b + (alpha/r) x Aᵀ Bᵀ") {
  // One Linear 3 -> 2 inside a tree, r = 2, alpha = 6: scaling 3 (not alpha). Small integers: exact in f32.
  struct One : Module {
    explicit One(Init init) { q_proj = register_module("q_proj", std::make_shared<Linear>(3, 2, true, init)); }
    std::shared_ptr<Linear> q_proj;
  };
  Generator g(2);
  One m({g});
  LoraConfig cfg;
  cfg.rank = 2;
  cfg.alpha = 6;
  CHECK(apply_lora(m, cfg, {g}) == 1);
  {
    NoGradGuard ng;
    copy_(m.q_proj->weight, from_vector(std::vector<float>{1, 0, 2, -1, 1, 0}, {2, 3}));
    copy_(m.q_proj->bias, from_vector(std::vector<float>{0.5f, -2}, {2}));
    copy_(m.q_proj->lora_A->weight, from_vector(std::vector<float>{1, 1, -1, 1, 0, 0}, {2, 3}));
    copy_(m.q_proj->lora_B->weight, from_vector(std::vector<float>{2, 1, -1, 0}, {2, 2}));
  }
  // x = (1, 2, 4): x Wᵀ = (1 + 8, -1 + 2) = (9, 1); + b = (9.5, -1).
  // x Aᵀ = (1 + 2 - 4, 1) = (-1, 1); · Bᵀ = (2·-1 + 1·1, -1·-1 + 0) = (-1, 1); · 3 = (-3, 3).
  // y = (6.5, 2).
  Tensor y = m.q_proj->forward(from_vector(std::vector<float>{1, 2, 4}, {1, 3}));
  CHECK(to_vector<double>(y) == std::vector<double>{6.5, 2.0});
}

TEST_CASE("lora: merged forward equals the unmerged forward; merge restores the original names") {
  Generator g(3);
  DecoderLM lm(tiny_lm(), {g});
  std::set<std::string> base_names = names_of(lm);
  Tensor base_q = lm.blocks->operator[](0)->attn->q_proj->weight.detach().to(DType::f64);
  LoraConfig cfg;
  cfg.rank = 3;
  cfg.alpha = 6;
  CHECK(apply_lora(lm, cfg, {g}) == 8);
  perturb_adapters(lm, g);
  Tensor ids = tiny_ids();
  Tensor unmerged = lm.forward(ids);
  CHECK(max_abs_diff(unmerged, lm.forward(ids)) == 0.0);
  // The adapters now change the output (else the comparison below would prove nothing).
  lm.blocks->operator[](0)->attn->q_proj->lora_scaling = 0;
  lm.blocks->operator[](1)->attn->v_proj->lora_scaling = 0;
  CHECK(max_abs_diff(unmerged, lm.forward(ids)) > 1e-3);
  lm.blocks->operator[](0)->attn->q_proj->lora_scaling = 2;
  lm.blocks->operator[](1)->attn->v_proj->lora_scaling = 2;
  CHECK(max_abs_diff(unmerged, lm.forward(ids)) == 0.0);

  auto q = lm.blocks->operator[](0)->attn->q_proj;
  Tensor expect_q = add(base_q, mul(matmul(q->lora_B->weight.detach().to(DType::f64),
                                           q->lora_A->weight.detach().to(DType::f64)), 2.0));
  CHECK(merge_lora(lm) == 8);
  CHECK(names_of(lm) == base_names);
  CHECK(q->lora_A == nullptr);
  CHECK(max_abs_diff(q->weight.to(DType::f64), expect_q) < 1e-6);  // W + (6/3)·B A, rounded to f32
  // x (W + sBA)ᵀ and x Wᵀ + s (x Aᵀ) Bᵀ round differently in f32 (different sums of products,
  // then softmax and two layers on top): agreement to rtol 1e-5 / atol 1e-5 is f32 round-off on
  // logits of size ~1, far below the > 1e-3 effect of the adapters checked above.
  Tensor merged = lm.forward(ids);
  CHECK(allclose(merged, unmerged, 1e-5, 1e-5));
  hh::test::check_throws([&] { merge_lora(lm); }, {"merge_lora", "no LoRA adapter"});
}

TEST_CASE("lora: frozen base + backward -> only the adapters get gradients") {
  Generator g(4);
  DecoderLM lm(tiny_lm(), {g});
  LoraConfig cfg;
  cfg.rank = 2;
  CHECK(apply_lora(lm, cfg, {g}) == 8);
  int64_t total = lm.num_parameters();
  lm.freeze("*");
  CHECK(lm.unfreeze("*lora_*") == 16);
  CHECK(lm.num_parameters(true) == 8 * (2 * 8 + 8 * 2));
  CHECK(lm.num_parameters() == total);
  perturb_adapters(lm, g);  // B != 0 so A's gradient is not trivially zero
  Tensor loss = sum(mul(lm.forward(tiny_ids()), lm.forward(tiny_ids()).detach()));
  loss.backward();
  int64_t with_grad = 0;
  for (auto& kv : lm.named_parameters()) {
    bool is_lora = kv.first.find(".lora_") != std::string::npos;
    CHECK_MESSAGE(kv.second.grad().defined() == is_lora, kv.first);
    if (is_lora) {
      ++with_grad;
      std::vector<double> gv = to_vector<double>(kv.second.grad());
      CHECK_MESSAGE(std::any_of(gv.begin(), gv.end(), [](double v) { return v != 0.0; }), kv.first);
    }
  }
  CHECK(with_grad == 16);
}

TEST_CASE("lora: BERT-style names, dropout, and the errors") {
  Generator g(5);
  ToyBert bert({g});
  Tensor x = randn({3, 6}, g);
  Tensor before = bert.forward(x);
  std::set<std::string> base_names = names_of(bert);

  // The default targets are Llama's: nothing here matches, and the error says what exists.
  hh::test::check_throws([&] { apply_lora(bert, LoraConfig{}, {g}); },
                         {"apply_lora", "q_proj, k_proj, v_proj, o_proj", "match no Linear",
                          "end in [query, key, value, dense]", "e.g. encoder.layer.0.attention.self.query"});
  CHECK(names_of(bert) == base_names);

  LoraConfig cfg;
  cfg.rank = 2;
  cfg.alpha = 2;
  cfg.dropout = 0.5;
  cfg.target_modules = {"query", "value"};
  CHECK(apply_lora(bert, cfg, {g}) == 4);
  std::set<std::string> names = names_of(bert);
  CHECK(names.count("encoder.layer.1.attention.self.value.lora_B.weight") == 1);
  CHECK(names.count("encoder.layer.0.attention.self.query.lora_A.weight") == 1);
  CHECK(names.count("encoder.layer.0.attention.self.key.lora_A.weight") == 0);
  CHECK(names.size() == base_names.size() + 8);  // the dropout modules have no tensors
  CHECK(bert.encoder->layer->operator[](0)->attention->self->query->lora_dropout != nullptr);
  CHECK(max_abs_diff(bert.forward(x), before) == 0.0);

  // Dropout acts in training mode only: with B != 0 two training passes differ, eval passes agree.
  perturb_adapters(bert, g);
  bert.train();
  CHECK(max_abs_diff(bert.forward(x), bert.forward(x)) > 0.0);
  bert.eval();
  Tensor eval_out = bert.forward(x);
  CHECK(max_abs_diff(eval_out, bert.forward(x)) == 0.0);

  // A second application to the same Linears is refused before anything changes.
  hh::test::check_throws([&] { apply_lora(bert, cfg, {g}); },
                         {"apply_lora", "encoder.layer.0.attention.self.query", "already has a LoRA adapter"});
  CHECK(names_of(bert).size() == base_names.size() + 8);

  CHECK(merge_lora(bert) == 4);
  CHECK(names_of(bert) == base_names);
  CHECK(allclose(bert.forward(x), eval_out, 1e-5, 1e-5));

  LoraConfig bad = cfg;
  bad.rank = 0;
  hh::test::check_throws([&] { apply_lora(bert, bad, {g}); }, {"apply_lora", "rank must be positive"});
  bad = cfg;
  bad.target_modules = {"attention.self.query"};
  hh::test::check_throws([&] { apply_lora(bert, bad, {g}); }, {"apply_lora", "invalid target 'attention.self.query'"});
  bad = cfg;
  bad.dropout = 1;
  hh::test::check_throws([&] { apply_lora(bert, bad, {g}); }, {"apply_lora", "dropout"});
}
