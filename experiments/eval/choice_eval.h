// Multiple-choice scoring by log-likelihood, as lm-evaluation-harness scores its multiple_choice
// tasks: each choice is a continuation of the example's context, scored by the sum of the
// log-probabilities of its tokens given the context; the prediction is the choice of the largest
// score (acc), of the largest score per character of the choice (acc_norm, lm-eval's len(choice):
// Unicode code points) and per UTF-8 byte (acc_bytes). Ties go to the first choice (numpy's argmax).
//
// Tokens follow lm-eval's HF model (lm_eval/api/model.py loglikelihood and _encode_pair,
// lm_eval/models/huggingface.py _loglikelihood_tokens):
//   - an empty context is [BOS] (else EOS) + the continuation's tokens without specials (unless the
//     continuation starts with that token: then its first token is the context);
//   - otherwise the context's trailing whitespace (Python's str.rstrip) moves to the start of the
//     continuation; the continuation's tokens are the tail of encode(context + continuation) after
//     the encode(context) tokens (encode with the tokenizer's specials: Llama's <s>, GPT-2 none;
//     without them when the text already starts with the BOS/EOS token's text);
//   - the model reads (context + continuation)[-(P + 1):][:-1] (P: its positions; left truncation).
// The file's choices are scored as given: lm-eval's tasks prepend a target delimiter (a space) to
// each choice; ChoiceOptions::target_delimiter does the same here (acc_norm / acc_bytes then count
// the choice without it, as lm-eval does).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "nn/models/hf_model.h"

namespace hh::train {

// One example of a JSONL file: {"context": str, "choices": [str, ...], "gold": int, "id": optional}.
struct ChoiceExample {
  std::string id;  // the file's "id" (a string or a number, as written), else ""
  std::string context;
  std::vector<std::string> choices;
  int64_t gold = 0;
  std::string file;  // the file it was read from ("" when made in code)
  int64_t line = 0;  // 1-based line in the file
};

// Reads every example, checked before any scoring: a line that is not a JSON object, a missing or
// mistyped "context" / "choices" / "gold", an empty choice list or an empty choice, a gold index
// out of range, more than kMaxChoices choices: "FILE:LINE: ..." errors. Blank lines are skipped;
// no example at all is an error.
std::vector<ChoiceExample> read_choice_examples(const std::string& path);
// The most choices one example may have (each is a forward pass: a million on one line ran for
// minutes before any error; benchmarks have a handful).
constexpr size_t kMaxChoices = 1000;

struct ChoiceOptions {
  std::string target_delimiter;  // prepended to every choice before scoring ("" = as given)
  // Called after every example with (examples done, total).
  std::function<void(int64_t, int64_t)> on_example;
};

// The tokens lm-eval's loglikelihood scores for (context, continuation).
struct EncodedPair {
  std::vector<int32_t> context, continuation;
};
EncodedPair encode_pair(const data::Tokenizer& tok, const std::string& context, const std::string& continuation);

// Bytes of trailing whitespace in `s` by Python's str.rstrip() (Unicode White_Space + the ASCII
// separators \x1c-\x1f); `s` is UTF-8.
size_t trailing_whitespace_bytes(const std::string& s);
// Unicode code points of the UTF-8 string `s` (Python's len of the str).
int64_t utf8_length(const std::string& s);

struct ChoicePrediction {
  int64_t pred = 0, pred_norm = 0, pred_bytes = 0;
};
// argmax of ll, ll / characters, ll / bytes (the first on ties); `choices` as in the file (the
// delimiter not counted), none empty.
ChoicePrediction predict_choice(const std::vector<double>& loglikelihoods, const std::vector<std::string>& choices);

struct ChoiceScore {
  std::vector<double> loglikelihoods;   // per choice: sum of log p(token | before)
  std::vector<bool> is_greedy;          // every continuation token was the argmax
  std::vector<int64_t> context_tokens;  // per choice: the context's tokens (before truncation)
  std::vector<std::vector<int32_t>> continuation_ids;
  ChoicePrediction prediction;
};

struct ChoiceResult {
  std::vector<ChoiceScore> examples;  // in the order given
  int64_t count = 0, correct = 0, correct_norm = 0, correct_bytes = 0;
  double acc = 0.0, acc_norm = 0.0, acc_bytes = 0.0;
};

// Scores every example with `lm` (one forward per choice, no gradients). Every example is
// tokenized and checked first: a continuation of no tokens or longer than the model's positions, or
// a token id outside the model's vocabulary, is an error naming the example's file and line.
ChoiceResult score_choices(nn::CausalLM& lm, const data::Tokenizer& tok, const std::vector<ChoiceExample>& examples,
                           const ChoiceOptions& options = {});

}  // namespace hh::train
