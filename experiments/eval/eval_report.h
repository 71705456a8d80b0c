// What eval_lm writes into its output folder, built from the evaluators' results: results.json
// (settings, metrics, per-cell or per-example numbers), the per-example scores of the choice task
// (choice_scores.jsonl), the perplexity of a text, the retrieval table (table.md: accuracy by context length and
// depth), its heat map (heatmap.svg) and index.html (train/report's page shell). JSON goes in and out as text:
// installed headers carry no nlohmann/json.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "experiments/eval/choice_eval.h"
#include "experiments/eval/retrieval_eval.h"

namespace hh::train {

// The run's description, written at the top of results.json and of the page.
struct EvalRunInfo {
  std::string task;          // "choice", "passkey", "needle"
  std::string model;         // the model folder
  std::string architecture;  // e.g. "LlamaForCausalLM"
  std::string mixer;         // the attention the folder runs
  std::string device = "cpu", precision = "f32";
  std::string data;  // the choice task's file
  double load_seconds = 0.0, eval_seconds = 0.0;
};

// results.json of the choice task: the info, acc / acc_norm / acc_bytes, their counts.
std::string choice_results_json(const EvalRunInfo& info, const ChoiceOptions& o, const ChoiceResult& r);
// One JSON object per example: id, line, gold, the predictions, and per choice its log-likelihood,
// is_greedy and token counts.
std::string choice_scores_jsonl(const std::vector<ChoiceExample>& examples, const ChoiceResult& r);
std::string choice_report_html(const EvalRunInfo& info, const ChoiceResult& r);

// Perplexity over a text file (the app computes it with experiments/lm's evaluate_lm).
struct PerplexityReport {
  int64_t context = 0, stride = 0;  // stride 0: non-overlapping blocks
  int64_t text_tokens = 0;          // the file's ids
  int64_t scored_tokens = 0;        // predictions scored
  double loss = 0.0, ppl = 0.0;     // mean negative log-likelihood (nats per token), exp(loss)
};
std::string perplexity_results_json(const EvalRunInfo& info, const PerplexityReport& p);
std::string perplexity_report_html(const EvalRunInfo& info, const PerplexityReport& p);

// results.json of passkey / needle: the info, the options, overall accuracy, every cell and trial.
std::string retrieval_results_json(const EvalRunInfo& info, const RetrievalOptions& o, const RetrievalResult& r);
// A Markdown table: a row per length, a column per depth, "accuracy% (correct/trials)".
std::string retrieval_table(const RetrievalOptions& o, const RetrievalResult& r);
// Accuracy (0..1) by length (rows) and depth (columns), train/report/svg's heat map.
std::string retrieval_heatmap_svg(const RetrievalOptions& o, const RetrievalResult& r);
std::string retrieval_report_html(const EvalRunInfo& info, const RetrievalOptions& o, const RetrievalResult& r);

}  // namespace hh::train
