// Progress reporting for training and evaluation loops. On a terminal: one bar redrawn in place
// (count, %, rate, ETA, named metrics). Otherwise (logs, pipes, CI): plain lines, one every
// `every_steps` steps or `every_seconds` seconds, whichever comes first, plus a final line.
//
//   Progress p({"epoch 3", /*total*/ batches});
//   for (...) { ...; p.update(step + 1, {{"loss", loss}, {"acc", acc}}); }
//   p.finish({{"loss", mean_loss}});
#pragma once
#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

namespace hh {

enum class ProgressMode { automatic, bar, plain };

struct ProgressOptions {
  std::string label;
  int64_t total = 0;             // steps expected; 0 = unknown (no %, no ETA)
  int64_t start_step = 0;        // a resumed loop starts here (rate counts from it)
  ProgressMode mode = ProgressMode::automatic;  // automatic: bar iff `out` is a terminal
  int64_t every_steps = 100;     // plain mode: print every N steps (0 = never by count)
  double every_seconds = 10.0;   // plain mode: or every T seconds (0 = never by time)
  double redraw_seconds = 0.1;   // bar mode: redraw at most this often
  int bar_width = 30;
  std::ostream* out = nullptr;   // default std::cerr; automatic mode checks isatty for
                                 // std::cerr / std::cout and treats other streams as plain
};

using ProgressMetric = std::pair<std::string, double>;
using ProgressMetrics = std::vector<ProgressMetric>;

// "0:07", "12:05", "1:02:03" (h:mm:ss past an hour); "?" for negative or non-finite input.
std::string format_duration(double seconds);

class Progress {
 public:
  explicit Progress(ProgressOptions options);
  ~Progress();  // ends a bar line that finish() did not end
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `step` = steps completed so far. Prints only when due (see the header comment).
  void update(int64_t step, const ProgressMetrics& metrics = {});
  // Prints the final state once (bar: last redraw and newline; plain: a last line unless the
  // final step was already printed and no metrics are given). Later update() calls are ignored.
  void finish(const ProgressMetrics& metrics = {});

  // The same with an explicit time in seconds since construction (tests, replay).
  void update_at(int64_t step, double elapsed_seconds, const ProgressMetrics& metrics);
  void finish_at(double elapsed_seconds, const ProgressMetrics& metrics);

  bool uses_bar() const { return bar_; }
  int64_t lines_printed() const { return lines_; }
  // The text of one report (no '\r' or newline), as update() would print it.
  std::string render(int64_t step, double elapsed_seconds, const ProgressMetrics& metrics) const;

 private:
  double now() const;
  void emit(int64_t step, double elapsed, const ProgressMetrics& metrics);

  ProgressOptions opt_;
  std::ostream* out_;
  bool bar_ = false;
  bool finished_ = false;
  bool bar_dirty_ = false;  // a bar line is on screen without its newline
  std::chrono::steady_clock::time_point start_;
  int64_t last_step_ = 0;
  int64_t last_printed_step_ = -1;
  double last_printed_time_ = 0.0;
  int64_t lines_ = 0;
};

}  // namespace hh
