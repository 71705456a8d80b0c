// Layer-by-layer attention transfer (train/layerwise_distill) on llama-tiny: only feature maps
// change, each layer's loss falls, a one-layer model gives the driver's stage 1, layer l sees the
// teacher's hidden states, and the peak of live memory stays below the whole-model trace's.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <unistd.h>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/memory.h"
#include "nn/models/hf_model.h"
#include "nn/models/llama.h"
#include "train/convert/convert.h"
#include "train/convert/hidden_store.h"
#include "train/convert/layerwise_distill.h"
#include "tests/temp_dir.h"

using namespace hh;

namespace {

const std::string kLlama = std::string(HH_SOURCE_DIR) + "/tests/fixtures/hf/llama-tiny";
// Mistral: the same decoder with a sliding window of 5, which the teacher's blocks must keep.
const std::string kMistral = std::string(HH_SOURCE_DIR) + "/tests/fixtures/hf/mistral-tiny";

std::shared_ptr<nn::LlamaForCausalLM> load_student(const std::string& mixer, uint64_t seed = 5,
                                                   const std::string& folder = kLlama) {
  nn::HFModelOptions o;
  o.mixer = nn::parse_mixer(mixer, "test");
  o.seed = seed;
  o.window = 4;  // hybrids: shorter than the batches, so the linear part and the window factor matter
  auto m = std::dynamic_pointer_cast<nn::LlamaForCausalLM>(nn::load_causal_lm(folder, o));
  REQUIRE(m != nullptr);
  return m;
}

// llama-tiny's config with one layer; weights drawn from the seed (no file).
std::shared_ptr<nn::LlamaForCausalLM> one_layer_student(uint64_t seed) {
  std::ifstream f(kLlama + "/config.json");
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str());
  j["num_hidden_layers"] = 1;
  nn::HFModelOptions o;
  o.mixer = nn::parse_mixer("hedgehog", "test");
  o.seed = seed;
  return std::make_shared<nn::LlamaForCausalLM>(nn::HFConfig::parse(j.dump(), "one-layer llama-tiny"), o);
}

std::vector<Tensor> id_batches(int64_t n, int64_t B, int64_t L, uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> b;
  for (int64_t i = 0; i < n; ++i) b.push_back(randint(0, 97, {B, L}, gen));
  return b;
}

std::map<std::string, std::vector<float>> values(const nn::Module& m) {
  std::map<std::string, std::vector<float>> v;
  for (auto& [name, t] : m.state_dict()) v[name] = to_vector<float>(t);
  return v;
}

// The driver's view of a list of id batches (no shuffling; the task loss is the LM cross-entropy).
class IdsTask : public train::ConversionTask {
 public:
  IdsTask(std::shared_ptr<nn::LlamaForCausalLM> m, std::vector<Tensor> b) : m_(std::move(m)), b_(std::move(b)) {}
  nn::Module& model() override { return *m_; }
  int64_t batches(train::Split) const override { return static_cast<int64_t>(b_.size()); }
  Tensor loss(train::Split, int64_t i, nn::TraceRequest* trace) override {
    Tensor logits = m_->forward(b_[static_cast<size_t>(i)], trace);
    return cross_entropy(reshape(logits, {-1, m_->vocab_size()}), reshape(b_[static_cast<size_t>(i)], {-1}));
  }
  int64_t tokens(train::Split, int64_t i) const override { return b_[static_cast<size_t>(i)].numel(); }
  train::Metrics evaluate(train::Split) override { return {{"none", 0.0}}; }

 private:
  std::shared_ptr<nn::LlamaForCausalLM> m_;
  std::vector<Tensor> b_;
};

}  // namespace

TEST_CASE("layerwise distill: only feature maps change, and every layer's loss falls") {
  auto student = load_student("hedgehog");
  const auto before = values(*student);
  std::map<std::string, bool> flags;
  for (auto& [name, t] : student->named_parameters()) flags[name] = t.requires_grad();
  train::LayerwiseConfig cfg;
  cfg.epochs = 4;
  cfg.loss.kl = true;  // KL: 0 when the student matches, so the fall is measured against the gap
  train::LayerwiseResult r = train::distill_layerwise(*student, id_batches(3, 2, 16, 1), cfg);
  REQUIRE(r.epoch_loss.size() == 2);
  for (size_t l = 0; l < 2; ++l) {
    REQUIRE(r.epoch_loss[l].size() == 4);
    REQUIRE(r.step_loss[l].size() == 12);
    MESSAGE("layer ", l, " KL per epoch: ", r.epoch_loss[l][0], " ", r.epoch_loss[l][1], " ", r.epoch_loss[l][2], " ",
            r.epoch_loss[l][3]);
    for (size_t e = 1; e < 4; ++e) CHECK_MESSAGE(r.epoch_loss[l][e] < r.epoch_loss[l][e - 1], "layer ", l, " epoch ", e);
    CHECK_MESSAGE(r.epoch_loss[l].back() < 0.95 * r.epoch_loss[l].front(), "layer ", l);
  }
  CHECK(r.steps == 24);
  CHECK(r.tokens == 24 * 2 * 16);
  const auto after = values(*student);
  int changed = 0;
  for (auto& kv : before) {
    const std::string name = kv.first;
    const std::vector<float>& v = kv.second;
    if (train::is_feature_map_param(name)) {
      changed += v != after.at(name);
    } else {
      CHECK_MESSAGE(v == after.at(name), name);
    }
  }
  CHECK(changed > 0);
  for (auto& kv : student->named_parameters()) {
    const std::string name = kv.first;
    CHECK_MESSAGE(kv.second.requires_grad() == flags.at(name), name);
  }
}

TEST_CASE("layerwise distill: a one-layer model matches the driver's whole-model stage 1") {
  const std::vector<Tensor> batches = id_batches(3, 2, 12, 2);
  auto a = one_layer_student(9), b = one_layer_student(9);
  REQUIRE(values(*a) == values(*b));
  train::LayerwiseConfig lc;
  lc.epochs = 1;
  train::LayerwiseResult r = train::distill_layerwise(*a, batches, lc);
  IdsTask task(b, batches);
  train::ConvertConfig cc;
  cc.quiet = true;
  cc.distill.epochs = 1;
  cc.finetune.epochs = 0;
  train::ConvertResult cr = train::convert(task, cc);
  REQUIRE(cr.distill.train_loss.size() == 1);
  CHECK(r.epoch_loss[0][0] == doctest::Approx(cr.distill.train_loss[0]).epsilon(1e-6));
  const auto va = values(*a), vb = values(*b);
  double max_diff = 0;
  for (auto& [name, v] : va) {
    REQUIRE(v.size() == vb.at(name).size());
    for (size_t i = 0; i < v.size(); ++i) max_diff = std::max(max_diff, double(std::fabs(v[i] - vb.at(name)[i])));
  }
  CHECK(max_diff <= 1e-6);
  CHECK(va != values(*one_layer_student(9)));  // training did move the maps
}

TEST_CASE("layerwise distill: layer l learns from the teacher's hidden states, not the student's") {
  // Reference for layer 1's first step: a model whose layer 0 is softmax (the teacher's block) and
  // whose layer 1 is the student's, traced whole: its layer-1 distillation loss is what the
  // layer-wise run must see before its first layer-1 update. Mistral: 16 tokens, window 5.
  for (const std::string& folder : {kLlama, kMistral}) {
    CAPTURE(folder);
    const std::vector<Tensor> batches = id_batches(2, 2, 16, 3);
    auto hybrid = load_student("hedgehog", 5, folder);
    auto& l0 = *(*hybrid->model->layers)[0]->self_attn;
    l0.mixer.feature_map = nullptr;  // layer 0 runs softmax attention
    nn::TraceRequest tr;
    tr.weights = true;
    tr.teacher = true;
    {
      NoGradGuard ng;
      hybrid->forward(batches[0], &tr);
    }
    REQUIRE(tr.layers.size() == 2);
    nn::TraceRequest layer1;
    layer1.layers.push_back(tr.layers[1]);
    const double expected = nn::distillation_loss(layer1, {}).item<double>();

    auto student = load_student("hedgehog", 5, folder);
    train::LayerwiseConfig cfg;
    train::LayerwiseResult r = train::distill_layerwise(*student, batches, cfg);
    CHECK(r.step_loss[1][0] == doctest::Approx(expected).epsilon(1e-5));
    // The student's own hidden states (linear layer 0) give another value: the check can fail.
    nn::TraceRequest st;
    st.weights = true;
    st.teacher = true;
    {
      NoGradGuard ng;
      load_student("hedgehog", 5, folder)->forward(batches[0], &st);
    }
    nn::TraceRequest s1;
    s1.layers.push_back(st.layers[1]);
    CHECK(std::fabs(nn::distillation_loss(s1, {}).item<double>() - expected) > 1e-4);
  }
}

TEST_CASE("layerwise distill: peak live memory is one layer's, below the whole-model trace's") {
  const Device cpu = Device::cpu();
  const std::vector<Tensor> batches = id_batches(1, 4, 64, 4);
  // Whole-model stage-1 step: every layer's weights and graph are alive for the backward pass.
  int64_t whole = 0;
  {
    auto student = load_student("hedgehog");
    for (auto& [name, t] : student->named_parameters())
      student->parameter(name).requires_grad_(train::is_feature_map_param(name));
    const int64_t base = static_cast<int64_t>(memory_stats(cpu).current);
    reset_peak_memory(cpu);
    nn::TraceRequest tr;
    tr.weights = true;
    tr.teacher = true;
    student->forward(batches[0], &tr);
    nn::distillation_loss(tr, {}).backward();
    whole = static_cast<int64_t>(memory_stats(cpu).peak) - base;
  }
  int64_t layerwise = 0;
  {
    auto student = load_student("hedgehog");
    train::LayerwiseConfig cfg;
    const int64_t base = static_cast<int64_t>(memory_stats(cpu).current);
    reset_peak_memory(cpu);
    train::distill_layerwise(*student, batches, cfg);
    layerwise = static_cast<int64_t>(memory_stats(cpu).peak) - base;
  }
  MESSAGE("peak live bytes: whole-model stage-1 step ", whole, ", layer-wise ", layerwise);
  // Two layers: the whole-model step holds both layers' (B,H,L,L) tensors, the layer-wise run one's.
  CHECK(layerwise > 0);
  CHECK(layerwise < 0.75 * static_cast<double>(whole));
}

TEST_CASE("layerwise distill: bad input is refused") {
  auto softmax = load_student("softmax");
  CHECK_THROWS_WITH_AS(train::distill_layerwise(*softmax, id_batches(1, 1, 4, 0), {}),
                       doctest::Contains("every layer has softmax attention"), Error);
  auto student = load_student("hedgehog");
  CHECK_THROWS_WITH_AS(train::distill_layerwise(*student, {}, {}), doctest::Contains("no batches"), Error);
  Generator gen(0);
  CHECK_THROWS_AS(train::distill_layerwise(*student, {randint(0, 500, {1, 4}, gen)}, {}), Error);
  train::LayerwiseConfig cfg;
  cfg.block = 0;
  CHECK_THROWS_WITH_AS(train::distill_layerwise(*student, id_batches(1, 1, 4, 0), cfg), doctest::Contains("block must be"),
                       Error);
}

TEST_CASE("layerwise distill: a block of layers, hidden states on disk, and the MSE transfer give the same maps") {
  // Each layer's loss depends only on its own map and the teacher's hidden states, and AdamW is
  // elementwise: training both layers as one block must give what one layer at a time gives, and
  // hidden states read back from memory-mapped shards must change nothing.
  const std::vector<Tensor> batches = id_batches(3, 2, 16, 6);
  for (const std::string mixer : {"hedgehog", "hybrid-hedgehog"}) {
    CAPTURE(mixer);
    train::LayerwiseConfig one;
    one.epochs = 2;
    one.loss = nn::transfer_options(nn::Transfer::both, 1.0);
    auto a = load_student(mixer);
    const train::LayerwiseResult ra = train::distill_layerwise(*a, batches, one);
    train::LayerwiseConfig two = one;
    two.block = 2;
    two.hidden = train::HiddenPlace::disk;
    two.hidden_folder = (std::filesystem::temp_directory_path() / ("hh_layerwise_" + std::to_string(::getpid()))).string();
    auto b = load_student(mixer);
    const train::LayerwiseResult rb = train::distill_layerwise(*b, batches, two);
    CHECK(rb.hidden_bytes_on_disk == 3 * 2 * 16 * a->cfg.hidden_size * 4);
    CHECK(std::filesystem::is_empty(two.hidden_folder));  // the shards are removed at the end
    std::filesystem::remove_all(two.hidden_folder);
    CHECK(ra.steps == 2 * 2 * 3);  // one run per layer
    CHECK(rb.steps == 2 * 3);      // one run for the block
    REQUIRE(rb.step_loss.size() == 2);
    for (size_t l = 0; l < 2; ++l) {
      REQUIRE(ra.step_loss[l].size() == rb.step_loss[l].size());
      for (size_t i = 0; i < ra.step_loss[l].size(); ++i)
        CHECK(ra.step_loss[l][i] == doctest::Approx(rb.step_loss[l][i]).epsilon(1e-5));
    }
    const auto va = values(*a), vb = values(*b);
    double max_diff = 0;
    for (const auto& kv : va)
      for (size_t i = 0; i < kv.second.size(); ++i)
        max_diff = std::max(max_diff, double(std::fabs(kv.second[i] - vb.at(kv.first)[i])));
    CHECK(max_diff <= 1e-5);
    CHECK(va != values(*load_student(mixer)));  // training did move the maps
  }
}

// Issue 36: hidden-state shards on disk were read back unchecked (two shards swapped, or one byte
// changed, while the run went on: the run ended "ok" with another perplexity). A shard that is not
// the one put() wrote is an error naming it, never used.
TEST_CASE("hidden store: a swapped or changed shard on disk is refused, naming it") {
  hh::test::TempDir tmp("hidden_store_tamper");
  auto fill = [](double v) { return full({2, 3, 4}, v); };
  {
    train::HiddenStore h(train::HiddenPlace::disk, Device::cpu(), tmp.file("h"));
    h.put(0, fill(1));
    h.put(1, fill(2));
    CHECK(to_vector<float>(h.get(1))[0] == 2.0f);
    // Swapped: each file is a valid shard of the other batch.
    std::filesystem::rename(tmp.file("h/hidden-0.safetensors"), tmp.file("h/swap"));
    std::filesystem::rename(tmp.file("h/hidden-1.safetensors"), tmp.file("h/hidden-0.safetensors"));
    std::filesystem::rename(tmp.file("h/swap"), tmp.file("h/hidden-1.safetensors"));
    CHECK_THROWS_WITH_AS(h.get(0), doctest::Contains("hidden-0.safetensors holds another batch's hidden state"), Error);
    CHECK_THROWS_WITH_AS(h.get(1), doctest::Contains("hidden-1.safetensors holds another batch's hidden state"), Error);
    h.put(0, fill(1));
    h.put(1, fill(2));
    // One byte of the data changed (the last byte of the file: the last tensor's data).
    {
      std::fstream f(tmp.file("h/hidden-1.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(-1, std::ios::end);
      const char c = static_cast<char>(f.get() ^ 0x01);
      f.seekp(-1, std::ios::end);
      f.put(c);
    }
    CHECK_THROWS_WITH_AS(h.get(1), doctest::Contains("hidden-1.safetensors cannot be read"), Error);
    // Another state written under the right name with valid checksums (not this run's write).
    save_safetensors(tmp.file("h/hidden-0.safetensors"), {{"hidden", fill(3)}}, {{"hedgehog.hidden.batch", "0"}},
                     Checksums::xxh3);
    CHECK_THROWS_WITH_AS(h.get(0), doctest::Contains("is not the hidden state this run wrote"), Error);
  }
}

// Issue 36: a run killed during block-wise transfer left its shards on disk; the next store in the
// folder removes them (and their temp files), and its own at its end.
TEST_CASE("hidden store: the shards a killed run left are removed by the next store") {
  hh::test::TempDir tmp("hidden_store_stale");
  std::filesystem::create_directories(tmp.file("h"));
  save_safetensors(tmp.file("h/hidden-7.safetensors"), {{"hidden", full({2}, 1.0)}});
  std::ofstream(tmp.file("h/hidden-3.safetensors.tmp.999999.0")) << "x";
  std::ofstream(tmp.file("h/keep.txt")) << "not a shard";
  {
    train::HiddenStore h(train::HiddenPlace::disk, Device::cpu(), tmp.file("h"));
    CHECK_FALSE(std::filesystem::exists(tmp.file("h/hidden-7.safetensors")));
    CHECK_FALSE(std::filesystem::exists(tmp.file("h/hidden-3.safetensors.tmp.999999.0")));
    h.put(0, full({2}, 2.0));
  }
  CHECK_FALSE(std::filesystem::exists(tmp.file("h/hidden-0.safetensors")));
  CHECK(std::filesystem::exists(tmp.file("h/keep.txt")));
}
