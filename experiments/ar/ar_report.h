// The associative-recall report: console table, results.json / results.csv, SVG figures
// (entropy vs accuracy as paper Figure 4, attention heatmaps as Figure 2, weight vs q·k as
// Figure 3, training curves) and an index.html that shows them. Every file is written atomically.
#pragma once
#include <string>
#include <vector>

#include "experiments/ar/ar_experiment.h"
#include "train/report/html.h"  // file_slug

namespace hh::train {

// One row per result; a "status" column shows ok, "diverged at ..." or the error of a failed run.
std::string ar_table(const std::vector<ArRunResult>& results);
// Writes everything under `dir` (created if missing); `config_json` goes to config.json. Figures
// show the results that were evaluated (every status but "error: ..." and "interrupted ...").
void write_ar_report(const std::string& dir, const std::vector<ArRunResult>& results, const std::string& config_json);
// Writes only results.json and results.csv (atomically): what a long run updates as each map
// finishes, so that a later failure or kill loses nothing already done.
void write_ar_results(const std::string& dir, const std::vector<ArRunResult>& results);

// One run's complete result (metrics, curves and figure material) as JSON text, and back: what
// ar_probe keeps per map so that --resume can skip finished maps. Parse errors name `source`.
std::string ar_result_json(const ArRunResult& r);
ArRunResult parse_ar_result(const std::string& json_text, const std::string& source);

}  // namespace hh::train
