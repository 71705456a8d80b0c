// Models loaded with HFModelOptions::weights = int8 (every Linear per-channel int8, quantized at
// load; embeddings and norms f32) or bf16 (every Linear's weight rounded to bf16, f32 arithmetic): logits close to the f32 model's and to transformers' on the tiny
// fixtures; f32 inference (prepacked weights) the same bits as the unprepared forward; the
// refusals (CUDA, bf16).
#include <doctest/doctest.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "nn/models/bert.h"
#include "nn/models/gpt2.h"
#include "nn/models/hf_model.h"
#include "tests/nn/models/decoder_test_util.h"
#include "tests/op_table.h"

using namespace hh;
using namespace hh::nn;
using hh::test::hf_fixture;
using hh::test::hf_reference;
using hh::test::rel_err;

namespace {
HFModelOptions with(WeightFormat w) {
  HFModelOptions o;
  o.weights = w;
  return o;
}
int64_t count_int8(const Module& m) {
  int64_t n = 0;
  for (auto& [name, mod] : m.named_modules())
    if (auto* lin = dynamic_cast<const Linear*>(mod.get()); lin && lin->weight_format == WeightFormat::int8) ++n;
  return n;
}
}  // namespace

TEST_CASE("linear int8 model: GPT-2 and BERT logits close to f32 and to transformers") {
  if (!hh::test::test_device().is_cpu()) return;  // int8 weights are CPU only (refusal below)
  NoGradGuard ng;
  {
    auto ref = hf_reference("gpt2-tiny");
    auto f32 = load_causal_lm(hf_fixture("gpt2-tiny"), with(WeightFormat::f32));
    auto i8 = load_causal_lm(hf_fixture("gpt2-tiny"), with(WeightFormat::int8));
    CHECK(count_int8(*i8) > 0);
    CHECK(count_int8(*f32) == 0);
    const Tensor ids = ref.tensors.at("input_ids");
    const Tensor lf = f32->forward(ids), lq = i8->forward(ids);
    CHECK(rel_err(lf, ref.tensors.at("logits")) < 1e-4);  // f32 inference: prepacked weights, parity kept
    // int8: per-channel weights and per-token activations at 127 levels each, through the tiny
    // model's layers: measured 0.014 (max |Δ| / max |logit|; bert-tiny below: 0.007 hidden, 0.012
    // logits). 0.05 leaves room for another machine's rounding of the f32 parts without hiding a
    // broken kernel (whose error is O(1)).
    const double e = rel_err(lq, lf);
    MESSAGE("gpt2-tiny int8 logits rel. error to f32: " << e);
    CHECK(e < 0.05);
    CHECK(e > 0.0);  // it did run in int8
    // The greedy next token of every position mostly agrees (random tiny weights: near ties exist).
    const Tensor af = argmax(lf, -1), aq = argmax(lq, -1);
    const auto vf = to_vector<int64_t>(af), vq = to_vector<int64_t>(aq);
    int64_t same = 0;
    for (size_t i = 0; i < vf.size(); ++i) same += vf[i] == vq[i];
    CHECK(same >= static_cast<int64_t>(vf.size()) * 8 / 10);
  }
  {
    SafeTensors r = load_safetensors(hf_fixture("bert-tiny") + "/reference.safetensors");
    auto f32 = load_hf_model(hf_fixture("bert-tiny"), with(WeightFormat::f32));
    auto i8 = load_hf_model(hf_fixture("bert-tiny"), with(WeightFormat::int8));
    auto* cf = dynamic_cast<BertForSequenceClassification*>(f32.get());
    auto* cq = dynamic_cast<BertForSequenceClassification*>(i8.get());
    REQUIRE(cf != nullptr);
    REQUIRE(cq != nullptr);
    const Tensor ids = r.tensors.at("input_ids"), types = r.tensors.at("token_type_ids"),
                 mask = r.tensors.at("attention_mask");
    Tensor hf, hq;
    const Tensor lf = cf->forward(ids, types, mask, nullptr, &hf), lq = cq->forward(ids, types, mask, nullptr, &hq);
    CHECK(rel_err(lf, r.tensors.at("logits")) < 1e-4);
    const double eh = rel_err(hq, hf), el = rel_err(lq, lf);
    MESSAGE("bert-tiny int8 rel. error to f32: hidden " << eh << ", logits " << el);
    CHECK(eh < 0.05);  // as above
    CHECK(el < 0.05);
  }
}

namespace {
// Every Linear weight of m overwritten with NaN behind its cache's back (through the raw pointer:
// no version bump), so a product that reads the f32 weight instead of the prepared int8 one gives
// NaN. Returns how many were poisoned.
int64_t poison_linear_weights(Module& m) {
  int64_t n = 0;
  for (auto& [name, mod] : m.named_modules())
    if (auto* lin = dynamic_cast<Linear*>(mod.get())) {
      float* w = lin->weight.data<float>();
      for (int64_t i = 0; i < lin->weight.numel(); ++i) w[i] = std::numeric_limits<float>::quiet_NaN();
      ++n;
    }
  return n;
}
}  // namespace

TEST_CASE("linear bf16 model: BERT's logits are the f32 model's with every Linear weight rounded to bf16; "
          "GPT-2's close to f32") {
  if (!hh::test::test_device().is_cpu()) return;
  NoGradGuard ng;
  SafeTensors r = load_safetensors(hf_fixture("bert-tiny") + "/reference.safetensors");
  const Tensor ids = r.tensors.at("input_ids"), types = r.tensors.at("token_type_ids"),
               mask = r.tensors.at("attention_mask");
  auto bf = load_hf_model(hf_fixture("bert-tiny"), with(WeightFormat::bf16));
  auto rounded = load_hf_model(hf_fixture("bert-tiny"), with(WeightFormat::f32));  // prepacked f32
  int64_t n = 0;
  for (auto& [name, mod] : rounded->named_modules())
    if (auto* lin = dynamic_cast<Linear*>(mod.get())) {
      copy_(lin->weight, lin->weight.to(DType::bf16).to(DType::f32));
      ++n;
    }
  CHECK(n > 0);
  auto* cb = dynamic_cast<BertForSequenceClassification*>(bf.get());
  auto* cr = dynamic_cast<BertForSequenceClassification*>(rounded.get());
  REQUIRE(cb != nullptr);
  REQUIRE(cr != nullptr);
  Tensor hb, hr;
  const Tensor lb = cb->forward(ids, types, mask, nullptr, &hb), lr = cr->forward(ids, types, mask, nullptr, &hr);
  CHECK(to_vector<float>(hb) == to_vector<float>(hr));  // the same bits
  // The 2-label classifier is too narrow for the packed engine: f32 multiplies it by the plain
  // GEMM, bf16 always by the packed one, so the sums differ in order only.
  CHECK(rel_err(lb, lr) < 1e-6);
  const double eb = rel_err(lb, r.tensors.at("logits"));
  MESSAGE("bert-tiny bf16 logits rel. error to transformers (f32): " << eb);
  CHECK(eb > 0.0);   // it did round
  CHECK(eb < 0.02);  // 8 bits of mantissa through 2 layers: measured 2e-3
  auto f32 = load_causal_lm(hf_fixture("gpt2-tiny"), with(WeightFormat::f32));
  auto b16 = load_causal_lm(hf_fixture("gpt2-tiny"), with(WeightFormat::bf16));
  const Tensor gids = hf_reference("gpt2-tiny").tensors.at("input_ids");
  const double eg = rel_err(b16->forward(gids), f32->forward(gids));
  MESSAGE("gpt2-tiny bf16 logits rel. error to f32: " << eg);
  CHECK(eg > 0.0);
  CHECK(eg < 0.02);
}

TEST_CASE("linear int8 and bf16 models: every Linear is multiplied through its prepared weight (fused MLPs "
          "included), and the tied LM head too") {
  if (!hh::test::test_device().is_cpu()) return;
  NoGradGuard ng;
  for (WeightFormat format : {WeightFormat::int8, WeightFormat::bf16}) {
    CAPTURE(weight_format_name(format));
    auto i8 = load_causal_lm(hf_fixture("gpt2-tiny"), with(format));
    auto* gpt2 = dynamic_cast<GPT2LMHeadModel*>(i8.get());
    REQUIRE(gpt2 != nullptr);
    CHECK(gpt2->lm_head->weight_format == format);
    const Tensor ids = hf_reference("gpt2-tiny").tensors.at("input_ids");
    const Tensor before = i8->forward(ids);
    CHECK(poison_linear_weights(*i8) > 0);
    const Tensor after = i8->forward(ids);  // the MLP's fused bias + GELU once read c_fc's f32 weight
    CHECK(first_non_finite(after) < 0);
    CHECK(to_vector<float>(after) == to_vector<float>(before));
  }
  for (WeightFormat format : {WeightFormat::int8, WeightFormat::bf16}) {
    CAPTURE(weight_format_name(format));
    SafeTensors r = load_safetensors(hf_fixture("bert-tiny") + "/reference.safetensors");
    auto i8 = load_hf_model(hf_fixture("bert-tiny"), with(format));
    auto* bert = dynamic_cast<BertForSequenceClassification*>(i8.get());
    REQUIRE(bert != nullptr);
    const Tensor ids = r.tensors.at("input_ids"), types = r.tensors.at("token_type_ids"),
                 mask = r.tensors.at("attention_mask");
    const Tensor before = bert->forward(ids, types, mask);
    CHECK(poison_linear_weights(*i8) > 0);
    const Tensor after = bert->forward(ids, types, mask);
    CHECK(first_non_finite(after) < 0);
    CHECK(to_vector<float>(after) == to_vector<float>(before));
  }
}

TEST_CASE("linear int8 model: refused on CUDA and in bf16, with the reason") {
  HFModelOptions o = with(WeightFormat::int8);
  o.dtype = DType::bf16;
  CHECK_THROWS_WITH_AS(load_hf_model(hf_fixture("gpt2-tiny"), o), doctest::Contains("int8 weights run on the CPU in f32"),
                       Error);
}
