// What every app and driver shares (cli/, below apps/ and python/), so that an app is its own
// flags, a preset and one call into its experiment. run_main is the one main() wrapper; the flags
// every model-running app takes (--device --precision --threads --seed --resume --out) are
// declared here with one help text each and read back, checked, into one struct at the edge,
// before any long work.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include "autograd/autocast.h"
#include "cli/flags.h"
#include "core/backend.h"
#include "core/device.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/prepacked.h"

namespace hh::cli {

// main() of every app: runs `run` and turns an escaping exception into "error: <message>" on
// stderr and exit status 1.
inline int run_main(int argc, char** argv, int (*run)(int, char**)) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

// Which of the common flags an app takes, and its own words where an app's meaning differs.
struct CommonFlagSpec {
  bool device = true;     // --device cpu|cuda[:N] (without it the app runs on the CPU)
  bool precision = true;  // --precision f32|tf32|bf16
  bool threads = true;    // --threads N
  bool seed = true;       // --seed N
  bool resume = false;    // --resume
  bool out = false;       // --out DIR
  std::string threads_default = "0";  // "" = decided by the app when the flag is absent
  std::string threads_help = "CPU threads (0 = all cores)";
  std::string seed_help = "seed of initialization, data and batch order";
  std::string resume_help = "continue the run in --out from its checkpoints (same settings)";
  std::string out_default;
  std::string out_help = "output folder";
};

// The common flags' values, parsed and checked.
struct CommonFlags {
  Device device = Device::cpu();
  Precision precision = Precision::f32;
  int64_t threads = -1;  // as given (0 = all cores); -1 when absent and the app decides
  uint64_t seed = 0;
  bool resume = false;
  std::string out;
  std::string device_name = "cpu";  // --device as given (for results.json)
};

inline void add_common_flags(Flags& f, const CommonFlagSpec& s) {
  if (s.device) f.add("device", "cpu", "cpu or cuda[:N]");
  if (s.precision) add_precision_flag(f);
  if (s.threads) f.add("threads", s.threads_default, s.threads_help);
  if (s.seed) f.add("seed", "0", s.seed_help);
  if (s.resume) f.add("resume", "false", s.resume_help, true);
  if (s.out) f.add("out", s.out_default, s.out_help);
}

// Reads what add_common_flags declared. --device must name a usable device (a CUDA device needs
// the CUDA module and a GPU: the error says why not), --precision must suit it.
inline CommonFlags read_common_flags(const Flags& f, const CommonFlagSpec& s) {
  CommonFlags c;
  if (s.device) {
    c.device_name = f.str("device");
    c.device = parse_device(c.device_name);
    if (c.device.is_cuda()) HH_CHECK(cuda_available(), "--device ", c.device_name, ": ", cuda_unavailable_reason());
  }
  if (s.precision) c.precision = precision_flag(f, c.device);
  if (s.threads && (f.given("threads") || !s.threads_default.empty())) c.threads = f.integer("threads", 0, 4096);
  if (s.seed) c.seed = static_cast<uint64_t>(f.integer("seed", 0));
  if (s.resume) c.resume = f.boolean("resume");
  if (s.out) c.out = f.str("out");
  return c;
}

// Sets the OpenMP thread count: `threads` > 0 as given, 0 = every core; returns the count used.
inline int apply_threads(int64_t threads) {
  const int n = threads > 0 ? static_cast<int>(threads) : std::max(1, omp_get_num_procs());
  set_num_threads(n);
  return n;
}

// --weights (f32, int8 or bf16), parsed once at the edge: the error names the flag.
inline WeightFormat parse_weights_flag(const std::string& value) {
  try {
    return parse_weight_format(value);
  } catch (const Error& e) {
    fail(str("--weights: ", e.what()));
  }
}

}  // namespace hh::cli
