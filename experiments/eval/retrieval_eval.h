// Long-context retrieval probes, generated from a seed (no data files), scored by greedy decoding
// through the model's decode path (nn::generate: CausalLM::prefill of the prompt in one pass, then
// step: a KV cache for softmax attention, the O(1) state of a linear or hybrid student):
//   passkey  Mohtashami & Jaggi (2023), "Landmark Attention": a task line, the filler "The grass is
//            green. The sky is blue. The sun is yellow. Here we go. There and back again." repeated,
//            "The pass key is NNNNN. Remember it. NNNNN is the pass key." inserted at a depth, then
//            "What is the pass key? The pass key is" (lines joined by "\n", as their script does);
//   needle   needle in a haystack (RULER's single-needle form): "One of the special magic numbers for
//            <word> is: NNNNNNN." at a depth in a haystack of varied everyday sentences, then "What is
//            the special magic number for <word> mentioned in the provided text? The special magic
//            number for <word> mentioned in the provided text is".
// and RULER's (Hsieh et al. 2024) harder forms, in the needle's haystack:
//   niah_multikey    4 needles of 4 different words, one asked (the others distract);
//   niah_multivalue  4 needles of one word, all 4 numbers asked ("What are all the special magic
//                    numbers for <word> ...? ... are");
//   vt               variable tracking in the passkey's filler: "VAR ABCDE = 12345." then 4 hops
//                    "VAR FGHIJ = VAR ABCDE." ..., then "Question: Find all variables that are
//                    assigned the value 12345 in the text above. Answer: According to the chain(s)
//                    of variable assignment in the text above, 5 variables are assigned the value
//                    12345, they are:".
// A trial of length L fits its prompt and the answer's decode budget in L tokens: the filler is the
// most whole sentences that fit (prompt tokens + max_new_tokens <= L); the (first) inserted line goes
// after round(depth * sentences) of them, a multi-needle's others at depth + k/4 (wrapped), a
// chain's at depth + k (1 - depth) / 5, in order. Scores: passkey and needle are correct when the
// first run of digits in the decoded completion is the answer (1 or 0); the RULER tasks are scored
// as RULER's string_match_all: the fraction of the answers found in the completion, case
// insensitive; a trial is correct when all are.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "nn/models/hf_model.h"

namespace hh::train {

enum class RetrievalTask { passkey, needle, multikey, multivalue, vt };
// "passkey", "needle", "niah_multikey", "niah_multivalue", "vt"; else an error naming them.
RetrievalTask parse_retrieval_task(const std::string& s);
const char* retrieval_task_name(RetrievalTask t);
std::string retrieval_task_names();  // "passkey, needle, ..."

struct RetrievalOptions {
  RetrievalTask task = RetrievalTask::passkey;
  std::vector<int64_t> lengths;  // tokens per trial (prompt + decode budget), each > 0
  std::vector<double> depths;    // where the key goes, each in [0, 1] (0: first, 1: last)
  int64_t trials = 1;            // per (length, depth)
  uint64_t seed = 0;
  // Called after every trial with (trials done, total).
  std::function<void(int64_t, int64_t)> on_trial;
};
// Errors naming the option: no lengths, a length < 1, no depths, a depth outside [0, 1] (NaN
// included), a length or depth given twice, trials < 1.
void check_retrieval_options(const RetrievalOptions& o);

// One generated prompt.
struct RetrievalPrompt {
  std::string text;              // the prompt as text
  std::vector<int32_t> ids;      // encode(text) with the tokenizer's specials
  std::vector<std::string> answers;  // what to retrieve (one number, 4 values, 5 variables)
  std::string answer;                // the answers joined by ", "
  int64_t max_new_tokens = 0;    // the decode budget: the answer's tokens (after a space) + 2
  int64_t sentences = 0;         // filler sentences
  int64_t sentences_before = 0;  // filler sentences before the key
};
// The prompt of trial `trial` at (length, depth) for `seed`: the same arguments give the same prompt.
// A length too short for the prompt without filler is an error giving the shortest length.
RetrievalPrompt make_retrieval_prompt(const data::Tokenizer& tok, RetrievalTask task, int64_t length, double depth,
                                      uint64_t seed, int64_t trial);

// The first run of ASCII digits in `text` ("" when none).
std::string first_number(const std::string& text);
// A completion's score in [0, 1] (see the head of this file).
double retrieval_score(RetrievalTask task, const std::vector<std::string>& answers, const std::string& completion);

struct RetrievalTrial {
  int64_t length = 0;
  double depth = 0.0;
  int64_t trial = 0;
  int64_t prompt_tokens = 0;
  std::string answer, completion;
  std::vector<std::string> answers;
  double score = 0.0;    // retrieval_score
  bool correct = false;  // score 1
};

struct RetrievalCell {
  int64_t length = 0;
  double depth = 0.0;
  int64_t trials = 0, correct = 0;
  double accuracy = 0.0;  // the mean score
  double mean_prompt_tokens = 0.0;
};

struct RetrievalResult {
  RetrievalTask task = RetrievalTask::passkey;
  std::vector<RetrievalTrial> trials;  // length-major, then depth, then trial
  std::vector<RetrievalCell> cells;    // (lengths, depths) row-major
  int64_t correct = 0, count = 0;
  double accuracy = 0.0;  // the mean score
};

// Runs every trial: every prompt is built and checked (it and its answer fit the model's positions)
// before the first is decoded; decoding is greedy, batch 1, no gradients.
RetrievalResult run_retrieval(nn::CausalLM& lm, const data::Tokenizer& tok, const RetrievalOptions& o);

}  // namespace hh::train
