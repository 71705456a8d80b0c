// A gated run's output (nn::GateOutput) joins the resume fingerprints of ar_probe, train_lm and
// lra only when it is not the default, so runs from before the option resume as they did.
#include <doctest/doctest.h>

#include <string>

#include "data/associative_recall.h"
#include "experiments/ar/ar_experiment.h"
#include "experiments/lm/lm_train.h"
#include "experiments/lra/lra_experiment.h"
#include "nn/gate.h"

using namespace hh;

namespace {

bool has_gate_output(const std::string& fingerprint) {
  return fingerprint.find("\"gate_output\":\"groupnorm\"") != std::string::npos;
}

}  // namespace

TEST_CASE("gate output: in the ar, lm and lra fingerprints only when groupnorm") {
  ArConfig dc;
  dc.vocab = 8;
  dc.seq_len = 9;
  dc.num_train = 4;
  dc.num_test = 2;
  const ArDataset data = make_associative_recall(dc);
  train::ArRunConfig ar;
  ar.mixer = nn::parse_mixer("hedgehog", "test");
  ar.gate = nn::Gate::gla;
  const std::string ar_default = train::ar_run_fingerprint(data, ar);
  CHECK(ar_default.find("gate_output") == std::string::npos);
  ar.gate_output = nn::GateOutput::group_norm;
  CHECK(has_gate_output(train::ar_run_fingerprint(data, ar)));

  train::LmTrainConfig lm;
  lm.attention.mixer = nn::parse_mixer("hedgehog", "test");
  lm.attention.gate = nn::Gate::delta;
  CHECK(train::lm_run_fingerprint(lm).find("gate_output") == std::string::npos);
  lm.attention.gate_output = nn::GateOutput::group_norm;
  CHECK(has_gate_output(train::lm_run_fingerprint(lm)));

  train::LraData empty;
  train::LraRunConfig lra;
  lra.model.attention = nn::parse_mixer("hedgehog", "test");
  lra.model.gate = nn::Gate::gla;
  CHECK(train::lra_run_fingerprint(empty, lra).find("gate_output") == std::string::npos);
  lra.model.gate_output = nn::GateOutput::group_norm;
  CHECK(has_gate_output(train::lra_run_fingerprint(empty, lra)));
}
