// Progress bar / periodic progress lines (see core/progress.h).
#include "core/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

namespace hh {

namespace {

bool is_terminal(std::ostream* out) {
  int fd = -1;
  if (out == &std::cerr || out == &std::clog) fd = STDERR_FILENO;
  else if (out == &std::cout) fd = STDOUT_FILENO;
  if (fd < 0 || !isatty(fd)) return false;
  const char* term = std::getenv("TERM");
  return !(term && std::strcmp(term, "dumb") == 0);
}

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string format_rate(double steps_per_second) {
  char buf[32];
  if (!(steps_per_second > 0.0) || !std::isfinite(steps_per_second)) return "? it/s";
  if (steps_per_second >= 1.0) std::snprintf(buf, sizeof buf, "%.2f it/s", steps_per_second);
  else std::snprintf(buf, sizeof buf, "%.2f s/it", 1.0 / steps_per_second);
  return buf;
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0.0) return "?";
  const long long total = static_cast<long long>(std::llround(seconds));
  const long long h = total / 3600, m = (total / 60) % 60, s = total % 60;
  char buf[48];
  if (h > 0) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", h, m, s);
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", m, s);
  return buf;
}

Progress::Progress(ProgressOptions options)
    : opt_(std::move(options)), out_(opt_.out ? opt_.out : &std::cerr), start_(std::chrono::steady_clock::now()) {
  bar_ = opt_.mode == ProgressMode::bar || (opt_.mode == ProgressMode::automatic && is_terminal(out_));
  opt_.bar_width = std::max(1, opt_.bar_width);
  last_step_ = opt_.start_step;
}

Progress::~Progress() {
  if (bar_dirty_) {
    *out_ << '\n';
    out_->flush();
  }
}

double Progress::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::update(int64_t step, const ProgressMetrics& metrics) { update_at(step, now(), metrics); }
void Progress::finish(const ProgressMetrics& metrics) { finish_at(now(), metrics); }

std::string Progress::render(int64_t step, double elapsed, const ProgressMetrics& metrics) const {
  const int64_t done = step - opt_.start_step;
  const double rate = elapsed > 0.0 ? static_cast<double>(done) / elapsed : 0.0;
  const bool known = opt_.total > 0;
  const double frac = known ? std::clamp(static_cast<double>(step) / static_cast<double>(opt_.total), 0.0, 1.0) : 0.0;
  std::string s;
  if (!opt_.label.empty()) s += opt_.label + " ";
  char buf[64];
  if (bar_ && known) {
    const int filled = static_cast<int>(frac * opt_.bar_width);
    s += "[" + std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(opt_.bar_width - filled), '-') + "] ";
  }
  if (known) std::snprintf(buf, sizeof buf, "%lld/%lld %3.0f%%", static_cast<long long>(step),
                           static_cast<long long>(opt_.total), 100.0 * frac);
  else std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(step));
  s += buf;
  s += " " + format_rate(rate);
  if (!bar_) s += " elapsed " + format_duration(elapsed);
  if (known) {
    const double remaining = static_cast<double>(std::max<int64_t>(0, opt_.total - step));
    s += " ETA " + (rate > 0.0 ? format_duration(remaining / rate) : std::string("?"));
  }
  for (const auto& m : metrics) s += " " + m.first + "=" + format_number(m.second);
  return s;
}

void Progress::emit(int64_t step, double elapsed, const ProgressMetrics& metrics) {
  const std::string text = render(step, elapsed, metrics);
  if (bar_) {
    *out_ << '\r' << text << "\033[K";
    bar_dirty_ = true;
  } else {
    *out_ << text << '\n';
  }
  out_->flush();
  last_printed_step_ = step;
  last_printed_time_ = elapsed;
  ++lines_;
}

void Progress::update_at(int64_t step, double elapsed, const ProgressMetrics& metrics) {
  if (finished_) return;
  last_step_ = step;
  bool due;
  if (bar_) {
    due = last_printed_step_ < 0 || elapsed - last_printed_time_ >= opt_.redraw_seconds ||
          (opt_.total > 0 && step >= opt_.total);
  } else {
    const int64_t since = step - std::max(last_printed_step_, opt_.start_step);
    due = (opt_.every_steps > 0 && since >= opt_.every_steps) ||
          (opt_.every_seconds > 0.0 && elapsed - last_printed_time_ >= opt_.every_seconds);
  }
  if (due && step != last_printed_step_) emit(step, elapsed, metrics);
}

void Progress::finish_at(double elapsed, const ProgressMetrics& metrics) {
  if (finished_) return;
  finished_ = true;
  if (bar_) {
    emit(last_step_, elapsed, metrics);
    *out_ << '\n';
    out_->flush();
    bar_dirty_ = false;
  } else if (last_printed_step_ != last_step_ || !metrics.empty()) {
    emit(last_step_, elapsed, metrics);
  }
}

}  // namespace hh
