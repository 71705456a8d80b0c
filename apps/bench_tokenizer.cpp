// bench_tokenizer: encode throughput of a tokenizer folder over a text file, one thread, line by
// line (each "\n"-separated line is one encode call). Companion: tools/bench_tokenizer_hf.py runs
// HF `tokenizers` (one thread, encode_batch over the same lines) and prints the same line.
//
//   bench_tokenizer [--tokenizer tests/fixtures/tokenizers/gpt2] [--file tests/fixtures/tokenizers/corpus.txt]
//                   [--reps 7] [--repeat 1]
//
// A first pass (untimed; it fills the word cache, as HF's first pass fills its own) is followed by
// --reps timed passes; the median is reported. --repeat N concatenates the file N times. The
// defaults are relative to the repository root.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "apps/kit/app.h"
#include "apps/kit/bench_stats.h"
#include "apps/kit/flags.h"
#include "core/error.h"
#include "core/regular_file.h"
#include "data/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

int run(int argc, char** argv) {
  hh::apps::Flags flags("bench_tokenizer", "Encode throughput of a tokenizer folder over a text file (one thread).");
  flags.add("tokenizer", "tests/fixtures/tokenizers/gpt2",
            "an HF tokenizer folder (tokenizer.json, vocab.json + merges.txt, or vocab.txt)");
  flags.add("file", "tests/fixtures/tokenizers/corpus.txt",
            "text to encode, one encode call per line");
  flags.add("reps", "7", "timed passes (the median is reported)");
  flags.add("repeat", "1", "use the file this many times over");
  if (!flags.parse(argc, argv)) return 0;
  const int64_t reps = flags.integer("reps", 1, 1000), repeat = flags.integer("repeat", 1, 1000);
  const auto tok = hh::data::load_tokenizer(flags.str("tokenizer"));
  hh::check_regular_file(flags.str("file"), "--file");
  std::ifstream in(flags.str("file"), std::ios::binary);
  HH_CHECK(in, "--file: cannot open ", flags.str("file"));
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::vector<std::string> lines;
  for (int64_t r = 0; r < repeat; ++r) {
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      lines.push_back(text.substr(pos, end - pos));
      pos = end + 1;
    }
  }
  size_t bytes = 0;
  for (const auto& l : lines) bytes += l.size();
  size_t ids = 0;
  const auto pass = [&] {
    ids = 0;
    for (const auto& l : lines) ids += tok->encode(l, false).size();
  };
  const auto c0 = Clock::now();
  pass();
  const double cold = std::chrono::duration<double>(Clock::now() - c0).count();
  std::vector<double> secs;
  for (int64_t r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    pass();
    secs.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double s = hh::apps::median(secs);
  std::printf("hedgehog: %zu lines, %.1f KB, %zu ids: %.2f ms per pass, %.2f MB/s, %.2f M ids/s "
              "(first pass, empty cache: %.2f ms, %.2f MB/s)\n",
              lines.size(), static_cast<double>(bytes) / 1e3, ids, s * 1e3, static_cast<double>(bytes) / s / 1e6,
              static_cast<double>(ids) / s / 1e6, cold * 1e3, static_cast<double>(bytes) / cold / 1e6);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return hh::apps::run_main(argc, argv, run); }
