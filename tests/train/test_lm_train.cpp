// train_lm's model, trainer and sampling (experiments/lm/lm_model, experiments/lm/lm_train, nn/models/generate).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops/nn.h"
#include "experiments/lm/lm_report.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "core/generator.h"
#include "core/safetensors.h"
#include "data/token_shards.h"
#include "nn/models/generate.h"
#include "nn/models/hf_save.h"
#include "tests/temp_dir.h"
#include "experiments/lm/lm_train.h"

using namespace hh;

namespace {

// A stream a tiny model can learn: a fixed cycle of 12 ids with one random id in every 6.
std::vector<int32_t> learnable_stream(int64_t n, uint64_t seed) {
  Generator gen(seed);
  const std::vector<double> noise = to_vector<double>(uniform({n}, 0.0, 1.0, gen));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ids[i] = i % 6 == 5 ? static_cast<int32_t>(noise[i] * 16) : static_cast<int32_t>((i * 7) % 12);
  return ids;
}

data::TokenDataset write_train_split(const test::TempDir& dir) {
  data::write_token_shard(dir.file("train_00000.bin"), learnable_stream(3000, 1), 16);
  return data::TokenDataset::open(dir.path.string(), "train");
}

struct TinyData {
  test::TempDir dir{"lm_train"};
  std::vector<int32_t> valid = learnable_stream(400, 2);
  data::TokenDataset train = write_train_split(dir);
};

train::LmTrainConfig tiny_config(const std::string& out, const std::string& mixer) {
  train::LmTrainConfig c;
  c.model = train::lm_model_preset("tiny");
  c.model.vocab_size = 16;
  c.model.n_positions = 32;
  c.attention.mixer = nn::parse_mixer(mixer, "test");
  c.context = 32;
  c.batch = 4;
  c.steps = 12;
  c.lr = 3e-3;
  c.warmup = 2;
  c.eval_every = 4;
  c.eval_windows = 4;
  c.out_dir = out;
  c.progress = false;
  return c;
}

std::vector<float> weights_of(const nn::Module& m) {
  std::vector<float> all;
  for (const auto& [name, p] : m.named_parameters()) {
    const std::vector<float> v = to_vector<float>(p);
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

}  // namespace

TEST_CASE("train_lm: presets, config.json and GPT-2 initialisation") {
  CHECK_THROWS_WITH_AS(train::lm_model_preset("huge"), doctest::Contains("unknown model preset 'huge'"), Error);
  train::LmModelConfig c = train::lm_model_preset("paper");
  CHECK(c.n_layer == 12);
  CHECK(c.n_embd == 768);
  CHECK(c.n_positions == 1024);
  CHECK_THROWS_WITH_AS(train::lm_config_json(c, -1), doctest::Contains("vocab_size"), Error);  // not set yet
  c = train::lm_model_preset("small");
  c.vocab_size = 257;
  c.n_layer = 8;  // so the c_proj scale 0.02 / sqrt(16) = 0.005 differs clearly from 0.02
  c.n_embd = 96;
  c.n_head = 3;
  nn::HFModelOptions o;
  o.seed = 3;
  auto m = train::make_lm_model(train::lm_config_json(c, 256), o);
  CHECK(m->config().get_int("eos_token_id") == 256);
  CHECK(m->vocab_size() == 257);
  double proj_sq = 0, fc_sq = 0, bias_abs = 0;
  int64_t proj_n = 0, fc_n = 0;
  for (const auto& [name, p] : m->named_parameters()) {
    const std::vector<double> v = to_vector<double>(p);
    double sq = 0;
    for (double x : v) sq += x * x;
    if (name.find("attn.c_proj.weight") != std::string::npos) proj_sq += sq, proj_n += p.numel();
    if (name.find("mlp.c_fc.weight") != std::string::npos) fc_sq += sq, fc_n += p.numel();
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0 && name.find(".ln_") == std::string::npos)
      for (double x : v) bias_abs += std::fabs(x);
  }
  CHECK(std::sqrt(proj_sq / proj_n) == doctest::Approx(0.005).epsilon(0.05));
  CHECK(std::sqrt(fc_sq / fc_n) == doctest::Approx(0.02).epsilon(0.05));
  CHECK(bias_abs == 0.0);
  // A bad size is named.
  c.n_embd = 97;
  CHECK_THROWS_WITH_AS(train::lm_config_json(c, -1), doctest::Contains("n_embd (97)"), Error);
}

TEST_CASE("train_lm: --arch llama's config.json and initialisation") {
  CHECK(train::parse_lm_arch("llama", "--arch") == train::LmArch::llama);
  CHECK(train::parse_lm_arch("gpt2", "--arch") == train::LmArch::gpt2);
  CHECK_THROWS_WITH_AS(train::parse_lm_arch("mamba", "--arch"),
                       doctest::Contains("--arch: unknown architecture 'mamba' (valid: gpt2, llama)"), Error);
  train::LmModelConfig c = train::lm_model_preset("small");
  c.arch = train::LmArch::llama;
  c.vocab_size = 257;
  c.n_positions = 1024;
  nn::HFModelOptions o;
  o.seed = 3;
  auto m = train::make_lm_model(train::lm_config_json(c, 256), o);
  CHECK(m->architecture() == "LlamaForCausalLM");
  CHECK(m->config().get_int("eos_token_id") == 256);
  CHECK(m->config().get_int("intermediate_size") == 512);
  CHECK(m->config().get_bool("tie_word_embeddings"));
  CHECK(m->max_positions() == 1024);  // no table: max_position_embeddings only
  int64_t weights = 0, norms = 0;
  for (const auto& named : m->named_parameters()) {
    const std::string& name = named.first;
    const Tensor& p = named.second;
    CAPTURE(name);
    const std::vector<double> v = to_vector<double>(p);
    double sq = 0, ones = 0;
    for (double x : v) sq += x * x, ones += x == 1.0;
    if (name.find("norm.") != std::string::npos) {
      CHECK(ones == static_cast<double>(v.size()));  // RMSNorm weights start at 1
      ++norms;
    } else {
      CHECK(std::sqrt(sq / static_cast<double>(v.size())) == doctest::Approx(0.02).epsilon(0.1));  // N(0, 0.02)
      ++weights;
    }
  }
  CHECK(norms == 2 * 4 + 1);
  CHECK(weights == 1 + 7 * 4);  // embed_tokens (tied head) + q, k, v, o, gate, up, down per layer
  // An odd head size cannot rotate.
  c.n_embd = 4 * 33;
  CHECK_THROWS_WITH_AS(train::lm_config_json(c, -1), doctest::Contains("even head size"), Error);
  // Its fingerprint says the architecture; a GPT-2 run's fingerprint is unchanged by the field.
  train::LmTrainConfig run;
  run.model = train::lm_model_preset("tiny");
  const std::string gpt2 = train::lm_run_fingerprint(run);
  CHECK(gpt2.find("arch") == std::string::npos);
  run.model.arch = train::LmArch::llama;
  CHECK(train::lm_run_fingerprint(run).find("\"arch\":\"llama\"") != std::string::npos);
}

TEST_CASE("train_lm: sampling (greedy, top-k 1, a tiny nucleus) and its checks") {
  const std::vector<double> logits = {0.1, 2.0, -1.0, 1.9, 0.0};
  nn::Sampler greedy(nn::SamplingOptions{0.0, 0, 1.0, 0});
  CHECK(greedy.next(logits) == 1);
  nn::Sampler top1(nn::SamplingOptions{1.0, 1, 1.0, 7});
  nn::Sampler nucleus(nn::SamplingOptions{1.0, 0, 1e-3, 7});
  nn::Sampler wide(nn::SamplingOptions{1.0, 0, 1.0, 7});
  int seen3 = 0;
  for (int i = 0; i < 200; ++i) {
    CHECK(top1.next(logits) == 1);
    CHECK(nucleus.next(logits) == 1);
    seen3 += wide.next(logits) == 3;
  }
  CHECK(seen3 > 40);  // p(3) = 0.33 with every token allowed
  CHECK_THROWS_WITH_AS(nn::Sampler(nn::SamplingOptions{-1.0, 0, 1.0, 0}), doctest::Contains("temperature"), Error);
  CHECK_THROWS_WITH_AS(nn::Sampler(nn::SamplingOptions{1.0, 0, 0.0, 0}), doctest::Contains("top-p"), Error);
}

TEST_CASE("train_lm: a tiny GPT learns; a resumed run ends bit for bit where an uninterrupted one ends") {
  TinyData d;
  auto comm = make_communicator("none");
  for (const std::string mixer : {"softmax", "hedgehog"}) {
    CAPTURE(mixer);
    test::TempDir out("lm_train_run");
    train::LmTrainConfig c = tiny_config(out.file("full"), mixer);
    c.steps = 40;
    const train::LmTrainResult full = train::train_language_model(c, d.train, d.valid, *comm);
    REQUIRE(full.status == "ok");
    REQUIRE(full.evals.size() == 10);  // steps 4, 8, ..., 36 and the final one
    CHECK(full.evals.back().step == 40);
    // Learned: it starts near ln 16 = 2.77; the unigram frequencies alone give about 2.5 (12
    // cycle ids and the noise), so a loss below 2 needs the context (5 of 6 ids follow from the
    // ones before; the best possible loss is about 0.5).
    CHECK(full.train_loss.front() > 2.5);
    CHECK(full.evals.back().loss < 2.0);
    CHECK(std::filesystem::exists(out.file("full/metrics.jsonl")));

    train::LmTrainConfig a = c;
    a.out_dir = out.file("resumed");
    a.stop_after_steps = 13;  // between evaluations: the checkpoint is written by the interruption
    const train::LmTrainResult part = train::train_language_model(a, d.train, d.valid, *comm);
    CHECK(part.status == "interrupted at step 13");
    a.stop_after_steps = 0;
    a.resume = true;
    const train::LmTrainResult rest = train::train_language_model(a, d.train, d.valid, *comm);
    REQUIRE(rest.status == "ok");
    CHECK(rest.train_loss == full.train_loss);
    CHECK(max_abs_diff(weights_of(*rest.model), weights_of(*full.model)) == 0.0);
    CHECK(rest.evals.back().loss == full.evals.back().loss);
    // Another configuration's checkpoint is refused before any step, naming what differs.
    train::LmTrainConfig other = a;
    other.lr = 1e-3;
    CHECK_THROWS_WITH_AS(train::check_lm_resume(other.out_dir, train::lm_run_fingerprint(other)),
                         doctest::Contains("differs in /lr"), Error);
    CHECK_THROWS_WITH_AS(train::train_language_model(other, d.train, d.valid, *comm),
                         doctest::Contains("another configuration"), Error);
  }
}

TEST_CASE("train_lm: gradient accumulation gives the update of the whole batch") {
  TinyData d;
  auto comm = make_communicator("none");
  test::TempDir out("lm_train_acc");
  train::LmTrainConfig c = tiny_config(out.file("one"), "hedgehog");
  c.steps = 3;
  c.eval_every = 0;
  const train::LmTrainResult one = train::train_language_model(c, d.train, d.valid, *comm);
  c.accumulation = 2;
  c.out_dir = out.file("two");
  const train::LmTrainResult two = train::train_language_model(c, d.train, d.valid, *comm);
  // The same windows and the same mean loss; only the f32 summation order differs (two halves
  // of the batch added, instead of one sum), so the weights after three AdamW steps agree to
  // rounding, not bit for bit.
  CHECK(max_abs_diff(weights_of(*one.model), weights_of(*two.model)) < 2e-5);
  CHECK(std::fabs(one.train_loss[2] - two.train_loss[2]) < 1e-5);
  c.accumulation = 3;  // 4 sequences cannot be cut into 3 micro-batches
  CHECK_THROWS_WITH_AS(train::train_language_model(c, d.train, d.valid, *comm),
                       doctest::Contains("--batch 4 must be a positive multiple of --accumulation (3)"), Error);
}

TEST_CASE("train_lm: validation perplexity over blocks and sliding windows") {
  TinyData d;
  auto comm = make_communicator("none");
  nn::HFModelOptions o;
  train::LmModelConfig mc = train::lm_model_preset("tiny");
  mc.vocab_size = 16;
  mc.n_positions = 32;
  auto m = train::make_lm_model(train::lm_config_json(mc, -1), o);
  m->eval();
  const std::vector<int32_t> ids(d.valid.begin(), d.valid.begin() + 97);  // 3 blocks of 32 + 1
  const train::LmEval blocks = train::evaluate_lm(*m, ids, 32, 0, 0, 2, *comm);
  CHECK(blocks.tokens == 96);
  // By hand: the three blocks in one batch.
  std::vector<int64_t> x, y;
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t j = 0; j < 32; ++j) x.push_back(ids[b * 32 + j]), y.push_back(ids[b * 32 + j + 1]);
  NoGradGuard ng;
  const Tensor logits = m->forward(from_vector(x, {3, 32}));
  const double expect = cross_entropy(logits, from_vector(y, {3, 32})).item<double>();
  CHECK(blocks.loss == doctest::Approx(expect).epsilon(1e-6));
  CHECK(blocks.ppl == doctest::Approx(std::exp(expect)).epsilon(1e-6));
  // A stride equal to the context is the block layout; a smaller stride scores each token once,
  // with more context.
  const train::LmEval strided = train::evaluate_lm(*m, ids, 32, 32, 0, 2, *comm);
  CHECK(strided.tokens == 96);
  CHECK(strided.loss == doctest::Approx(blocks.loss).epsilon(1e-6));
  const train::LmEval sliding = train::evaluate_lm(*m, ids, 32, 8, 0, 2, *comm);
  CHECK(sliding.tokens == 96);
  // At most 2 windows (of the 3 blocks).
  CHECK(train::evaluate_lm(*m, ids, 32, 0, 2, 2, *comm).tokens == 64);
}

TEST_CASE("train_lm: the exported HF folder loads back with the same outputs") {
  TinyData d;
  auto comm = make_communicator("none");
  for (const auto& run : std::vector<std::pair<train::LmArch, std::string>>{
           {train::LmArch::gpt2, "softmax"}, {train::LmArch::gpt2, "hedgehog"},
           {train::LmArch::llama, "softmax"}, {train::LmArch::llama, "hedgehog"}}) {
    const train::LmArch arch = run.first;  // not structured bindings: clang 14 refuses them in CAPTURE's lambda
    const std::string& mixer = run.second;
    const std::string label = std::string(train::name(arch)) + " " + mixer;
    CAPTURE(label);
    test::TempDir out("lm_train_export");
    train::LmTrainConfig c = tiny_config(out.file("run"), mixer);
    c.model.arch = arch;
    c.steps = 3;
    c.eos_id = 15;
    const train::LmTrainResult r = train::train_language_model(c, d.train, d.valid, *comm);
    nn::save_hf_model(*r.model, out.file("model"), r.config_json, "test config", "");
    auto back = nn::load_causal_lm(out.file("model"));
    CHECK(back->architecture() == (arch == train::LmArch::llama ? "LlamaForCausalLM" : "GPT2LMHeadModel"));
    CHECK(nn::name(back->options().mixer) == mixer);
    CHECK(back->config().get_int("eos_token_id") == 15);
    NoGradGuard ng;
    const Tensor ids = from_vector(std::vector<int64_t>(d.valid.begin(), d.valid.begin() + 20), {1, 20});
    CHECK(max_abs_diff(to_vector<float>(r.model->forward(ids)), to_vector<float>(back->forward(ids))) == 0.0);
    // The run's checkpoint rebuilds the same model (its config.json and attention are in it).
    auto from_ckpt = train::load_lm_checkpoint_model(train::lm_checkpoint_path(out.file("run")));
    CHECK(max_abs_diff(to_vector<float>(r.model->forward(ids)), to_vector<float>(from_ckpt->forward(ids))) == 0.0);
    // Decoding one token at a time (KV cache or recurrent state) gives the same next-token logits.
    nn::Sampler greedy(nn::SamplingOptions{0.0, 0, 1.0, 0});
    nn::GenerateOptions go;
    go.max_new_tokens = 5;
    const nn::Generation g = nn::generate(*back, {3, 5, 7}, greedy, go);
    CHECK(g.ids.size() == 5);
    std::vector<int64_t> seq = {3, 5, 7};
    for (int64_t id : g.ids) {
      const Tensor l = back->forward(from_vector(seq, {1, static_cast<int64_t>(seq.size())}));
      const int64_t n = static_cast<int64_t>(seq.size());
      CHECK(argmax(reshape(l.slice(1, n - 1, n), {-1}), 0).item<int64_t>() == id);
      seq.push_back(id);
    }
  }
}

TEST_CASE("train_lm: a warm start (--init) begins from the folder's weights") {
  TinyData d;
  auto comm = make_communicator("none");
  test::TempDir out("lm_train_init");
  train::LmTrainConfig c = tiny_config(out.file("first"), "softmax");
  c.model.arch = train::LmArch::llama;
  c.steps = 4;
  const train::LmTrainResult first = train::train_language_model(c, d.train, d.valid, *comm);
  nn::save_hf_model(*first.model, out.file("model"), first.config_json, "test config", "");
  // A second run at another context (RoPE: no position table) and learning rate, from those weights:
  // at a learning rate of ~0 its weights are the folder's; a fresh run's are not.
  train::LmTrainConfig warm = c;
  warm.out_dir = out.file("warm");
  warm.context = 16;
  warm.lr = 1e-12;
  warm.warmup = 0;
  warm.steps = 1;
  warm.init_from = out.file("model");
  const train::LmTrainResult w = train::train_language_model(warm, d.train, d.valid, *comm);
  CHECK(max_abs_diff(weights_of(*w.model), weights_of(*first.model)) < 1e-6);
  // The same from the first run's checkpoint file (e.g. one left by --stop-after-steps).
  warm.init_from = train::lm_checkpoint_path(out.file("first"));
  warm.out_dir = out.file("warm_ckpt");
  const train::LmTrainResult wc = train::train_language_model(warm, d.train, d.valid, *comm);
  CHECK(max_abs_diff(weights_of(*wc.model), weights_of(*first.model)) < 1e-6);
  warm.init_from.clear();
  warm.out_dir = out.file("fresh");
  const train::LmTrainResult fresh = train::train_language_model(warm, d.train, d.valid, *comm);
  CHECK(max_abs_diff(weights_of(*fresh.model), weights_of(*first.model)) > 1e-3);
  // The folder's weights are in the fingerprint (a resume of a fresh run is refused).
  warm.init_from = out.file("model");
  const std::string fp = train::lm_run_fingerprint(warm);
  CHECK(fp.find("\"init\"") != std::string::npos);
  CHECK(fp.find("fnv1a") != std::string::npos);
  CHECK(train::lm_run_fingerprint(warm) == fp);
  // Sizes or architecture that differ: an error naming the weight or the architecture.
  warm.out_dir = out.file("bad");
  warm.model.n_inner = 96;
  CHECK_THROWS_WITH_AS(train::train_language_model(warm, d.train, d.valid, *comm),
                       doctest::Contains("mlp.gate_proj.weight is (128, 32), the run's is (96, 32)"), Error);
  warm.model.n_inner = c.model.n_inner;
  warm.model.arch = train::LmArch::gpt2;
  CHECK_THROWS_WITH_AS(train::train_language_model(warm, d.train, d.valid, *comm),
                       doctest::Contains("holds a LlamaForCausalLM, this run trains a GPT2LMHeadModel"), Error);
}

TEST_CASE("train_lm: bf16 autocast training tracks f32") {
  // The same 40 steps in f32 and under bf16 autocast (bf16 GEMMs and attention with f32 sums, f32
  // weights, AdamW state and loss). bf16 keeps 8 significant bits, so single logits differ by up to
  // 2^-8 relative and the runs drift apart slowly. Bound: every step's training loss and the final
  // validation loss within 0.005 of f32's (the loss goes from 2.77 to about 1.65; measured: at most
  // 5.7e-4 and 4.3e-4 per step, 2e-4 and 3e-4 at the end, for softmax and Hedgehog), and both learn.
  TinyData d;
  auto comm = make_communicator("none");
  for (const std::string mixer : {"softmax", "hedgehog"}) {
    CAPTURE(mixer);
    test::TempDir out("lm_train_bf16");
    train::LmTrainConfig c = tiny_config(out.file("f32"), mixer);
    c.steps = 40;
    const train::LmTrainResult f32 = train::train_language_model(c, d.train, d.valid, *comm);
    c.out_dir = out.file("bf16");
    c.precision = Precision::bf16;
    const train::LmTrainResult bf16 = train::train_language_model(c, d.train, d.valid, *comm);
    REQUIRE(f32.status == "ok");
    REQUIRE(bf16.status == "ok");
    REQUIRE(bf16.train_loss.size() == f32.train_loss.size());
    double worst = 0;
    for (size_t i = 0; i < f32.train_loss.size(); ++i)
      worst = std::max(worst, std::fabs(bf16.train_loss[i] - f32.train_loss[i]));
    const double final_gap = std::fabs(bf16.evals.back().loss - f32.evals.back().loss);
    MESSAGE(mixer, ": max per-step train loss gap ", worst, ", final validation loss f32 ", f32.evals.back().loss,
            " bf16 ", bf16.evals.back().loss);
    CHECK(worst > 0.0);  // autocast changed the arithmetic
    CHECK(worst < 0.005);
    CHECK(final_gap < 0.005);
    CHECK(bf16.evals.back().loss < 2.0);
    // The weights stay f32 (master weights), and a bf16 checkpoint is not resumed as an f32 run.
    for (const auto& [name, p] : bf16.model->named_parameters()) CHECK(p.dtype() == DType::f32);
    train::LmTrainConfig as_f32 = c;
    as_f32.precision = Precision::f32;
    CHECK_THROWS_WITH_AS(train::check_lm_resume(c.out_dir, train::lm_run_fingerprint(as_f32)),
                         doctest::Contains("precision"), Error);
  }
}

namespace {

// Rewrites a checkpoint of train_language_model into the layout of train_lm's own loop before
// train/trainer.h: its history as "lm.state" = {seconds, evals} and the tensor "extra.train_loss",
// without the Trainer's state. The weights and AdamW moments are the same in both layouts.
void to_legacy_layout(const std::string& path) {
  SafeTensors f = load_safetensors(path);
  const nlohmann::json run = nlohmann::json::parse(f.metadata.at("lm.run"));
  const nlohmann::json state = nlohmann::json::parse(f.metadata.at("trainer.state"));
  const std::vector<double> losses = run.at("train_loss").get<std::vector<double>>();
  std::map<std::string, std::string> md = f.metadata;
  md.erase("format");
  md.erase("lm.run");
  md.erase("trainer.state");
  md["lm.state"] = nlohmann::json{{"seconds", state.at("seconds")}, {"evals", run.at("evals")}}.dump();
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : f.order) tensors.emplace_back(name, f.tensors.at(name));
  tensors.emplace_back("extra.train_loss", from_vector(losses, {static_cast<int64_t>(losses.size())}, {DType::f64}));
  save_safetensors(path, tensors, md);
}

}  // namespace

TEST_CASE("train_lm: a checkpoint of the loop before the Trainer resumes to the same end") {
  TinyData d;
  auto comm = make_communicator("none");
  test::TempDir out("lm_train_legacy");
  train::LmTrainConfig c = tiny_config(out.file("full"), "hedgehog");
  c.steps = 20;
  const train::LmTrainResult full = train::train_language_model(c, d.train, d.valid, *comm);
  REQUIRE(full.status == "ok");
  for (const int64_t stop : {13, 16}) {  // between validations, and at one
    CAPTURE(stop);
    train::LmTrainConfig a = c;
    a.out_dir = out.file("legacy" + std::to_string(stop));
    a.stop_after_steps = stop;
    REQUIRE(train::train_language_model(a, d.train, d.valid, *comm).status == str("interrupted at step ", stop));
    const std::string ckpt = train::lm_checkpoint_path(a.out_dir);
    to_legacy_layout(ckpt);
    CHECK(load_safetensors(ckpt).metadata.count("trainer.state") == 0);
    // Its readers still read it.
    CHECK(train::load_lm_checkpoint_model(ckpt)->vocab_size() == 16);
    train::check_lm_resume(a.out_dir, train::lm_run_fingerprint(a));
    a.stop_after_steps = 0;
    a.resume = true;
    const train::LmTrainResult rest = train::train_language_model(a, d.train, d.valid, *comm);
    REQUIRE(rest.status == "ok");
    CHECK(rest.train_loss == full.train_loss);
    CHECK(max_abs_diff(weights_of(*rest.model), weights_of(*full.model)) == 0.0);
    REQUIRE(rest.evals.size() == full.evals.size());
    for (size_t i = 0; i < full.evals.size(); ++i) {
      CHECK(rest.evals[i].step == full.evals[i].step);
      CHECK(rest.evals[i].loss == full.evals[i].loss);
    }
  }
  // A checkpoint with neither layout's state is refused, saying why.
  train::LmTrainConfig b = c;
  b.out_dir = out.file("neither");
  b.stop_after_steps = 5;
  REQUIRE(train::train_language_model(b, d.train, d.valid, *comm).status == "interrupted at step 5");
  const std::string ckpt = train::lm_checkpoint_path(b.out_dir);
  SafeTensors f = load_safetensors(ckpt);
  f.metadata.erase("format");
  f.metadata.erase("trainer.state");
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : f.order) tensors.emplace_back(name, f.tensors.at(name));
  save_safetensors(ckpt, tensors, f.metadata);
  b.stop_after_steps = 0;
  b.resume = true;
  CHECK_THROWS_WITH_AS(train::train_language_model(b, d.train, d.valid, *comm),
                       doctest::Contains("metadata lacks 'lm.state' and 'trainer.state'"), Error);
}

TEST_CASE("lm table: a finite loss whose perplexity overflows shows its loss; no finite loss shows dashes") {
  hh::train::LmRunSummary big, none;
  big.attention = hh::nn::Mixer::softmax();
  big.status = "ok";
  big.val_loss = 994.4717;
  big.val_ppl = std::exp(994.4717);  // inf
  big.tokens_per_second = 1000;
  none.attention = hh::nn::parse_mixer("hedgehog", "test");
  none.status = "diverged at step 3";
  const std::string t = hh::train::lm_table({big, none});
  CHECK(t.find("overflow  994.4717") != std::string::npos);
  CHECK(t.find("hedgehog                -         -") != std::string::npos);
  big.val_loss = 554.7083;  // exp is finite but has 31 digits: shown in scientific notation
  big.val_ppl = std::exp(554.7083);
  CHECK(hh::train::lm_table({big}).find(" 8.068e+240  554.7083") != std::string::npos);
}
