// libFuzzer harness: the apps' flag parser (cli/flags.h). The input is split at '\n' into
// arguments; a parser with one flag of each kind parses them, then every typed getter runs.
// Each step may reject the input with hh::Error; nothing else may happen.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // --help prints the usage to stdout; keep libFuzzer's own output (stderr) readable.
  if (!std::freopen("/dev/null", "w", stdout)) std::perror("freopen");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args{"fuzz_flags"};
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += static_cast<char>(data[i]);
    }
  }
  if (size > 0) args.push_back(cur);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(&a[0]);
  argv.push_back(nullptr);

  hh::cli::Flags flags("fuzz_flags", "flag parser fuzz target");
  flags.add("epochs", "3", "an integer");
  flags.add("lr", "0.001", "a number");
  flags.add("quiet", "false", "a boolean", /*is_bool=*/true);
  flags.add("name", "", "a string");
  flags.add("maps", "softmax,elu", "a comma-separated list");
  bool go = false;
  if (!hh::fuzz::accepted([&] { go = flags.parse(static_cast<int>(args.size()), argv.data()); }) || !go) return 0;
  hh::fuzz::accepted([&] { flags.integer("epochs", 1, 1000); });
  hh::fuzz::accepted([&] { flags.integer("epochs"); });
  hh::fuzz::accepted([&] { flags.number("lr", 0.0, 10.0); });
  hh::fuzz::accepted([&] { flags.number("lr"); });
  hh::fuzz::accepted([&] { flags.boolean("quiet"); });
  hh::fuzz::accepted([&] { flags.integer("name"); });
  for (const std::string& m : hh::cli::Flags::split_list(flags.str("maps"))) {
    if (m.empty()) hh::fuzz::finding("split_list returned an empty item");
  }
  if (!flags.given("name") && !flags.str("name").empty()) hh::fuzz::finding("a flag not given has a value");
  return 0;
}
