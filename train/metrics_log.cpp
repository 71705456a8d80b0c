// JSONL metrics log and CSV results tables (see train/metrics_log.h).
#include "train/metrics_log.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/regular_file.h"

namespace hh {

namespace {

nlohmann::ordered_json to_json(const MetricValue& v) {
  switch (v.kind()) {
    case MetricValue::Kind::null: return nullptr;
    case MetricValue::Kind::boolean: return v.boolean();
    case MetricValue::Kind::integer: return v.integer();
    case MetricValue::Kind::number:
      if (!std::isfinite(v.number())) return nullptr;
      return v.number();
    case MetricValue::Kind::text: return v.text();
  }
  return nullptr;
}

}  // namespace

std::string to_json_line(const MetricRecord& record) {
  nlohmann::ordered_json obj = nlohmann::ordered_json::object();
  std::set<std::string> seen;
  for (const auto& kv : record) {
    HH_CHECK(seen.insert(kv.first).second, "metrics log: duplicate key '", kv.first, "' in one record");
    obj[kv.first] = to_json(kv.second);
  }
  // Replace invalid UTF-8 instead of throwing from inside a training loop.
  return obj.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

MetricsLog::MetricsLog(const std::string& path, bool append) : path_(path) {
  check_regular_file(path, "metrics log");  // opening a FIFO for writing would block until a reader comes
  file_ = std::fopen(path.c_str(), append ? "ab" : "wb");
  HH_CHECK(file_ != nullptr, "metrics log: cannot open '", path, "' for writing: ", std::strerror(errno));
}

MetricsLog::~MetricsLog() { close(); }

MetricsLog::MetricsLog(MetricsLog&& o) noexcept : file_(o.file_), path_(std::move(o.path_)), lines_(o.lines_) {
  o.file_ = nullptr;
}

MetricsLog& MetricsLog::operator=(MetricsLog&& o) noexcept {
  if (this != &o) {
    close();
    file_ = o.file_;
    path_ = std::move(o.path_);
    lines_ = o.lines_;
    o.file_ = nullptr;
  }
  return *this;
}

void MetricsLog::close() {
  if (file_) std::fclose(file_);
  file_ = nullptr;
}

void MetricsLog::write(const MetricRecord& record) {
  HH_CHECK(file_ != nullptr, "metrics log: write() on a log that is not open (path '", path_, "')");
  std::string line = to_json_line(record);
  line += '\n';
  const bool fault = write_fault_injected(path_);  // the test hook of a full disk (core/atomic_file.h)
  const bool ok = !fault && std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0;
  if (fault) errno = ENOSPC;
  HH_CHECK(ok, "metrics log: writing '", path_, "' failed: ", std::strerror(errno));
  ++lines_;
}

std::string csv_escape(const std::string& cell) {
  if (cell.find_first_of(",\"\r\n") == std::string::npos) return cell;
  std::string out = "\"";
  for (char c : cell) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

CsvTable::CsvTable(std::vector<std::string> header, int precision) : header_(std::move(header)), precision_(precision) {
  HH_CHECK(!header_.empty(), "CsvTable: the header needs at least one column");
  HH_CHECK(precision >= 1 && precision <= 17, "CsvTable: precision must lie in [1, 17], got ", precision);
}

void CsvTable::add_row(std::vector<std::string> cells) {
  HH_CHECK(cells.size() == header_.size(), "CsvTable: row with ", cells.size(), " cells for ", header_.size(),
           " columns");
  rows_.push_back(std::move(cells));
}

std::string CsvTable::format(const MetricValue& v) const {
  switch (v.kind()) {
    case MetricValue::Kind::null: return "";
    case MetricValue::Kind::boolean: return v.boolean() ? "true" : "false";
    case MetricValue::Kind::integer: return std::to_string(v.integer());
    case MetricValue::Kind::number: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.*g", precision_, v.number());
      return buf;
    }
    case MetricValue::Kind::text: return v.text();
  }
  return "";
}

void CsvTable::add_values(const std::vector<MetricValue>& cells) {
  std::vector<std::string> text;
  text.reserve(cells.size());
  for (const auto& c : cells) text.push_back(format(c));
  add_row(std::move(text));
}

std::string CsvTable::str() const {
  std::string out;
  auto line = [&out](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) {
      if (i) out += ',';
      out += csv_escape(cells[i]);
    }
    out += '\n';
  };
  line(header_);
  for (const auto& r : rows_) line(r);
  return out;
}

void CsvTable::save(const std::string& path) const { write_file_atomic(path, str()); }

}  // namespace hh
