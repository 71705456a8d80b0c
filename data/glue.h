// GLUE from the official TSV files (the layout of the GLUE download, REFERENCE.md §5): CoLA, SST-2,
// MRPC, STS-B, QQP, MNLI (matched and mismatched dev), QNLI, RTE.
//
// Lines are split on '\n' and fields on '\t'. Quotes are literal text (no CSV quoting), as the GLUE
// files are written. A trailing '\r' on a line and a UTF-8 byte-order mark at the start of the file
// are dropped; nothing else is changed. CoLA's train/dev files have no header line; every other
// task's file starts with one, which is checked against the task's column names (so a file of
// another task, or a test file without labels, is refused).
//
// Every row must have the expected number of fields (CoLA: 4; others: as many as the header) and a
// label the task knows; anything else is an hh::Error naming the file and the 1-based line. With
// GlueReadOptions::skip_malformed such rows are skipped instead and counted in GlueReadStats (the
// official QQP train file has a few broken rows); the header, an empty file or a file with no
// examples are errors in either case.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hh::data {

struct GlueExample {
  std::string text_a;
  std::string text_b;   // empty for single-sentence tasks (CoLA, SST-2)
  int64_t label = 0;    // class index in GLUE's / HF's order; 0 for STS-B
  double score = 0.0;   // STS-B: the similarity in [0, 5]; other tasks: the label as a double
};

struct GlueTask {
  std::string name;                   // canonical spelling: "CoLA", "SST-2", ..., "MNLI"
  int num_labels = 2;                 // 1 for STS-B (regression)
  bool pair = false;                  // two sentences per example
  std::vector<std::string> metrics;   // of "matthews_corr", "accuracy", "f1", "pearson", "spearman"
  std::vector<std::string> label_names;  // label_names[label]; empty for STS-B
};

// The task by name, case-insensitive, '-' and '_' ignored ("sst2", "SST-2", "sts_b" all match).
// An unknown name is an error listing the valid ones.
GlueTask glue_task(const std::string& name);
// The eight tasks in GLUE's order.
std::vector<GlueTask> glue_tasks();

// The official file of a split in the task's folder `dir`: "train" -> train.tsv, "dev" -> dev.tsv
// (MNLI: dev_matched.tsv), "dev_mismatched" -> dev_mismatched.tsv (MNLI only). An unknown split, or
// a file that does not exist, is an error naming what was looked for.
std::string glue_split_path(const GlueTask& task, const std::string& dir, const std::string& split);

struct GlueReadOptions {
  int64_t max_examples = -1;    // stop after this many examples (-1: all)
  bool skip_malformed = false;  // skip (and count) rows with wrong field counts or bad labels
};

struct GlueReadStats {
  int64_t lines = 0;                  // data lines read (header not counted)
  int64_t skipped = 0;                // malformed rows skipped (skip_malformed only)
  std::vector<std::string> skipped_rows;  // "file:line: reason" of the first 100 skipped rows
};

// Reads the examples of one split file. Errors name the file (and line for row errors).
std::vector<GlueExample> read_glue(const GlueTask& task, const std::string& path, int64_t max_examples = -1);
std::vector<GlueExample> read_glue(const GlueTask& task, const std::string& path, const GlueReadOptions& options,
                                   GlueReadStats* stats = nullptr);

}  // namespace hh::data
