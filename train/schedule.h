// Learning-rate schedules. One value type, one query: lr_at(step), where `step` is the number of
// optimizer steps already taken (0 for the first update), the convention of PyTorch's LambdaLR /
// OneCycleLR and of Hugging Face's get_*_schedule_with_warmup.
//
// Names (parse_schedule_kind; apps take them as flag values):
//   constant   lr = base_lr after an optional linear warmup
//   cosine     linear warmup, then half-cosine from base_lr down to min_lr at total_steps
//              (HF get_cosine_with_min_lr_schedule_with_warmup; min_lr 0 = get_cosine_schedule_with_warmup)
//   linear     linear warmup, then straight line from base_lr down to min_lr at total_steps
//              (HF get_linear_schedule_with_warmup when min_lr is 0)
//   onecycle   torch.optim.lr_scheduler.OneCycleLR, anneal_strategy='cos', three_phase=False:
//              from base_lr/div_factor up to base_lr (max_lr) over pct_start*total_steps - 1 steps,
//              then down to base_lr/div_factor/final_div_factor at step total_steps - 1
// Warmup (constant, cosine, linear): lr = base_lr * step / warmup_steps for step < warmup_steps,
// as HF does (so step 0 runs at lr 0). After total_steps the schedules hold their final value
// (OneCycleLR itself raises there; holding is friendlier to a resumed run).
#pragma once
#include <cstdint>
#include <string>

namespace hh {

enum class ScheduleKind { constant, cosine, linear, onecycle };

// "constant", "cosine", "linear", "onecycle" (also "one_cycle", "one-cycle", "warmup_cosine",
// "warmup_linear"). Throws hh::Error listing the valid names otherwise.
ScheduleKind parse_schedule_kind(const std::string& name);
const char* schedule_kind_name(ScheduleKind k);

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::constant;
  double base_lr = 1e-3;       // peak lr (max_lr for onecycle)
  int64_t total_steps = 0;     // required (> 0) for cosine, linear, onecycle
  int64_t warmup_steps = 0;    // constant, cosine, linear
  double min_lr = 0.0;         // cosine, linear: the value reached at total_steps
  double pct_start = 0.3;      // onecycle: fraction of steps spent increasing
  double div_factor = 25.0;    // onecycle: initial lr = base_lr / div_factor
  double final_div_factor = 1e4;  // onecycle: final lr = initial lr / final_div_factor
};

class LrSchedule {
 public:
  // Validates the config (throws hh::Error naming the field).
  explicit LrSchedule(const ScheduleConfig& config);
  // Convenience: parse the kind from its name, then as above.
  LrSchedule(const std::string& name, ScheduleConfig config);

  double lr_at(int64_t step) const;
  const ScheduleConfig& config() const { return config_; }

 private:
  ScheduleConfig config_;
};

}  // namespace hh
