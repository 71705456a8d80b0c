// bench_train_lm: training speed and memory of train_lm's GPT (issue 11's targets), per attention:
// the median step time after warm-up steps -> training tokens/s, the allocator's peak during
// training (on --device) and the process's peak RSS. On CUDA a step's time runs from its first
// micro-batch to the end of its optimizer step as the host sees it; the loss is read each step, so
// the median of steady steps is the device's step time. Random token windows, so only the speed is meaningful.
// Twin: tools/bench_train_lm_torch.py builds the same model in PyTorch and times the same step
// (AdamW with decay groups, clipping, the same batch and context); --compare prints the ratios.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
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
#include "core/generator.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "data/token_shards.h"
#include "experiments/lm/lm_train.h"

using namespace hh;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // Linux: KiB
}

int run(int argc, char** argv) {
  cli::Flags f("bench_train_lm", "Training tokens/s and memory of train_lm's GPT per attention.");
  f.add("preset", "small", "model sizes: small, tiny or paper (experiments/lm/lm_model.h)");
  f.add("attentions", "softmax,hedgehog", "comma-separated attentions");
  f.add("vocab", "257", "vocabulary (257 = the byte tokenizer of the demonstration)");
  f.add("batch", "16", "sequences per step");
  f.add("context", "256", "tokens per sequence");
  f.add("steps", "12", "steps timed (after --warmup)");
  f.add("warmup", "3", "untimed steps first");
  cli::CommonFlagSpec common;
  common.seed = false;
  cli::add_common_flags(f, common);
  f.add("json", "", "write the results here (atomically)");
  f.add("compare", "", "a JSON written by tools/bench_train_lm_torch.py: print torch / hedgehog time ratios");
  if (!f.parse(argc, argv)) return 0;
  const cli::CommonFlags common_flags = cli::read_common_flags(f, common);
  const Precision precision = common_flags.precision;
  const Device device = common_flags.device;
  if (common_flags.threads > 0) set_num_threads(static_cast<int>(common_flags.threads));
  const int64_t vocab = f.integer("vocab", 2, 1 << 24), context = f.integer("context", 2, 1 << 20);
  const int64_t batch = f.integer("batch", 1, 1 << 20), steps = f.integer("steps", 1, 100000);
  const int64_t warmup = f.integer("warmup", 0, 100000);
  std::vector<nn::Mixer> mixers;
  const std::string list = f.str("attentions") + ",";
  for (size_t start = 0, end; (end = list.find(',', start)) != std::string::npos; start = end + 1)
    mixers.push_back(nn::parse_mixer(list.substr(start, end - start), "--attentions"));
  json torch_ref;
  if (f.given("compare")) torch_ref = json::parse(read_file(f.str("compare")));

  // Random tokens: enough for every window, written as a shard in a temp folder.
  const fs::path dir = fs::temp_directory_path() / ("hh_bench_train_lm_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  Generator gen(1);
  std::vector<int32_t> ids;
  for (double x : to_vector<double>(uniform({(batch * (steps + warmup) + 4) * (context + 1)}, 0.0, 1.0, gen)))
    ids.push_back(static_cast<int32_t>(x * static_cast<double>(vocab - 1)));
  data::write_token_shard((dir / "train_00000.bin").string(), ids, vocab);
  const data::TokenDataset data = data::TokenDataset::open(dir.string(), "train");
  const std::vector<int32_t> valid(ids.begin(), ids.begin() + context + 1);
  auto comm = make_communicator("none");

  json results = json::array();
  std::printf("%-10s %10s %12s %12s %14s %12s\n", "attention", "params", "step ms", "tokens/s", "peak alloc MiB",
              "torch ratio");
  for (const nn::Mixer& mixer : mixers) {
    const std::string name = nn::name(mixer);
    train::LmTrainConfig c;
    c.model = train::lm_model_preset(f.str("preset"));
    c.model.vocab_size = vocab;
    c.model.n_positions = std::max(c.model.n_positions, context);
    c.attention.mixer = mixer;
    c.context = context;
    c.batch = batch;
    c.steps = steps + warmup;
    c.lr = 1e-4;
    c.warmup = 0;
    c.eval_every = 0;
    c.eval_batch = 1;
    c.out_dir = (dir / name).string();
    c.progress = false;
    c.precision = precision;
    c.device = device;
    reset_peak_memory(device);
    const double before = static_cast<double>(memory_stats(device).current);
    const train::LmTrainResult r = train::train_language_model(c, data, valid, *comm);
    const double peak = (static_cast<double>(memory_stats(device).peak) - before) / (1 << 20);
    const std::vector<double> timed(r.step_seconds.begin() + warmup, r.step_seconds.end());
    const double step = apps::median(timed);
    const double tps = static_cast<double>(batch * context) / step;
    std::string ratio = "-";
    const json torch_rows = torch_ref.is_object() ? torch_ref.value("results", json::array()) : json::array();
    for (const auto& t : torch_rows)
      if (t.value("attention", "") == name) ratio = std::to_string(t.at("step_ms").get<double>() / (1e3 * step));
    std::printf("%-10s %10lld %12.1f %12.0f %14.1f %12s\n", name.c_str(), static_cast<long long>(r.params), 1e3 * step,
                tps, peak, ratio.c_str());
    results.push_back({{"attention", name}, {"params", r.params}, {"step_ms", 1e3 * step}, {"tokens_per_s", tps},
                       {"peak_alloc_mib", peak}, {"steps_timed", timed.size()}});
  }
  std::printf("peak RSS of the process: %.1f MiB\n", peak_rss_mib());
  fs::remove_all(dir);
  if (f.given("json"))
    write_file_atomic(f.str("json"), json{{"engine", "hedgehog"}, {"device", common_flags.device_name}, {"threads", num_threads()}, {"batch", batch},
                                          {"context", context}, {"preset", f.str("preset")}, {"results", results},
                                          {"peak_rss_mib", peak_rss_mib()}}.dump(2) + "\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return hh::cli::run_main(argc, argv, run); }
