// Multiple-choice log-likelihood scoring (lm-evaluation-harness's conventions): see choice_eval.h.
#include "experiments/eval/choice_eval.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "autograd/grad_mode.h"
#include "autograd/ops/shape.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/regular_file.h"
#include "core/stop.h"
#include "core/tensor.h"

namespace hh::train {

namespace {

// The code point that ends at s[end - 1] and its first byte (s is valid UTF-8).
std::pair<uint32_t, size_t> last_code_point(const std::string& s, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  const auto b0 = static_cast<unsigned char>(s[start]);
  const size_t n = end - start;
  uint32_t cp = n == 1 ? b0 : n == 2 ? b0 & 0x1Fu : n == 3 ? b0 & 0x0Fu : b0 & 0x07u;
  for (size_t i = start + 1; i < end; ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[i]) & 0x3Fu);
  return {cp, start};
}

// Python's str.isspace(): what str.rstrip() strips.
bool python_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string quote_json_line(const std::string& line) { return line.size() <= 60 ? line : line.substr(0, 57) + "..."; }

}  // namespace

size_t trailing_whitespace_bytes(const std::string& s) {
  size_t end = s.size();
  while (end > 0) {
    const auto [cp, start] = last_code_point(s, end);
    if (!python_space(cp)) break;
    end = start;
  }
  return s.size() - end;
}

int64_t utf8_length(const std::string& s) {
  int64_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::vector<ChoiceExample> read_choice_examples(const std::string& path) {
  check_regular_file(path, "--data");
  std::string text = read_file(path);
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);  // a UTF-8 byte-order mark
  std::istringstream in(text);
  std::string line;
  std::vector<ChoiceExample> out;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string at = str(path, ":", n);
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    HH_CHECK(!j.is_discarded(), at, ": not JSON: ", quote_json_line(line));
    HH_CHECK(j.is_object(), at, ": expected a JSON object ({\"context\", \"choices\", \"gold\"}) per line");
    HH_CHECK(j.contains("context") && j["context"].is_string(), at, ": \"context\" (a string) is missing");
    HH_CHECK(j.contains("choices") && j["choices"].is_array(), at, ": \"choices\" (an array of strings) is missing");
    HH_CHECK(j.contains("gold") && j["gold"].is_number_integer(), at, ": \"gold\" (an integer index into \"choices\") ",
             j.contains("gold") ? "must be an integer, got " + j["gold"].dump() : std::string("is missing"));
    ChoiceExample e;
    e.line = n;
    e.file = path;
    e.context = j["context"].get<std::string>();
    HH_CHECK(!j["choices"].empty(), at, ": \"choices\" is empty");
    HH_CHECK(j["choices"].size() <= kMaxChoices, at, ": ", j["choices"].size(), " choices, more than the ", kMaxChoices,
             " an example may have");
    for (size_t i = 0; i < j["choices"].size(); ++i) {
      const nlohmann::json& c = j["choices"][i];
      HH_CHECK(c.is_string(), at, ": choice ", i, " is not a string: ", c.dump());
      HH_CHECK(!c.get<std::string>().empty(), at, ": choice ", i, " is empty (its length normalizes acc_norm)");
      e.choices.push_back(c.get<std::string>());
    }
    const nlohmann::json& g = j["gold"];
    const bool negative = g.is_number_integer() && !g.is_number_unsigned() && g.get<int64_t>() < 0;
    HH_CHECK(!negative && g.get<uint64_t>() < e.choices.size(), at, ": \"gold\" ", g.dump(), " is out of range (",
             e.choices.size(), " choices: 0..", e.choices.size() - 1, ")");
    e.gold = g.get<int64_t>();
    if (j.contains("id")) {
      HH_CHECK(j["id"].is_string() || j["id"].is_number_integer(), at, ": \"id\" must be a string or an integer");
      e.id = j["id"].is_string() ? j["id"].get<std::string>() : j["id"].dump();
    }
    out.push_back(std::move(e));
  }
  HH_CHECK(!out.empty(), path, ": no examples (one JSON object per line)");
  return out;
}

namespace {

// lm-eval's prefix token: BOS, else EOS (-1: neither).
int32_t prefix_token(const data::Tokenizer& tok) { return tok.bos_id() >= 0 ? tok.bos_id() : tok.eos_id(); }

// lm-eval's tok_encode: the tokenizer's specials, unless the text already starts with the prefix
// token's text ("<s>...": then none, so that it is not doubled).
std::vector<int32_t> lm_eval_encode(const data::Tokenizer& tok, const std::string& text) {
  const int32_t prefix = prefix_token(tok);
  const std::string prefix_text = prefix >= 0 ? tok.decode({prefix}) : std::string();
  const bool has_prefix = !prefix_text.empty() && text.compare(0, prefix_text.size(), prefix_text) == 0;
  return tok.encode(text, !has_prefix);
}

}  // namespace

EncodedPair encode_pair(const data::Tokenizer& tok, const std::string& context, const std::string& continuation) {
  EncodedPair p;
  if (context.empty()) {
    const int32_t prefix = prefix_token(tok);
    HH_CHECK(prefix >= 0, "an empty context is scored after the BOS (or EOS) token, and the tokenizer has neither");
    p.context = {prefix};
    p.continuation = tok.encode(continuation, false);
    // A continuation that starts with the prefix token has it as its context instead.
    if (!p.continuation.empty() && p.continuation.front() == prefix) p.continuation.erase(p.continuation.begin());
    return p;
  }
  const size_t spaces = trailing_whitespace_bytes(context);
  const std::string ctx = context.substr(0, context.size() - spaces);
  const std::string cont = context.substr(ctx.size()) + continuation;
  const std::vector<int32_t> whole = lm_eval_encode(tok, ctx + cont);
  p.context = lm_eval_encode(tok, ctx);
  if (whole.size() > p.context.size())
    p.continuation.assign(whole.begin() + static_cast<std::ptrdiff_t>(p.context.size()), whole.end());
  return p;
}

ChoicePrediction predict_choice(const std::vector<double>& ll, const std::vector<std::string>& choices) {
  HH_CHECK(!ll.empty() && ll.size() == choices.size(), "predict_choice: ", ll.size(), " scores for ", choices.size(),
           " choices");
  ChoicePrediction p;
  double best = 0, best_norm = 0, best_bytes = 0;
  for (size_t i = 0; i < ll.size(); ++i) {
    HH_CHECK(!choices[i].empty(), "predict_choice: choice ", i, " is empty");
    const double norm = ll[i] / static_cast<double>(utf8_length(choices[i]));
    const double bytes = ll[i] / static_cast<double>(choices[i].size());
    const auto at = static_cast<int64_t>(i);
    if (i == 0 || ll[i] > best) best = ll[i], p.pred = at;
    if (i == 0 || norm > best_norm) best_norm = norm, p.pred_norm = at;
    if (i == 0 || bytes > best_bytes) best_bytes = bytes, p.pred_bytes = at;
  }
  return p;
}

namespace {

// log p of each continuation token: the model reads (context + continuation)[-(P+1):][:-1].
void score_one(nn::CausalLM& lm, Device dev, const EncodedPair& pair, ChoiceScore& s) {
  std::vector<int64_t> seq(pair.context.begin(), pair.context.end());
  seq.insert(seq.end(), pair.continuation.begin(), pair.continuation.end());
  const int64_t P = lm.max_positions();
  if (P >= 0 && static_cast<int64_t>(seq.size()) > P + 1) seq.erase(seq.begin(), seq.end() - (P + 1));
  seq.pop_back();
  const auto L = static_cast<int64_t>(seq.size()), n = static_cast<int64_t>(pair.continuation.size());
  Tensor logits = lm.forward(from_vector(seq, {1, L}, {DType::i64}).to(dev));  // (1,L,V)
  logits = slice(logits, 1, L - n, L).to(DType::f32).to(Device::cpu()).contiguous();
  const std::vector<float> v = to_vector<float>(logits);
  const int64_t V = logits.size(2);
  double total = 0.0;
  bool greedy = true;
  for (int64_t t = 0; t < n; ++t) {
    const float* row = v.data() + t * V;
    const int64_t arg = std::max_element(row, row + V) - row;
    double lse = 0.0;
    for (int64_t k = 0; k < V; ++k) lse += std::exp(static_cast<double>(row[k]) - row[arg]);
    const int32_t target = pair.continuation[static_cast<size_t>(t)];
    total += static_cast<double>(row[target]) - row[arg] - std::log(lse);
    greedy = greedy && arg == target;  // torch's argmax: the first maximum
  }
  s.loglikelihoods.push_back(total);
  s.is_greedy.push_back(greedy);
  s.context_tokens.push_back(static_cast<int64_t>(pair.context.size()));
  s.continuation_ids.push_back(pair.continuation);
}

}  // namespace

ChoiceResult score_choices(nn::CausalLM& lm, const data::Tokenizer& tok, const std::vector<ChoiceExample>& examples,
                           const ChoiceOptions& o) {
  const int64_t P = lm.max_positions();
  // Every example is tokenized and checked before the first forward.
  std::vector<std::vector<EncodedPair>> pairs;
  for (const ChoiceExample& e : examples) {
    pairs.emplace_back();
    const std::string at = e.file.empty() ? str("example at line ", e.line) : str(e.file, ":", e.line);
    for (size_t i = 0; i < e.choices.size(); ++i) {
      EncodedPair p = encode_pair(tok, e.context, o.target_delimiter + e.choices[i]);
      HH_CHECK(!p.continuation.empty(), at, ": choice ", i, " adds no token to the context");
      HH_CHECK(P < 0 || static_cast<int64_t>(p.continuation.size()) <= P, at, ": choice ", i, " has ",
               p.continuation.size(), " tokens, more than the model's ", P, " positions");
      for (const std::vector<int32_t>* ids : {&p.context, &p.continuation})
        for (int32_t id : *ids)
          HH_CHECK(id >= 0 && id < lm.vocab_size(), at, ": token id ", id, " is outside the model's vocabulary of ",
                   lm.vocab_size());
      pairs.back().push_back(std::move(p));
    }
  }
  NoGradGuard no_grad;
  const Device dev = lm.parameters().empty() ? Device::cpu() : lm.parameters().front().device();
  ChoiceResult r;
  for (size_t k = 0; k < examples.size(); ++k) {
    ChoiceScore s;
    for (const EncodedPair& p : pairs[k]) score_one(lm, dev, p, s);
    s.prediction = predict_choice(s.loglikelihoods, examples[k].choices);
    const int64_t gold = examples[k].gold;
    r.correct += s.prediction.pred == gold;
    r.correct_norm += s.prediction.pred_norm == gold;
    r.correct_bytes += s.prediction.pred_bytes == gold;
    r.examples.push_back(std::move(s));
    if (o.on_example) o.on_example(static_cast<int64_t>(k + 1), static_cast<int64_t>(examples.size()));
    throw_if_stop_requested("choice");  // core/stop.h: between examples
  }
  r.count = static_cast<int64_t>(examples.size());
  const double n = static_cast<double>(std::max<int64_t>(r.count, 1));
  r.acc = static_cast<double>(r.correct) / n;
  r.acc_norm = static_cast<double>(r.correct_norm) / n;
  r.acc_bytes = static_cast<double>(r.correct_bytes) / n;
  return r;
}

}  // namespace hh::train
