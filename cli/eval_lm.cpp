// eval_lm: the evaluations a user runs on an HF or converted causal LM folder (GPT-2, Llama and
// their linear / hybrid students), through experiments/eval:
//   --task choice   multiple choice by log-likelihood, as lm-evaluation-harness scores it (acc,
//                   acc_norm, acc_bytes) on a JSONL file of {context, choices, gold[, id]};
//   --task passkey  passkey retrieval (Mohtashami & Jaggi 2023), generated from --seed;
//   --task needle   needle in a haystack, generated from --seed;
//   --task niah_multikey, niah_multivalue, vt  RULER's multi-key and multi-value needles and
//                   variable tracking, generated from --seed, scored as RULER scores them;
//   --task perplexity  of a text file on strided windows (experiments/lm's evaluate_lm);
// the retrieval tasks by context length x depth, decoded greedily through the model's decode path.
// Results go to stdout and, with --out, to results.json, choice_scores.jsonl or table.md and
// heatmap.svg, and index.html (train/run_dir: a failed run keeps the previous result).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/app.h"
#include "cli/drivers.h"
#include "cli/flags.h"
#include "core/atomic_file.h"
#include "core/communicator.h"
#include "core/progress.h"
#include "core/regular_file.h"
#include "data/tokenizer.h"
#include "experiments/eval/choice_eval.h"
#include "experiments/eval/eval_report.h"
#include "experiments/eval/retrieval_eval.h"
#include "experiments/lm/lm_train.h"
#include "nn/models/hf_model.h"
#include "train/run_dir.h"

using namespace hh;
using json = nlohmann::json;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<int64_t> parse_lengths(const std::string& s) {
  std::vector<int64_t> v;
  for (const std::string& item : cli::Flags::split_list(s)) {
    size_t pos = 0;
    long long x = 0;
    try {
      x = std::stoll(item, &pos);
    } catch (...) {
      pos = 0;
    }
    HH_CHECK(pos == item.size() && x >= 1, "--lengths: '", item, "' is not a positive number of tokens");
    v.push_back(x);
  }
  return v;
}

std::vector<double> parse_depths(const std::string& s) {
  std::vector<double> v;
  for (const std::string& item : cli::Flags::split_list(s)) {
    size_t pos = 0;
    double x = 0;
    try {
      x = std::stod(item, &pos);
    } catch (...) {
      pos = 0;
    }
    HH_CHECK(pos == item.size(), "--depths: '", item, "' is not a number");
    v.push_back(x);
  }
  return v;
}

enum class Task { choice, retrieval, perplexity };

std::string task_names() { return "choice, " + train::retrieval_task_names() + " or perplexity"; }

Task parse_task(const std::string& s) {
  HH_CHECK(!s.empty(), "--task is required: ", task_names());
  if (s == "choice") return Task::choice;
  if (s == "perplexity") return Task::perplexity;
  try {
    train::parse_retrieval_task(s);
    return Task::retrieval;
  } catch (const Error&) {
    fail(str("--task: unknown '", s, "' (", task_names(), ")"));
  }
}

// The flags that only some tasks take: given to another task, an error naming the flag.
void check_task_flags(const cli::Flags& f, Task task) {
  struct Only {
    const char* flag;
    std::vector<Task> tasks;
    const char* which;
  };
  const std::vector<Only> only = {
      {"data", {Task::choice, Task::perplexity}, "choice or perplexity"},
      {"target-delimiter", {Task::choice}, "choice"},
      {"lengths", {Task::retrieval}, "passkey, needle, niah_multikey, niah_multivalue or vt"},
      {"depths", {Task::retrieval}, "passkey, needle, niah_multikey, niah_multivalue or vt"},
      {"trials", {Task::retrieval}, "passkey, needle, niah_multikey, niah_multivalue or vt"},
      {"context", {Task::perplexity}, "perplexity"},
      {"stride", {Task::perplexity}, "perplexity"},
      {"batch", {Task::perplexity}, "perplexity"},
  };
  for (const Only& o : only)
    HH_CHECK(!f.given(o.flag) || std::find(o.tasks.begin(), o.tasks.end(), task) != o.tasks.end(), "--", o.flag,
             " is for --task ", o.which);
}

Progress make_progress(const char* label, int64_t total) {
  ProgressOptions po;
  po.label = label;
  po.total = total;
  return Progress(po);
}

// Perplexity of --data's text (its ids with the tokenizer's specials) on strided windows.
void run_perplexity(nn::CausalLM& lm, const data::Tokenizer& tok, const std::string& text, const cli::Flags& f,
                    train::EvalRunInfo& info, train::PerplexityReport& pr, const train::RunDir* out) {
  const int64_t P = lm.max_positions();
  if (pr.context == 0) {
    HH_CHECK(P > 0, "--context: the model has no position limit, give the window size");
    pr.context = P;
  }
  HH_CHECK(P < 0 || pr.context <= P, "--context ", pr.context, " is more than the model's ", P, " positions");
  HH_CHECK(pr.stride <= pr.context, "--stride ", pr.stride, " is more than --context ", pr.context);
  const std::vector<int32_t> ids = tok.encode(text, true);
  pr.text_tokens = static_cast<int64_t>(ids.size());
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<Communicator> one = make_communicator("none");
  const train::LmEval e = train::evaluate_lm(lm, ids, pr.context, pr.stride, 0, f.integer("batch", 1), *one);
  info.eval_seconds = seconds_since(t0);
  pr.scored_tokens = e.tokens;
  pr.loss = e.loss;
  pr.ppl = e.ppl;
  std::printf(
      "perplexity %.4f (loss %.6f nats per token) over %lld of %lld tokens, context %lld, stride %lld, in %.2f s\n",
      pr.ppl, pr.loss, static_cast<long long>(pr.scored_tokens), static_cast<long long>(pr.text_tokens),
      static_cast<long long>(pr.context), static_cast<long long>(pr.stride), info.eval_seconds);
  if (out) {
    out->write(out->at("results.json"), train::perplexity_results_json(info, pr));
    out->write(out->at("index.html"), train::perplexity_report_html(info, pr));
  }
}

int run(int argc, char** argv) {
  cli::Flags f("eval_lm",
                "eval_lm: evaluates a causal LM folder (GPT-2, Llama; HF or converted): multiple choice by\n"
                "log-likelihood as lm-evaluation-harness scores it, passkey retrieval, needle in a haystack,\n"
                "RULER's multi-key and multi-value needles and variable tracking, perplexity of a text.");
  f.add("model", "", "the model folder (config.json + weights; a converted folder runs its own attention)");
  f.add("tokenizer", "", "folder with the tokenizer files (default: the model folder)");
  f.add("task", "", "choice, passkey, needle, niah_multikey, niah_multivalue, vt or perplexity");
  f.add("data", "",
        "choice: a JSONL file, one {\"context\", \"choices\", \"gold\", \"id\"?} per line;\n"
        "                       perplexity: a UTF-8 text file");
  f.add("target-delimiter", "",
        "choice: text put before every choice (lm-eval's tasks use \" \" with choices\n"
        "                       stored without it); \"\" scores the choices as given");
  f.add("lengths", "512,1024,2048", "retrieval: context lengths in tokens (prompt + the answer's decode budget)");
  f.add("depths", "0,0.25,0.5,0.75,1", "retrieval: where the (first) key goes, fractions of the filler in [0, 1]");
  f.add("trials", "5", "retrieval: trials per (length, depth), each its own keys");
  f.add("context", "0", "perplexity: tokens the model reads per window (0 = the model's positions)");
  f.add("stride", "0",
        "perplexity: windows every N tokens, each token scored once (HF's strided perplexity);\n"
        "                       0 = non-overlapping blocks");
  f.add("batch", "8", "perplexity: windows per forward");
  f.add("mixer", "softmax",
        "attention of every layer when the folder does not set one: softmax, a feature map,\n"
        "                       or hybrid-<map>");
  f.add("form", "chunked", "linear mixers: chunked, quadratic or recurrent");
  f.add("window", "64", "hybrid-<map> mixers: the sliding window size");
  cli::CommonFlagSpec common;
  common.seed_help = "retrieval: the seed the keys and haystacks are drawn from";
  common.out = true;
  common.out_help = "folder for results.json, the table, heat map and index.html (optional)";
  cli::add_common_flags(f, common);
  if (!f.parse(argc, argv)) return 0;

  // Everything checkable is checked before the model is read.
  const std::string task_name = f.str("task");
  const Task task = parse_task(task_name);
  check_task_flags(f, task);
  const cli::CommonFlags c = cli::read_common_flags(f, common);
  if (c.threads > 0) set_num_threads(static_cast<int>(c.threads));
  const std::string model_dir = f.str("model");
  HH_CHECK(!model_dir.empty(), "--model is required: no model folder given (see --help)");
  const std::string tok_dir = f.given("tokenizer") ? f.str("tokenizer") : model_dir;
  nn::HFModelOptions opt;
  opt.mixer = nn::parse_mixer(f.str("mixer"), "--mixer");
  opt.form = nn::parse_linear_form(f.str("form"));
  opt.window = f.integer("window", 1, 1 << 30);
  opt.device = c.device;

  std::vector<train::ChoiceExample> examples;
  train::ChoiceOptions co;
  train::RetrievalOptions ro;
  train::PerplexityReport pr;
  std::string text;  // perplexity: --data's text
  if (task == Task::choice) {
    HH_CHECK(f.given("data"), "--task choice needs --data FILE.jsonl");
    co.target_delimiter = f.str("target-delimiter");
    examples = train::read_choice_examples(f.str("data"));
  } else if (task == Task::perplexity) {
    HH_CHECK(f.given("data"), "--task perplexity needs --data FILE (a text file)");
    check_regular_file(f.str("data"), "--data");
    text = read_file(f.str("data"));
    pr.context = f.integer("context", 0, 1 << 30);
    pr.stride = f.integer("stride", 0, 1 << 30);
    HH_CHECK(pr.context == 0 || pr.stride <= pr.context, "--stride ", pr.stride, " is more than --context ",
             pr.context);
    f.integer("batch", 1, 1 << 16);
  } else {
    ro.task = train::parse_retrieval_task(task_name);
    ro.lengths = parse_lengths(f.str("lengths"));
    ro.depths = parse_depths(f.str("depths"));
    ro.trials = f.integer("trials", 1, 1 << 20);
    ro.seed = c.seed;
    train::check_retrieval_options(ro);
  }
  std::unique_ptr<train::RunDir> out;
  if (!c.out.empty()) out = std::make_unique<train::RunDir>(c.out, train::RunDir::Options{});
  std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer(tok_dir);

  auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<nn::CausalLM> lm = nn::load_causal_lm(model_dir, opt);
  train::EvalRunInfo info;
  info.task = task_name;
  info.model = model_dir;
  info.architecture = lm->architecture();
  info.mixer = nn::name(lm->options().mixer);
  info.device = c.device_name;
  info.precision = precision_name(c.precision);
  info.data = f.str("data");
  info.load_seconds = seconds_since(t0);
  std::printf("loaded %s (%s, %lld parameters, attention: %s) in %.2f s\n", model_dir.c_str(),
              info.architecture.c_str(), static_cast<long long>(lm->num_parameters()), info.mixer.c_str(),
              info.load_seconds);

  json settings = {{"task", task_name},       {"model", model_dir},         {"tokenizer", tok_dir},
                   {"mixer", f.str("mixer")}, {"form", f.str("form")},      {"window", opt.window},
                   {"device", c.device_name}, {"precision", info.precision}};
  if (task == Task::choice) {
    settings["data"] = info.data;
    settings["target_delimiter"] = co.target_delimiter;
  } else if (task == Task::perplexity) {
    settings["data"] = info.data;
    settings["context"] = pr.context;
    settings["stride"] = pr.stride;
  } else {
    settings["lengths"] = ro.lengths;
    settings["depths"] = ro.depths;
    settings["trials"] = ro.trials;
    settings["seed"] = ro.seed;
  }
  const std::vector<std::string> files =
      task == Task::choice       ? std::vector<std::string>{"results.json", "choice_scores.jsonl", "index.html"}
      : task == Task::perplexity ? std::vector<std::string>{"results.json", "index.html"}
                                 : std::vector<std::string>{"results.json", "table.md", "heatmap.svg", "index.html"};
  if (out) out->start(settings.dump(), false, files);

  PrecisionGuard autocast(c.precision);
  t0 = std::chrono::steady_clock::now();
  if (task == Task::choice) {
    Progress bar = make_progress("choice", static_cast<int64_t>(examples.size()));
    co.on_example = [&](int64_t n, int64_t) { bar.update(n); };
    const train::ChoiceResult r = train::score_choices(*lm, *tok, examples, co);
    bar.finish();
    info.eval_seconds = seconds_since(t0);
    std::printf("%lld examples in %.2f s\nacc       %.4f (%lld)\nacc_norm  %.4f (%lld)\nacc_bytes %.4f (%lld)\n",
                static_cast<long long>(r.count), info.eval_seconds, r.acc, static_cast<long long>(r.correct),
                r.acc_norm, static_cast<long long>(r.correct_norm), r.acc_bytes,
                static_cast<long long>(r.correct_bytes));
    if (out) {
      out->write(out->at("results.json"), train::choice_results_json(info, co, r));
      out->write(out->at("choice_scores.jsonl"), train::choice_scores_jsonl(examples, r));
      out->write(out->at("index.html"), train::choice_report_html(info, r));
    }
  } else if (task == Task::perplexity) {
    run_perplexity(*lm, *tok, text, f, info, pr, out.get());
  } else {
    const int64_t total = static_cast<int64_t>(ro.lengths.size() * ro.depths.size()) * ro.trials;
    Progress bar = make_progress(task_name.c_str(), total);
    ro.on_trial = [&](int64_t n, int64_t) { bar.update(n); };
    const train::RetrievalResult r = train::run_retrieval(*lm, *tok, ro);
    bar.finish();
    info.eval_seconds = seconds_since(t0);
    const std::string table = train::retrieval_table(ro, r);
    std::printf("%s: %lld trials in %.2f s, accuracy %.4f\n%s", task_name.c_str(), static_cast<long long>(r.count),
                info.eval_seconds, r.accuracy, table.c_str());
    if (out) {
      out->write(out->at("results.json"), train::retrieval_results_json(info, ro, r));
      out->write(out->at("table.md"), table);
      out->write(out->at("heatmap.svg"), train::retrieval_heatmap_svg(ro, r));
      out->write(out->at("index.html"), train::retrieval_report_html(info, ro, r));
    }
  }
  if (out) {
    const std::string note = out->finish(train::RunDir::End::complete);
    std::printf("wrote %s/results.json and index.html%s\n", c.out.c_str(), note.empty() ? "" : ("; " + note).c_str());
  }
  return 0;
}

}  // namespace

int hh::cli::eval_lm(int argc, char** argv) { return run(argc, argv); }
