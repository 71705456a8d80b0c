#include "experiments/lra/lra_report.h"

#include <algorithm>
#include <iterator>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/atomic_file.h"
#include "train/report/html.h"
#include "train/report/svg.h"

namespace hh::train {

namespace {

const char* const kTasks[] = {"listops", "text", "retrieval", "image", "pathfinder"};
const char* const kColumns[] = {"ListOps", "Text", "Retrieval", "Image", "Pathfinder"};
constexpr int kNumTasks = 5;

struct PaperRow {
  const char* attention;
  const char* name;
  double values[kNumTasks + 1];
};
// REFERENCE.md §4, paper Table 6 (accuracy %).
const PaperRow kPaper[] = {
    {"softmax", "Transformer", {36.37, 64.27, 57.46, 42.44, 71.40, 54.39}},
    {"performer", "Performer", {18.01, 65.40, 53.82, 42.77, 77.05, 51.41}},
    {"elu", "Linear Trans.", {16.13, 65.90, 53.09, 42.34, 75.30, 50.55}},
    {"cosformer", "cosFormer", {37.90, 63.41, 61.36, 43.17, 70.33, 55.23}},
    {"hedgehog", "Hedgehog", {37.15, 64.60, 82.24, 40.15, 74.16, 59.66}},
};

bool evaluated(const LraRunResult& r) { return r.status == "ok" || r.status.rfind("diverged", 0) == 0; }

// One row of the table: the attention's cell per task (-1 = not run, -2 = failed) and its average
// over the tasks it has a number for; a row with a failed task has no average (-2: "failed"), as
// the mean of the tasks left would read as the row's score.
struct Row {
  nn::Mixer attention;
  nn::Gate gate = nn::Gate::none;
  std::string label() const { return nn::gated_label(nn::name(attention), gate); }
  double cells[kNumTasks] = {-1, -1, -1, -1, -1};
  double avg = -1;
  int in_avg = 0;
};

std::vector<Row> rows_of(const std::vector<LraRunResult>& results) {
  std::vector<Row> rows;
  for (const auto& r : results) {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& x) { return x.attention == r.attention && x.gate == r.gate; });
    if (it == rows.end()) {
      rows.push_back(Row{});
      rows.back().attention = r.attention;
      rows.back().gate = r.gate;
      it = rows.end() - 1;
    }
    for (int t = 0; t < kNumTasks; ++t)
      if (r.task == kTasks[t]) it->cells[t] = evaluated(r) ? 100.0 * r.test_accuracy : -2;
  }
  for (Row& row : rows) {
    double sum = 0;
    for (double c : row.cells)
      if (c >= 0) {
        sum += c;
        ++row.in_avg;
      }
    const bool failed = std::find(std::begin(row.cells), std::end(row.cells), -2.0) != std::end(row.cells);
    if (failed) row.avg = -2;
    else if (row.in_avg > 0) row.avg = sum / row.in_avg;
  }
  return rows;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string cell_text(double v, const double* paper, int column) {
  char buf[48];
  const char* mine = nullptr;
  char value[16];
  if (v >= 0) {
    std::snprintf(value, sizeof value, "%.2f", v);
    mine = value;
  } else {
    mine = v == -2 ? "failed" : "";
  }
  if (paper)
    std::snprintf(buf, sizeof buf, "%6s (%5.2f)", mine, paper[column]);
  else
    std::snprintf(buf, sizeof buf, "%6s", mine);
  return buf;
}

nlohmann::json to_json(const LraRunResult& r) {
  nlohmann::json j = {{"task", r.task},
                      {"attention", nn::name(r.attention)},
                      {"status", r.status},
                      {"test_accuracy", r.test_accuracy},
                      {"val_accuracy", r.val_accuracy},
                      {"best_step", r.best_step},
                      {"steps", r.steps},
                      {"seconds", r.seconds},
                      {"steps_per_second", r.steps_per_second},
                      {"params", r.params},
                      {"eval_steps", r.eval_steps},
                      {"train_loss", r.train_loss},
                      {"val_acc", r.val_acc}};
  if (r.gate != nn::Gate::none) j["gate"] = nn::name(r.gate);  // only gated runs: other results unchanged
  return j;
}

std::string index_html(const std::vector<LraRunResult>& results) {
  std::ostringstream os;
  os << "<h1>Long Range Arena (paper Table 6 layout)</h1>\n<p>Test accuracy (%) of the best validation weights; "
     << "in grey the paper's number. Avg is over the tasks run (the paper's over all five).</p>\n<table>\n<tr><th>attention</th>";
  for (const char* c : kColumns) os << "<th>" << c << "</th>";
  os << "<th>Avg</th></tr>\n";
  for (const Row& row : rows_of(results)) {
    const double* paper = (row.gate == nn::Gate::none ? lra_paper_row(row.attention) : nullptr);
    os << "<tr><td>" << xml_escape(row.label()) << "</td>";
    for (int t = 0; t <= kNumTasks; ++t) {
      const double v = t < kNumTasks ? row.cells[t] : row.avg;
      os << "<td>" << (v >= 0 ? num(std::round(v * 100) / 100) : v == -2 ? "failed" : "");
      if (paper) os << " <span class=\"paper\">(" << num(paper[t]) << ")</span>";
      os << "</td>";
    }
    os << "</tr>\n";
  }
  os << "</table>\n<h2>Runs</h2>\n<pre>";
  for (const auto& r : results) {
    char line[256];
    std::snprintf(line, sizeof line, "%-11s %-20s val %6.2f%% (step %lld)  %7.2f steps/s  %8.1f s  ", r.task.c_str(),
                  nn::gated_label(nn::name(r.attention), r.gate).c_str(), 100 * r.val_accuracy, static_cast<long long>(r.best_step),
                  r.steps_per_second, r.seconds);
    os << xml_escape(line + r.status) << "\n";
  }
  os << "</pre>\n<h2>Learning curves</h2>\n<img src=\"learning_curves.svg\">\n"
     << "<p>Data: <a href=\"table6.csv\">table6.csv</a>, <a href=\"results.json\">results.json</a></p>\n";
  HtmlPageOptions page;
  page.max_width = 1100;
  page.css = "td,th{text-align:right}td:first-child{text-align:left}.paper{color:#888}";
  return html_page("Long Range Arena", os.str(), page);
}

}  // namespace

const double* lra_paper_row(const nn::Mixer& attention) {
  for (const PaperRow& p : kPaper)
    if (nn::name(attention) == p.attention) return p.values;
  return nullptr;
}

std::string lra_table(const std::vector<LraRunResult>& results) {
  std::ostringstream os;
  char buf[64];
  os << "Long Range Arena: test accuracy % (paper Table 6 in brackets; Avg over the tasks run)\n";
  std::snprintf(buf, sizeof buf, "%-20s", "attention");
  os << buf;
  for (const char* c : kColumns) {
    std::snprintf(buf, sizeof buf, " %-14s", c);
    os << buf;
  }
  os << " Avg\n" << std::string(20 + 6 * 15, '-') << "\n";
  for (const Row& row : rows_of(results)) {
    const double* paper = (row.gate == nn::Gate::none ? lra_paper_row(row.attention) : nullptr);
    std::snprintf(buf, sizeof buf, "%-20s", row.label().c_str());
    os << buf;
    for (int t = 0; t <= kNumTasks; ++t) {
      std::snprintf(buf, sizeof buf, " %-14s", cell_text(t < kNumTasks ? row.cells[t] : row.avg, paper, t).c_str());
      os << buf;
    }
    os << "\n";
  }
  for (const auto& r : results)
    if (r.status != "ok") os << nn::gated_label(nn::name(r.attention), r.gate) << " on " << r.task << ": " << r.status << "\n";
  return os.str();
}

void write_lra_results(const std::string& dir, const std::vector<LraRunResult>& results) {
  std::filesystem::create_directories(dir);
  std::ostringstream csv;
  csv << "attention";
  for (const char* c : kColumns) csv << "," << c;
  csv << ",Avg,tasks_in_avg";
  for (const char* c : kColumns) csv << ",paper_" << c;
  csv << ",paper_Avg\n";
  for (const Row& row : rows_of(results)) {
    csv << row.label();  // flag values: no commas or quotes
    for (int t = 0; t < kNumTasks; ++t) csv << "," << (row.cells[t] >= 0 ? num(row.cells[t]) : "");
    csv << "," << (row.avg >= 0 ? num(row.avg) : "") << "," << row.in_avg;
    const double* paper = (row.gate == nn::Gate::none ? lra_paper_row(row.attention) : nullptr);
    for (int t = 0; t <= kNumTasks; ++t) csv << "," << (paper ? num(paper[t]) : "");
    csv << "\n";
  }
  remove_stale_temps(dir + "/table6.csv");
  write_file_atomic(dir + "/table6.csv", csv.str());
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : results) arr.push_back(to_json(r));
  remove_stale_temps(dir + "/results.json");
  write_file_atomic(dir + "/results.json", arr.dump(2) + "\n");
}

void write_lra_report(const std::string& dir, const std::vector<LraRunResult>& results, const std::string& config_json) {
  write_lra_results(dir, results);
  write_file_atomic(dir + "/config.json", config_json + "\n");
  std::vector<LineSeries> curves;
  for (const auto& r : results) {
    if (r.val_acc.empty()) continue;
    LineSeries ls;
    ls.name = r.task + " " + nn::gated_label(nn::name(r.attention), r.gate);
    for (size_t i = 0; i < r.val_acc.size(); ++i) {
      ls.x.push_back(static_cast<double>(r.eval_steps[i]));
      ls.y.push_back(100.0 * r.val_acc[i]);
    }
    ls.markers = true;
    curves.push_back(ls);
  }
  PlotOptions po;
  po.title = "Long Range Arena: validation accuracy";
  po.x.label = "step";
  po.x.integer = true;  // steps are whole numbers
  po.y.label = "validation accuracy (%)";
  po.y.min = 0;
  po.y.max = 100;
  save_svg(dir + "/learning_curves.svg", line_plot(curves, po));
  write_file_atomic(dir + "/report.html", index_html(results));
}

std::string lra_result_json(const LraRunResult& r) { return to_json(r).dump() + "\n"; }

LraRunResult parse_lra_result(const std::string& json_text, const std::string& source) {
  LraRunResult r;
  try {
    const nlohmann::json j = nlohmann::json::parse(json_text);
    r.task = j.at("task").get<std::string>();
    r.attention = nn::parse_mixer(j.at("attention").get<std::string>(), str("lra result ", source, ": attention"));
    r.gate = nn::parse_gate(j.value("gate", std::string("none")), str("lra result ", source, ": gate"));
    r.status = j.at("status").get<std::string>();
    r.test_accuracy = j.at("test_accuracy").get<double>();
    r.val_accuracy = j.at("val_accuracy").get<double>();
    r.best_step = j.at("best_step").get<int64_t>();
    r.steps = j.at("steps").get<int64_t>();
    r.seconds = j.at("seconds").get<double>();
    r.steps_per_second = j.at("steps_per_second").get<double>();
    r.params = j.at("params").get<int64_t>();
    r.eval_steps = j.at("eval_steps").get<std::vector<int64_t>>();
    r.train_loss = j.at("train_loss").get<std::vector<double>>();
    r.val_acc = j.at("val_acc").get<std::vector<double>>();
  } catch (const nlohmann::json::exception& e) {
    fail(str("lra result ", source, ": not a complete run result: ", e.what()));
  }
  HH_CHECK(r.eval_steps.size() == r.val_acc.size() && r.train_loss.size() == r.val_acc.size(), "lra result ", source,
           ": its curves have different lengths");
  return r;
}

}  // namespace hh::train
