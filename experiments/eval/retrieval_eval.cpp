// Passkey retrieval, needle in a haystack and RULER's multi-key, multi-value and variable-tracking
// tasks, generated from a seed: see retrieval_eval.h.
#include "experiments/eval/retrieval_eval.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <utility>

#include "core/error.h"
#include "core/stop.h"
#include "nn/models/generate.h"

namespace hh::train {

namespace {

const std::vector<std::string>& passkey_filler() {
  static const std::vector<std::string> s = {"The grass is green.", "The sky is blue.", "The sun is yellow.",
                                             "Here we go.", "There and back again."};
  return s;
}

const std::vector<std::string>& haystack_sentences() {
  static const std::vector<std::string> s = {
      "The morning train was late again, so most people waited on the platform with coffee.",
      "A small garden can feed a family if the soil is kept rich and the beds are watered.",
      "The library opens at nine and closes early on Sundays.",
      "Old maps often show rivers that have since changed their course.",
      "She folded the letter twice and put it in the drawer with the others.",
      "Bread rises faster in a warm kitchen than in a cold one.",
      "The committee met on Tuesday and agreed to postpone the vote.",
      "Most birds in the park are sparrows, but a heron visits the pond in spring.",
      "He repaired the old bicycle with parts from three other bikes.",
      "The museum keeps its oldest paintings in a room with dim light.",
      "Snow fell all night and covered the road to the village.",
      "A good map, a full water bottle and sturdy shoes make a long walk pleasant.",
      "The children built a tower of wooden blocks taller than the table.",
      "Tea tastes different depending on the water it is brewed with.",
      "The ferry crosses the lake four times a day in summer.",
      "Clocks in the hall were wound every Sunday by the caretaker.",
  };
  return s;
}

const std::vector<std::string>& needle_words() {
  static const std::vector<std::string> s = {"harbor",  "lantern", "meadow", "copper",  "violin",  "glacier", "orchard",
                                             "compass", "falcon",  "pebble", "saffron", "thistle", "quartz",  "marble",
                                             "willow",  "cobalt",  "ember",  "juniper", "tundra",  "canyon"};
  return s;
}

// The per-trial generator: the same (seed, task, length, trial) give the same key at every depth.
std::mt19937_64 trial_rng(uint64_t seed, RetrievalTask task, int64_t length, int64_t trial) {
  std::seed_seq seq{static_cast<uint32_t>(seed),
                    static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(task),
                    static_cast<uint32_t>(length),
                    static_cast<uint32_t>(static_cast<uint64_t>(length) >> 32),
                    static_cast<uint32_t>(trial)};
  return std::mt19937_64(seq);
}

std::string digits(std::mt19937_64& rng, int n) {  // n digits, the first not 0
  std::string s(1, static_cast<char>('1' + rng() % 9));
  while (static_cast<int>(s.size()) < n) s += static_cast<char>('0' + rng() % 10);
  return s;
}

// A line put into the filler at a fraction of it (after round(at * sentences) sentences).
struct Insert {
  double at;
  std::string line;
};

// What a trial holds apart from the filler count.
struct Parts {
  std::string head, question;
  std::vector<Insert> inserts;      // the first is the one at the trial's depth
  std::vector<std::string> filler;  // cycled
  std::string sep;                  // between the parts: "\n" (passkey) or " "
  std::vector<std::string> answers;
};

// n distinct words of needle_words(), drawn with rng.
std::vector<std::string> distinct_words(std::mt19937_64& rng, size_t n) {
  std::vector<std::string> w = needle_words();
  for (size_t i = 0; i < n; ++i) std::swap(w[i], w[i + static_cast<size_t>(rng() % (w.size() - i))]);
  w.resize(n);
  return w;
}

std::vector<std::string> shuffled(std::vector<std::string> v, std::mt19937_64& rng) {
  for (size_t i = v.size() - 1; i > 0; --i)  // Fisher-Yates on rng() itself: the same order everywhere
    std::swap(v[i], v[static_cast<size_t>(rng() % (i + 1))]);
  return v;
}

// `count` lines spread over the filler: the first at depth, the others at depth + k / count, wrapped.
double spread(double depth, size_t k, size_t count) {
  const double at = depth + static_cast<double>(k) / static_cast<double>(count);
  return at > 1.0 ? at - 1.0 : at;
}

const char* kNeedleHead =
    "Some special magic numbers are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the numbers afterwards.";

std::string needle_line(const std::string& word, const std::string& number) {
  return "One of the special magic numbers for " + word + " is: " + number + ".";
}

// The question of the single- and multi-key needles (RULER's template).
std::string needle_question(const std::string& word) {
  return "What is the special magic number for " + word + " mentioned in the provided text? " +
         "The special magic number for " + word + " mentioned in the provided text is";
}

Parts trial_parts(RetrievalTask task, std::mt19937_64& rng, double depth) {
  Parts p;
  p.sep = " ";
  switch (task) {
    case RetrievalTask::passkey: {
      const std::string key = digits(rng, 5);
      p.answers = {key};
      p.head =
          "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
          "I will quiz you about the important information there.";
      p.inserts = {{depth, "The pass key is " + key + ". Remember it. " + key + " is the pass key."}};
      p.question = "What is the pass key? The pass key is";
      p.filler = passkey_filler();
      p.sep = "\n";
      break;
    }
    case RetrievalTask::needle: {
      const std::string number = digits(rng, 7);
      const std::string& word = needle_words()[rng() % needle_words().size()];
      p.answers = {number};
      p.head = kNeedleHead;
      p.inserts = {{depth, needle_line(word, number)}};
      p.question = needle_question(word);
      p.filler = shuffled(haystack_sentences(), rng);
      break;
    }
    case RetrievalTask::multikey: {  // RULER's niah_multikey: 4 keys, one asked
      const std::vector<std::string> words = distinct_words(rng, 4);
      for (size_t k = 0; k < words.size(); ++k) {
        const std::string number = digits(rng, 7);
        if (k == 0) p.answers = {number};
        p.inserts.push_back({spread(depth, k, words.size()), needle_line(words[k], number)});
      }
      p.head = kNeedleHead;
      p.question = needle_question(words[0]);
      p.filler = shuffled(haystack_sentences(), rng);
      break;
    }
    case RetrievalTask::multivalue: {  // RULER's niah_multivalue: one key, 4 values, all asked
      const std::string word = needle_words()[rng() % needle_words().size()];
      for (size_t k = 0; k < 4; ++k) {
        p.answers.push_back(digits(rng, 7));
        p.inserts.push_back({spread(depth, k, 4), needle_line(word, p.answers.back())});
      }
      p.head = kNeedleHead;
      p.question = "What are all the special magic numbers for " + word +
                   " mentioned in the provided text? "
                   "The special magic numbers for " +
                   word + " mentioned in the provided text are";
      p.filler = shuffled(haystack_sentences(), rng);
      break;
    }
    case RetrievalTask::vt: {  // RULER's variable tracking: one chain of 4 hops (5 variables)
      const std::string value = digits(rng, 5);
      std::vector<std::string> names;
      while (names.size() < 5) {
        std::string v;
        for (int i = 0; i < 5; ++i) v += static_cast<char>('A' + rng() % 26);
        if (std::find(names.begin(), names.end(), v) == names.end()) names.push_back(v);
      }
      for (size_t k = 0; k < names.size(); ++k) {
        const std::string line = "VAR " + names[k] + " = " + (k == 0 ? value : "VAR " + names[k - 1]) + ".";
        p.inserts.push_back({depth + (1.0 - depth) * static_cast<double>(k) / static_cast<double>(names.size()), line});
      }
      p.answers = names;
      p.head = "Memorize and track the chain(s) of variable assignment hidden in the following text.";
      p.question = "Question: Find all variables that are assigned the value " + value +
                   " in the text above. Answer: According to the chain(s) of variable assignment in the text above, " +
                   std::to_string(names.size()) + " variables are assigned the value " + value + ", they are:";
      p.filler = passkey_filler();
      break;
    }
  }
  return p;
}

std::string filler_text(const Parts& p, int64_t from, int64_t to) {
  std::string s;
  for (int64_t i = from; i < to; ++i) {
    if (i > from) s += " ";
    s += p.filler[static_cast<size_t>(i) % p.filler.size()];
  }
  return s;
}

int64_t sentences_before(int64_t n, double depth) { return std::llround(depth * static_cast<double>(n)); }

// head, the filler with every insert after round(at * n) sentences (equal places in insert order),
// the question; parts joined by p.sep.
std::string prompt_text(const Parts& p, int64_t n) {
  std::vector<std::pair<int64_t, size_t>> order;  // (sentences before, insert index)
  for (size_t i = 0; i < p.inserts.size(); ++i) order.emplace_back(sentences_before(n, p.inserts[i].at), i);
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> parts{p.head};
  int64_t at = 0;
  for (const auto& [before, i] : order) {
    parts.push_back(filler_text(p, at, before));
    parts.push_back(p.inserts[i].line);
    at = before;
  }
  parts.push_back(filler_text(p, at, n));
  parts.push_back(p.question);
  std::string s;
  for (const std::string& part : parts)
    if (!part.empty()) s += (s.empty() ? "" : p.sep) + part;
  return s;
}

std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

}  // namespace

namespace {
struct TaskName {
  RetrievalTask task;
  const char* name;
};
constexpr TaskName kTaskNames[] = {{RetrievalTask::passkey, "passkey"},
                                   {RetrievalTask::needle, "needle"},
                                   {RetrievalTask::multikey, "niah_multikey"},
                                   {RetrievalTask::multivalue, "niah_multivalue"},
                                   {RetrievalTask::vt, "vt"}};
}  // namespace

RetrievalTask parse_retrieval_task(const std::string& s) {
  for (const TaskName& t : kTaskNames)
    if (s == t.name) return t.task;
  fail(str("unknown retrieval task '", s, "' (", retrieval_task_names(), ")"));
}

const char* retrieval_task_name(RetrievalTask t) {
  for (const TaskName& n : kTaskNames)
    if (n.task == t) return n.name;
  return "?";
}

std::string retrieval_task_names() {
  std::string s;
  for (const TaskName& t : kTaskNames) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

bool is_ruler_scored(RetrievalTask t) { return t != RetrievalTask::passkey && t != RetrievalTask::needle; }

double retrieval_score(RetrievalTask task, const std::vector<std::string>& answers, const std::string& completion) {
  HH_CHECK(!answers.empty(), "retrieval_score: no answers");
  if (!is_ruler_scored(task)) return first_number(completion) == answers[0] ? 1.0 : 0.0;
  const std::string said = lower(completion);
  double found = 0;
  for (const std::string& a : answers) found += said.find(lower(a)) != std::string::npos ? 1.0 : 0.0;
  return found / static_cast<double>(answers.size());
}

void check_retrieval_options(const RetrievalOptions& o) {
  HH_CHECK(!o.lengths.empty(), "--lengths: no context lengths given");
  for (size_t i = 0; i < o.lengths.size(); ++i) {
    HH_CHECK(o.lengths[i] >= 1, "--lengths: ", o.lengths[i], " is not a positive number of tokens");
    HH_CHECK(std::count(o.lengths.begin(), o.lengths.begin() + static_cast<std::ptrdiff_t>(i), o.lengths[i]) == 0,
             "--lengths: ", o.lengths[i], " is given twice");
  }
  HH_CHECK(!o.depths.empty(), "--depths: no depths given");
  for (size_t i = 0; i < o.depths.size(); ++i) {
    HH_CHECK(o.depths[i] >= 0.0 && o.depths[i] <= 1.0, "--depths: ", o.depths[i], " is outside [0, 1]");
    HH_CHECK(std::count(o.depths.begin(), o.depths.begin() + static_cast<std::ptrdiff_t>(i), o.depths[i]) == 0,
             "--depths: ", o.depths[i], " is given twice");
  }
  HH_CHECK(o.trials >= 1, "--trials: ", o.trials, " (at least 1)");
}

RetrievalPrompt make_retrieval_prompt(const data::Tokenizer& tok, RetrievalTask task, int64_t length, double depth,
                                      uint64_t seed, int64_t trial) {
  HH_CHECK(depth >= 0.0 && depth <= 1.0, "depth ", depth, " is outside [0, 1]");
  std::mt19937_64 rng = trial_rng(seed, task, length, trial);
  const Parts p = trial_parts(task, rng, depth);
  RetrievalPrompt r;
  r.answers = p.answers;
  r.answer = p.answers[0];
  for (size_t i = 1; i < p.answers.size(); ++i) r.answer += ", " + p.answers[i];
  // The answer's tokens after a space, and 2 more (RULER's budgets are of the same order).
  r.max_new_tokens = static_cast<int64_t>(tok.encode(" " + r.answer, false).size()) + 2;
  const int64_t budget = length - r.max_new_tokens;
  const auto tokens = [&](int64_t n) {
    return static_cast<int64_t>(tok.encode(prompt_text(p, n), true).size());
  };
  const int64_t least = tokens(0);
  HH_CHECK(least <= budget, "length ", length, " is too short for the ", retrieval_task_name(task),
           " prompt: it needs ", least + r.max_new_tokens, " tokens without any filler (", least, " of prompt, ",
           r.max_new_tokens, " to decode the answer)");
  // The most sentences that fit: each adds at least one token, so budget - least is an upper bound.
  int64_t lo = 0, hi = budget - least + 1;  // tokens(lo) fits; hi is beyond
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (tokens(mid) <= budget ? lo : hi) = mid;
  }
  r.sentences = lo;
  r.sentences_before = sentences_before(lo, depth);
  r.text = prompt_text(p, lo);
  r.ids = tok.encode(r.text, true);
  return r;
}

std::string first_number(const std::string& text) {
  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  const auto b = std::find_if(text.begin(), text.end(), is_digit);
  return std::string(b, std::find_if_not(b, text.end(), is_digit));
}

RetrievalResult run_retrieval(nn::CausalLM& lm, const data::Tokenizer& tok, const RetrievalOptions& o) {
  check_retrieval_options(o);
  const int64_t P = lm.max_positions();
  for (int64_t L : o.lengths)
    HH_CHECK(P < 0 || L <= P, "--lengths: ", L, " tokens is more than the model's ", P, " positions");
  std::vector<RetrievalPrompt> prompts;  // every prompt is built (and checked) before decoding starts
  RetrievalResult r;
  r.task = o.task;
  for (int64_t L : o.lengths)
    for (double d : o.depths)
      for (int64_t t = 0; t < o.trials; ++t) {
        prompts.push_back(make_retrieval_prompt(tok, o.task, L, d, o.seed, t));
        RetrievalTrial tr;
        tr.length = L;
        tr.depth = d;
        tr.trial = t;
        tr.answer = prompts.back().answer;
        tr.answers = prompts.back().answers;
        tr.prompt_tokens = static_cast<int64_t>(prompts.back().ids.size());
        r.trials.push_back(tr);
      }
  nn::Sampler greedy(nn::SamplingOptions{0.0, 0, 1.0, 0});
  for (size_t i = 0; i < prompts.size(); ++i) {
    nn::GenerateOptions go;
    go.max_new_tokens = prompts[i].max_new_tokens;
    if (tok.eos_id() >= 0) go.eos = {tok.eos_id()};
    go.keep_eos = false;
    const std::vector<int64_t> ids(prompts[i].ids.begin(), prompts[i].ids.end());
    const nn::Generation g = nn::generate(lm, ids, greedy, go);
    RetrievalTrial& tr = r.trials[i];
    tr.completion = tok.decode(std::vector<int32_t>(g.ids.begin(), g.ids.end()), true);
    tr.score = retrieval_score(o.task, tr.answers, tr.completion);
    tr.correct = tr.score == 1.0;
    if (o.on_trial) o.on_trial(static_cast<int64_t>(i + 1), static_cast<int64_t>(prompts.size()));
    throw_if_stop_requested("retrieval");  // core/stop.h: between trials
  }
  for (int64_t L : o.lengths)
    for (double d : o.depths) {
      RetrievalCell c;
      c.length = L;
      c.depth = d;
      for (const RetrievalTrial& tr : r.trials)
        if (tr.length == L && tr.depth == d) {
          ++c.trials;
          c.correct += tr.correct;
          c.accuracy += tr.score;
          c.mean_prompt_tokens += static_cast<double>(tr.prompt_tokens);
        }
      c.accuracy /= static_cast<double>(c.trials);
      c.mean_prompt_tokens /= static_cast<double>(c.trials);
      r.cells.push_back(c);
    }
  r.count = static_cast<int64_t>(r.trials.size());
  for (const RetrievalTrial& tr : r.trials) {
    r.correct += tr.correct;
    r.accuracy += tr.score;
  }
  r.accuracy /= static_cast<double>(r.count);
  return r;
}

}  // namespace hh::train
