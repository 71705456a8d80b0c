// The Long Range Arena results in the layout of the paper's Table 6: one row per attention,
// columns ListOps Text Retrieval Image Pathfinder Avg (test accuracy %), an empty cell for a task
// not run, "failed" for a run that failed, and the paper's number beside each cell where the paper
// has that attention. Written as console text, table6.csv, results.json (every run with its
// curves), report.html and learning_curves.svg; every file atomically.
#pragma once
#include <string>
#include <vector>

#include "experiments/lra/lra_experiment.h"

namespace hh::train {

// The paper's Table 6 row of an attention flag value (softmax -> Transformer, elu -> Linear Trans.,
// performer, cosformer, hedgehog), or nullptr when the paper has none. Values in task order, then Avg.
const double* lra_paper_row(const nn::Mixer& attention);

// The console table (with a line per failed run naming its status).
std::string lra_table(const std::vector<LraRunResult>& results);
// table6.csv and results.json only: what a long run rewrites as each run finishes.
void write_lra_results(const std::string& dir, const std::vector<LraRunResult>& results);
// Everything: the above, report.html and learning_curves.svg; config_json goes to config.json.
void write_lra_report(const std::string& dir, const std::vector<LraRunResult>& results, const std::string& config_json);

// One run's result as JSON text and back (what apps/lra keeps per run so --resume can skip it).
std::string lra_result_json(const LraRunResult& r);
LraRunResult parse_lra_result(const std::string& json_text, const std::string& source);

}  // namespace hh::train
