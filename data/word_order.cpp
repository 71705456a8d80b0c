#include "data/word_order.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/generator.h"
#include "core/regular_file.h"

namespace hh::data {

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  std::string cur;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 128 && std::isalnum(c)) {
      cur += static_cast<char>(std::tolower(c));
    } else if (!cur.empty()) {
      words.push_back(cur);
      cur.clear();
    }
  }
  if (!cur.empty()) words.push_back(cur);
  return words;
}

std::vector<std::string> text_files_in(const std::string& folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  HH_CHECK(fs::is_directory(folder, ec), "word order: '", folder, "' is not a folder of text files");
  std::set<std::string> seen;
  std::vector<std::string> files;
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(folder, ec)) entries.push_back(e.path());
  std::sort(entries.begin(), entries.end());
  for (const auto& p : entries) {
    const fs::path real = fs::canonical(p, ec);
    if (ec || !fs::is_regular_file(real, ec) || !seen.insert(real.string()).second) continue;
    files.push_back(real.string());
  }
  HH_CHECK(!files.empty(), "word order: no text files in '", folder, "'");
  return files;
}

namespace {
std::string read_all(const std::string& path) {
  check_regular_file(path, "word order");  // a FIFO would block the open below forever
  std::ifstream in(path, std::ios::binary);
  HH_CHECK(in.good(), "word order: cannot read '", path, "'");
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}
}  // namespace

WordOrderData make_word_order(const std::vector<std::string>& files, const WordOrderConfig& cfg) {
  HH_CHECK(cfg.window >= 2, "word order: window must be >= 2 words, got ", cfg.window);
  HH_CHECK(cfg.min_count >= 1, "word order: min_count must be >= 1, got ", cfg.min_count);
  HH_CHECK(cfg.val_fraction > 0 && cfg.test_fraction > 0 && cfg.val_fraction + cfg.test_fraction < 1,
           "word order: validation and test fractions must be positive with a sum below 1");
  WordOrderData d;
  std::vector<std::string> words;
  for (const auto& f : files) {
    auto w = split_words(read_all(f));
    words.insert(words.end(), w.begin(), w.end());
  }
  d.words = static_cast<int64_t>(words.size());
  const int64_t W = cfg.window, n = d.words / W;
  const int64_t n_val = static_cast<int64_t>(cfg.val_fraction * static_cast<double>(n));
  const int64_t n_test = static_cast<int64_t>(cfg.test_fraction * static_cast<double>(n));
  const int64_t n_train = n - n_val - n_test;
  HH_CHECK(n_val >= 1 && n_test >= 1 && n_train >= 1, "word order: ", d.words, " words make ", n, " windows of ", W,
           ", too few for training, validation and test splits");
  // Vocabulary from the training windows only.
  std::map<std::string, int64_t> count;
  for (int64_t i = 0; i < n_train * W; ++i) ++count[words[static_cast<size_t>(i)]];
  std::vector<std::pair<std::string, int64_t>> freq(count.begin(), count.end());
  std::stable_sort(freq.begin(), freq.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  d.vocab = {"[PAD]", "[UNK]", "[CLS]"};
  std::map<std::string, int64_t> id;
  if (!cfg.vocab.empty()) {
    HH_CHECK(cfg.vocab.size() >= 3 && cfg.vocab[2] == "[CLS]", "word order: a given vocabulary must start with [PAD], [UNK], [CLS]");
    d.vocab = cfg.vocab;
    for (size_t i = 3; i < d.vocab.size(); ++i) id[d.vocab[i]] = static_cast<int64_t>(i);
  } else {
    for (const auto& [w, c] : freq)
      if (c >= cfg.min_count) {
        id[w] = static_cast<int64_t>(d.vocab.size());
        d.vocab.push_back(w);
      }
  }
  // Window i: shuffled when its coin says so; a shuffle equal to the original is redrawn (label 0
  // must mean "not the original order").
  Generator gen(cfg.seed);
  // Windows starting at word `first`, `first + stride`, ... below `end` (each W words long).
  auto build = [&](int64_t first, int64_t end, int64_t stride) {
    std::vector<int64_t> ids, labels;
    int64_t count_w = 0;
    for (int64_t start = first; start + W <= end; start += stride, ++count_w) {
      std::vector<int64_t> w(static_cast<size_t>(W));
      for (int64_t j = 0; j < W; ++j) {
        auto it = id.find(words[static_cast<size_t>(start + j)]);
        w[static_cast<size_t>(j)] = it == id.end() ? 1 : it->second;
      }
      const std::vector<int64_t> orig = w;
      if (gen.next_int(0, 2) == 1)
        for (int tries = 0; tries < 8 && w == orig; ++tries)
          for (int64_t j = W - 1; j > 0; --j) std::swap(w[static_cast<size_t>(j)], w[static_cast<size_t>(gen.next_int(0, j + 1))]);
      ids.push_back(2);
      ids.insert(ids.end(), w.begin(), w.end());
      labels.push_back(w == orig ? 1 : 0);  // a window of one repeated word cannot be shuffled
    }
    return WordOrderSplit{from_vector(ids, {count_w, W + 1}, {DType::i64}), from_vector(labels, {count_w}, {DType::i64})};
  };
  HH_CHECK(cfg.train_stride >= 0, "word order: train_stride must be >= 0, got ", cfg.train_stride);
  d.train = build(0, n_train * W, cfg.train_stride > 0 ? cfg.train_stride : W);
  d.val = build(n_train * W, (n_train + n_val) * W, W);
  d.test = build((n_train + n_val) * W, (n_train + n_val + n_test) * W, W);
  return d;
}

}  // namespace hh::data
