// Task metrics of the conversion apps: GLUE's (accuracy, F1, Matthews correlation, Pearson,
// Spearman) and ROUGE-1/2/L. Pure functions on host vectors; results are fractions (in [0, 1], or
// [-1, 1] for the correlations) that the apps print times 100. Every function throws hh::Error
// naming itself on empty input, inputs of different sizes or non-finite values.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hh::train {

// Fraction of positions where pred == label.
double accuracy(const std::vector<int64_t>& pred, const std::vector<int64_t>& label);

// F1 of class `positive` (sklearn f1_score, average="binary"): 2·TP / (2·TP + FP + FN). When
// nothing is predicted positive and nothing is labelled positive the ratio is 0/0; we return 0,
// as sklearn does with zero_division=0 (its default "warn" also returns 0, with a warning). Any
// value other than `positive` counts as negative (sklearn refuses more than two classes here).
double f1_binary(const std::vector<int64_t>& pred, const std::vector<int64_t>& label, int64_t positive = 1);

// Matthews correlation for any number of classes (sklearn matthews_corrcoef's formula on the
// confusion matrix C, n samples, t_k / p_k the true / predicted counts of class k):
//   (trace(C)·n − Σ t_k p_k) / sqrt((n² − Σ p_k²)(n² − Σ t_k²)),
// and 0 when the denominator is 0 (one class only in pred or in label), as sklearn.
double matthews_corrcoef(const std::vector<int64_t>& pred, const std::vector<int64_t>& label);

// Pearson correlation (scipy.stats.pearsonr's statistic), clipped to [-1, 1]. When either input is
// constant the correlation is undefined (scipy returns NaN with a warning); we return 0 so a
// degenerate model scores 0 rather than writing NaN into a JSON result. Needs 2+ values.
double pearson(const std::vector<double>& x, const std::vector<double>& y);

// Spearman rank correlation (scipy.stats.spearmanr): Pearson of the ranks, tied values getting
// the average of the ranks they span. Constant input -> 0, as pearson.
double spearman(const std::vector<double>& x, const std::vector<double>& y);

// Average ranks (1-based; ties share the mean of their ranks), as scipy.stats.rankdata("average").
std::vector<double> average_ranks(const std::vector<double>& x);

// The GLUE metrics of a task, by name: "mcc", "accuracy", "f1" (positive class 1), "pearson",
// "spearman". Classification metrics read predictions and labels as class ids (each value must be
// an integer); "pearson"/"spearman" read them as scores. Returns (name, value) in the given order.
// An unknown name is an error listing the known ones.
std::vector<std::pair<std::string, double>> glue_metrics(const std::vector<std::string>& metric_names,
                                                         const std::vector<double>& predictions,
                                                         const std::vector<double>& labels);

// The metric names GLUE reports for a task (HF's glue metric): cola {mcc}; sst2, mnli, qnli, rte,
// wnli {accuracy}; mrpc, qqp {accuracy, f1}; stsb {pearson, spearman}. Task names are lower case
// without dashes ("sst2", "stsb"); an unknown task is an error listing the known ones.
std::vector<std::string> glue_task_metrics(const std::string& task);

// ---- ROUGE, as Google's rouge_score package (what HF evaluate's "rouge" wraps), use_stemmer=False.

// rouge_score's tokenizer: lower-case, every run of characters outside [a-z0-9] becomes a space,
// split on spaces. Bytes are handled as ASCII: every non-ASCII UTF-8 byte is a separator (Python's
// str.lower() maps a few non-ASCII letters, e.g. the Kelvin sign, to ASCII ones; we do not).
std::vector<std::string> rouge_tokenize(const std::string& text);

struct RougeScore {
  double precision = 0;  // matches / prediction count
  double recall = 0;     // matches / reference count
  double f1 = 0;         // 2PR / (P + R), 0 when P + R == 0
};

struct Rouge {
  RougeScore rouge1, rouge2, rougeL;
};

// ROUGE-1 and -2: n-gram overlap with clipped counts (Σ_g min(count_pred(g), count_ref(g))).
// ROUGE-L: longest common subsequence of the two token lists ("rougeL", not the newline-split
// "rougeLsum"). A prediction or reference without tokens (or without n-grams) scores 0.
Rouge rouge(const std::string& prediction, const std::string& reference);

// Plain mean of the per-example precision, recall and F1 of each kind. HF evaluate reports the
// "mid" of a 1000-sample bootstrap of the mean (by default), which is the mean up to resampling
// noise; we report the mean itself, which is deterministic.
Rouge rouge_corpus(const std::vector<std::string>& predictions, const std::vector<std::string>& references);

}  // namespace hh::train
