// Metrics logging: a JSONL log (one JSON object per line, keys in the order given, flushed after
// every line so a crashed or killed run keeps everything it logged) and a small CSV table writer
// for results tables (RFC 4180 quoting, saved atomically).
//
//   MetricsLog log("runs/ar/metrics.jsonl");
//   log.write({{"split", "train"}, {"step", step}, {"loss", loss}, {"lr", lr}});
//
// Non-finite numbers have no JSON spelling: they are written as null.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace hh {

// One JSON scalar: null, bool, integer, floating number or string.
class MetricValue {
 public:
  enum class Kind { null, boolean, integer, number, text };

  MetricValue() = default;  // null
  MetricValue(bool v) : kind_(Kind::boolean), i_(v ? 1 : 0) {}  // NOLINT(google-explicit-constructor)
  template <typename T, std::enable_if_t<std::is_integral<T>::value && !std::is_same<T, bool>::value, int> = 0>
  MetricValue(T v) : kind_(Kind::integer), i_(static_cast<int64_t>(v)) {}  // NOLINT
  MetricValue(double v) : kind_(Kind::number), d_(v) {}                     // NOLINT
  MetricValue(float v) : kind_(Kind::number), d_(v) {}                      // NOLINT
  MetricValue(const char* v) : kind_(Kind::text), s_(v ? v : "") {}         // NOLINT
  MetricValue(std::string v) : kind_(Kind::text), s_(std::move(v)) {}       // NOLINT

  Kind kind() const { return kind_; }
  bool boolean() const { return i_ != 0; }
  int64_t integer() const { return i_; }
  double number() const { return kind_ == Kind::integer ? static_cast<double>(i_) : d_; }
  const std::string& text() const { return s_; }

 private:
  Kind kind_ = Kind::null;
  int64_t i_ = 0;
  double d_ = 0.0;
  std::string s_;
};

using MetricRecord = std::vector<std::pair<std::string, MetricValue>>;

// The record as one compact JSON object (no newline). Duplicate keys are an error.
std::string to_json_line(const MetricRecord& record);

class MetricsLog {
 public:
  MetricsLog() = default;  // not open; write() throws
  // Opens `path` for writing (truncates, or appends when `append`, e.g. a resumed run).
  explicit MetricsLog(const std::string& path, bool append = false);
  ~MetricsLog();
  MetricsLog(MetricsLog&& other) noexcept;
  MetricsLog& operator=(MetricsLog&& other) noexcept;
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const MetricRecord& record);  // one line, flushed
  bool is_open() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }
  int64_t lines_written() const { return lines_; }
  void close();

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
  int64_t lines_ = 0;
};

// Quotes a CSV cell when it holds a comma, quote, CR or LF (quotes doubled), as RFC 4180 says.
std::string csv_escape(const std::string& cell);

// A results table: header + rows of cells, written as CSV.
class CsvTable {
 public:
  explicit CsvTable(std::vector<std::string> header, int precision = 6);

  void add_row(std::vector<std::string> cells);          // must have header().size() cells
  void add_values(const std::vector<MetricValue>& cells);  // numbers printed with %.{precision}g

  const std::vector<std::string>& header() const { return header_; }
  const std::vector<std::vector<std::string>>& rows() const { return rows_; }
  std::string str() const;                     // the whole CSV, lines ending in "\n"
  void save(const std::string& path) const;    // atomically (core/atomic_file.h)

 private:
  std::string format(const MetricValue& v) const;

  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  int precision_;
};

}  // namespace hh
