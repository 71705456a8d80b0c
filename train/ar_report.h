// The associative-recall report: console table, results.json / results.csv, SVG figures
// (entropy vs accuracy as paper Figure 4, attention heatmaps as Figure 2, weight vs q·k as
// Figure 3, training curves) and an index.html that shows them. Every file is written atomically.
#pragma once
#include <string>
#include <vector>

#include "train/ar_experiment.h"

namespace hh::train {

std::string ar_table(const std::vector<ArRunResult>& results);
// Writes everything under `dir` (created if missing); `config_json` is embedded in results.json.
void write_ar_report(const std::string& dir, const std::vector<ArRunResult>& results, const std::string& config_json);
std::string file_slug(const std::string& label);  // "exp (t=2)" -> "exp_t2"

}  // namespace hh::train
