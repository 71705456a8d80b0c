// bench_models: load time and forward speed of an imported GPT-2-sized model (124M parameters,
// GPT-2 small's configuration with random weights, generated once into --dir as an HF folder).
// Twin: tools/bench_models_torch.py reads the same folder with transformers and times the same.
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/app.h"
#include "apps/kit/bench_stats.h"
#include "cli/flags.h"
#include "core/atomic_file.h"
#include "core/backend.h"
#include "core/parallel.h"
#include "core/safetensors.h"
#include "nn/models/hf_model.h"

using namespace hh;
namespace fs = std::filesystem;

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// GPT-2 small (124M): the HF folder layout, Conv1D weights stored (in, out), N(0, 0.02) weights.
void write_gpt2_small(const std::string& dir, int64_t layers) {
  const int64_t V = 50257, P = 1024, C = 768;
  Generator g(1234);
  std::vector<std::pair<std::string, Tensor>> ts;
  auto w = [&](const std::string& name, Shape s) { ts.emplace_back("transformer." + name, mul(randn(s, g), 0.02)); };
  auto ln = [&](const std::string& name) {
    ts.emplace_back("transformer." + name + ".weight", ones({C}));
    ts.emplace_back("transformer." + name + ".bias", zeros({C}));
  };
  w("wte.weight", {V, C});
  w("wpe.weight", {P, C});
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    ln(p + "ln_1");
    w(p + "attn.c_attn.weight", {C, 3 * C});
    w(p + "attn.c_attn.bias", {3 * C});
    w(p + "attn.c_proj.weight", {C, C});
    w(p + "attn.c_proj.bias", {C});
    ln(p + "ln_2");
    w(p + "mlp.c_fc.weight", {C, 4 * C});
    w(p + "mlp.c_fc.bias", {4 * C});
    w(p + "mlp.c_proj.weight", {4 * C, C});
    w(p + "mlp.c_proj.bias", {C});
  }
  ln("ln_f");
  nlohmann::json cfg = {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"vocab_size", V},
                        {"n_positions", P}, {"n_embd", C}, {"n_layer", layers}, {"n_head", 12},
                        {"activation_function", "gelu_new"}, {"layer_norm_epsilon", 1e-5},
                        {"tie_word_embeddings", true}, {"bos_token_id", 50256}, {"eos_token_id", 50256}};
  fs::create_directories(dir);
  save_safetensors(dir + "/model.safetensors", ts);
  write_file_atomic(dir + "/config.json", cfg.dump(2) + "\n");
}

int run(int argc, char** argv) {
  cli::Flags f("bench_models", "bench_models: load time and forward tokens/s of a generated GPT-2 small (124M) HF folder");
  f.add("dir", "/tmp/hh_gpt2_124m", "the generated folder (written when it has no config.json)");
  f.add("layers", "12", "layers (12 = GPT-2 small)");
  f.add("batch", "1", "sequences per forward");
  f.add("seq", "256", "tokens per sequence");
  f.add("reps", "5", "timed repetitions (median reported)");
  f.add("loads", "3", "timed loads (median reported; the first run also counts the page cache filling)");
  cli::CommonFlagSpec common;
  common.seed = false;
  cli::add_common_flags(f, common);
  f.add("json", "", "also write the figures to this JSON file");
  if (!f.parse(argc, argv)) return 0;
  const std::string dir = f.str("dir");
  const int64_t B = f.integer("batch", 1, 1024), L = f.integer("seq", 1, 1024), reps = f.integer("reps", 1, 1000);
  const int64_t loads = f.integer("loads", 1, 100);
  nn::HFModelOptions opt;
  const cli::CommonFlags common_flags = cli::read_common_flags(f, common);
  opt.device = common_flags.device;
  const Precision precision = common_flags.precision;
  PrecisionGuard autocast(precision);
  if (common_flags.threads > 0) set_num_threads(static_cast<int>(common_flags.threads));

  if (!fs::exists(dir + "/config.json")) {
    std::printf("writing %s (GPT-2 small layout, random weights)...\n", dir.c_str());
    write_gpt2_small(dir, f.integer("layers", 1, 96));
  }
  std::vector<double> load_s;
  std::shared_ptr<nn::CausalLM> lm;
  for (int64_t i = 0; i < loads; ++i) {
    lm.reset();
    auto t0 = std::chrono::steady_clock::now();
    lm = nn::load_causal_lm(dir, opt);
    backend_for(opt.device).synchronize();
    load_s.push_back(since(t0));
  }
  std::printf("load %s: %.1fM parameters, median %.3f s over %lld loads (first %.3f s)\n", dir.c_str(),
              lm->num_parameters() / 1e6, apps::median(load_s), static_cast<long long>(loads), load_s[0]);

  Generator g(7);
  Tensor ids = randint(0, lm->vocab_size(), {B, L}, g).to(opt.device);
  NoGradGuard ng;
  lm->forward(ids);  // warm-up
  backend_for(opt.device).synchronize();
  std::vector<double> fwd;
  for (int64_t r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    Tensor logits = lm->forward(ids);
    backend_for(opt.device).synchronize();
    fwd.push_back(since(t0));
  }
  const double med = apps::median(fwd);
  std::printf("forward B=%lld L=%lld: median %.3f s, %.0f tokens/s\n", static_cast<long long>(B),
              static_cast<long long>(L), med, B * L / med);
  if (f.given("json")) {
    nlohmann::json j = {{"load_seconds_median", apps::median(load_s)}, {"load_seconds_first", load_s[0]},
                        {"batch", B}, {"seq", L}, {"forward_seconds_median", med}, {"tokens_per_second", B * L / med},
                        {"threads", num_threads()}, {"device", common_flags.device_name},
                        {"precision", precision_name(precision)}};
    write_file_atomic(f.str("json"), j.dump(2) + "\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return hh::cli::run_main(argc, argv, run); }
