// bench_transfer: LoLCATs' block-wise attention transfer (train/convert/layerwise_distill.h) on a
// random-initialized Llama of a given shape (default Llama 3 8B's: 32 layers, 4096 wide, 32 heads,
// 8 KV heads, MLP 14336, vocab 128256): parameters, the memory of the model alone and at the
// transfer's peak, and the time and tokens/s of one block's training. Weights do not change the
// arithmetic, so no checkpoint is needed; --layers limits how many layers are built (time per layer
// scales the rest). Twin: none (LoLCATs reports 6.5 GPU-hours for its whole 8B conversion).
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/app.h"
#include "cli/flags.h"
#include "core/atomic_file.h"
#include "core/backend.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "nn/models/llama.h"
#include "train/convert/layerwise_distill.h"

using namespace hh;

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

int run(int argc, char** argv) {
  cli::Flags f("bench_transfer",
                "bench_transfer: block-wise attention transfer (LoLCATs) on a random-initialized Llama: memory and speed");
  f.add("layers", "32", "decoder layers built (Llama 3 8B: 32)");
  f.add("hidden", "4096", "hidden size");
  f.add("heads", "32", "attention heads");
  f.add("kv-heads", "8", "key/value heads");
  f.add("intermediate", "14336", "MLP width");
  f.add("vocab", "128256", "vocabulary");
  f.add("mixer", "hybrid-hedgehog", "the student's attention (a feature map or hybrid-<map>)");
  f.add("window", "64", "hybrid: the sliding window");
  f.add("block", "1", "layers trained together");
  f.add("transfer", "mse", "xent, mse or both");
  f.add("batch", "1", "sequences per step");
  f.add("seq", "1024", "tokens per sequence");
  f.add("steps", "4", "batches (optimizer steps per block; the first is a warm-up)");
  f.add("timed-blocks", "1", "blocks run (0 = every block; time per block is reported)");
  cli::CommonFlagSpec common;
  cli::add_common_flags(f, common);
  f.add("json", "", "also write the figures to this JSON file");
  if (!f.parse(argc, argv)) return 0;
  const cli::CommonFlags cf = cli::read_common_flags(f, common);
  if (cf.threads > 0) set_num_threads(static_cast<int>(cf.threads));
  const int64_t layers = f.integer("layers", 1, 1024), B = f.integer("batch", 1, 1 << 16),
                L = f.integer("seq", 2, 1 << 20), steps = f.integer("steps", 2, 1 << 20),
                block = f.integer("block", 1, 1024), timed = f.integer("timed-blocks", 0, 1024);
  nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                           {"model_type", "llama"},
                           {"num_hidden_layers", timed > 0 ? std::min(layers, timed * block) : layers},
                           {"hidden_size", f.integer("hidden", 8, 1 << 20)},
                           {"num_attention_heads", f.integer("heads", 1, 4096)},
                           {"num_key_value_heads", f.integer("kv-heads", 1, 4096)},
                           {"intermediate_size", f.integer("intermediate", 1, 1 << 22)},
                           {"vocab_size", f.integer("vocab", 2, 1 << 24)},
                           {"max_position_embeddings", L},
                           {"rope_theta", 500000.0},
                           {"rms_norm_eps", 1e-5},
                           {"tie_word_embeddings", false}};
  nn::HFModelOptions o;
  o.mixer = nn::parse_mixer(f.str("mixer"), "--mixer");
  HH_CHECK(o.mixer.is_linear(), "--mixer: the student needs a feature map (not softmax)");
  o.window = f.integer("window", 1, 1 << 20);
  o.device = cf.device;
  o.seed = cf.seed;
  train::LayerwiseConfig lc;
  lc.block = block;
  lc.epochs = 1;
  lc.precision = cf.precision;
  lc.loss = nn::transfer_options(nn::parse_transfer(f.str("transfer")), 1.0);
  const Device dev = cf.device;

  auto t0 = std::chrono::steady_clock::now();
  nn::LlamaForCausalLM model(nn::HFConfig::parse(config.dump(), "bench_transfer config"), o);
  backend_for(dev).synchronize();
  const double build_s = since(t0);
  const double model_bytes = static_cast<double>(memory_stats(dev).current);
  const int64_t built = model.num_layers();
  std::printf("Llama %lld of %lld layers, %.2fB parameters built in %.1f s on %s; model memory %.2f GiB\n",
              static_cast<long long>(built), static_cast<long long>(layers), model.num_parameters() / 1e9, build_s,
              cf.device_name.c_str(), gib(model_bytes));

  Generator g(7);
  std::vector<Tensor> batches;
  for (int64_t i = 0; i < steps; ++i) batches.push_back(randint(0, model.vocab_size(), {B, L}, g));
  reset_peak_memory(dev);
  t0 = std::chrono::steady_clock::now();
  const train::LayerwiseResult r = train::distill_layerwise(model, batches, lc);
  backend_for(dev).synchronize();
  const double total_s = since(t0);
  const double peak = static_cast<double>(memory_stats(dev).peak);
  const int64_t blocks = (built + block - 1) / block;
  const double per_block = total_s / static_cast<double>(blocks);
  const double tokens = static_cast<double>(B * L * steps);
  std::printf("transfer (%s, %s, block %lld, B=%lld L=%lld, %lld steps a block): %.2f s a block, "
              "%.0f tokens/s a block; peak memory %.2f GiB (%.2f GiB over the model)\n",
              f.str("mixer").c_str(), f.str("transfer").c_str(), static_cast<long long>(block),
              static_cast<long long>(B), static_cast<long long>(L), static_cast<long long>(steps), per_block,
              tokens / per_block, gib(peak), gib(peak - model_bytes));
  std::printf("all %lld layers at this rate: %.1f s per pass over these %lld batches\n", static_cast<long long>(layers),
              per_block * static_cast<double>((layers + block - 1) / block), static_cast<long long>(steps));
  if (f.given("json")) {
    nlohmann::json j = {{"layers", layers},          {"built_layers", built},     {"parameters", model.num_parameters()},
                        {"model_gib", gib(model_bytes)}, {"peak_gib", gib(peak)},  {"seconds_per_block", per_block},
                        {"tokens_per_second", tokens / per_block}, {"batch", B}, {"seq", L}, {"steps", steps},
                        {"block", block}, {"device", cf.device_name}, {"precision", precision_name(cf.precision)},
                        {"trainable", r.trainable}};
    write_file_atomic(f.str("json"), j.dump(2) + "\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return hh::cli::run_main(argc, argv, run); }
