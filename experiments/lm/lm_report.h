// train_lm's results: one row per attention (validation perplexity, the gap to softmax, speed,
// samples), written as results.json, results.csv and report.html with the training-loss and
// validation-perplexity curves (SVG). Every file is written atomically.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "experiments/lm/lm_train.h"
#include "nn/gate.h"
#include "nn/mixer.h"

namespace hh::train {

struct LmRunSummary {
  nn::Mixer attention;   // shown by name ("softmax", "hedgehog", ...)
  nn::Gate gate = nn::Gate::none;  // shown after the name when gated ("hedgehog+gla")
  std::string status;    // "ok", "interrupted at step N", "diverged ...", "error: ..."
  int64_t params = 0;
  int64_t steps = 0;
  double seconds = 0.0;
  double tokens_per_second = 0.0;
  double val_loss = NAN, val_ppl = NAN;  // the final validation (NaN when none)
  std::vector<double> train_loss;        // per step
  std::vector<LmEval> evals;
  std::vector<std::string> samples;      // text sampled from the final model
};

LmRunSummary summarize_lm_run(const nn::Mixer& attention, const LmTrainResult& r);
// The row's name: the attention's, "+<gate>" after it when gated.
std::string lm_run_label(const LmRunSummary& s);

// The side-by-side table (perplexity, gap to the softmax row when there is one, tokens/s).
std::string lm_table(const std::vector<LmRunSummary>& runs);

// results.json (config + rows), results.csv, loss.svg, ppl.svg, report.html in `dir`.
void write_lm_report(const std::string& dir, const std::vector<LmRunSummary>& runs, const std::string& config_json);

}  // namespace hh::train
