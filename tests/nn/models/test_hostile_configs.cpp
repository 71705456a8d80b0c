// Sizes in config.json are checked before use (issue 27, item 4): every model family computes its
// parameter count with overflow-checked arithmetic before building any layer, and a config whose
// sizes overflow int64, would not fit in memory, or ask for more layers than the folder's weights
// hold is refused at once with an error naming the file and the key (before: signed overflow, minutes
// of building layers, or gigabytes allocated before the weights were checked).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/checked.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "nn/models/bert.h"
#include "nn/models/gpt2.h"
#include "nn/models/hf_config.h"
#include "nn/models/hf_model.h"
#include "nn/models/llama.h"
#include "nn/models/vit.h"
#include "tests/nn/models/decoder_test_util.h"

using namespace hh;
using namespace hh::nn;

namespace {

// A copy of `fixture` whose config.json has `edits` merged in; load_hf_model must refuse it within
// two seconds with an error naming config.json and every string in `want`.
void refused(const std::string& fixture, const nlohmann::json& edits, const std::vector<std::string>& want) {
  CAPTURE(fixture);
  CAPTURE(edits.dump());
  hh::test::ScratchFolder dir(fixture);
  nlohmann::json cfg = nlohmann::json::parse(dir.read("config.json"));
  cfg.merge_patch(edits);
  dir.write("config.json", cfg.dump(2));
  const auto start = std::chrono::steady_clock::now();
  std::string msg;
  try {
    load_hf_model(dir.path());
  } catch (const Error& e) {
    msg = e.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CAPTURE(msg);
  CHECK(msg.find(dir.file("config.json")) != std::string::npos);
  for (const std::string& w : want) CHECK(msg.find(w) != std::string::npos);
  CHECK(seconds < 2.0);
}

constexpr int64_t k2p62 = int64_t{1} << 62;

}  // namespace

TEST_CASE("checked arithmetic: overflow is an error naming what was computed, never UB") {
  CHECK(checked_mul(int64_t{1} << 31, int64_t{1} << 31, "x") == int64_t{1} << 62);
  CHECK(checked_add(INT64_MAX - 1, 1, "x") == INT64_MAX);
  CHECK_THROWS_WITH_AS(checked_mul(int64_t{1} << 33, int64_t{1} << 31, "heads x head_dim"),
                       "heads x head_dim: 8589934592 x 2147483648 does not fit a 64-bit integer", Error);
  CHECK_THROWS_WITH_AS(checked_add(INT64_MAX, 1, "total"), doctest::Contains("total: 9223372036854775807 + 1"), Error);
  CHECK_THROWS_WITH_AS(checked_mul(-k2p62, 4, [] { return std::string("lazy"); }), doctest::Contains("lazy: "), Error);
  // Shape: the element count and the strides.
  CHECK(numel_of({k2p62, 1, 0}) == 0);
  CHECK_THROWS_WITH_AS(numel_of({k2p62, 4}), doctest::Contains("the element count of shape"), Error);
  CHECK_THROWS_WITH_AS(empty({INT64_MAX, 2}), doctest::Contains("does not fit a 64-bit integer"), Error);
  CHECK_THROWS_WITH_AS(empty({INT64_MAX / 2}), doctest::Contains("empty: the bytes of shape"), Error);  // x 4 bytes
}

TEST_CASE("hostile configs: GPT-2 sizes overflowing int64 or memory are refused naming the key") {
  refused("gpt2-tiny", {{"n_layer", k2p62}}, {"n_layer"});
  refused("gpt2-tiny", {{"n_layer", 1000000000}}, {"\"n_layer\" = 1000000000"});
  refused("gpt2-tiny", {{"n_embd", k2p62}, {"n_head", 1}}, {"n_inner's default 4 x n_embd: 4 x 4611686018427387904"});
  refused("gpt2-tiny", {{"n_embd", k2p62}, {"n_head", 1}, {"n_inner", 4}}, {"n_embd"});
  refused("gpt2-tiny", {{"vocab_size", INT64_MAX}}, {"vocab_size"});
  refused("gpt2-tiny", {{"n_positions", k2p62}}, {"n_positions"});
  // Fits memory but not the folder: more layers, or far more values, than the weights hold.
  refused("gpt2-tiny", {{"n_layer", 10000}}, {"\"n_layer\" = 10000 but the weights in", "hold 2 layers"});
  refused("gpt2-tiny", {{"n_inner", 1000000}}, {"parameters but the weights in", "values"});
  refused("gpt2-tiny", {{"vocab_size", UINT64_MAX}}, {"\"vocab_size\" = 18446744073709551615 does not fit a 64-bit integer"});
}

TEST_CASE("hostile configs: Llama layers, heads x head_dim and vocabulary") {
  refused("llama-tiny", {{"num_hidden_layers", 1000000000}}, {"\"num_hidden_layers\" = 1000000000"});
  refused("llama-tiny", {{"num_hidden_layers", k2p62}}, {"num_hidden_layers"});
  // Fits memory but not the folder: refused before 10,000 layers are built.
  refused("llama-tiny", {{"num_hidden_layers", 10000}},
          {"\"num_hidden_layers\" = 10000 but the weights in", "hold 2 layers"});
  refused("llama-tiny", {{"intermediate_size", 1000000}}, {"parameters but the weights in", "values"});
  refused("llama-tiny",
          {{"num_attention_heads", int64_t{1} << 33}, {"num_key_value_heads", int64_t{1} << 33}, {"head_dim", int64_t{1} << 31}},
          {"num_attention_heads x head_dim: 8589934592 x 2147483648 does not fit a 64-bit integer"});
  refused("llama-tiny", {{"vocab_size", INT64_MAX}}, {"vocab_size"});
  refused("llama-tiny", {{"intermediate_size", k2p62}}, {"intermediate_size"});
}

TEST_CASE("hostile configs: BERT and ViT layers, sizes and image_size") {
  refused("bert-tiny", {{"num_hidden_layers", 1000000000}}, {"\"num_hidden_layers\" = 1000000000"});
  refused("bert-tiny", {{"num_hidden_layers", 10000}}, {"\"num_hidden_layers\" = 10000 but the weights in"});
  refused("bert-tiny", {{"vocab_size", INT64_MAX}}, {"vocab_size"});
  refused("bert-tiny", {{"max_position_embeddings", k2p62}}, {"max_position_embeddings"});
  refused("vit-tiny", {{"num_hidden_layers", 1000000000}}, {"\"num_hidden_layers\" = 1000000000"});
  refused("vit-tiny", {{"num_hidden_layers", 10000}}, {"\"num_hidden_layers\" = 10000 but the weights in", "hold 2 layers"});
  refused("vit-tiny", {{"image_size", int64_t{1} << 40}}, {"(image_size / patch_size)^2"});
  refused("vit-tiny", {{"image_size", int64_t{1} << 40}, {"patch_size", 1024}}, {"image_size"});
  refused("vit-tiny", {{"hidden_size", k2p62}, {"num_attention_heads", 1}}, {"hidden_size"});
}

TEST_CASE("hostile configs: a model built from a config alone is refused before its layers when it cannot fit memory") {
  hh::test::ScratchFolder dir("llama-tiny");
  nlohmann::json cfg = nlohmann::json::parse(dir.read("config.json"));
  cfg["num_hidden_layers"] = 1000000000;
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(LlamaForCausalLM(HFConfig::parse(cfg.dump(), "hostile"), HFModelOptions{}),
                       doctest::Contains("more than this machine's memory"), Error);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 2.0);
}

// load_hf_model also compares the config with the folder's weights, which refuses a billion layers
// too, so the memory check in each family's from_hf is pinned here on its own.
TEST_CASE("hostile configs: every family's from_hf refuses a billion layers as beyond memory, weights or none") {
  auto beyond = [](const std::string& fixture, const std::string& key, auto from_hf) {
    CAPTURE(fixture);
    hh::test::ScratchFolder dir(fixture);
    nlohmann::json cfg = nlohmann::json::parse(dir.read("config.json"));
    cfg[key] = 1000000000;
    std::string msg;
    try {
      from_hf(HFConfig::parse(cfg.dump(), "hostile.json"));
    } catch (const Error& e) {
      msg = e.what();
    }
    CAPTURE(msg);
    CHECK(msg.find("hostile.json: the config describes") != std::string::npos);
    CHECK(msg.find("more than this machine's memory") != std::string::npos);
    CHECK(msg.find(str("\"", key, "\" = 1000000000")) != std::string::npos);
  };
  beyond("gpt2-tiny", "n_layer", GPT2Config::from_hf);
  for (DecoderFamily f : {DecoderFamily::llama, DecoderFamily::mistral, DecoderFamily::qwen2, DecoderFamily::qwen3})
    beyond(str(family_name(f), "-tiny"), "num_hidden_layers", [f](const HFConfig& c) { return LlamaConfig::from_hf(c, f); });
  beyond("bert-tiny", "num_hidden_layers", BertConfig::from_hf);
  beyond("vit-tiny", "num_hidden_layers", ViTConfig::from_hf);
}

TEST_CASE("hostile configs: the fixtures' own configs still load (their counts match their weights)") {
  for (const char* f : {"gpt2-tiny", "llama-tiny", "bert-tiny", "vit-tiny", "mistral-tiny", "qwen2-tiny", "qwen3-tiny"}) {
    CAPTURE(f);
    CHECK_NOTHROW(load_hf_model(hh::test::hf_fixture(f)));
  }
}
