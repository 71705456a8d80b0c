// The conversion study's table and report, shared by the convert_* apps and the offline demo: one
// row per student (the paper's layout: the softmax teacher; swap + finetune without distillation for
// 1+ELU, T2R and untrained Hedgehog; distilled T2R-HH and Hedgehog), with the task metric, how much
// of the teacher's it recovers, fidelity to the teacher's attention (KL, entropy, monotonicity),
// and figures: per-layer/per-head KL heat maps, teacher vs student attention weights (Figs. 7, 9),
// and the stage curves. Every file is written atomically.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/gate.h"
#include "nn/mixer.h"
#include "train/convert/convert.h"

namespace hh::train {

struct ConversionRow {
  std::string label;   // "Hedgehog", "T2R-HH", "1+ELU", ...
  nn::Mixer mixer;     // linear attention with the row's feature map
  bool distill = true;  // stage 1 runs (false: swap + finetune only)
};
// The paper's rows (Tables 1-3, 8): elu, t2r, hedgehog-untrained without distillation; t2r
// ("T2R-HH") and hedgehog distilled.
std::vector<ConversionRow> paper_conversion_rows();
// Rows from a comma list of feature-map names (each distilled when its map has weights to train);
// "paper" gives paper_conversion_rows(). An unknown name is an error listing the valid ones.
// "hybrid-<map>" gives the hybrid row of that map (hybrid_row).
std::vector<ConversionRow> parse_conversion_rows(const std::string& list);
// The row's map as LoLCATs' hybrid (sliding window + linear): "Hybrid <label>", always distilled
// (the window factors train even when the map has no weights). A hybrid row is returned as is.
ConversionRow hybrid_row(const ConversionRow& row);
// The rows with their linear state gated by `gate`: each labelled "<label>+<gate>" (nn::gated_label),
// e.g. "Hedgehog+liger"; Gate::none leaves them as they are. A hybrid row is refused (its softmax
// window has no state to gate), the error starting with `what` (the flag).
std::vector<ConversionRow> gated_rows(std::vector<ConversionRow> rows, nn::Gate gate, const std::string& what);

struct ConversionOutcome {
  ConversionRow row;
  std::string status = "ok";  // or "error: <message>"
  ConvertResult result;
  Metrics test;               // the converted model on the test split
  Fidelity fidelity;          // attention fidelity to the teacher on the test split
  Metrics extra;              // what an app measures besides (e.g. KL at other lengths), in results.json
  double seconds = 0;
};

// Builds the row's student (teacher weights + the row's feature map), converts it with `cfg`
// (distill.epochs forced to 0 for rows without distillation), then measures the test metric and
// fidelity (over up to `fidelity_batches` test batches). Errors are caught into status.
// `after` (optional) runs last on the converted student, e.g. to fill `extra`.
using StudentFactory = std::function<std::unique_ptr<ConversionTask>(const nn::Mixer& mixer)>;
using AfterConversion = std::function<void(ConversionTask& student, ConversionOutcome& outcome)>;
ConversionOutcome run_conversion_row(const ConversionRow& row, const StudentFactory& make, ConvertConfig cfg,
                                     bool causal, int64_t fidelity_batches, const AfterConversion& after = {});

struct ConversionReport {
  std::string title;          // e.g. "Associative recall: softmax decoder -> linear"
  Metrics teacher;            // the softmax teacher on the test split
  double teacher_entropy = 0;  // the teacher's attention entropy and monotonicity on the test split
  double teacher_monotonicity = 0;
  bool percent = true;        // metrics shown ×100
  bool higher_is_better = true;  // of the primary metric; false (perplexity): recover = teacher / student
  std::vector<ConversionOutcome> rows;
  std::string config_json;    // written to config.json
};

// A teacher that did not learn makes a conversion measure nothing (every student "recovers" the
// teacher's chance level): when the teacher's primary test metric (higher being better) is below
// chance + margin, an error naming both figures and what to do. `chance`: the metric of a guess
// (the majority class's share; 1 / the number of answers).
void check_teacher_learned(const ConversionReport& rep, double chance, double margin);

// A fixed-width table: model, primary test metric, % of the teacher's, metric right after the swap
// and after distillation (validation split), mean KL to the teacher, entropy, monotonicity, time.
std::string conversion_table(const ConversionReport& r);
// results.json, results.csv, config.json, SVG figures and report.html under `dir` (created).
void write_conversion_report(const std::string& dir, const ConversionReport& r);

}  // namespace hh::train
