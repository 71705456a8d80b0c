// bench_tokenizer: encode throughput of a tokenizer folder over a text file, one thread, line by
// line (each "\n"-separated line is one encode call). Companion: tools/bench_tokenizer_hf.py runs
// HF `tokenizers` (one thread, encode_batch over the same lines) and prints the same line.
//
//   bench_tokenizer [--tokenizer tests/fixtures/tokenizers/gpt2] [--file tests/fixtures/tokenizers/corpus.txt]
//                   [--reps 7] [--repeat 1] [--input file|spaces|digits|newlines|english|word] [--size 20000000]
//
// A first pass (untimed; it fills the word cache, as HF's first pass fills its own) is followed by
// --reps timed passes; the median is reported. --repeat N concatenates the file N times. The
// defaults are relative to the repository root.
//
// --input other than "file" encodes one generated text of --size bytes in a single encode call
// (the cost-bound rows of issue 27: long inputs must stay linear-ish in time and memory):
//   spaces    ' ' repeated;                newlines  '\n' repeated;
//   digits    pseudo-random decimal digits (the generator below, which the Python twin repeats);
//   english   the --file text repeated, cut at a character boundary;
//   word      the ASCII letters of --file in order, repeated: one word of --size bytes.
// Peak memory is the process's (run it under /usr/bin/time -v).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/app.h"
#include "apps/kit/bench_stats.h"
#include "cli/flags.h"
#include "core/error.h"
#include "core/regular_file.h"
#include "data/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

// The generated input `kind` of `size` bytes (see the header); `file` is the --file text.
std::string generate(const std::string& kind, size_t size, const std::string& file) {
  std::string out;
  out.reserve(size);
  if (kind == "spaces" || kind == "newlines") {
    out.assign(size, kind == "spaces" ? ' ' : '\n');
  } else if (kind == "digits") {
    uint64_t x = 0x9E3779B97F4A7C15ull;  // 64-bit LCG (Knuth's MMIX constants); the digit is bits 33..63 mod 10
    for (size_t i = 0; i < size; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      out += static_cast<char>('0' + (x >> 33) % 10);
    }
  } else if (kind == "english") {
    HH_CHECK(!file.empty(), "--input english: --file is empty");
    while (out.size() < size) out.append(file, 0, std::min(file.size(), size - out.size()));
    size_t last = out.size();  // drop a character the cut left incomplete
    while (last > 0 && (static_cast<unsigned char>(out[last - 1]) & 0xC0) == 0x80) --last;
    if (last > 0) {
      const unsigned lead = static_cast<unsigned char>(out[last - 1]);
      const size_t len = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
      if (out.size() - (last - 1) < len) out.resize(last - 1);
    }
  } else if (kind == "word") {
    std::string letters;
    for (char c : file)
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) letters += c;
    HH_CHECK(!letters.empty(), "--input word: --file has no ASCII letters");
    while (out.size() < size) out.append(letters, 0, std::min(letters.size(), size - out.size()));
  } else {
    hh::fail(hh::str("--input: unknown kind '", kind, "' (file, spaces, digits, newlines, english or word)"));
  }
  return out;
}

int run(int argc, char** argv) {
  hh::cli::Flags flags("bench_tokenizer", "Encode throughput of a tokenizer folder over a text file (one thread).");
  flags.add("tokenizer", "tests/fixtures/tokenizers/gpt2",
            "an HF tokenizer folder (tokenizer.json, vocab.json + merges.txt, or vocab.txt)");
  flags.add("file", "tests/fixtures/tokenizers/corpus.txt",
            "text to encode, one encode call per line");
  flags.add("reps", "7", "timed passes (the median is reported)");
  flags.add("repeat", "1", "use the file this many times over");
  flags.add("input", "file",
            "file (the --file lines), or one generated text of --size bytes: spaces, digits, newlines, english, word");
  flags.add("size", "20000000", "bytes of a generated --input");
  if (!flags.parse(argc, argv)) return 0;
  const int64_t reps = flags.integer("reps", 1, 1000), repeat = flags.integer("repeat", 1, 1000);
  const int64_t size = flags.integer("size", 1, int64_t{1} << 32);
  const std::string kind = flags.str("input");
  const auto tok = hh::data::load_tokenizer(flags.str("tokenizer"));
  hh::check_regular_file(flags.str("file"), "--file");
  std::ifstream in(flags.str("file"), std::ios::binary);
  HH_CHECK(in, "--file: cannot open ", flags.str("file"));
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::vector<std::string> lines;
  if (kind != "file") lines.push_back(generate(kind, static_cast<size_t>(size), text));
  for (int64_t r = 0; r < repeat && kind == "file"; ++r) {
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
  if (kind != "file") std::printf("input %s: ", kind.c_str());
  std::printf("hedgehog: %zu lines, %.1f KB, %zu ids: %.2f ms per pass, %.2f MB/s, %.2f M ids/s "
              "(first pass, empty cache: %.2f ms, %.2f MB/s)\n",
              lines.size(), static_cast<double>(bytes) / 1e3, ids, s * 1e3, static_cast<double>(bytes) / s / 1e6,
              static_cast<double>(ids) / s / 1e6, cold * 1e3, static_cast<double>(bytes) / cold / 1e6);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return hh::cli::run_main(argc, argv, run); }
