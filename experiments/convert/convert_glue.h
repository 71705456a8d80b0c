// A GLUE task as a ConversionTask (convert_bert): an HF BertForSequenceClassification on one task's
// official TSV files, tokenized once up front with the model folder's tokenizer (a pair per row for
// the pair tasks, HF's truncation to max_length), batched with padding to the batch's longest row
// and an attention mask. Loss: cross-entropy over the labels, or for STS-B (one output, a score in
// [0, 5]) the mean squared error, as transformers' BertForSequenceClassification computes them.
// Metrics: the task's GLUE metrics (HF's glue metric), the first one primary: CoLA Matthews
// correlation, MRPC/QQP accuracy and F1, STS-B Pearson and Spearman, the others accuracy; MNLI's
// test split also reports the mismatched dev accuracy when that file was read.
//
// Splits: GLUE's test files have no labels, so the dev file is the test split; the validation split
// (early stopping, model selection) is a held-out part of train (GlueDataConfig::val_fraction) so
// the dev file stays untouched, or the dev file itself when val_fraction is 0.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/batching.h"
#include "data/glue.h"
#include "data/user_task.h"
#include "data/tokenizer.h"
#include "nn/models/bert.h"
#include "train/convert/convert.h"

namespace hh::train {

// One split, tokenized: the ids and token types of each row (specials included, unpadded).
struct GlueRows {
  std::vector<std::vector<int32_t>> ids, types;
  std::vector<int64_t> labels;  // class ids (0 for STS-B)
  std::vector<double> scores;   // STS-B scores (the label as a double elsewhere)
  int64_t size() const { return static_cast<int64_t>(ids.size()); }
  int64_t tokens() const;       // real tokens over all rows
};

// Texts (pairs with `b` when it is not empty) tokenized in chunks with HF's truncation to
// max_length and templates, each row unpadded; labels and scores 0.
GlueRows tokenize_rows(const data::Tokenizer& tok, const std::vector<std::string>& a, const std::vector<std::string>& b,
                       int64_t max_length, int32_t pad_id);

struct GlueDataConfig {
  int64_t max_length = 128;     // tokens per row, specials included (HF truncation longest_first)
  int64_t max_train = -1;       // read at most this many training rows (-1: all)
  int64_t max_eval = -1;        // read at most this many dev rows (each dev file; -1: all)
  double val_fraction = 0.1;    // of the training rows held out as the validation split (0: dev)
  uint64_t seed = 0;            // which training rows are held out
  bool skip_malformed = false;  // skip malformed rows (counted) instead of failing
};

// Every split of a task, read and tokenized once; shared by the rows of a study.
struct GlueData {
  data::GlueTask task;
  std::string train_path, dev_path, dev_mismatched_path;  // the files read (mismatched: MNLI only)
  GlueRows train, val, test, test_mismatched;
  int64_t skipped = 0;          // malformed rows skipped (skip_malformed)
  int32_t pad_id = 0;
};

// Reads <dir>/train.tsv and the dev file(s) of `task`, tokenizes them with `tok`. Errors name the
// file (and line) or the setting that is wrong; a split that ends up empty is an error.
GlueData load_glue_data(const data::GlueTask& task, const std::string& dir, const data::Tokenizer& tok,
                        const GlueDataConfig& cfg);

// A task in the user's own files (data/user_task.h: <dir>/train.{tsv,jsonl}, <dir>/dev.{tsv,jsonl})
// as GlueData: dev is the test split, validation is held out of train as for GLUE.
GlueData load_user_task_data(const std::string& dir, const data::Tokenizer& tok, const GlueDataConfig& cfg);

// The GLUE metric names of task_metrics (glue_metrics) for a task: "mcc", "accuracy", "f1", ...
std::vector<std::string> glue_metric_names(const data::GlueTask& task);

// Checks that a model fits a task: num_labels equal (an error naming both and the model's
// architecture) and rows no longer than the model's positions.
void check_model_for_task(const nn::BertForSequenceClassification& model, const data::GlueTask& task,
                          int64_t max_length);

struct GlueTaskConfig {
  int64_t batch = 8;
  uint64_t seed = 0;  // training batch order
  Device device = Device::cpu();
};

// One padded batch of rows: input_ids and token_type_ids (B,L) i64, attention_mask (B,L) i64 (1 on
// tokens, 0 on padding), L = the longest row of the batch.
struct GlueBatch {
  Tensor input_ids, token_type_ids, attention_mask;
  std::vector<int64_t> labels;
  std::vector<double> scores;
  int64_t tokens = 0;  // real (unpadded) tokens
};
GlueBatch make_glue_batch(const GlueRows& rows, const std::vector<int64_t>& which, int32_t pad_id);

class GlueConversionTask : public ConversionTask {
 public:
  GlueConversionTask(std::shared_ptr<nn::BertForSequenceClassification> model, std::shared_ptr<const GlueData> data,
                     GlueTaskConfig cfg);
  nn::Module& model() override { return *model_; }
  void keep_softmax(const std::vector<int64_t>& layers) override { model_->keep_softmax(layers); }
  nn::BertForSequenceClassification& bert() { return *model_; }
  int64_t batches(Split s) const override { return batches_of(s).size(); }
  void shuffle(int64_t epoch) override { train_batches_.set_epoch(epoch); }
  // Cross-entropy of the logits (MSE of the one output for STS-B), mean over the batch.
  Tensor loss(Split s, int64_t i, nn::TraceRequest* trace) override;
  int64_t tokens(Split s, int64_t i) const override;  // real (unpadded) tokens of the batch
  Metrics evaluate(Split s) override;
  // The model's predictions on a split, no grad: class ids (as doubles) or STS-B scores.
  std::vector<double> predict(Split s);
  // The labels of a split in the form glue_metrics reads them (class ids, or scores for STS-B).
  std::vector<double> references(Split s) const;
  GlueBatch batch(Split s, int64_t i) const;

 private:
  const GlueRows& rows(Split s) const;
  const RowBatches& batches_of(Split s) const;
  std::vector<double> predict_rows(const GlueRows& rows);
  std::shared_ptr<nn::BertForSequenceClassification> model_;
  std::shared_ptr<const GlueData> data_;
  GlueTaskConfig cfg_;
  RowBatches train_batches_, val_batches_, test_batches_;
};

}  // namespace hh::train
