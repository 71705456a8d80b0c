// Patience-based early stopping on a validation metric (paper App. B.1: stop once the validation
// loss has not improved for 10 epochs). Call update() once per evaluation; stop when
// should_stop(). A value improves on the best when it is lower than best - min_delta (mode min)
// or higher than best + min_delta (mode max); the first finite value always does. A non-finite
// value (NaN loss) never improves. The state is a few numbers so checkpoints can store it.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace hh {

enum class EarlyStopMode { min, max };

inline EarlyStopMode parse_early_stop_mode(const std::string& name) {
  if (name == "min") return EarlyStopMode::min;
  if (name == "max") return EarlyStopMode::max;
  fail(str("early stopping: unknown mode '", name, "' (expected min or max)"));
}

struct EarlyStoppingState {
  bool has_best = false;
  double best = 0.0;
  int64_t best_index = -1;  // which update() (0-based) gave the best value
  int64_t bad_count = 0;    // updates since the last improvement
  int64_t num_updates = 0;
};

class EarlyStopping {
 public:
  // patience >= 1: stop after `patience` consecutive updates without improvement.
  explicit EarlyStopping(int64_t patience, EarlyStopMode mode = EarlyStopMode::min, double min_delta = 0.0)
      : patience_(patience), mode_(mode), min_delta_(min_delta) {
    HH_CHECK(patience >= 1, "early stopping: patience must be >= 1, got ", patience);
    HH_CHECK(std::isfinite(min_delta) && min_delta >= 0.0, "early stopping: min_delta must be finite and >= 0, got ",
             min_delta);
  }

  // Records one evaluation; returns true when it is a new best.
  bool update(double value) {
    const bool improved = std::isfinite(value) && (!s_.has_best || (mode_ == EarlyStopMode::min
                                                                        ? value < s_.best - min_delta_
                                                                        : value > s_.best + min_delta_));
    if (improved) {
      s_.has_best = true;
      s_.best = value;
      s_.best_index = s_.num_updates;
      s_.bad_count = 0;
    } else {
      ++s_.bad_count;
    }
    ++s_.num_updates;
    return improved;
  }

  bool should_stop() const { return s_.bad_count >= patience_; }
  bool has_best() const { return s_.has_best; }
  double best() const {
    HH_CHECK(s_.has_best, "early stopping: no finite value recorded yet");
    return s_.best;
  }
  int64_t best_index() const { return s_.best_index; }
  int64_t bad_count() const { return s_.bad_count; }
  int64_t patience() const { return patience_; }
  EarlyStopMode mode() const { return mode_; }

  const EarlyStoppingState& state() const { return s_; }
  void set_state(const EarlyStoppingState& s) {
    HH_CHECK(s.bad_count >= 0 && s.num_updates >= 0 && s.best_index < s.num_updates,
             "early stopping: inconsistent state (bad_count ", s.bad_count, ", best_index ", s.best_index,
             ", num_updates ", s.num_updates, ")");
    s_ = s;
  }

 private:
  int64_t patience_;
  EarlyStopMode mode_;
  double min_delta_;
  EarlyStoppingState s_;
};

}  // namespace hh
