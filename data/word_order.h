// A word-order classification task built from real text (the offline demonstration's part (b),
// in the spirit of CoLA's acceptability judgements): windows of W consecutive words from English
// text; half keep their order (label 1), half are shuffled (label 0). Both classes hold the same
// words, so a bag of words scores 50%: the model must read word order, i.e. attend by position.
//
// Words: maximal runs of ASCII letters/digits, lowercased. Vocabulary: [PAD]=0, [UNK]=1, [CLS]=2,
// then every word seen at least `min_count` times in the training windows, most frequent first
// (ties by spelling). Each example is [CLS] w_1 .. w_W (length W + 1).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hh::data {

struct WordOrderConfig {
  int64_t window = 12;      // W words per example
  int64_t min_count = 2;    // rarer words map to [UNK]
  int64_t train_stride = 0;  // training windows start every this many words (0 = window: no overlap);
                             // validation and test windows never overlap
  double val_fraction = 0.1, test_fraction = 0.1;  // of the windows, taken from the end of the text
  uint64_t seed = 0;        // which windows are shuffled, and how
};

struct WordOrderSplit {
  Tensor ids;     // (N, W+1) i64
  Tensor labels;  // (N) i64: 1 = original order, 0 = shuffled
};

struct WordOrderData {
  std::vector<std::string> vocab;  // id -> word
  WordOrderSplit train, val, test;
  int64_t words = 0;               // words read
};

// The words of a text, in order (see the header comment).
std::vector<std::string> split_words(const std::string& text);

// Reads the files (each as UTF-8 or ASCII text; a missing or unreadable file is an error naming it),
// concatenates their words and builds the splits. Too little text for one window per split is an
// error saying how many words were found.
WordOrderData make_word_order(const std::vector<std::string>& files, const WordOrderConfig& cfg);

// The plain-text files of a folder (sorted, symlinks resolved and duplicates dropped): what the demo
// reads from /usr/share/common-licenses, the license texts every Debian system carries.
std::vector<std::string> text_files_in(const std::string& folder);

}  // namespace hh::data
