// Learning-rate schedules (formulas and conventions in train/schedule.h).
#include "train/schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace hh {

namespace {

constexpr double kPi = 3.14159265358979323846;

// OneCycleLR's cosine annealing from `start` (pct 0) to `end` (pct 1).
double anneal_cos(double start, double end, double pct) { return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1.0); }

bool finite_positive(double v) { return std::isfinite(v) && v > 0.0; }

ScheduleConfig with_kind(ScheduleConfig c, ScheduleKind k) {
  c.kind = k;
  return c;
}

}  // namespace

ScheduleKind parse_schedule_kind(const std::string& name) {
  if (name == "constant") return ScheduleKind::constant;
  if (name == "cosine" || name == "warmup_cosine") return ScheduleKind::cosine;
  if (name == "linear" || name == "warmup_linear") return ScheduleKind::linear;
  if (name == "onecycle" || name == "one_cycle" || name == "one-cycle") return ScheduleKind::onecycle;
  fail(str("lr schedule: unknown name '", name, "' (expected one of: constant, cosine, linear, onecycle)"));
}

const char* schedule_kind_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::constant: return "constant";
    case ScheduleKind::cosine: return "cosine";
    case ScheduleKind::linear: return "linear";
    case ScheduleKind::onecycle: return "onecycle";
  }
  return "?";
}

LrSchedule::LrSchedule(const std::string& name, ScheduleConfig config)
    : LrSchedule(with_kind(config, parse_schedule_kind(name))) {}

LrSchedule::LrSchedule(const ScheduleConfig& c) : config_(c) {
  const char* name = schedule_kind_name(c.kind);
  HH_CHECK(finite_positive(c.base_lr), "lr schedule ", name, ": base_lr must be finite and > 0, got ", c.base_lr);
  HH_CHECK(c.total_steps >= 0, "lr schedule ", name, ": total_steps must be >= 0, got ", c.total_steps);
  if (c.kind == ScheduleKind::onecycle) {
    HH_CHECK(c.total_steps > 0, "lr schedule onecycle: total_steps must be > 0");
    HH_CHECK(c.pct_start > 0.0 && c.pct_start < 1.0, "lr schedule onecycle: pct_start must lie in (0, 1), got ",
             c.pct_start);
    const double up_end = c.pct_start * static_cast<double>(c.total_steps) - 1.0;
    HH_CHECK(up_end > 0.0 && up_end < static_cast<double>(c.total_steps - 1), "lr schedule onecycle: pct_start ",
             c.pct_start, " with total_steps ", c.total_steps, " leaves an empty warm-up or annealing phase");
    HH_CHECK(finite_positive(c.div_factor), "lr schedule onecycle: div_factor must be > 0, got ", c.div_factor);
    HH_CHECK(finite_positive(c.final_div_factor), "lr schedule onecycle: final_div_factor must be > 0, got ",
             c.final_div_factor);
    return;
  }
  HH_CHECK(c.warmup_steps >= 0, "lr schedule ", name, ": warmup_steps must be >= 0, got ", c.warmup_steps);
  if (c.kind == ScheduleKind::constant) return;
  HH_CHECK(c.total_steps > 0, "lr schedule ", name, ": total_steps must be > 0");
  HH_CHECK(c.warmup_steps <= c.total_steps, "lr schedule ", name, ": warmup_steps ", c.warmup_steps,
           " exceeds total_steps ", c.total_steps);
  HH_CHECK(std::isfinite(c.min_lr) && c.min_lr >= 0.0 && c.min_lr <= c.base_lr, "lr schedule ", name,
           ": min_lr must lie in [0, base_lr = ", c.base_lr, "], got ", c.min_lr);
}

double LrSchedule::lr_at(int64_t step) const {
  const ScheduleConfig& c = config_;
  HH_CHECK(step >= 0, "lr schedule ", schedule_kind_name(c.kind), ": negative step ", step);
  const double s = static_cast<double>(step);

  if (c.kind == ScheduleKind::onecycle) {
    const double initial = c.base_lr / c.div_factor;
    const double final_lr = initial / c.final_div_factor;
    const double up_end = c.pct_start * static_cast<double>(c.total_steps) - 1.0;
    const double down_end = static_cast<double>(c.total_steps - 1);
    if (s <= up_end) return anneal_cos(initial, c.base_lr, s / up_end);
    const double pct = std::min(1.0, (s - up_end) / (down_end - up_end));
    return anneal_cos(c.base_lr, final_lr, pct);
  }

  if (step < c.warmup_steps) return c.base_lr * s / static_cast<double>(c.warmup_steps);
  if (c.kind == ScheduleKind::constant) return c.base_lr;

  const double span = static_cast<double>(std::max<int64_t>(1, c.total_steps - c.warmup_steps));
  const double progress = std::min(1.0, (s - static_cast<double>(c.warmup_steps)) / span);
  const double factor = c.kind == ScheduleKind::cosine ? 0.5 * (1.0 + std::cos(kPi * progress)) : 1.0 - progress;
  return c.min_lr + (c.base_lr - c.min_lr) * factor;
}

}  // namespace hh
