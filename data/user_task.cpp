#include "data/user_task.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/quote.h"
#include "core/regular_file.h"
#include "core/utf8.h"

namespace hh::data {

namespace fs = std::filesystem;

namespace {

// One row before its label is mapped: the label's text, and its value when it is a number.
struct RawRow {
  std::string text, pair, label;
  std::optional<double> number;
  int64_t line = 0;
};

// A label's value when it is a decimal number ("0.5", "-3", "1e-2"), else nullopt (a class name).
std::optional<double> as_number(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  if (s.find_first_of("xXpP") != std::string::npos) return std::nullopt;  // decimal only (no 0x1p1)
  return v;
}

// A label that reads as a number but not a finite one ("nan", "inf", "-Infinity", "1e999") is an
// error naming its line: taken as a class name it silently turned a regression into classes.
void check_finite_label(const std::string& label, const std::string& at) {
  if (label.empty()) return;
  char* end = nullptr;
  const double v = std::strtod(label.c_str(), &end);
  HH_CHECK(end != label.c_str() + label.size() || std::isfinite(v), at, ": label ", quote_text(label),
           " is not a finite number");
}

// Every line is UTF-8 (the labels are written to JSON, the texts tokenized as UTF-8): an invalid
// byte is an error naming the line and the byte.
void check_utf8_line(const std::string& line, const std::string& at) {
  const size_t bad = first_invalid_utf8(line.data(), line.size());
  HH_CHECK(bad == std::string::npos, at, ": invalid UTF-8 (byte ", bad + 1, " of the line: 0x", std::hex,
           static_cast<int>(static_cast<unsigned char>(line[bad < line.size() ? bad : 0])), std::dec, ")");
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1)
    out.push_back(line.substr(start, tab - start));
  out.push_back(line.substr(start));
  return out;
}

std::vector<RawRow> read_rows(const std::string& path, bool& pair, int64_t max_rows) {
  check_regular_file(path, "task");
  const bool jsonl = path.size() >= 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0;
  std::string text = read_file(path);
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);  // a UTF-8 byte-order mark
  std::istringstream in(text);
  std::string line;
  std::vector<RawRow> rows;
  int col_text = -1, col_pair = -1, col_label = -1;
  size_t columns = 0;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string at = str(path, ":", n);
    check_utf8_line(line, at);
    if (jsonl) {
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      HH_CHECK(j.is_object(), at, ": expected a JSON object per line");
      HH_CHECK(j.contains("text") && j["text"].is_string(), at, ": \"text\" (a string) is missing");
      HH_CHECK(j.contains("label") && (j["label"].is_string() || j["label"].is_number()) && !j["label"].is_boolean(),
               at, ": \"label\" (a string or a number) is missing");
      RawRow r;
      r.line = n;
      r.text = j["text"].get<std::string>();
      if (j.contains("text_pair")) {
        HH_CHECK(j["text_pair"].is_string(), at, ": \"text_pair\" must be a string");
        r.pair = j["text_pair"].get<std::string>();
      }
      if (rows.empty()) pair = j.contains("text_pair");
      HH_CHECK(j.contains("text_pair") == pair, at, ": \"text_pair\" is ", pair ? "missing" : "given",
               " here but ", pair ? "given" : "missing", " on the first row");
      if (j["label"].is_number()) {
        r.number = j["label"].get<double>();
        HH_CHECK(std::isfinite(*r.number), at, ": the label is not a finite number");
        r.label = j["label"].dump();
      } else {
        r.label = j["label"].get<std::string>();
        check_finite_label(r.label, at);
        r.number = as_number(r.label);
      }
      rows.push_back(std::move(r));
    } else if (col_text < 0) {  // the header
      const std::vector<std::string> head = split_tabs(line);
      columns = head.size();
      for (size_t i = 0; i < head.size(); ++i) {
        if (head[i] == "text") col_text = static_cast<int>(i);
        if (head[i] == "text_pair") col_pair = static_cast<int>(i);
        if (head[i] == "label") col_label = static_cast<int>(i);
      }
      HH_CHECK(col_text >= 0 && col_label >= 0, at, ": the header must name the columns \"text\" and \"label\" ",
               "(tab-separated; \"text_pair\" optional), got ", quote_text(line));
      pair = col_pair >= 0;
      continue;
    } else {
      if (line.empty()) continue;
      const std::vector<std::string> f = split_tabs(line);
      HH_CHECK(f.size() == columns, at, ": ", f.size(), " tab-separated fields, the header has ", columns);
      RawRow r;
      r.line = n;
      r.text = f[static_cast<size_t>(col_text)];
      if (pair) r.pair = f[static_cast<size_t>(col_pair)];
      r.label = f[static_cast<size_t>(col_label)];
      HH_CHECK(!r.label.empty(), at, ": empty label");
      check_finite_label(r.label, at);
      r.number = as_number(r.label);
      rows.push_back(std::move(r));
    }
    if (max_rows > 0 && static_cast<int64_t>(rows.size()) >= max_rows) break;
  }
  HH_CHECK(!rows.empty(), path, ": no examples", jsonl ? "" : " (a header row, then one example per line)");
  return rows;
}

// The one file of a split: <dir>/<split>.tsv or <dir>/<split>.jsonl.
std::string split_file(const std::string& dir, const std::string& split) {
  const std::string tsv = (fs::path(dir) / (split + ".tsv")).string();
  const std::string jsonl = (fs::path(dir) / (split + ".jsonl")).string();
  std::error_code ec;
  const bool has_tsv = fs::exists(tsv, ec), has_jsonl = fs::exists(jsonl, ec);
  HH_CHECK(has_tsv != has_jsonl, "task: ", dir, ": expected one of ", split, ".tsv and ", split, ".jsonl, found ",
           has_tsv ? "both" : "neither");
  return has_tsv ? tsv : jsonl;
}

}  // namespace

UserTask read_user_task(const std::string& dir, int64_t max_train, int64_t max_dev) {
  std::error_code ec;
  HH_CHECK(fs::is_directory(dir, ec), "task: ", dir, " is not a folder (train.tsv|jsonl and dev.tsv|jsonl)");
  UserTask u;
  u.train_path = split_file(dir, "train");
  u.dev_path = split_file(dir, "dev");
  bool pair = false, dev_pair = false;
  const std::vector<RawRow> train = read_rows(u.train_path, pair, max_train);
  const std::vector<RawRow> dev = read_rows(u.dev_path, dev_pair, max_dev);
  HH_CHECK(pair == dev_pair, "task: ", u.dev_path, ": ", dev_pair ? "has" : "lacks", " text_pair where ", u.train_path,
           pair ? " has it" : " does not");
  const bool all_numbers = std::all_of(train.begin(), train.end(), [](const RawRow& r) { return r.number.has_value(); });
  const bool regression = all_numbers && std::any_of(train.begin(), train.end(), [](const RawRow& r) {
                            return *r.number != std::floor(*r.number);
                          });
  u.task.name = "custom";
  u.task.pair = pair;
  std::map<std::string, int64_t> index;  // label text -> class id
  if (regression) {
    u.task.num_labels = 1;
    u.task.metrics = {"pearson", "spearman"};
  } else {
    // The distinct labels through a set (sorted, linear in the rows up to a log: a search of the
    // list per row was quadratic in the classes, 125 s at 100k), in numeric order when all are numbers.
    const std::set<std::string> distinct = [&] {
      std::set<std::string> d;
      for (const RawRow& r : train) d.insert(r.label);
      return d;
    }();
    HH_CHECK(distinct.size() <= static_cast<size_t>(kMaxUserClasses), "task: ", u.train_path, ": ", distinct.size(),
             " distinct labels, more than the ", kMaxUserClasses, " classes a task may have",
             all_numbers ? " (a regression needs labels with a fractional part)" : "");
    std::vector<std::string> names(distinct.begin(), distinct.end());
    if (all_numbers)
      std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
        return *as_number(a) < *as_number(b);
      });
    HH_CHECK(names.size() >= 2, "task: ", u.train_path, ": one class only (", quote_text(names.front()),
             "): a classifier needs at least two");
    for (size_t i = 0; i < names.size(); ++i) index[names[i]] = static_cast<int64_t>(i);
    u.task.num_labels = static_cast<int>(names.size());
    u.task.label_names = names;
    u.task.metrics = names.size() == 2 ? std::vector<std::string>{"accuracy", "f1"} : std::vector<std::string>{"accuracy"};
  }
  auto convert = [&](const std::vector<RawRow>& rows, const std::string& path) {
    std::vector<GlueExample> out;
    for (const RawRow& r : rows) {
      GlueExample e;
      e.text_a = r.text;
      e.text_b = r.pair;
      if (regression) {
        HH_CHECK(r.number.has_value(), path, ":", r.line, ": label ", quote_text(r.label),
                 " is not a number (the task is a regression: train's labels are numbers)");
        e.score = *r.number;
      } else {
        auto it = index.find(r.label);
        HH_CHECK(it != index.end(), path, ":", r.line, ": label ", quote_text(r.label),
                 " is not one of train's classes");
        e.label = it->second;
        e.score = static_cast<double>(e.label);
      }
      out.push_back(std::move(e));
    }
    return out;
  };
  u.train = convert(train, u.train_path);
  u.dev = convert(dev, u.dev_path);
  return u;
}

}  // namespace hh::data
