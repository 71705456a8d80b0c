#include "experiments/ar/ar_report.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/atomic_file.h"
#include "train/metrics_log.h"
#include "train/report/svg.h"

namespace hh::train {

namespace {
// A run that got as far as its test evaluation (ok, or diverged and evaluated on its best weights).
bool evaluated(const ArRunResult& r) { return r.status == "ok" || r.status.rfind("diverged", 0) == 0; }
}  // namespace

std::string ar_table(const std::vector<ArRunResult>& results) {
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%-20s %9s %9s %13s %10s %9s %7s  %s\n", "feature map", "test acc", "entropy",
                "monotonicity", "params", "train s", "epochs", "status");
  os << line << std::string(91, '-') << "\n";
  for (const auto& r : results) {
    if (!evaluated(r)) {
      std::snprintf(line, sizeof line, "%-20s %9s %9s %13s %10s %9s %7s  ", r.label.c_str(), "-", "-", "-", "-", "-", "-");
    } else {
      std::snprintf(line, sizeof line, "%-20s %8.1f%% %9.3f %13.3f %10lld %9.1f %7lld  ", r.label.c_str(),
                    100.0 * r.accuracy, r.entropy, r.monotonicity, static_cast<long long>(r.params), r.seconds,
                    static_cast<long long>(r.epochs_run));
    }
    os << line << r.status << "\n";
  }
  return os.str();
}

namespace {

std::string index_html(const std::vector<ArRunResult>& results, const std::string& table) {
  std::ostringstream os;
  os << "<h1>Associative recall (Hedgehog paper §3.2)</h1>\n<pre>" << xml_escape(table) << "</pre>\n"
     << "<p>Data: <a href=\"results.json\">results.json</a>, <a href=\"results.csv\">results.csv</a></p>\n"
     << "<h2>Accuracy vs attention entropy (Figure 4)</h2>\n<img src=\"entropy_vs_accuracy.svg\">\n"
     << "<img src=\"training_curves.svg\">\n<h2>Attention weights (Figure 2)</h2>\n";
  for (const auto& r : results) os << "<img src=\"heatmap_" << file_slug(r.label) << ".svg\">\n";
  os << "<h2>Weight vs q&middot;k (Figure 3)</h2>\n";
  for (const auto& r : results) os << "<img src=\"scatter_" << file_slug(r.label) << ".svg\">\n";
  return html_page("associative recall", os.str());
}

nlohmann::json result_to_json(const ArRunResult& r) {
  nlohmann::json j = {{"feature_map", r.label},
                      {"status", r.status},
                      {"mixer", nn::name(r.mixer)},
                      {"temperature", r.temperature},
                      {"accuracy", r.accuracy},
                      {"val_accuracy", r.val_accuracy},
                      {"entropy", r.entropy},
                      {"monotonicity", r.monotonicity},
                      {"params", r.params},
                      {"seconds", r.seconds},
                      {"epochs", r.epochs_run},
                      {"steps", r.steps},
                      {"lr", r.lr},
                      {"weight_decay", r.weight_decay},
                      {"batch", r.batch},
                      {"train_loss", r.train_loss},
                      {"val_accuracy_curve", r.val_acc},
                      {"val_loss_curve", r.val_loss}};
  if (r.gate != nn::Gate::none) j["gate"] = nn::name(r.gate);  // only gated runs: other results unchanged
  if (r.gate_output != nn::GateOutput::normalizer) j["gate_output"] = nn::name(r.gate_output);
  return j;
}

}  // namespace

std::string ar_result_json(const ArRunResult& r) {
  nlohmann::json j = result_to_json(r);
  j["heat"] = r.heat;
  j["heat_len"] = r.heat_len;
  j["heat_layer"] = r.heat_layer;
  j["heat_head"] = r.heat_head;
  j["heat_tokens"] = r.heat_tokens;
  j["scatter_qk"] = r.scatter_qk;
  j["scatter_w"] = r.scatter_w;
  return j.dump() + "\n";
}

ArRunResult parse_ar_result(const std::string& json_text, const std::string& source) {
  ArRunResult r;
  try {
    const nlohmann::json j = nlohmann::json::parse(json_text);
    r.label = j.at("feature_map").get<std::string>();
    r.status = j.at("status").get<std::string>();
    r.mixer = nn::parse_mixer(j.at("mixer").get<std::string>(), str("ar result ", source, ": mixer"));
    r.gate = nn::parse_gate(j.value("gate", std::string("none")), str("ar result ", source, ": gate"));
    r.gate_output = nn::parse_gate_output(j.value("gate_output", std::string("normalizer")),
                                          str("ar result ", source, ": gate_output"));
    r.temperature = j.at("temperature").get<double>();
    r.accuracy = j.at("accuracy").get<double>();
    r.val_accuracy = j.at("val_accuracy").get<double>();
    r.entropy = j.at("entropy").get<double>();
    r.monotonicity = j.at("monotonicity").get<double>();
    r.params = j.at("params").get<int64_t>();
    r.seconds = j.at("seconds").get<double>();
    r.epochs_run = j.at("epochs").get<int64_t>();
    r.steps = j.at("steps").get<int64_t>();
    r.lr = j.at("lr").get<double>();
    r.weight_decay = j.at("weight_decay").get<double>();
    r.batch = j.at("batch").get<int64_t>();
    r.train_loss = j.at("train_loss").get<std::vector<double>>();
    r.val_acc = j.at("val_accuracy_curve").get<std::vector<double>>();
    r.val_loss = j.value("val_loss_curve", std::vector<double>{});  // absent in results of older versions
    r.heat = j.at("heat").get<std::vector<double>>();
    r.heat_len = j.at("heat_len").get<int64_t>();
    r.heat_layer = j.at("heat_layer").get<int64_t>();
    r.heat_head = j.at("heat_head").get<int64_t>();
    r.heat_tokens = j.at("heat_tokens").get<std::vector<std::string>>();
    r.scatter_qk = j.at("scatter_qk").get<std::vector<double>>();
    r.scatter_w = j.at("scatter_w").get<std::vector<double>>();
  } catch (const nlohmann::json::exception& e) {
    fail(str("ar result ", source, ": not a complete run result: ", e.what()));
  }
  HH_CHECK(r.heat.size() == static_cast<size_t>(r.heat_len * r.heat_len), "ar result ", source, ": heat has ",
           r.heat.size(), " values for a ", r.heat_len, "x", r.heat_len, " map");
  return r;
}

void write_ar_results(const std::string& dir, const std::vector<ArRunResult>& results) {
  ensure_writable_dir(dir);
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : results) arr.push_back(result_to_json(r));
  remove_stale_temps(dir + "/results.json");
  write_file_atomic(dir + "/results.json", arr.dump(2) + "\n");
  CsvTable csv({"feature_map", "accuracy", "entropy", "monotonicity", "params", "seconds", "epochs", "lr",
                "weight_decay", "batch", "status"});
  for (const auto& r : results)
    csv.add_values({r.label, r.accuracy, r.entropy, r.monotonicity, r.params, r.seconds, r.epochs_run, r.lr,
                    r.weight_decay, r.batch, r.status});
  remove_stale_temps(dir + "/results.csv");
  csv.save(dir + "/results.csv");
}

void write_ar_report(const std::string& dir, const std::vector<ArRunResult>& all, const std::string& config_json) {
  write_ar_results(dir, all);
  nlohmann::json cfg = nlohmann::json::parse(config_json, nullptr, false);
  if (!cfg.is_discarded()) write_file_atomic(dir + "/config.json", cfg.dump(2) + "\n");
  std::vector<ArRunResult> results;  // the figures show the evaluated runs
  for (const auto& r : all)
    if (evaluated(r)) results.push_back(r);

  // Figure 4: accuracy vs entropy, one labelled point per map.
  ScatterSeries pts;
  pts.name = "feature maps";
  for (const auto& r : results) {
    pts.x.push_back(r.entropy);
    pts.y.push_back(100.0 * r.accuracy);
    pts.labels.push_back(r.label);
  }
  PlotOptions po;
  po.title = "Associative recall: accuracy vs attention entropy";
  po.x.label = "attention entropy (nats)";
  po.y.label = "test accuracy (%)";
  po.y.min = 0;
  po.y.max = 104;  // room for a point at 100% (the plot area is clipped)
  po.legend = false;
  save_svg(dir + "/entropy_vs_accuracy.svg", scatter_plot({pts}, po));

  std::vector<LineSeries> curves;
  for (const auto& r : results) {
    LineSeries ls;
    ls.name = r.label;
    for (size_t e = 0; e < r.val_acc.size(); ++e) {
      ls.x.push_back(static_cast<double>(e + 1));
      ls.y.push_back(100.0 * r.val_acc[e]);
    }
    ls.markers = true;
    curves.push_back(ls);
  }
  PlotOptions co;
  co.title = "Validation accuracy per epoch";
  co.x.label = "epoch";
  co.x.integer = true;
  co.y.label = "validation accuracy (%)";
  co.y.min = 0;
  co.y.max = 100;
  save_svg(dir + "/training_curves.svg", line_plot(curves, co));

  for (const auto& r : results) {
    HeatmapOptions ho;
    ho.title = r.label + ": layer " + std::to_string(r.heat_layer) + " head " + std::to_string(r.heat_head);
    ho.vmin = 0;
    if (r.heat_len > 0) save_svg(dir + "/heatmap_" + file_slug(r.label) + ".svg", heatmap(r.heat, r.heat_len, r.heat_len, ho));
    ScatterSeries sc;
    sc.name = r.label;
    sc.x = r.scatter_qk;
    sc.y = r.scatter_w;
    sc.radius = 1.5;
    sc.opacity = 0.35;
    PlotOptions so;
    so.title = r.label + ": attention weight vs q·k/√D";
    so.x.label = "q·k/√D";
    so.y.label = "attention weight";
    so.legend = false;
    save_svg(dir + "/scatter_" + file_slug(r.label) + ".svg", scatter_plot({sc}, so));
  }
  write_file_atomic(dir + "/index.html", index_html(results, ar_table(all)));
}

}  // namespace hh::train
