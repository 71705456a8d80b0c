// A text-classification or regression task in the user's own files, read into the GLUE structures
// (data/glue.h) so every GLUE consumer (convert_bert) takes it: a folder with train.tsv or
// train.jsonl and dev.tsv or dev.jsonl.
//   TSV: a header row naming the columns "text", optional "text_pair", "label" (any order, other
//        columns ignored); fields split on tabs, no quoting (as GLUE's files).
//   JSONL: one object per line: {"text": ..., "text_pair": ... (optional), "label": ...}.
// Labels: numbers with a fractional part anywhere in train make a regression task (one output,
// Pearson and Spearman); otherwise a classification task whose classes are train's distinct labels
// (integers in numeric order, names in sorted order; accuracy, plus F1 when there are two). A dev
// label train never had is an error, and so are more than kMaxUserClasses classes. A label that
// reads as a non-finite number (nan, inf, 1e999) and a line that is not valid UTF-8 are errors.
// Every error names the file (and the 1-based line where there is one).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/glue.h"

namespace hh::data {

// The most classes a classification task may have (a head of 10,000 outputs; more is a broken
// file or a regression whose labels lack fractions).
constexpr int64_t kMaxUserClasses = 10000;

struct UserTask {
  GlueTask task;                      // name "custom"; num_labels, pair, metrics, label_names
  std::string train_path, dev_path;
  std::vector<GlueExample> train, dev;
};

// Reads <dir>/train.{tsv,jsonl} and <dir>/dev.{tsv,jsonl} (exactly one of each).
UserTask read_user_task(const std::string& dir, int64_t max_train = -1, int64_t max_dev = -1);

}  // namespace hh::data
