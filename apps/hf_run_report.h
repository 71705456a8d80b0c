// hf_run's report.html: the run's settings, the generated text and speed (decoders), a bar chart
// of the class logits (classifiers) or the embedding settings and similarity (embed), from the
// same JSON that results.json holds.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/report/html.h"

namespace hh::apps {

// Horizontal bars, one per class, scaled to the largest |logit|.
inline std::string logits_svg(const std::vector<double>& v, const std::vector<std::string>& labels) {
  const int row = 22, width = 640, label_w = 200, bar_w = width - label_w - 90;
  double mx = 1e-12;
  for (double x : v) mx = std::max(mx, std::fabs(x));
  std::string s = "<svg xmlns='http://www.w3.org/2000/svg' width='" + std::to_string(width) + "' height='" +
                  std::to_string(row * v.size() + 10) + "' font-family='sans-serif' font-size='12'>";
  const int zero = label_w + bar_w / 2;
  for (size_t i = 0; i < v.size(); ++i) {
    const int y = static_cast<int>(i) * row + 5;
    const int len = static_cast<int>(std::lround(std::fabs(v[i]) / mx * (bar_w / 2)));
    const int x = v[i] >= 0 ? zero : zero - len;
    char num[32];
    std::snprintf(num, sizeof num, "%+.4f", v[i]);
    s += "<text x='0' y='" + std::to_string(y + 14) + "'>" + html_escape(i < labels.size() ? labels[i] : "") + "</text>";
    s += "<rect x='" + std::to_string(x) + "' y='" + std::to_string(y + 3) + "' width='" + std::to_string(len) +
         "' height='" + std::to_string(row - 6) + "' fill='" + (v[i] >= 0 ? "#3b7dd8" : "#d8583b") + "'/>";
    s += "<text x='" + std::to_string(label_w + bar_w + 8) + "' y='" + std::to_string(y + 14) + "'>" + num + "</text>";
  }
  return s + "<line x1='" + std::to_string(zero) + "' y1='0' x2='" + std::to_string(zero) + "' y2='" +
         std::to_string(row * v.size() + 10) + "' stroke='#444'/></svg>";
}

// A figure as the report shows it: numbers to 4 significant digits (0.05624571 s reads 0.05625),
// other values as JSON.
inline std::string shown_number(const nlohmann::json& v) {
  if (!v.is_number_float()) return v.dump();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v.get<double>());
  return buf;
}

inline std::string hf_run_report_html(const nlohmann::json& r) {
  std::string h = "<h1>hf_run</h1><table>";
  for (const char* k : {"model", "architecture", "task", "mixer", "device", "pooling", "config_source"})
    if (r.contains(k)) h += std::string("<tr><td>") + k + "</td><td>" + html_escape(r[k].get<std::string>()) + "</td></tr>";
  for (const char* k : {"load_seconds", "prefill_seconds", "generate_seconds", "tokens_per_second", "forward_seconds",
                        "normalize", "count", "dim", "embed_seconds", "cosine_similarity"})
    if (r.contains(k)) h += std::string("<tr><td>") + k + "</td><td>" + shown_number(r[k]) + "</td></tr>";
  h += "</table>";
  // Long texts and id lists wrap inside the page instead of running off it.
  const std::string pre = "<pre style='white-space:pre-wrap;overflow-wrap:anywhere'>";
  if (r.contains("text")) h += "<h2>Text</h2>" + pre + html_escape(r["text"].get<std::string>()) + "</pre>";
  if (r.contains("generated_ids"))
    h += "<h2>Token ids</h2>" + pre + "prompt:    " + r["prompt_ids"].dump() + "\ngenerated: " +
         r["generated_ids"].dump() + "</pre>";
  if (r.contains("logits")) {
    h += "<h2>Class logits (predicted: " + html_escape(r["predicted"].get<std::string>()) + ")</h2>";
    h += logits_svg(r["logits"].get<std::vector<double>>(), r["labels"].get<std::vector<std::string>>());
  }
  HtmlPageOptions page;
  page.max_width = 900;
  return html_page("hf_run: " + r.value("model", ""), h + "\n", page);
}

}  // namespace hh::apps
