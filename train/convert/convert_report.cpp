#include "train/convert/convert_report.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/atomic_file.h"
#include "core/stop.h"
#include "nn/feature_maps.h"
#include "nn/gate.h"
#include "train/report/html.h"
#include "train/report/svg.h"

namespace hh::train {

namespace {
// The paper's name of a feature map.
std::string map_label(const std::string& map, bool distill) {
  if (map == "elu") return "1+ELU";
  if (map == "relu") return "ReLU";
  if (map == "t2r" || map == "t2r-hh") return distill ? "T2R-HH" : "T2R";
  if (map == "hedgehog") return distill ? "Hedgehog" : "Hedgehog (no distill)";
  if (map == "hedgehog-exp") return distill ? "Hedgehog (exp)" : "Hedgehog (exp, no distill)";
  if (map == "hedgehog-untrained") return "Hedgehog (untrained)";
  if (map == "performer") return "Performer";
  if (map == "cosformer") return "cosFormer";
  if (map == "taylor") return "Taylor";
  return map;
}
// A row of feature map `map` (a registered name).
ConversionRow map_row(const std::string& map, bool distill) {
  return {map_label(map, distill), nn::parse_mixer(map, "conversion row"), distill};
}
bool evaluated(const ConversionOutcome& o) { return o.status == "ok"; }
double primary(const Metrics& m) { return m.empty() ? std::nan("") : m.front().second; }
}  // namespace

ConversionRow hybrid_row(const ConversionRow& row) {
  if (row.mixer.is_hybrid()) return row;
  return {"Hybrid " + row.label, nn::parse_mixer("hybrid-" + row.mixer.feature_map(), "conversion row"), true};
}

std::vector<ConversionRow> gated_rows(std::vector<ConversionRow> rows, nn::Gate gate, const std::string& what) {
  for (ConversionRow& row : rows) {
    HH_CHECK(gate == nn::Gate::none || !row.mixer.is_hybrid(), what, ": row '", row.label,
             "' is hybrid attention (a softmax window); a gate needs plain linear rows");
    row.label = nn::gated_label(row.label, gate);
  }
  return rows;
}

std::vector<ConversionRow> paper_conversion_rows() {
  return {map_row("elu", false), map_row("t2r", false), map_row("hedgehog-untrained", false), map_row("t2r", true),
          map_row("hedgehog", true)};
}

std::vector<ConversionRow> parse_conversion_rows(const std::string& list) {
  if (list == "paper") return paper_conversion_rows();
  std::vector<ConversionRow> rows;
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ',')) {
    if (name.empty()) continue;
    if (name.rfind("hybrid-", 0) == 0) {  // LoLCATs' hybrid: its window factors always train
      const ConversionRow row = hybrid_row(map_row(name.substr(7) == "t2r-hh" ? "t2r" : name.substr(7), true));
      for (const ConversionRow& r : rows)
        HH_CHECK(r.label != row.label, "feature map '", name, "' is given twice");
      rows.push_back(row);
      continue;
    }
    if (!nn::is_feature_map_name(name)) {
      std::string valid;
      for (const auto& n : nn::feature_map_names()) valid += (valid.empty() ? "" : ", ") + n;
      fail(str("unknown feature map '", name, "' (expected paper or a comma list of: ", valid, ")"));
    }
    // Maps without weights cannot be distilled; t2r-hh is t2r distilled.
    const bool trainable = name == "t2r" || name == "t2r-hh" || name == "hedgehog" || name == "hedgehog-exp";
    const ConversionRow row = map_row(name == "t2r-hh" ? "t2r" : name, trainable);
    for (const ConversionRow& r : rows)
      HH_CHECK(r.label != row.label, "feature map '", name, "' is given twice (each row trains into its own "
               "folder under the output folder)");
    rows.push_back(row);
  }
  HH_CHECK(!rows.empty(), "no feature map given (expected paper or a comma list of feature-map names)");
  return rows;
}

ConversionOutcome run_conversion_row(const ConversionRow& row, const StudentFactory& make, ConvertConfig cfg,
                                     bool causal, int64_t fidelity_batches, const AfterConversion& after) {
  ConversionOutcome o;
  o.row = row;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (!row.distill) cfg.distill.epochs = 0;
    std::unique_ptr<ConversionTask> task = make(row.mixer);
    o.result = convert(*task, cfg);
    // A stop requested from outside (core/stop.h) ended the stage at a step, its checkpoint written:
    // no evaluation; the caller ends the run for resume.
    if (o.result.interrupted && stop_requested()) throw StopRequested(str("converting ", row.label));
    o.test = task->evaluate(Split::test);
    // The last layer's first head is pictured (clamped to the model's last layer).
    o.fidelity = measure_fidelity(*task, Split::test, fidelity_batches, causal, INT64_MAX, 0);
    if (after) after(*task, o);
  } catch (const StopRequested&) {
    throw;
  } catch (const Error& e) {
    o.status = str("error: ", e.what());
  }
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return o;
}

namespace {
// The fraction of the teacher's metric a student recovers: m / t, or t / m when lower is better.
double recovered(const ConversionReport& r, double m, double t) {
  if (r.higher_is_better) return t != 0 ? m / t : 0.0;
  return m != 0 ? t / m : 0.0;
}
}  // namespace

namespace {
std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}
}  // namespace

void check_teacher_learned(const ConversionReport& rep, double chance, double margin) {
  const double t = primary(rep.teacher), scale = rep.percent ? 100.0 : 1.0;
  const std::string unit = rep.percent ? "%" : "";
  const std::string metric = rep.teacher.empty() ? "metric" : rep.teacher.front().first;
  HH_CHECK(!rep.higher_is_better || (std::isfinite(t) && t >= chance + margin), rep.title,
           ": the softmax teacher did not learn: its test ", metric, " is ", fixed(scale * t, 1), unit,
           " where a guess scores ", fixed(scale * chance, 1), unit, " (it needs at least ",
           fixed(scale * (chance + margin), 1), unit,
           "); converting it would measure nothing. Train it longer (more epochs or data) or check the task");
}

std::string conversion_table(const ConversionReport& r) {
  const double scale = r.percent ? 100.0 : 1.0;
  const std::string metric = r.teacher.empty() ? "metric" : r.teacher.front().first;
  std::ostringstream os;
  char line[320];
  std::snprintf(line, sizeof line, "%-24s %10s %8s %10s %10s %9s %8s %6s %8s  %s\n", "model", metric.c_str(),
                "recover", "swapped", "distilled", "KL", "entropy", "mono", "time s", "status");
  os << line << std::string(110, '-') << "\n";
  std::snprintf(line, sizeof line, "%-24s %10.2f %7.1f%% %10s %10s %9s %8.3f %6.3f %8s  %s\n", "softmax (teacher)",
                scale * primary(r.teacher), 100.0, "-", "-", "0", r.teacher_entropy, r.teacher_monotonicity, "-", "ok");
  os << line;
  const double t = primary(r.teacher);
  for (const auto& o : r.rows) {
    if (!evaluated(o)) {
      std::snprintf(line, sizeof line, "%-24s %10s %8s %10s %10s %9s %8s %6s %8.1f  ", o.row.label.c_str(), "-", "-",
                    "-", "-", "-", "-", "-", o.seconds);
      os << line << o.status << "\n";
      continue;
    }
    const double m = primary(o.test);
    char dbuf[32];
    std::snprintf(dbuf, sizeof dbuf, "%.2f", scale * primary(o.result.distilled));
    std::snprintf(line, sizeof line, "%-24s %10.2f %7.1f%% %10.2f %10s %9.4f %8.3f %6.3f %8.1f  %s\n",
                  o.row.label.c_str(), scale * m, 100.0 * recovered(r, m, t), scale * primary(o.result.swapped),
                  o.result.distilled.empty() ? "-" : dbuf, o.fidelity.kl_mean, o.fidelity.entropy_student,
                  o.fidelity.monotonicity_student, o.seconds, o.status.c_str());
    os << line;
  }
  // The apps' extra measurements, one column each (e.g. the KL at other lengths, Table 5).
  std::vector<std::string> keys;
  for (const auto& o : r.rows)
    for (const auto& [k, v] : o.extra)
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  if (!keys.empty()) {
    os << "\n" << std::string(24, ' ');
    for (const auto& k : keys) os << " " << std::string(k.size() < 10 ? 10 - k.size() : 0, ' ') << k;
    os << "\n";
    for (const auto& o : r.rows) {
      if (o.extra.empty()) continue;
      std::snprintf(line, sizeof line, "%-24s", o.row.label.c_str());
      os << line;
      for (const auto& k : keys) {
        auto it = std::find_if(o.extra.begin(), o.extra.end(), [&](const auto& e) { return e.first == k; });
        std::snprintf(line, sizeof line, " %*s", static_cast<int>(std::max<size_t>(10, k.size())),
                      it == o.extra.end() ? "-" : str(it->second).substr(0, 8).c_str());
        os << line;
      }
      os << "\n";
    }
  }
  // The task's other test metrics (an embedding conversion's Spearman correlation and
  // nearest-neighbour agreement beside its cosine), teacher first.
  if (r.teacher.size() > 1) {
    os << "\n" << std::string(24, ' ');
    for (size_t k = 1; k < r.teacher.size(); ++k)
      os << " " << std::string(r.teacher[k].first.size() < 12 ? 12 - r.teacher[k].first.size() : 0, ' ')
         << r.teacher[k].first;
    os << "\n";
    const auto metrics_line = [&](const std::string& label, const Metrics& m) {
      std::snprintf(line, sizeof line, "%-24s", label.c_str());
      os << line;
      for (size_t k = 1; k < r.teacher.size(); ++k) {
        auto it = std::find_if(m.begin(), m.end(), [&](const auto& e) { return e.first == r.teacher[k].first; });
        char cell[32];
        if (it == m.end()) std::snprintf(cell, sizeof cell, "%s", "-");
        else std::snprintf(cell, sizeof cell, "%.4f", it->second);
        std::snprintf(line, sizeof line, " %*s", static_cast<int>(std::max<size_t>(12, r.teacher[k].first.size())), cell);
        os << line;
      }
      os << "\n";
    };
    metrics_line("softmax (teacher)", r.teacher);
    for (const auto& o : r.rows) metrics_line(o.row.label, o.test);
  }
  // The layers kept as softmax, how they were chosen and, KL-guided, every layer's score.
  bool first = true;
  for (const auto& o : r.rows) {
    const ConvertResult& c = o.result;
    if (c.softmax_layers.empty()) continue;
    os << (first ? "\n" : "") << o.row.label << ": softmax layers";
    first = false;
    for (size_t i = 0; i < c.softmax_layers.size(); ++i) os << (i ? "," : " ") << c.softmax_layers[i];
    if (!c.softmax_choice.empty()) os << " (" << c.softmax_choice << ")";
    if (!c.layer_score.empty()) {
      os << "; KL drop per layer (all-linear KL " << c.kl_all_linear << "):";
      for (size_t l = 0; l < c.layer_score.size(); ++l) os << (l ? "," : "") << " " << l << ": " << c.layer_score[l];
    }
    os << "\n";
  }
  return os.str();
}

namespace {

nlohmann::json metrics_json(const Metrics& m) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : m) j[k] = v;
  return j;
}

nlohmann::json stage_json(const StageLog& l) {
  return {{"train_loss", l.train_loss}, {"val", l.val},         {"steps", l.steps},
          {"tokens", l.tokens},         {"seconds", l.seconds}, {"tokens_per_second", l.tokens_per_second()},
          {"stopped", l.stopped}};
}

nlohmann::json outcome_json(const ConversionOutcome& o) {
  const Fidelity& f = o.fidelity;
  nlohmann::json j = {{"label", o.row.label},
          {"feature_map", nn::name(o.row.mixer)},
          {"distilled", o.row.distill},
          {"status", o.status},
          {"seconds", o.seconds},
          {"test", metrics_json(o.test)},
          {"extra", metrics_json(o.extra)},
          {"val_swapped", metrics_json(o.result.swapped)},
          {"val_distilled", metrics_json(o.result.distilled)},
          {"val_finetuned", metrics_json(o.result.finetuned)},
          {"distill", stage_json(o.result.distill)},
          {"finetune", stage_json(o.result.finetune)},
          {"trainable_distill", o.result.trainable_distill},
          {"trainable_finetune", o.result.trainable_finetune},
          {"lora_targets", o.result.lora_targets},
          {"fidelity",
           {{"layers", f.layers},
            {"heads", f.heads},
            {"kl", f.kl},
            {"kl_mean", f.kl_mean},
            {"entropy_student", f.entropy_student},
            {"entropy_teacher", f.entropy_teacher},
            {"monotonicity_student", f.monotonicity_student},
            {"monotonicity_teacher", f.monotonicity_teacher}}}};
  if (!o.result.layer_error.empty()) j["layer_error"] = o.result.layer_error;  // after stage 1, validation
  if (!o.result.softmax_layers.empty()) j["softmax_layers"] = o.result.softmax_layers;
  if (!o.result.softmax_choice.empty()) j["softmax_choice"] = o.result.softmax_choice;
  if (!o.result.layer_score.empty())
    j["kl_select"] = {{"all_linear", o.result.kl_all_linear},
                      {"layer_kl", o.result.layer_kl},
                      {"score", o.result.layer_score}};
  return j;
}

// What each layer scored and which stayed softmax: "<p>...</p>" and a table, or "" when stage 1
// measured nothing and no layer was kept.
std::string layer_choice_html(const ConvertResult& r) {
  if (r.layer_error.empty() && r.layer_score.empty()) return "";
  auto kept = [&](size_t l) {
    return std::find(r.softmax_layers.begin(), r.softmax_layers.end(), static_cast<int64_t>(l)) != r.softmax_layers.end();
  };
  std::ostringstream s;
  s << "<p>Per layer after stage 1 (validation): the attention-transfer error";
  if (!r.layer_score.empty())
    s << ", and KL-guided selection's next-token KL(teacher || student) with the layer alone restored to softmax "
      << "(all-linear: " << r.kl_all_linear << ") and its score, the KL drop";
  s << ". Kept as softmax";
  if (!r.softmax_choice.empty()) s << " (chosen by " << xml_escape(r.softmax_choice) << ")";
  s << ": ";
  if (r.softmax_layers.empty()) s << "none";
  for (size_t i = 0; i < r.softmax_layers.size(); ++i) s << (i ? ", " : "") << r.softmax_layers[i];
  s << ".</p>\n<table>\n<tr><th>layer</th><th>transfer error</th>";
  if (!r.layer_score.empty()) s << "<th>KL, layer softmax</th><th>KL drop (score)</th>";
  s << "<th>kept</th></tr>\n";
  const size_t layers = std::max(r.layer_error.size(), r.layer_score.size());
  for (size_t l = 0; l < layers; ++l) {
    s << "<tr><td>" << l << "</td><td>" << (l < r.layer_error.size() ? str(r.layer_error[l]) : "-") << "</td>";
    if (!r.layer_score.empty()) s << "<td>" << r.layer_kl[l] << "</td><td>" << r.layer_score[l] << "</td>";
    s << "<td>" << (kept(l) ? "softmax" : "") << "</td></tr>\n";
  }
  s << "</table>\n";
  return s.str();
}

// The score the layers were chosen by (KL drop, or transfer error), per layer, the kept ones
// marked: an SVG, or "" when the layers were not chosen by a score.
std::string layer_choice_svg(const ConversionOutcome& o) {
  const ConvertResult& r = o.result;
  const bool kl = !r.layer_score.empty();
  if (!kl && r.softmax_choice != "transfer") return "";
  const std::vector<double>& score = kl ? r.layer_score : r.layer_error;
  ScatterSeries chosen{"kept as softmax", {}, {}, {}, "#d62728", 6.0, 0.95};
  ScatterSeries other{"linear", {}, {}, {}, "#1f77b4", 4.0, 0.9};
  for (size_t l = 0; l < score.size(); ++l) {
    const bool kept = std::find(r.softmax_layers.begin(), r.softmax_layers.end(), static_cast<int64_t>(l)) !=
                      r.softmax_layers.end();
    ScatterSeries& to = kept ? chosen : other;
    to.x.push_back(static_cast<double>(l));
    to.y.push_back(score[l]);
  }
  PlotOptions p;
  p.title = str(o.row.label, ": softmax layers chosen by ", r.softmax_choice);
  p.x.label = "layer";
  p.y.label = kl ? "KL drop when restored to softmax" : "transfer error";
  p.width = 480;
  p.height = 340;
  std::vector<ScatterSeries> series;
  if (!other.x.empty()) series.push_back(other);
  if (!chosen.x.empty()) series.push_back(chosen);
  return scatter_plot(series, p);
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace

void write_conversion_report(const std::string& dir, const ConversionReport& r) {
  ensure_writable_dir(dir);
  const double scale = r.percent ? 100.0 : 1.0;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& o : r.rows) rows.push_back(outcome_json(o));
  nlohmann::json all = {{"title", r.title},
                        {"teacher", metrics_json(r.teacher)},
                        {"teacher_entropy", r.teacher_entropy},
                        {"teacher_monotonicity", r.teacher_monotonicity},
                        {"rows", rows}};
  write_file_atomic(dir + "/results.json", all.dump(2) + "\n");
  if (!r.config_json.empty()) write_file_atomic(dir + "/config.json", r.config_json + "\n");

  std::ostringstream csv;
  csv << "model,feature_map,distilled,status,metric,test,recover,val_swapped,val_distilled,kl_mean,entropy,"
         "monotonicity,distill_steps,distill_tokens_per_s,finetune_steps,seconds\n";
  const std::string metric = r.teacher.empty() ? "" : r.teacher.front().first;
  csv << "softmax (teacher),softmax,0,ok," << metric << "," << primary(r.teacher) << ",1,,,0," << r.teacher_entropy
      << "," << r.teacher_monotonicity << ",,,,\n";
  for (const auto& o : r.rows) {
    csv << csv_field(o.row.label) << "," << nn::name(o.row.mixer) << "," << o.row.distill << "," << csv_field(o.status)
        << "," << metric << ",";
    if (evaluated(o)) {
      const double m = primary(o.test), t = primary(r.teacher);
      csv << m << "," << recovered(r, m, t) << "," << primary(o.result.swapped) << ","
          << (o.result.distilled.empty() ? "" : str(primary(o.result.distilled))) << "," << o.fidelity.kl_mean << ","
          << o.fidelity.entropy_student << "," << o.fidelity.monotonicity_student << "," << o.result.distill.steps
          << "," << o.result.distill.tokens_per_second() << "," << o.result.finetune.steps;
    } else {
      csv << ",,,,,,,,,,";
    }
    csv << "," << o.seconds << "\n";
  }
  write_file_atomic(dir + "/results.csv", csv.str());

  // Figures.
  std::ostringstream figs;
  bool teacher_pic = false;
  std::vector<LineSeries> distill_curves, finetune_curves;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const ConversionOutcome& o = r.rows[i];
    if (!evaluated(o)) continue;
    const Fidelity& f = o.fidelity;
    const std::string slug = file_slug(o.row.label);
    HeatmapOptions kh;
    kh.title = str(o.row.label, ": KL(teacher || student) per layer and head, mean ", f.kl_mean);
    kh.x_label = "head";
    kh.y_label = "layer";
    kh.vmin = 0;
    kh.width = 420;
    kh.height = 360;
    save_svg(dir + "/kl_" + slug + ".svg", heatmap(f.kl, f.layers, f.heads, kh));
    HeatmapOptions ah;
    ah.vmin = 0;
    if (!teacher_pic && f.pic_len > 0) {
      ah.title = str("softmax teacher, layer ", f.pic_layer, " head ", f.pic_head);
      save_svg(dir + "/attn_teacher.svg", heatmap(f.pic_teacher, f.pic_len, f.pic_len, ah));
      teacher_pic = true;
    }
    if (f.pic_len > 0) {
      ah.title = str(o.row.label, ", layer ", f.pic_layer, " head ", f.pic_head);
      save_svg(dir + "/attn_" + slug + ".svg", heatmap(f.pic_student, f.pic_len, f.pic_len, ah));
    }
    figs << "<h3>" << xml_escape(o.row.label) << "</h3>\n" << layer_choice_html(o.result);
    const std::string choice = layer_choice_svg(o);
    if (!choice.empty()) {
      save_svg(dir + "/layers_" + slug + ".svg", choice);
      figs << "<img src=\"layers_" << slug << ".svg\">";
    }
    figs << "<img src=\"attn_" << slug << ".svg\"><img src=\"kl_" << slug << ".svg\">\n";
    auto epochs = [](size_t n) {
      std::vector<double> x(n);
      for (size_t k = 0; k < n; ++k) x[k] = static_cast<double>(k + 1);
      return x;
    };
    if (!o.result.distill.val.empty())
      distill_curves.push_back({o.row.label, epochs(o.result.distill.val.size()), o.result.distill.val, "", 1.8, true});
    if (!o.result.finetune.val.empty()) {
      std::vector<double> v = o.result.finetune.val;
      for (double& x : v) x *= scale;
      finetune_curves.push_back({o.row.label, epochs(v.size()), v, "", 1.8, true});
    }
  }
  PlotOptions dp;
  dp.title = "Stage 1: validation distillation loss";
  dp.x.label = "epoch";
  dp.x.integer = true;
  dp.y.label = "soft cross-entropy";
  if (!distill_curves.empty()) save_svg(dir + "/distill_curves.svg", line_plot(distill_curves, dp));
  PlotOptions fp;
  fp.title = "Stage 2: validation " + metric;
  fp.x.label = "epoch";
  fp.x.integer = true;
  fp.y.label = metric;
  if (!finetune_curves.empty()) save_svg(dir + "/finetune_curves.svg", line_plot(finetune_curves, fp));

  std::ostringstream html;
  html << "<h1>" << xml_escape(r.title) << "</h1>\n<pre>"
       << xml_escape(conversion_table(r)) << "</pre>\n"
       << "<p>Data: <a href=\"results.json\">results.json</a>, <a href=\"results.csv\">results.csv</a>, "
       << "<a href=\"config.json\">config.json</a></p>\n<h2>Training</h2>\n";
  if (!distill_curves.empty()) html << "<img src=\"distill_curves.svg\">";
  if (!finetune_curves.empty()) html << "<img src=\"finetune_curves.svg\">";
  html << "\n<h2>Attention weights and fidelity (Figs. 7, 9; Table 4)</h2>\n";
  if (teacher_pic) html << "<h3>softmax teacher</h3>\n<img src=\"attn_teacher.svg\">\n";
  html << figs.str();
  write_file_atomic(dir + "/report.html", html_page(r.title, html.str()));
}

}  // namespace hh::train
