#include "data/glue.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "core/error.h"
#include "core/quote.h"
#include "core/regular_file.h"

namespace hh::data {

namespace {

enum class LabelKind { Digit, Name, Score };

// Where a task's fields are in its files (REFERENCE.md §5) and what the header calls them.
struct Layout {
  GlueTask task;
  bool header = true;
  size_t fields = 0;          // without a header (CoLA): the field count of every row
  int col_a = 0, col_b = -1;  // -1: no second sentence
  int col_label = -1;         // -1: the last field
  std::string head_a, head_b, head_label;
  LabelKind kind = LabelKind::Digit;
};

std::vector<Layout> layouts() {
  const std::vector<std::string> acc{"accuracy"}, acc_f1{"accuracy", "f1"};
  std::vector<Layout> out;
  auto add = [&](GlueTask t, bool header, size_t fields, int a, int b, int label, std::string ha, std::string hb,
                 std::string hl, LabelKind kind) {
    Layout l;
    l.task = std::move(t);
    l.header = header;
    l.fields = fields;
    l.col_a = a;
    l.col_b = b;
    l.col_label = label;
    l.head_a = std::move(ha);
    l.head_b = std::move(hb);
    l.head_label = std::move(hl);
    l.kind = kind;
    out.push_back(std::move(l));
  };
  add({"CoLA", 2, false, {"matthews_corr"}, {"unacceptable", "acceptable"}}, false, 4, 3, -1, 1, "", "", "",
      LabelKind::Digit);
  add({"SST-2", 2, false, acc, {"negative", "positive"}}, true, 0, 0, -1, 1, "sentence", "", "label",
      LabelKind::Digit);
  add({"MRPC", 2, true, acc_f1, {"not_equivalent", "equivalent"}}, true, 0, 3, 4, 0, "#1 String", "#2 String",
      "Quality", LabelKind::Digit);
  add({"STS-B", 1, true, {"pearson", "spearman"}, {}}, true, 0, 7, 8, -1, "sentence1", "sentence2", "score",
      LabelKind::Score);
  add({"QQP", 2, true, acc_f1, {"not_duplicate", "duplicate"}}, true, 0, 3, 4, 5, "question1", "question2",
      "is_duplicate", LabelKind::Digit);
  add({"MNLI", 3, true, acc, {"entailment", "neutral", "contradiction"}}, true, 0, 8, 9, -1, "sentence1",
      "sentence2", "gold_label", LabelKind::Name);
  add({"QNLI", 2, true, acc, {"entailment", "not_entailment"}}, true, 0, 1, 2, -1, "question", "sentence", "label",
      LabelKind::Name);
  add({"RTE", 2, true, acc, {"entailment", "not_entailment"}}, true, 0, 1, 2, -1, "sentence1", "sentence2", "label",
      LabelKind::Name);
  return out;
}

std::string normalize_name(const std::string& name) {
  std::string s;
  for (char c : name)
    if (c != '-' && c != '_') s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string valid_names() {
  std::string s;
  for (const auto& l : layouts()) s += (s.empty() ? "" : ", ") + l.task.name;
  return s;
}

const Layout& layout_of(const GlueTask& task) {
  static const std::vector<Layout> all = layouts();
  for (const auto& l : all)
    if (l.task.name == task.name) return l;
  fail(str("glue: unknown task '", task.name, "' (valid: ", valid_names(), ")"));
}

std::vector<std::string_view> split_tabs(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t tab = line.find('\t', start);
    if (tab == std::string_view::npos) {
      out.push_back(line.substr(start));
      return out;
    }
    out.push_back(line.substr(start, tab - start));
    start = tab + 1;
  }
}

std::string quoted(std::string_view s) { return quote_text(s, 60); }

// The label field of a row as (label, score); an empty string on success, else what is wrong.
std::string parse_label(const Layout& l, std::string_view field, GlueExample& ex) {
  switch (l.kind) {
    case LabelKind::Digit:
      if (field.size() == 1 && field[0] >= '0' && field[0] < '0' + l.task.num_labels) {
        ex.label = field[0] - '0';
        ex.score = static_cast<double>(ex.label);
        return "";
      }
      return str("label ", quoted(field), " is not one of 0..", l.task.num_labels - 1);
    case LabelKind::Name:
      for (size_t i = 0; i < l.task.label_names.size(); ++i)
        if (field == l.task.label_names[i]) {
          ex.label = static_cast<int64_t>(i);
          ex.score = static_cast<double>(i);
          return "";
        }
      {
        std::string names;
        for (const auto& n : l.task.label_names) names += (names.empty() ? "" : ", ") + n;
        return str("label ", quoted(field), " is not one of ", names);
      }
    case LabelKind::Score: {
      const std::string s(field);
      char* end = nullptr;
      // Decimal only: strtod also reads hex floats ("0x1p1"), "inf" and "nan", which no GLUE file holds.
      const bool decimal = !s.empty() && s.find_first_not_of("0123456789.+-eE") == std::string::npos;
      const double v = decimal ? std::strtod(s.c_str(), &end) : NAN;
      if (end != s.c_str() + s.size() || !std::isfinite(v) || v < 0.0 || v > 5.0)
        return str("score ", quoted(field), " is not a number in [0, 5]");
      ex.label = 0;
      ex.score = v;
      return "";
    }
  }
  return "unknown label kind";
}

// Checks the header line of a task that has one; returns the field count of its rows.
size_t check_header(const Layout& l, std::string_view line, const std::string& where) {
  const auto h = split_tabs(line);
  const size_t label_col = l.col_label < 0 ? h.size() - 1 : static_cast<size_t>(l.col_label);
  if (label_col >= h.size() || h[label_col] != l.head_label)
    fail(str(where, ":1: the header has no '", l.head_label, "' column where ", l.task.name,
             " keeps its labels (header: ", quoted(line), "); GLUE test files have no labels, use train or dev"));
  auto expect = [&](int col, const std::string& name) {
    if (col < 0) return;
    const size_t c = static_cast<size_t>(col);
    if (c >= h.size() || h[c] != name)
      fail(str(where, ":1: expected column ", c + 1, " of the header to be '", name, "' (header: ", quoted(line),
               "); is this a ", l.task.name, " file?"));
  };
  expect(l.col_a, l.head_a);
  expect(l.col_b, l.head_b);
  return h.size();
}

}  // namespace

std::vector<GlueTask> glue_tasks() {
  std::vector<GlueTask> out;
  for (const auto& l : layouts()) out.push_back(l.task);
  return out;
}

GlueTask glue_task(const std::string& name) {
  const std::string want = normalize_name(name);
  for (const auto& l : layouts())
    if (normalize_name(l.task.name) == want) return l.task;
  fail(str("glue: unknown task '", name, "' (valid: ", valid_names(), ")"));
}

std::string glue_split_path(const GlueTask& task, const std::string& dir, const std::string& split) {
  const bool mnli = layout_of(task).task.name == "MNLI";
  std::string file;
  if (split == "train") {
    file = "train.tsv";
  } else if (split == "dev") {
    file = mnli ? "dev_matched.tsv" : "dev.tsv";
  } else if (split == "dev_mismatched") {
    HH_CHECK(mnli, "glue: split 'dev_mismatched' exists only for MNLI, not ", task.name);
    file = "dev_mismatched.tsv";
  } else {
    fail(str("glue: unknown split '", split, "' (valid: train, dev", mnli ? ", dev_mismatched" : "", ")"));
  }
  const std::string path = (std::filesystem::path(dir) / file).string();
  std::error_code ec;
  HH_CHECK(std::filesystem::is_regular_file(path, ec), "glue: ", task.name, " ", split, ": no file ", path);
  return path;
}

std::vector<GlueExample> read_glue(const GlueTask& task, const std::string& path, int64_t max_examples) {
  GlueReadOptions o;
  o.max_examples = max_examples;
  return read_glue(task, path, o);
}

std::vector<GlueExample> read_glue(const GlueTask& task, const std::string& path, const GlueReadOptions& options,
                                   GlueReadStats* stats) {
  const Layout& l = layout_of(task);
  const std::string where = str("glue ", l.task.name, ": ", path);
  HH_CHECK(options.max_examples == -1 || options.max_examples > 0, "glue: max_examples must be -1 (all) or > 0, got ",
           options.max_examples);
  std::error_code ec;
  HH_CHECK(!std::filesystem::is_directory(path, ec), where, ": is a directory, not a TSV file");
  check_regular_file(path, str("glue ", l.task.name));  // a FIFO would block the open below forever
  std::ifstream f(path, std::ios::binary);
  HH_CHECK(f.good(), where, ": cannot open the file");

  GlueReadStats local;
  GlueReadStats& st = stats ? *stats : local;
  st = GlueReadStats{};
  std::vector<GlueExample> out;
  std::string line;
  int64_t line_no = 0;
  size_t fields = l.fields;
  while (options.max_examples < 0 || static_cast<int64_t>(out.size()) < options.max_examples) {
    if (!std::getline(f, line)) break;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line_no == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
    if (line_no == 1 && l.header) {
      fields = check_header(l, line, where);
      continue;
    }
    ++st.lines;
    const auto v = split_tabs(line);
    if (line_no == 1 && !l.header && v.size() == 2 && v[0] == "index")
      fail(str(where, ":1: this is a GLUE test file (header 'index<TAB>sentence'): it has no labels, use train or dev"));
    GlueExample ex;
    std::string err;
    if (v.size() != fields) {
      err = str("has ", v.size(), " tab-separated fields, expected ", fields);
    } else {
      const size_t label_col = l.col_label < 0 ? fields - 1 : static_cast<size_t>(l.col_label);
      err = parse_label(l, v[label_col], ex);
      ex.text_a = std::string(v[static_cast<size_t>(l.col_a)]);
      if (l.col_b >= 0) ex.text_b = std::string(v[static_cast<size_t>(l.col_b)]);
    }
    if (err.empty()) {
      out.push_back(std::move(ex));
      continue;
    }
    const std::string msg = str(where, ":", line_no, ": ", err);
    if (!options.skip_malformed) fail(msg);
    ++st.skipped;
    if (st.skipped_rows.size() < 100) st.skipped_rows.push_back(msg);
  }
  HH_CHECK(!f.bad(), where, ": read error after line ", line_no);
  HH_CHECK(line_no > 0, where, ": the file is empty");
  HH_CHECK(!out.empty(), where, ": no examples", st.skipped ? str(" (all ", st.skipped, " rows malformed)") : "");
  return out;
}

}  // namespace hh::data
