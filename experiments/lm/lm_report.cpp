#include "experiments/lm/lm_report.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/atomic_file.h"
#include "train/metrics_log.h"
#include "train/report/html.h"
#include "train/report/svg.h"

namespace hh::train {

using nlohmann::json;

std::string lm_run_label(const LmRunSummary& s) { return nn::gated_label(nn::name(s.attention), s.gate); }

LmRunSummary summarize_lm_run(const nn::Mixer& attention, const LmTrainResult& r) {
  LmRunSummary s;
  s.attention = attention;
  s.status = r.status;
  s.params = r.params;
  s.steps = r.steps;
  s.seconds = r.seconds;
  s.tokens_per_second = r.tokens_per_second;
  s.train_loss = r.train_loss;
  s.evals = r.evals;
  if (r.status == "ok" && !r.evals.empty()) s.val_loss = r.evals.back().loss, s.val_ppl = r.evals.back().ppl;
  return s;
}

namespace {

const LmRunSummary* softmax_row(const std::vector<LmRunSummary>& runs) {
  for (const auto& r : runs)
    if (r.attention.is_softmax() && std::isfinite(r.val_ppl)) return &r;
  return nullptr;
}

// Training loss smoothed over a trailing window (the raw per-step loss is noisy).
std::vector<double> smooth(const std::vector<double>& v, size_t window) {
  std::vector<double> out(v.size());
  double sum = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    sum += v[i];
    if (i >= window) sum -= v[i - window];
    out[i] = sum / static_cast<double>(std::min(i + 1, window));
  }
  return out;
}

}  // namespace

std::string lm_table(const std::vector<LmRunSummary>& runs) {
  const LmRunSummary* base = softmax_row(runs);
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%-14s %10s %9s %10s %10s %8s %9s  %s\n", "attention", "val ppl", "val loss",
                "gap (ppl)", "params", "steps", "tokens/s", "status");
  os << line << std::string(86, '-') << "\n";
  for (const auto& r : runs) {
    const std::string name = lm_run_label(r);
    std::string gap = "-";
    if (base && std::isfinite(r.val_ppl) && &r != base) {
      char g[32];
      std::snprintf(g, sizeof g, "%+.2f", r.val_ppl - base->val_ppl);
      gap = g;
    }
    // A finite loss whose exp overflows (a run that learned nothing, lr far too high) still shows
    // its loss; only a run without a finite loss shows dashes.
    char ppl[32] = "-", loss[32] = "-", tps[32] = "-";
    if (std::isfinite(r.val_ppl)) std::snprintf(ppl, sizeof ppl, r.val_ppl < 1e6 ? "%.2f" : "%.3e", r.val_ppl);
    else if (std::isfinite(r.val_loss)) std::snprintf(ppl, sizeof ppl, "overflow");
    if (std::isfinite(r.val_loss)) {
      std::snprintf(loss, sizeof loss, "%.4f", r.val_loss);
      std::snprintf(tps, sizeof tps, "%.0f", r.tokens_per_second);
    }
    std::snprintf(line, sizeof line, "%-14s %10s %9s %10s %10lld %8lld %9s  ", name.c_str(), ppl, loss, gap.c_str(),
                  static_cast<long long>(r.params), static_cast<long long>(r.steps), tps);
    os << line << r.status << "\n";
  }
  return os.str();
}

void write_lm_report(const std::string& dir, const std::vector<LmRunSummary>& runs, const std::string& config_json) {
  namespace fs = std::filesystem;
  ensure_writable_dir(dir);
  const auto at = [&](const char* name) { return (fs::path(dir) / name).string(); };
  json rows = json::array();
  CsvTable csv({"attention", "status", "val_ppl", "val_loss", "params", "steps", "seconds", "tokens_per_second"});
  std::vector<LineSeries> loss_lines, ppl_lines;
  for (const auto& r : runs) {
    const std::string name = lm_run_label(r);
    json evals = json::array();
    LineSeries pl;
    pl.name = name;
    pl.markers = true;
    for (const auto& e : r.evals) {
      evals.push_back({{"step", e.step}, {"loss", e.loss}, {"ppl", e.ppl}, {"tokens", e.tokens}});
      pl.x.push_back(static_cast<double>(e.step));
      pl.y.push_back(e.ppl);
    }
    const auto num = [](double x) { return std::isfinite(x) ? json(x) : json(nullptr); };
    rows.push_back({{"attention", name}, {"status", r.status}, {"val_ppl", num(r.val_ppl)},
                    {"val_loss", num(r.val_loss)}, {"params", r.params}, {"steps", r.steps}, {"seconds", r.seconds},
                    {"tokens_per_second", r.tokens_per_second}, {"evals", evals}, {"samples", r.samples}});
    csv.add_values({name, r.status, r.val_ppl, r.val_loss, r.params, r.steps, r.seconds, r.tokens_per_second});
    LineSeries ll;
    ll.name = name;
    ll.y = smooth(r.train_loss, 20);
    for (size_t i = 0; i < ll.y.size(); ++i) ll.x.push_back(static_cast<double>(i + 1));
    loss_lines.push_back(std::move(ll));
    ppl_lines.push_back(std::move(pl));
  }
  json config = json::parse(config_json, nullptr, false);
  write_file_atomic(at("results.json"), json{{"config", config}, {"runs", rows}}.dump(2) + "\n");
  csv.save(at("results.csv"));
  PlotOptions lo;
  lo.title = "training loss (mean of the last 20 steps)";
  lo.x.label = "step";
  lo.x.integer = true;
  lo.y.label = "cross-entropy (nats/token)";
  save_svg(at("loss.svg"), line_plot(loss_lines, lo));
  PlotOptions po;
  po.title = "validation perplexity";
  po.x.label = "step";
  po.x.integer = true;
  po.y.label = "perplexity";
  po.y.log = true;
  save_svg(at("ppl.svg"), line_plot(ppl_lines, po));
  std::ostringstream html;
  html << "<h1>Language modelling from scratch (Hedgehog paper Table 7)</h1>\n<pre>" << xml_escape(lm_table(runs))
       << "</pre>\n<p>Paper, WikiText-103, 125M GPT-2 style: Transformer 18.6, Performer 26.8, 1+ELU 25.6, "
       << "Hedgehog 20.8 perplexity.</p>\n<p>Data: <a href=\"results.json\">results.json</a>, "
       << "<a href=\"results.csv\">results.csv</a>; per run: metrics.jsonl, model/ (an HF GPT-2 folder)</p>\n"
       << "<img src=\"loss.svg\"><img src=\"ppl.svg\">\n<h2>Samples</h2>\n";
  for (const auto& r : runs) {
    html << "<h3>" << xml_escape(lm_run_label(r)) << "</h3>\n";
    for (const auto& s : r.samples) html << "<pre>" << xml_escape(s) << "</pre>\n";
  }
  html << "<h2>Settings</h2>\n<pre>" << xml_escape(config.is_discarded() ? config_json : config.dump(2))
       << "</pre>\n";
  write_file_atomic(at("report.html"), html_page("train_lm", html.str()));
}

}  // namespace hh::train
