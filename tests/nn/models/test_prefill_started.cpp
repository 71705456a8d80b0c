// CausalLM::prefill from a started state (issue 33): a prompt prefilled in segments, each from the
// state the previous one left, in one pass per segment for every mixer (softmax over the cached
// keys with RoPE / GPT-2 positions and sliding windows, the linear and gated scans from the
// carried S, z, the delta rule from its state, the hybrid from its window ring and linear state),
// gives the logits and the final state of the token-by-token steps: f64 to 1e-10, f32 to 1e-5.
// The split points cross the chunk (4), the hybrid windows (4, 64) and Mistral's sliding window (5).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "nn/gate.h"
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

struct StartedCase {
  const char* mixer;
  Gate gate;
  int64_t window;                       // hybrid mixers' window (0: the default)
  std::vector<int64_t> softmax_layers;  // layers kept softmax
};

const std::vector<StartedCase>& started_cases() {
  static const std::vector<StartedCase> cases = {
      {"softmax", Gate::none, 0, {}},
      {"hedgehog", Gate::none, 0, {}},
      {"exp", Gate::none, 0, {}},
      {"hybrid-hedgehog", Gate::none, 4, {}},   // segments run past the window: a wrapped ring
      {"hybrid-hedgehog", Gate::none, 64, {}},  // the ring never full
      {"hybrid-hedgehog", Gate::none, 4, {0}},  // a kept softmax layer beside the hybrid one
      {"hedgehog", Gate::gla, 0, {}},
      {"hedgehog", Gate::decay, 0, {}},
      {"hedgehog", Gate::liger, 0, {}},
      {"hedgehog", Gate::delta, 0, {}},
  };
  return cases;
}

std::shared_ptr<CausalLM> load(const std::string& fixture, const StartedCase& m, DType dtype) {
  HFModelOptions o;
  o.device = test_device();
  o.dtype = dtype;
  o.mixer = parse_mixer(m.mixer, "test");
  o.gate = m.gate;
  if (m.window > 0) o.window = m.window;
  o.softmax_layers = m.softmax_layers;
  o.chunk = 4;
  o.seed = 3;
  return load_causal_lm(hf_fixture(fixture), o);
}

// Steps over ids (1,T) from a fresh state: the logits after each token (1,T,V), the state in *end.
Tensor steps(CausalLM& lm, const Tensor& ids, DecodeState* end) {
  DecodeState st = lm.start_decoding();
  std::vector<Tensor> out;
  for (int64_t t = 0; t < ids.size(1); ++t) out.push_back(lm.step(slice(ids, 1, t, t + 1), st));
  *end = std::move(st);
  return cat(out, 1);
}

// Prefills ids in the given segment lengths, each from the state the previous left; checks each
// segment's last logits against the steps' at that position, and the final state.
void check_segments(CausalLM& lm, const Tensor& ids, const std::vector<int64_t>& lengths, double tol) {
  DecodeState want;
  const Tensor every = steps(lm, ids, &want);
  DecodeState st = lm.start_decoding();
  int64_t at = 0;
  for (int64_t n : lengths) {
    CAPTURE(at);
    const Tensor logits = lm.prefill(slice(ids, 1, at, at + n), st);
    at += n;
    CHECK(st.pos == at);
    CHECK(rel_err(logits, slice(every, 1, at - 1, at)) < tol);
  }
  REQUIRE(at == ids.size(1));
  CHECK(decode_state_err(st, want) < tol);
}

}  // namespace

TEST_CASE("prefill from a started state: segments in one pass each equal the steps (f64 1e-10, f32 1e-5)") {
  NoGradGuard ng;
  Generator gen(11);
  const char* const fixtures[] = {"gpt2-tiny", "llama-tiny", "mistral-tiny", "qwen2-tiny", "qwen3-tiny"};
  // 14 tokens; the splits cross the chunk of 4, the windows of 4 and 5, and land on them.
  const std::vector<std::vector<int64_t>> splits = {{1, 13}, {3, 11}, {5, 9}, {9, 5}, {4, 4, 6}, {2, 7, 1, 4}};
  const Tensor ids = randint(0, 97, {1, 14}, gen).to(test_device());
  for (DType dtype : {DType::f64, DType::f32}) {
    const double tol = dtype == DType::f64 ? 1e-10 : 1e-5;
    for (const char* fixture : fixtures) {
      for (const StartedCase& m : started_cases()) {
        const std::string label = std::string(fixture) + " " + m.mixer + " gate " + name(m.gate) + " W=" +
                                  std::to_string(m.window) + (m.softmax_layers.empty() ? "" : " +softmax layer 0");
        CAPTURE(dtype);
        CAPTURE(label);
        auto lm = load(fixture, m, dtype);
        for (const auto& lengths : splits) {
          CAPTURE(lengths.size());
          CAPTURE(lengths[0]);
          check_segments(*lm, ids, lengths, tol);
        }
      }
    }
  }
}

TEST_CASE("prefill from a started state: a batch of rows") {
  NoGradGuard ng;
  Generator gen(12);
  const Tensor ids = randint(0, 97, {3, 10}, gen).to(test_device());
  for (const char* fixture : {"gpt2-tiny", "mistral-tiny"})
    for (const StartedCase& m : {started_cases()[0], started_cases()[3], started_cases()[6], started_cases()[9]}) {
      const std::string label = std::string(fixture) + " " + m.mixer + " gate " + name(m.gate);
      CAPTURE(label);
      auto lm = load(fixture, m, DType::f64);
      check_segments(*lm, ids, {6, 4}, 1e-10);
    }
}

TEST_CASE("prefill from a started state: dynamic RoPE, a segment across max_position_embeddings") {
  NoGradGuard ng;
  Generator gen(13);
  const Tensor ids = randint(0, 97, {1, 40}, gen).to(test_device());
  for (const StartedCase& m : {started_cases()[0], started_cases()[3]}) {
    const std::string label = m.mixer;
    CAPTURE(label);
    auto lm = load("qwen2-tiny-dynamic", m, DType::f64);  // max_position_embeddings 32, factor 2
    check_segments(*lm, ids, {30, 6, 4}, 1e-10);           // 30..35 crosses 32; 36..39 beyond it
  }
}

TEST_CASE("softmax_attention_continued: queries after a cache, in blocks of 256, as the causal attention's last rows") {
  NoGradGuard ng;
  Generator gen(14);
  const int64_t T = 50, L = 300, D = 4;  // L spans two query blocks
  const Options o{DType::f64, test_device()};
  const Tensor q = randn({1, 2, L, D}, gen, o), k = randn({1, 2, T + L, D}, gen, o), v = randn({1, 2, T + L, 3}, gen, o);
  const Tensor q_ext = cat({zeros({1, 2, T, D}, o), q}, 2);  // the cached positions' queries, dropped below
  for (int64_t window : {int64_t{0}, int64_t{37}}) {
    CAPTURE(window);
    const Tensor want = slice(softmax_attention(q_ext, k, v, true, Tensor(), nullptr, window), 2, T, T + L);
    CHECK(rel_err(softmax_attention_continued(q, k, v, T, 0, window), want) < 1e-12);
    // A cache that evicted its first 10 keys: positions shift, the result does not.
    CHECK(rel_err(softmax_attention_continued(q, slice(k, 2, 10, T + L), slice(v, 2, 10, T + L), T, 10, window),
                  window > 0 ? want : slice(softmax_attention(slice(q_ext, 2, 10, T + L), slice(k, 2, 10, T + L),
                                                              slice(v, 2, 10, T + L), true, Tensor()),
                                            2, T - 10, T + L - 10)) < 1e-12);
  }
}
