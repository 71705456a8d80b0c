// libFuzzer harness: the JSON and metadata the project reads from files. The first byte picks the
// reader, the rest is the file:
//   even: a sharded-checkpoint index (model.safetensors.index.json), listed and then loaded
//         against one real shard "a.safetensors" (tensors "x", "y") in the same private folder;
//   1 mod 4: a training checkpoint (safetensors whose __metadata__ holds the step, optimizer steps
//         and generator states) restored into a Linear(2, 3) with AdamW;
//   3 mod 4: the same file resumed as --resume does it: train::Trainer::fit with resume on, which
//         also reads the loop's state ("trainer.state"), the run's own JSON and the best weights,
//         then trains the remaining steps of a 3-step run.
// Every reader must accept the file or reject it with hh::Error.
#include <sys/stat.h>

#include <cstdint>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/generator.h"
#include "autograd/ops.h"
#include "core/safetensors.h"
#include "fuzz/fuzz_common.h"
#include "nn/layers.h"
#include "train/checkpoint.h"
#include "train/optim.h"
#include "train/schedule.h"
#include "train/trainer.h"

using namespace hh;

namespace {

// A folder of our own holding the shard the index files may name.
const std::string& folder() {
  static const std::string dir = [] {
    std::string d = fuzz::scratch_path("json.d");
    ::mkdir(d.c_str(), 0700);
    Tensor x = from_vector(std::vector<double>{1, 2, 3}, {3}, {DType::f32});
    Tensor y = from_vector(std::vector<int64_t>{4, 5}, {2}, {DType::i64});
    save_safetensors(d + "/a.safetensors", {{"x", x}, {"y", y}});
    return d + "/";
  }();
  return dir;
}

void read_index(const std::string& text) {
  const std::string path = folder() + "model.safetensors.index.json";
  fuzz::write_file(path, text);
  if (!fuzz::accepted([&] { safetensors_index_files(path); })) return;
  fuzz::accepted([&] { load_safetensors_sharded(path); });
}

void read_checkpoint(const std::string& bytes) {
  const std::string path = folder() + "ckpt.safetensors";
  fuzz::write_file(path, bytes);
  Generator init_gen(1);
  nn::Linear model(2, 3, /*bias=*/true, nn::Init{init_gen});
  train::AdamW opt(train::single_group(model, 0.0), 1e-3);
  Generator data_gen(7);
  train::CheckpointMeta meta;
  meta.generators["data"] = &data_gen;
  // A checkpoint without checksums loads with a warning line on std::cerr: not printed per input.
  static std::ostringstream sink;
  std::streambuf* old = std::cerr.rdbuf(sink.rdbuf());
  fuzz::accepted([&] { train::load_checkpoint(path, model, &opt, meta); });
  std::cerr.rdbuf(old);
  sink.str("");
}

void resume_run(const std::string& bytes) {
  const std::string path = folder() + "run.safetensors";
  fuzz::write_file(path, bytes);
  Generator init_gen(1);
  nn::Linear model(2, 3, /*bias=*/true, nn::Init{init_gen});
  train::AdamW opt(train::single_group(model, 0.0), 1e-3);
  const LrSchedule schedule(ScheduleConfig{});
  train::TrainerConfig tc;
  tc.total_steps = 3;
  tc.eval_every = 1;
  tc.patience = 2;
  tc.checkpoint_path = path;
  tc.kind = "fz";
  tc.fingerprint = "{}";
  tc.resume = true;
  tc.quiet = true;
  tc.show_progress = false;
  const Tensor x = from_vector(std::vector<double>{1, -2, 0.5, 3}, {2, 2}, {DType::f32});
  train::TrainerHooks hooks;
  hooks.loss = [&](int64_t, int64_t) { return sum(square(model.forward(x))); };
  hooks.evaluate = [&](int64_t) { return train::Evaluation{0.0, {}, false}; };
  hooks.save_state = [] { return train::JsonText{"{\"curve\":[1.0]}"}; };
  hooks.load_state = [](const train::JsonText& t) { nlohmann::json::parse(t.text).at("curve").get<std::vector<double>>(); };
  static std::ostringstream sink;  // the no-checksum warning, not printed per input
  std::streambuf* old = std::cerr.rdbuf(sink.rdbuf());
  fuzz::accepted([&] { train::Trainer(model, opt, schedule, tc, std::move(hooks)).fit(); });
  std::cerr.rdbuf(old);
  sink.str("");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    read_index(rest);
  } else if (data[0] % 4 == 1) {
    read_checkpoint(rest);
  } else {
    resume_run(rest);
  }
  return 0;
}
