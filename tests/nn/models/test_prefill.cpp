// CausalLM::prefill (the prompt in one pass through every layer's full forward) against the
// token-by-token path it replaces, for every decoder family fixture and every kind of mixer: the
// last position's logits, the greedy tokens after it, and the DecodeState it leaves (KV caches with
// sliding windows, linear, gated and delta states, the hybrid's window ring and linear state).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "nn/gate.h"
#include "nn/models/generate.h"
#include "nn/models/hf_model.h"
#include "tests/nn/models/decode_state_util.h"
#include "tests/nn/models/decoder_test_util.h"
#include "tests/op_table.h"

using namespace hh;
using namespace hh::nn;
using hh::test::decode_state_err;
using hh::test::hf_fixture;
using hh::test::rel_err;
using hh::test::test_device;

namespace {

const char* const kFixtures[] = {"gpt2-tiny", "llama-tiny", "mistral-tiny", "qwen2-tiny", "qwen3-tiny"};

// A mixer of the tests: its text, the gate, the hybrid window; softmax_layers keeps layer 0 softmax.
struct MixerCase {
  const char* mixer;
  Gate gate;
  int64_t window;
  std::vector<int64_t> softmax_layers;
  std::string label() const {
    return gated_label(mixer, gate) + (parse_mixer(mixer, "test").is_hybrid() ? " W=" + std::to_string(window) : "") +
           (softmax_layers.empty() ? "" : " +softmax layer 0");
  }
};

const std::vector<MixerCase>& mixer_cases() {
  static const std::vector<MixerCase> cases = {
      {"softmax", Gate::none, 0, {}},
      {"hedgehog", Gate::none, 0, {}},
      {"exp", Gate::none, 0, {}},                  // a per-sequence key shift in forward: one by one here
      {"hybrid-hedgehog", Gate::none, 4, {}},      // the prompt runs past the window (a wrapped ring)
      {"hybrid-hedgehog", Gate::none, 64, {}},     // the ring not full yet
      {"hybrid-hedgehog", Gate::none, 4, {0}},     // a kept softmax layer beside the hybrid one
      {"hedgehog", Gate::gla, 0, {}},
      {"hedgehog", Gate::decay, 0, {}},
      {"hedgehog", Gate::liger, 0, {}},
      {"hedgehog", Gate::delta, 0, {}},
  };
  return cases;
}

std::shared_ptr<CausalLM> load(const std::string& fixture, const MixerCase& m) {
  HFModelOptions o;
  o.device = test_device();
  o.mixer = parse_mixer(m.mixer, "test");
  o.gate = m.gate;
  if (m.window > 0) o.window = m.window;
  o.softmax_layers = m.softmax_layers;
  o.chunk = 4;  // several chunks over the prompt
  o.seed = 3;
  return load_causal_lm(hf_fixture(fixture), o);
}

Tensor ids_of(const std::vector<int64_t>& v) {
  return from_vector(v, {1, static_cast<int64_t>(v.size())}, {DType::i64}).to(test_device());
}

// argmax of (1,1,V) logits.
int64_t greedy(const Tensor& logits) { return to_vector<int64_t>(argmax(reshape(logits, {-1}), 0))[0]; }

}  // namespace

TEST_CASE("prefill: logits, 12 greedy tokens and the decoding state equal the token-by-token path") {
  NoGradGuard ng;
  Generator gen(7);
  for (const char* fixture : kFixtures) {
    for (const MixerCase& m : mixer_cases()) {
      const std::string label = m.label();
      CAPTURE(fixture);
      CAPTURE(label);
      auto lm = load(fixture, m);
      // Prompts of 11 tokens (past every window of the fixtures and the W=4 ring) and of 2.
      for (int64_t P : {11, 2}) {
        CAPTURE(P);
        const std::vector<int64_t> prompt = to_vector<int64_t>(randint(0, 97, {P}, gen));
        DecodeState one = lm->start_decoding(), each = lm->start_decoding();
        Tensor a = lm->prefill(ids_of(prompt), one);
        Tensor b;
        for (int64_t id : prompt) b = lm->step(ids_of({id}), each);
        REQUIRE(a.shape() == Shape{1, 1, lm->vocab_size()});
        CHECK(rel_err(a, b) < 1e-5);
        CHECK(one.pos == P);
        CHECK(decode_state_err(one, each) < 1e-5);
        // 12 greedy tokens from each state: the same tokens, logits and final states.
        for (int i = 0; i < 12; ++i) {
          const int64_t next = greedy(a);
          REQUIRE(next == greedy(b));
          a = lm->step(ids_of({next}), one);
          b = lm->step(ids_of({next}), each);
          CHECK(rel_err(a, b) < 1e-5);
        }
        CHECK(decode_state_err(one, each) < 1e-5);
      }
    }
  }
}

TEST_CASE("prefill: a batch of prompts, and a started sequence (one pass from its state), as the steps") {
  NoGradGuard ng;
  Generator gen(8);
  for (const char* fixture : {"gpt2-tiny", "mistral-tiny"}) {
    for (const MixerCase& m : {mixer_cases()[0], mixer_cases()[3], mixer_cases()[6]}) {
      const std::string label = m.label();
      CAPTURE(fixture);
      CAPTURE(label);
      auto lm = load(fixture, m);
      const Tensor ids = randint(0, 97, {3, 9}, gen).to(test_device());
      DecodeState one = lm->start_decoding();
      const Tensor last = lm->prefill(ids, one);
      const Tensor every = hh::test::stepwise_logits(*lm, ids);
      CHECK(rel_err(last, slice(every, 1, 8, 9)) < 1e-5);
      // A prefill after some steps continues the sequence: the same logits as steps all along.
      DecodeState split = lm->start_decoding();
      lm->prefill(slice(ids, 1, 0, 4), split);
      const Tensor rest = lm->prefill(slice(ids, 1, 4, 9), split);
      CHECK(split.pos == 9);
      CHECK(rel_err(rest, slice(every, 1, 8, 9)) < 1e-5);
    }
  }
}

TEST_CASE("prefill: generate() gives the tokens of the token-by-token decoding") {
  for (const char* fixture : {"gpt2-tiny", "qwen2-tiny"}) {
    for (const MixerCase& m : {mixer_cases()[0], mixer_cases()[3], mixer_cases()[9]}) {
      const std::string label = m.label();
      CAPTURE(fixture);
      CAPTURE(label);
      auto lm = load(fixture, m);
      const std::vector<int64_t> prompt = {5, 17, 3, 42, 8, 8, 61, 2, 30};
      Sampler sampler(SamplingOptions{0.0, 0, 1.0, 0});
      GenerateOptions go;
      go.max_new_tokens = 12;
      bool prefilled = false;
      go.on_prefilled = [&] { prefilled = true; };
      const Generation g = generate(*lm, prompt, sampler, go);
      CHECK(prefilled);
      std::vector<int64_t> want = hh::test::greedy_decode(*lm, ids_of(prompt), 12);
      want.erase(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(prompt.size()));
      CHECK(g.ids == want);
    }
  }
}

TEST_CASE("prefill: dynamic RoPE beyond max_position_embeddings steps those tokens, as decoding rotates them") {
  NoGradGuard ng;
  Generator gen(9);
  for (const MixerCase& m : {mixer_cases()[0], mixer_cases()[3]}) {
    const std::string label = m.label();
    CAPTURE(label);
    auto lm = load("qwen2-tiny-dynamic", m);  // max_position_embeddings 32, factor 2: 64 positions
    const Tensor ids = randint(0, 97, {1, 40}, gen).to(test_device());
    DecodeState one = lm->start_decoding(), each = lm->start_decoding();
    const Tensor a = lm->prefill(ids, one);
    Tensor b;
    for (int64_t t = 0; t < 40; ++t) b = lm->step(slice(ids, 1, t, t + 1), each);
    CHECK(rel_err(a, b) < 1e-5);
    CHECK(decode_state_err(one, each) < 1e-5);
  }
}
