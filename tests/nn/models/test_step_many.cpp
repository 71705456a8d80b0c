// CausalLM::step_many and nn::decode_step (continuous batching's decode): runs that join and leave a
// shared batch at token granularity draw exactly the tokens, from bit-identical logits, that each
// draws alone through nn::generate, for every decoder family and kind of mixer; and step_many's
// rows equal step()'s for each row within rounding (without the batch-invariance guard).
#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "nn/gate.h"
#include "nn/models/generate.h"
#include "nn/models/hf_model.h"
#include "tests/nn/models/decoder_test_util.h"
#include "tests/op_table.h"

using namespace hh;
using namespace hh::nn;

namespace {

struct Mix {
  const char* mixer;
  Gate gate;
  int64_t window;
};

std::shared_ptr<CausalLM> load(const std::string& fixture, const Mix& m) {
  HFModelOptions o;
  o.device = hh::test::test_device();
  o.mixer = parse_mixer(m.mixer, "test");
  o.gate = m.gate;
  if (m.window > 0) o.window = m.window;
  o.chunk = 4;
  o.seed = 3;
  return load_causal_lm(hh::test::hf_fixture(fixture), o);
}

// A prompt of n ids drawn from a seed, inside the vocabulary.
std::vector<int64_t> prompt_of(int64_t n, uint64_t seed, int64_t vocab) {
  std::vector<int64_t> p;
  uint64_t x = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    p.push_back(static_cast<int64_t>((x >> 33) % static_cast<uint64_t>(vocab)));
  }
  return p;
}

struct Trace {
  std::vector<int64_t> ids;
  std::vector<std::vector<double>> logits;
};

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

}  // namespace

TEST_CASE("decode_step: runs joining and leaving one batch draw what each draws alone, bit for bit") {
  const Mix mixes[] = {{"softmax", Gate::none, 0},        {"hedgehog", Gate::none, 0}, {"hybrid-hedgehog", Gate::none, 4},
                       {"hedgehog", Gate::gla, 0},        {"hedgehog", Gate::delta, 0}};
  for (const char* fixture : {"gpt2-tiny", "llama-tiny", "mistral-tiny", "qwen3-tiny"})
    for (const Mix& m : mixes) {
      CAPTURE(fixture);
      CAPTURE(gated_label(m.mixer, m.gate));
      auto lm = load(fixture, m);
      const int64_t runs = std::string(fixture) == "llama-tiny" && m.gate == Gate::none && m.window == 0 ? 64 : 12;
      // Alone: nn::generate, greedy, each run its own prompt length and max_new_tokens.
      std::vector<std::vector<int64_t>> prompts;
      std::vector<int64_t> max_new;
      std::vector<Trace> alone(static_cast<size_t>(runs));
      for (int64_t r = 0; r < runs; ++r) {
        prompts.push_back(prompt_of(3 + r % 9, static_cast<uint64_t>(r), lm->vocab_size()));
        max_new.push_back(4 + r % 7);
        Sampler greedy(SamplingOptions{0.0, 0, 1.0, 0});
        GenerateOptions o;
        o.max_new_tokens = max_new.back();
        Trace& t = alone[static_cast<size_t>(r)];
        o.on_logits = [&](const std::vector<double>& l) { t.logits.push_back(l); };
        t.ids = generate(*lm, prompts.back(), greedy, o).ids;
      }
      // Batched: run r joins at iteration r % 5 (its prefill), all draw, one decode_step for all.
      std::vector<Sampler> samplers(static_cast<size_t>(runs), Sampler(SamplingOptions{0.0, 0, 1.0, 0}));
      std::vector<Trace> batched(static_cast<size_t>(runs));
      std::vector<std::unique_ptr<DecodeRun>> live(static_cast<size_t>(runs));
      int64_t peak = 0;
      for (int64_t it = 0;; ++it) {
        for (int64_t r = 0; r < runs; ++r)
          if (r % 5 == it) {
            GenerateOptions o;
            o.max_new_tokens = max_new[static_cast<size_t>(r)];
            Trace& t = batched[static_cast<size_t>(r)];
            o.on_logits = [&t](const std::vector<double>& l) { t.logits.push_back(l); };
            live[static_cast<size_t>(r)] =
                std::make_unique<DecodeRun>(*lm, prompts[static_cast<size_t>(r)], samplers[static_cast<size_t>(r)], o);
            live[static_cast<size_t>(r)]->prefill();
          }
        std::vector<DecodeRun*> active;
        for (auto& run : live)
          if (run && !run->finished()) {
            run->draw();
            active.push_back(run.get());
          }
        if (active.empty() && it >= 5) break;
        int64_t due = 0;
        for (DecodeRun* run : active) due += !run->finished();
        peak = std::max(peak, due);
        decode_step(*lm, active);
      }
      CHECK(peak > runs / 2);  // the runs did share steps
      for (int64_t r = 0; r < runs; ++r) {
        CAPTURE(r);
        batched[static_cast<size_t>(r)].ids = live[static_cast<size_t>(r)]->generated();
        CHECK(batched[static_cast<size_t>(r)].ids == alone[static_cast<size_t>(r)].ids);
        REQUIRE(batched[static_cast<size_t>(r)].logits.size() == alone[static_cast<size_t>(r)].logits.size());
        for (size_t k = 0; k < alone[static_cast<size_t>(r)].logits.size(); ++k)
          CHECK(same_bits(batched[static_cast<size_t>(r)].logits[k], alone[static_cast<size_t>(r)].logits[k]));
      }
    }
}

TEST_CASE("step_many: each row equals step() on that row's state alone, and bad arguments are errors") {
  for (const char* fixture : {"gpt2-tiny", "qwen2-tiny"}) {
    CAPTURE(fixture);
    auto lm = load(fixture, {"hybrid-hedgehog", Gate::none, 4});
    std::vector<DecodeState> a, b;
    for (int64_t r = 0; r < 3; ++r) {
      a.push_back(lm->start_decoding());
      b.push_back(lm->start_decoding());
      const std::vector<int64_t> p = prompt_of(2 + 3 * r, static_cast<uint64_t>(r), lm->vocab_size());
      const Tensor ids = from_vector(p, {1, static_cast<int64_t>(p.size())}, {DType::i64}).to(hh::test::test_device());
      lm->prefill(ids, a.back());
      lm->prefill(ids, b.back());
    }
    const std::vector<int64_t> next = {5, 9, 2};
    const Tensor many = lm->step_many(from_vector(next, {3, 1}, {DType::i64}).to(hh::test::test_device()),
                                      {&a[0], &a[1], &a[2]});
    CHECK(many.shape() == Shape{3, 1, lm->vocab_size()});
    for (int64_t r = 0; r < 3; ++r) {
      const Tensor one = lm->step(from_vector(std::vector<int64_t>{next[static_cast<size_t>(r)]}, {1, 1}, {DType::i64})
                                      .to(hh::test::test_device()),
                                  b[static_cast<size_t>(r)]);
      CHECK(hh::test::rel_err(slice(many, 0, r, r + 1), one) < 1e-5);
      CHECK(a[static_cast<size_t>(r)].pos == b[static_cast<size_t>(r)].pos);
    }
    const Tensor two = from_vector(std::vector<int64_t>{1, 2}, {2, 1}, {DType::i64});
    CHECK_THROWS_WITH(lm->step_many(two, {&a[0]}), doctest::Contains("2 rows of ids for 1 decode states"));
    CHECK_THROWS_WITH(lm->step_many(two, {&a[0], nullptr}), doctest::Contains("decode state 1 is null"));
    DecodeState wrong;
    CHECK_THROWS_WITH(lm->step_many(two, {&a[0], &wrong}), doctest::Contains("use start_decoding()"));
  }
}
