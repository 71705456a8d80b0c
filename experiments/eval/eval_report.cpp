// eval_lm's output files: see eval_report.h.
#include "experiments/eval/eval_report.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "train/report/html.h"
#include "train/report/svg.h"

namespace hh::train {

namespace {

using json = nlohmann::json;

json info_json(const EvalRunInfo& info) {
  json j = {{"task", info.task},
            {"model", info.model},
            {"architecture", info.architecture},
            {"mixer", info.mixer},
            {"device", info.device},
            {"precision", info.precision},
            {"load_seconds", info.load_seconds},
            {"eval_seconds", info.eval_seconds}};
  if (!info.data.empty()) j["data"] = info.data;
  return j;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string depth_label(double d) { return fmt("%g", d); }

std::string info_table(const EvalRunInfo& info) {
  std::string h = "<table>";
  const auto row = [&](const std::string& k, const std::string& v) {
    if (!v.empty()) h += "<tr><td>" + k + "</td><td>" + html_escape(v) + "</td></tr>";
  };
  row("task", info.task);
  row("model", info.model);
  row("architecture", info.architecture);
  row("attention", info.mixer);
  row("device", info.device);
  row("precision", info.precision);
  row("data", info.data);
  row("load", fmt("%.2f s", info.load_seconds));
  row("evaluation", fmt("%.2f s", info.eval_seconds));
  return h + "</table>";
}

// The cell of (length i, depth k).
const RetrievalCell& cell(const RetrievalOptions& o, const RetrievalResult& r, size_t i, size_t k) {
  return r.cells[i * o.depths.size() + k];
}

}  // namespace

std::string choice_results_json(const EvalRunInfo& info, const ChoiceOptions& o, const ChoiceResult& r) {
  json j = info_json(info);
  j["target_delimiter"] = o.target_delimiter;
  j["count"] = r.count;
  j["acc"] = r.acc;
  j["acc_norm"] = r.acc_norm;
  j["acc_bytes"] = r.acc_bytes;
  j["correct"] = r.correct;
  j["correct_norm"] = r.correct_norm;
  j["correct_bytes"] = r.correct_bytes;
  j["scores_file"] = "choice_scores.jsonl";
  return j.dump(2) + "\n";
}

std::string choice_scores_jsonl(const std::vector<ChoiceExample>& examples, const ChoiceResult& r) {
  std::string out;
  for (size_t i = 0; i < r.examples.size(); ++i) {
    const ChoiceExample& e = examples[i];
    const ChoiceScore& s = r.examples[i];
    json j = {{"id", e.id},
              {"line", e.line},
              {"gold", e.gold},
              {"pred", s.prediction.pred},
              {"pred_norm", s.prediction.pred_norm},
              {"pred_bytes", s.prediction.pred_bytes},
              {"loglikelihoods", s.loglikelihoods},
              {"is_greedy", s.is_greedy},
              {"context_tokens", s.context_tokens}};
    json lens = json::array();
    for (const auto& c : s.continuation_ids) lens.push_back(c.size());
    j["continuation_tokens"] = lens;
    out += j.dump() + "\n";
  }
  return out;
}

std::string choice_report_html(const EvalRunInfo& info, const ChoiceResult& r) {
  std::string h = "<h1>eval_lm: multiple choice</h1>" + info_table(info);
  h += "<h2>Accuracy</h2><table><tr><th></th><th>accuracy</th><th>correct</th></tr>";
  const auto row = [&](const char* name, double acc, int64_t correct) {
    h += std::string("<tr><td>") + name + "</td><td>" + fmt("%.4f", acc) + "</td><td>" + std::to_string(correct) +
         " / " + std::to_string(r.count) + "</td></tr>";
  };
  row("acc", r.acc, r.correct);
  row("acc_norm (per character)", r.acc_norm, r.correct_norm);
  row("acc_bytes (per UTF-8 byte)", r.acc_bytes, r.correct_bytes);
  h += "</table><p>Per-example scores: <code>choice_scores.jsonl</code>.</p>";
  HtmlPageOptions page;
  page.max_width = 900;
  return html_page("eval_lm: " + info.model, h + "\n", page);
}

std::string perplexity_results_json(const EvalRunInfo& info, const PerplexityReport& p) {
  json j = info_json(info);
  j["context"] = p.context;
  j["stride"] = p.stride;
  j["text_tokens"] = p.text_tokens;
  j["scored_tokens"] = p.scored_tokens;
  j["loss"] = p.loss;
  j["ppl"] = p.ppl;
  return j.dump(2) + "\n";
}

std::string perplexity_report_html(const EvalRunInfo& info, const PerplexityReport& p) {
  std::string h =
      "<h1>eval_lm: perplexity</h1>" + info_table(info) + "<h2>Perplexity " + fmt("%.4f", p.ppl) + "</h2><table>";
  h += "<tr><td>loss (nats per token)</td><td>" + fmt("%.6f", p.loss) + "</td></tr>";
  h += "<tr><td>tokens scored / in the text</td><td>" + std::to_string(p.scored_tokens) + " / " +
       std::to_string(p.text_tokens) + "</td></tr>";
  h += "<tr><td>context</td><td>" + std::to_string(p.context) + "</td></tr><tr><td>stride</td><td>" +
       (p.stride > 0 ? std::to_string(p.stride) : std::string("0 (non-overlapping blocks)")) + "</td></tr></table>";
  HtmlPageOptions page;
  page.max_width = 900;
  return html_page("eval_lm: " + info.model, h + "\n", page);
}

std::string retrieval_results_json(const EvalRunInfo& info, const RetrievalOptions& o, const RetrievalResult& r) {
  json j = info_json(info);
  j["lengths"] = o.lengths;
  j["depths"] = o.depths;
  j["trials_per_cell"] = o.trials;
  j["seed"] = o.seed;
  j["accuracy"] = r.accuracy;  // the mean score (RULER's string_match_all for its tasks)
  j["correct"] = r.correct;
  j["count"] = r.count;
  json cells = json::array();
  for (const RetrievalCell& c : r.cells)
    cells.push_back({{"length", c.length},
                     {"depth", c.depth},
                     {"trials", c.trials},
                     {"correct", c.correct},
                     {"accuracy", c.accuracy},
                     {"mean_prompt_tokens", c.mean_prompt_tokens}});
  j["cells"] = cells;
  json trials = json::array();
  for (const RetrievalTrial& t : r.trials)
    trials.push_back({{"length", t.length},
                      {"depth", t.depth},
                      {"trial", t.trial},
                      {"prompt_tokens", t.prompt_tokens},
                      {"answer", t.answer},
                      {"answers", t.answers},
                      {"completion", t.completion},
                      {"score", t.score},
                      {"correct", t.correct}});
  j["trials"] = trials;
  j["table_file"] = "table.md";
  j["heatmap_file"] = "heatmap.svg";
  return j.dump(2) + "\n";
}

std::string retrieval_table(const RetrievalOptions& o, const RetrievalResult& r) {
  std::string t = "| length \\ depth |";
  std::string rule = "|---|";
  for (double d : o.depths) {
    t += " " + depth_label(d) + " |";
    rule += "---|";
  }
  t += "\n" + rule + "\n";
  for (size_t i = 0; i < o.lengths.size(); ++i) {
    t += "| " + std::to_string(o.lengths[i]) + " |";
    for (size_t k = 0; k < o.depths.size(); ++k) {
      const RetrievalCell& c = cell(o, r, i, k);
      t += " " + fmt("%.1f%%", 100.0 * c.accuracy) + " (" + std::to_string(c.correct) + "/" + std::to_string(c.trials) +
           ") |";
    }
    t += "\n";
  }
  return t;
}

std::string retrieval_heatmap_svg(const RetrievalOptions& o, const RetrievalResult& r) {
  HeatmapOptions h;
  h.title = std::string(retrieval_task_name(r.task)) + " accuracy";
  h.x_label = "depth of the key";
  h.y_label = "context length (tokens)";
  for (int64_t L : o.lengths) h.row_labels.push_back(std::to_string(L));
  for (double d : o.depths) h.col_labels.push_back(depth_label(d));
  h.vmin = 0.0;
  h.vmax = 1.0;
  std::vector<double> v;
  for (const RetrievalCell& c : r.cells) v.push_back(c.accuracy);
  return heatmap(v, static_cast<int64_t>(o.lengths.size()), static_cast<int64_t>(o.depths.size()), h);
}

std::string retrieval_report_html(const EvalRunInfo& info, const RetrievalOptions& o, const RetrievalResult& r) {
  std::string h = "<h1>eval_lm: " + std::string(retrieval_task_name(r.task)) + "</h1>" + info_table(info);
  h += "<h2>Accuracy " + fmt("%.1f%%", 100.0 * r.accuracy) + " (" + std::to_string(r.correct) + " / " +
       std::to_string(r.count) + ")</h2>";
  h += "<table><tr><th>length \\ depth</th>";
  for (double d : o.depths) h += "<th>" + depth_label(d) + "</th>";
  h += "</tr>";
  for (size_t i = 0; i < o.lengths.size(); ++i) {
    h += "<tr><td>" + std::to_string(o.lengths[i]) + "</td>";
    for (size_t k = 0; k < o.depths.size(); ++k) {
      const RetrievalCell& c = cell(o, r, i, k);
      h += "<td>" + fmt("%.1f%%", 100.0 * c.accuracy) + " (" + std::to_string(c.correct) + "/" +
           std::to_string(c.trials) + ")</td>";
    }
    h += "</tr>";
  }
  h += "</table>" + retrieval_heatmap_svg(o, r);
  HtmlPageOptions page;
  page.max_width = 900;
  return html_page("eval_lm: " + info.model, h + "\n", page);
}

}  // namespace hh::train
