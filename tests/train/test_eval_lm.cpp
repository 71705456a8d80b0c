// experiments/eval: the multiple-choice scorer against transformers' log-likelihoods under
// lm-evaluation-harness's conventions (tests/fixtures/eval, tools/make_eval_fixtures.py), its
// normalizations and input checks, the passkey / needle generators and runner, and experiments/lm's
// strided perplexity (what eval_lm --task perplexity runs) against transformers.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/communicator.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "experiments/eval/choice_eval.h"
#include "experiments/eval/eval_report.h"
#include "experiments/eval/retrieval_eval.h"
#include "experiments/lm/lm_train.h"
#include "nn/models/hf_model.h"
#include "tests/temp_dir.h"

using namespace hh;

namespace {

const std::string kEval = std::string(HH_SOURCE_DIR) + "/tests/fixtures/eval";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("eval choice: log-likelihoods, tokens and accuracies match transformers under lm-eval's rules") {
  const nlohmann::json expected = nlohmann::json::parse(read_file(kEval + "/choice_expected.json"));
  const std::vector<train::ChoiceExample> examples = train::read_choice_examples(kEval + "/choice.jsonl");
  REQUIRE(examples.size() == 7);
  CHECK(examples[0].id == "capital");
  CHECK(examples[6].id.empty());
  for (const char* name : {"llama-tok", "gpt2-tok"}) {
    CAPTURE(name);
    const nlohmann::json& want = expected.at(name);
    auto lm = nn::load_causal_lm(kEval + "/" + name);
    auto tok = data::load_tokenizer(kEval + "/" + name);
    int64_t calls = 0;
    train::ChoiceOptions o;
    o.on_example = [&](int64_t n, int64_t total) {
      ++calls;
      CHECK(n == calls);
      CHECK(total == 7);
    };
    const train::ChoiceResult r = train::score_choices(*lm, *tok, examples, o);
    CHECK(calls == 7);
    REQUIRE(r.examples.size() == examples.size());
    for (size_t i = 0; i < examples.size(); ++i) {
      CAPTURE(i);
      const nlohmann::json& w = want["examples"][i];
      const train::ChoiceScore& s = r.examples[i];
      REQUIRE(s.loglikelihoods.size() == examples[i].choices.size());
      for (size_t k = 0; k < s.loglikelihoods.size(); ++k) {
        CAPTURE(k);
        CHECK(s.continuation_ids[k] == w["continuation_ids"][k].get<std::vector<int32_t>>());
        CHECK(s.context_tokens[k] == w["context_tokens"][k].get<int64_t>());
        const double ref = w["loglikelihoods"][k].get<double>();
        CHECK(std::fabs(s.loglikelihoods[k] - ref) <= 1e-4 * std::fabs(ref));  // the HF fixtures' 1e-4 relative
        CHECK(static_cast<bool>(s.is_greedy[k]) == w["is_greedy"][k].get<bool>());
      }
      CHECK(s.prediction.pred == w["pred"].get<int64_t>());
      CHECK(s.prediction.pred_norm == w["pred_norm"].get<int64_t>());
      CHECK(s.prediction.pred_bytes == w["pred_bytes"].get<int64_t>());
    }
    CHECK(r.count == 7);
    CHECK(r.acc == doctest::Approx(want["acc"].get<double>()));
    CHECK(r.acc_norm == doctest::Approx(want["acc_norm"].get<double>()));
    CHECK(r.acc_bytes == doctest::Approx(want["acc_bytes"].get<double>()));
    CHECK(r.acc == doctest::Approx(static_cast<double>(r.correct) / 7));

    // The per-example file: one line per example, in order, with the scores above.
    const std::string jsonl = train::choice_scores_jsonl(examples, r);
    const nlohmann::json first = nlohmann::json::parse(jsonl.substr(0, jsonl.find('\n')));
    CHECK(first["id"] == "capital");
    CHECK(first["line"] == 1);
    CHECK(first["loglikelihoods"].get<std::vector<double>>() == r.examples[0].loglikelihoods);
    CHECK(std::count(jsonl.begin(), jsonl.end(), '\n') == 7);
  }
}

TEST_CASE("eval choice: a target delimiter is scored but not counted by acc_norm") {
  auto lm = nn::load_causal_lm(kEval + "/gpt2-tok");
  auto tok = data::load_tokenizer(kEval + "/gpt2-tok");
  train::ChoiceExample spaced{"a", "2 + 2 =", {" 4", " four"}, 0, "", 1};
  train::ChoiceExample bare{"b", "2 + 2 =", {"4", "four"}, 0, "", 1};
  train::ChoiceOptions o;
  o.target_delimiter = " ";
  const train::ChoiceResult a = train::score_choices(*lm, *tok, {spaced});
  const train::ChoiceResult b = train::score_choices(*lm, *tok, {bare}, o);
  CHECK(a.examples[0].loglikelihoods == b.examples[0].loglikelihoods);
  CHECK(b.examples[0].prediction.pred_norm ==
        train::predict_choice(b.examples[0].loglikelihoods, bare.choices).pred_norm);
}

TEST_CASE("eval choice: a token outside the model's vocabulary is an error naming the line, before scoring") {
  auto lm = nn::load_causal_lm(kEval + "/gpt2-tok");            // 1200 tokens
  auto llama_tok = data::load_tokenizer(kEval + "/llama-tok");  // 1756
  const std::vector<train::ChoiceExample> examples = train::read_choice_examples(kEval + "/choice.jsonl");
  int64_t scored = 0;
  train::ChoiceOptions o;
  o.on_example = [&](int64_t, int64_t) { ++scored; };
  const std::string msg = error_of([&] { train::score_choices(*lm, *llama_tok, examples, o); });
  CHECK(msg.find("choice.jsonl:") != std::string::npos);
  CHECK(msg.find("is outside the model's vocabulary of 1200") != std::string::npos);
  CHECK(scored == 0);
}

TEST_CASE("eval choice: encode_pair splits as lm-eval does") {
  auto llama = data::load_tokenizer(kEval + "/llama-tok");
  // The context's trailing spaces go to the continuation; the continuation is the tail of the whole.
  const train::EncodedPair a = train::encode_pair(*llama, "The hedgehog  ", "sleeps");
  CHECK(a.context == llama->encode("The hedgehog", true));
  std::vector<int32_t> whole = a.context;
  whole.insert(whole.end(), a.continuation.begin(), a.continuation.end());
  CHECK(whole == llama->encode("The hedgehog  sleeps", true));
  // A text that starts with <s> gets no second one (lm-eval's has_bos_prefix).
  const train::EncodedPair b = train::encode_pair(*llama, "<s>The hedgehog", " sleeps");
  REQUIRE(b.context.size() >= 2);
  CHECK(b.context[0] == 1);
  CHECK(b.context[1] != 1);
  CHECK(b.context == llama->encode("<s>The hedgehog", false));
  // An empty context: [BOS] then the continuation without specials.
  const train::EncodedPair c = train::encode_pair(*llama, "", "The hedgehog");
  CHECK(c.context == std::vector<int32_t>{1});
  CHECK(c.continuation == llama->encode("The hedgehog", false));
  // GPT-2's byte-level tokenizer has no BOS: <|endoftext|> (its EOS) is the prefix.
  auto gpt2 = data::load_tokenizer(kEval + "/gpt2-tok");
  CHECK(train::encode_pair(*gpt2, "", " hi").context == std::vector<int32_t>{gpt2->eos_id()});
}

TEST_CASE("eval choice: acc_norm divides by characters, acc_bytes by UTF-8 bytes, ties go to the first") {
  // "ééé": 3 characters, 6 bytes; "abcd": 4 and 4.
  const train::ChoicePrediction p = train::predict_choice({-3.3, -4.0}, {"\xC3\xA9\xC3\xA9\xC3\xA9", "abcd"});
  CHECK(p.pred == 0);        // -3.3 > -4.0
  CHECK(p.pred_norm == 1);   // -1.1 < -1.0
  CHECK(p.pred_bytes == 0);  // -0.55 > -1.0
  const train::ChoicePrediction tie = train::predict_choice({-2.0, -2.0}, {"ab", "cd"});
  CHECK(tie.pred == 0);
  CHECK(tie.pred_norm == 0);
  CHECK(train::utf8_length("\xF0\x9F\xA6\x94\xC3\xA9x") == 3);  // hedgehog emoji, é, x
  CHECK_THROWS(train::predict_choice({-1.0}, {"a", "b"}));
}

TEST_CASE("eval choice: trailing whitespace is Python's str.rstrip") {
  CHECK(train::trailing_whitespace_bytes("abc \t\n") == 3);
  CHECK(train::trailing_whitespace_bytes("abc") == 0);
  CHECK(train::trailing_whitespace_bytes("") == 0);
  CHECK(train::trailing_whitespace_bytes("   ") == 3);
  CHECK(train::trailing_whitespace_bytes("x\xC2\xA0") == 2);       // U+00A0 no-break space
  CHECK(train::trailing_whitespace_bytes("x\xE3\x80\x80 ") == 4);  // U+3000 ideographic space, then a space
  CHECK(train::trailing_whitespace_bytes("x\xE2\x80\x8B") == 0);   // U+200B zero width space: not a space
  CHECK(train::trailing_whitespace_bytes("\xC3\xA9\x1F") == 1);    // U+001F unit separator: a space to Python
}

TEST_CASE("eval choice: bad lines are FILE:LINE errors before any scoring") {
  test::TempDir dir("eval_choice_bad");
  const std::string good = R"({"context": "a", "choices": [" b", " c"], "gold": 1})";
  struct Case {
    std::string line, message;
  };
  const std::vector<Case> cases = {
      {"not json", ":2: not JSON"},
      {"[1, 2]", ":2: expected a JSON object"},
      {R"({"choices": [" b"], "gold": 0})", ":2: \"context\" (a string) is missing"},
      {R"({"context": "a", "gold": 0})", ":2: \"choices\" (an array of strings) is missing"},
      {R"({"context": "a", "choices": [" b"]})", ":2: \"gold\" (an integer index into \"choices\") is missing"},
      {R"({"context": "a", "choices": [" b"], "gold": 0.5})",
       ":2: \"gold\" (an integer index into \"choices\") must be an integer, got 0.5"},
      {R"({"context": "a", "choices": [], "gold": 0})", ":2: \"choices\" is empty"},
      {R"({"context": "a", "choices": [" b", ""], "gold": 0})", ":2: choice 1 is empty"},
      {R"({"context": "a", "choices": [" b", 3], "gold": 0})", ":2: choice 1 is not a string"},
      {R"({"context": "a", "choices": [" b", " c"], "gold": 2})", ":2: \"gold\" 2 is out of range (2 choices: 0..1)"},
      {R"({"context": "a", "choices": [" b", " c"], "gold": -1})", ":2: \"gold\" -1 is out of range"},
      {R"({"context": "a", "choices": [" b"], "gold": 0, "id": [1]})", ":2: \"id\" must be"},
      // Issue 36: a million choices on one line scored for minutes; more than kMaxChoices is refused.
      {R"({"context": "a", "choices": [)" + [] {
         std::string c = R"(" x")";
         for (size_t i = 1; i <= train::kMaxChoices; ++i) c += R"(, " x")";
         return c;
       }() + R"(], "gold": 0})",
       ":2: 1001 choices, more than the 1000 an example may have"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.line);
    const std::string path = dir.write("bad.jsonl", good + "\n" + c.line + "\n" + good + "\n");
    const std::string msg = error_of([&] { train::read_choice_examples(path); });
    CHECK(msg.find(path + c.message) != std::string::npos);
    if (msg.find(path + c.message) == std::string::npos) MESSAGE(msg);
  }
  CHECK(error_of([&] { train::read_choice_examples(dir.write("empty.jsonl", "\n  \n")); }).find("no examples") !=
        std::string::npos);
  CHECK(error_of([&] { train::read_choice_examples(dir.file("missing.jsonl")); }).find("missing.jsonl") !=
        std::string::npos);
  const auto ok = train::read_choice_examples(dir.write("ok.jsonl", "\n" + good + "\r\n\n" + good));
  REQUIRE(ok.size() == 2);
  CHECK(ok[0].line == 2);
  CHECK(ok[1].line == 4);
  CHECK(ok[1].gold == 1);
}

TEST_CASE("eval retrieval: prompts are seeded, fit their length and hold the key at the depth") {
  auto tok = data::load_tokenizer(kEval + "/llama-tok");
  for (train::RetrievalTask task : {train::RetrievalTask::passkey, train::RetrievalTask::needle}) {
    CAPTURE(std::string(train::retrieval_task_name(task)));
    for (int64_t L : {240, 400}) {
      for (double depth : {0.0, 0.5, 1.0}) {
        const train::RetrievalPrompt p = train::make_retrieval_prompt(*tok, task, L, depth, 7, 0);
        CHECK(static_cast<int64_t>(p.ids.size()) + p.max_new_tokens <= L);
        CHECK(static_cast<int64_t>(p.ids.size()) + p.max_new_tokens > L - 30);  // the most sentences that fit
        CHECK(p.ids == tok->encode(p.text, true));
        CHECK(p.answer.size() == (task == train::RetrievalTask::passkey ? 5u : 7u));
        CHECK(train::first_number(p.answer) == p.answer);
        CHECK(p.text.find(p.answer) != std::string::npos);
        CHECK(p.sentences_before == std::llround(depth * static_cast<double>(p.sentences)));
        CHECK(p.sentences > 0);
        // The same arguments give the same prompt; the key depends on the trial, not on the depth.
        CHECK(train::make_retrieval_prompt(*tok, task, L, depth, 7, 0).text == p.text);
        CHECK(train::make_retrieval_prompt(*tok, task, L, 0.25, 7, 0).answer == p.answer);
        CHECK(train::make_retrieval_prompt(*tok, task, L, depth, 7, 1).answer != p.answer);
        CHECK(train::make_retrieval_prompt(*tok, task, L, depth, 8, 0).answer != p.answer);
        const size_t key =
            p.text.find(task == train::RetrievalTask::passkey ? "The pass key is " : "One of the special");
        const size_t question =
            p.text.find(task == train::RetrievalTask::passkey ? "What is the pass key" : "What is the special");
        REQUIRE(key != std::string::npos);
        REQUIRE(question != std::string::npos);
        const std::string before = p.text.substr(0, key), after = p.text.substr(key, question - key);
        const auto sentences = [](const std::string& s) { return std::count(s.begin(), s.end(), '.'); };
        // The head has 3 sentences; the key line 3 (passkey) or 1 (needle: its number ends it).
        CHECK(sentences(before) - 3 == p.sentences_before);
        CHECK(sentences(after) - (task == train::RetrievalTask::passkey ? 3 : 1) == p.sentences - p.sentences_before);
      }
    }
  }
  const std::string msg =
      error_of([&] { train::make_retrieval_prompt(*tok, train::RetrievalTask::passkey, 40, 0.5, 0, 0); });
  CHECK(msg.find("length 40 is too short for the passkey prompt") != std::string::npos);
  CHECK(train::first_number("is 12345. And 678") == "12345");
  CHECK(train::first_number("none") == "");
}

TEST_CASE("eval retrieval: options are checked") {
  train::RetrievalOptions o;
  o.lengths = {128};
  o.depths = {0.5};
  CHECK_NOTHROW(train::check_retrieval_options(o));
  const auto err = [&](train::RetrievalOptions bad) { return error_of([&] { train::check_retrieval_options(bad); }); };
  train::RetrievalOptions b = o;
  b.lengths = {};
  CHECK(err(b).find("--lengths: no context lengths") != std::string::npos);
  b = o;
  b.lengths = {128, 0};
  CHECK(err(b).find("--lengths: 0 is not a positive") != std::string::npos);
  b = o;
  b.lengths = {128, 128};
  CHECK(err(b).find("given twice") != std::string::npos);
  b = o;
  b.depths = {1.5};
  CHECK(err(b).find("--depths: 1.5 is outside [0, 1]") != std::string::npos);
  b = o;
  b.depths = {std::nan("")};
  CHECK(err(b).find("is outside [0, 1]") != std::string::npos);
  b = o;
  b.depths = {};
  CHECK(err(b).find("--depths: no depths") != std::string::npos);
  b = o;
  b.trials = 0;
  CHECK(err(b).find("--trials") != std::string::npos);
  CHECK(train::parse_retrieval_task("needle") == train::RetrievalTask::needle);
  CHECK_THROWS(train::parse_retrieval_task("haystack"));
}

TEST_CASE("eval retrieval: a grid of trials through the decode path, softmax and a linear student") {
  auto tok = data::load_tokenizer(kEval + "/llama-tok");
  for (const char* mixer : {"softmax", "hedgehog"}) {
    CAPTURE(mixer);
    nn::HFModelOptions mo;
    mo.mixer = nn::parse_mixer(mixer, "mixer");
    auto lm = nn::load_causal_lm(kEval + "/llama-tok", mo);
    train::RetrievalOptions o;
    o.task = train::RetrievalTask::passkey;
    o.lengths = {128, 200};
    o.depths = {0.0, 1.0};
    o.trials = 2;
    o.seed = 3;
    int64_t calls = 0;
    o.on_trial = [&](int64_t, int64_t total) {
      ++calls;
      CHECK(total == 8);
    };
    const train::RetrievalResult r = train::run_retrieval(*lm, *tok, o);
    CHECK(calls == 8);
    REQUIRE(r.trials.size() == 8);
    REQUIRE(r.cells.size() == 4);
    CHECK(r.cells[1].length == 128);
    CHECK(r.cells[1].depth == 1.0);
    CHECK(r.cells[2].length == 200);
    int64_t correct = 0;
    for (const train::RetrievalTrial& t : r.trials) {
      CHECK(t.prompt_tokens < t.length);
      CHECK(t.correct == (train::first_number(t.completion) == t.answer));
      correct += t.correct;
    }
    CHECK(r.correct == correct);
    for (const train::RetrievalCell& c : r.cells) CHECK(c.trials == 2);
    // The report: a row per length, a column per depth; the heat map is an SVG.
    const std::string table = train::retrieval_table(o, r);
    CHECK(table.find("| length \\ depth | 0 | 1 |") == 0);
    CHECK(table.find("\n| 128 |") != std::string::npos);
    CHECK(table.find("\n| 200 |") != std::string::npos);
    CHECK(train::retrieval_heatmap_svg(o, r).rfind("<svg", 0) == 0);
    const nlohmann::json j = nlohmann::json::parse(train::retrieval_results_json({}, o, r));
    CHECK(j["cells"].size() == 4);
    CHECK(j["trials"].size() == 8);
  }
  // A length beyond the model's positions is refused before any decoding.
  auto lm = nn::load_causal_lm(kEval + "/llama-tok");
  train::RetrievalOptions o;
  o.lengths = {600};
  o.depths = {0.5};
  CHECK(error_of([&] {
          train::run_retrieval(*lm, *tok, o);
        }).find("600 tokens is more than the model's 512 positions") != std::string::npos);
}

namespace {

// A decoder that reads its prompt through step() and then says `reply` (token ids), one per step:
// what a model that retrieves perfectly (or wrongly) does, to test the scoring of a trial.
class ScriptedLM : public nn::CausalLM {
 public:
  ScriptedLM(int64_t vocab, int64_t prompt_len, std::vector<int32_t> reply)
      : nn::CausalLM("scripted", "ScriptedLM", nn::HFConfig::parse("{}", "scripted"), {}),
        vocab_(vocab),
        prompt_len_(prompt_len),
        reply_(std::move(reply)) {}
  Tensor forward(const Tensor&, nn::TraceRequest*) override { fail("ScriptedLM: forward is not the decode path"); }
  Tensor hidden(const Tensor&, nn::TraceRequest*) override { fail("ScriptedLM: no hidden states"); }
  nn::DecodeState start_decoding() const override { return {}; }
  Tensor step(const Tensor& ids, nn::DecodeState& state) override {
    CHECK(ids.size(1) == 1);
    ++state.pos;
    const int64_t at = state.pos - prompt_len_;  // 0: the prompt's last token was just fed
    std::vector<float> logits(static_cast<size_t>(vocab_), 0.0f);
    if (at >= 0 && at < static_cast<int64_t>(reply_.size())) logits[static_cast<size_t>(reply_[at])] = 1.0f;
    return from_vector(logits, {1, 1, vocab_});
  }
  int64_t vocab_size() const override { return vocab_; }
  int64_t max_positions() const override { return -1; }
  int64_t num_layers() const override { return 0; }
  Tensor embed(const Tensor&) const override { fail("ScriptedLM: no layers"); }
  Tensor layer_forward(int64_t, const Tensor&, nn::TraceRequest*) const override { fail("ScriptedLM: no layers"); }
  std::vector<nn::AttentionSite> attention_sites() override { return {}; }

 private:
  int64_t vocab_, prompt_len_;
  std::vector<int32_t> reply_;
};

}  // namespace

TEST_CASE("eval retrieval: a trial is correct when the decoded number is the key") {
  auto tok = data::load_tokenizer(kEval + "/llama-tok");
  for (train::RetrievalTask task : {train::RetrievalTask::passkey, train::RetrievalTask::needle}) {
    CAPTURE(std::string(train::retrieval_task_name(task)));
    const train::RetrievalPrompt p = train::make_retrieval_prompt(*tok, task, 150, 0.5, 9, 0);
    train::RetrievalOptions o;
    o.task = task;
    o.lengths = {150};
    o.depths = {0.5};
    o.seed = 9;
    std::string wrong = p.answer;
    wrong.back() = wrong.back() == '9' ? '0' : static_cast<char>(wrong.back() + 1);
    // The key; a wrong last digit; a wrong number first (the first number decides).
    for (const std::string& said : {p.answer + ".", wrong + ".", "0 " + p.answer}) {
      CAPTURE(said);
      ScriptedLM lm(tok->vocab_size(), static_cast<int64_t>(p.ids.size()), tok->encode(" " + said, false));
      const train::RetrievalResult r = train::run_retrieval(lm, *tok, o);
      REQUIRE(r.trials.size() == 1);
      CHECK(r.trials[0].answer == p.answer);
      const bool right = said == p.answer + ".";
      if (right) CHECK(r.trials[0].completion.find(p.answer) != std::string::npos);
      CHECK(r.trials[0].correct == right);
      CHECK(r.cells[0].accuracy == (right ? 1.0 : 0.0));
      CHECK(r.accuracy == (right ? 1.0 : 0.0));
    }
  }
}

TEST_CASE("eval perplexity: evaluate_lm on strided windows and blocks equals transformers") {
  const nlohmann::json expected = nlohmann::json::parse(read_file(kEval + "/perplexity_expected.json"));
  const std::string text = read_file(kEval + "/text.txt");
  std::shared_ptr<Communicator> one = make_communicator("none");
  for (const char* name : {"llama-tok", "gpt2-tok"}) {
    CAPTURE(std::string(name));
    auto lm = nn::load_causal_lm(kEval + "/" + name);
    const std::vector<int32_t> ids = data::load_tokenizer(kEval + "/" + name)->encode(text, true);
    CHECK(static_cast<int64_t>(ids.size()) == expected[name]["ids"].get<int64_t>());
    for (const nlohmann::json& w : expected[name]["windows"]) {
      CAPTURE(w.dump());
      const train::LmEval e =
          train::evaluate_lm(*lm, ids, w["context"].get<int64_t>(), w["stride"].get<int64_t>(), 0, 3, *one);
      CHECK(e.tokens == w["tokens"].get<int64_t>());
      CHECK(std::fabs(e.loss - w["loss"].get<double>()) <= 1e-5 * w["loss"].get<double>());
    }
  }
}

TEST_CASE("eval retrieval: RULER's multi-key, multi-value and variable-tracking prompts") {
  auto tok = data::load_tokenizer(kEval + "/llama-tok");
  using train::RetrievalTask;
  const auto count = [](const std::string& s, const std::string& what) {
    int64_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  };
  for (RetrievalTask task : {RetrievalTask::multikey, RetrievalTask::multivalue, RetrievalTask::vt}) {
    CAPTURE(std::string(train::retrieval_task_name(task)));
    CHECK(train::parse_retrieval_task(train::retrieval_task_name(task)) == task);
    for (int64_t L : {260, 400})
      for (double depth : {0.0, 0.5, 1.0}) {
        const train::RetrievalPrompt p = train::make_retrieval_prompt(*tok, task, L, depth, 7, 0);
        CHECK(static_cast<int64_t>(p.ids.size()) + p.max_new_tokens <= L);
        CHECK(static_cast<int64_t>(p.ids.size()) + p.max_new_tokens > L - 40);
        CHECK(p.ids == tok->encode(p.text, true));
        CHECK(train::make_retrieval_prompt(*tok, task, L, depth, 7, 0).text == p.text);
        CHECK(train::make_retrieval_prompt(*tok, task, L, depth, 7, 1).answer != p.answer);
        CHECK(p.sentences > 0);
        for (const std::string& a : p.answers) CHECK(p.text.find(a) != std::string::npos);
        if (task == RetrievalTask::multikey) {
          // 4 needles, each its own word; the asked one's number is the answer, and it sits at the depth.
          REQUIRE(p.answers.size() == 1);
          CHECK(count(p.text, "One of the special magic numbers for ") == 4);
          const size_t q = p.text.find("What is the special magic number for ");
          REQUIRE(q != std::string::npos);
          const std::string word = p.text.substr(q + 37, p.text.find(' ', q + 37) - (q + 37));
          CHECK(p.text.find("One of the special magic numbers for " + word + " is: " + p.answers[0] + ".") !=
                std::string::npos);
          CHECK(count(p.text, "for " + word + " ") == 3);  // its needle and the question's two mentions
        } else if (task == RetrievalTask::multivalue) {
          REQUIRE(p.answers.size() == 4);
          CHECK(count(p.text, "One of the special magic numbers for ") == 4);
          CHECK(p.text.find("What are all the special magic numbers for ") != std::string::npos);
          CHECK(p.answer == p.answers[0] + ", " + p.answers[1] + ", " + p.answers[2] + ", " + p.answers[3]);
        } else {
          // A chain of 5 variables in order: VAR A = value, VAR B = VAR A, ...; the question names the value.
          REQUIRE(p.answers.size() == 5);
          size_t at = 0;
          for (size_t k = 0; k < 5; ++k) {
            const size_t line = p.text.find("VAR " + p.answers[k] + " = ", at);
            REQUIRE(line != std::string::npos);
            const std::string expect = "VAR " + p.answers[k] + " = VAR " + (k > 0 ? p.answers[k - 1] : "") + ".";
            if (k > 0) CHECK(p.text.compare(line, expect.size(), expect) == 0);
            at = line + 1;
          }
          const std::string value = train::first_number(p.text.substr(p.text.find("VAR " + p.answers[0] + " = ")));
          CHECK(value.size() == 5);
          CHECK(p.text.find("Question: Find all variables that are assigned the value " + value + " in the text above.") !=
                std::string::npos);
          CHECK(p.text.size() > p.text.rfind("they are:") + 8);  // nothing after the question
          CHECK(p.text.substr(p.text.size() - 9) == "they are:");
        }
      }
    // Too short for the template: an error naming the task and the shortest length.
    const std::string msg = error_of([&] { train::make_retrieval_prompt(*tok, task, 60, 0.5, 0, 0); });
    CHECK(msg.find(std::string("length 60 is too short for the ") + train::retrieval_task_name(task) + " prompt") !=
          std::string::npos);
  }
  // The same prompts on every run and machine: fixed seeds give these texts (FNV-1a 64 of the bytes).
  const auto fnv = [](const std::string& s) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
  };
  const std::vector<std::pair<RetrievalTask, uint64_t>> golden{{RetrievalTask::passkey, 11579423425146148653ull},
                                                                {RetrievalTask::needle, 8454255846295895800ull},
                                                                {RetrievalTask::multikey, 17543726993738847928ull},
                                                                {RetrievalTask::multivalue, 3013591631782985662ull},
                                                                {RetrievalTask::vt, 2864488606046046442ull}};
  for (const auto& g : golden) {  // clang 14 cannot capture a structured binding in doctest's macros
    CAPTURE(std::string(train::retrieval_task_name(g.first)));
    CHECK(fnv(train::make_retrieval_prompt(*tok, g.first, 300, 0.25, 5, 2).text) == g.second);
  }
  CHECK(error_of([&] { train::parse_retrieval_task("niah"); }).find("passkey, needle, niah_multikey, niah_multivalue, vt") !=
        std::string::npos);
}

TEST_CASE("eval retrieval: RULER's string_match_all scores right, partly right and wrong completions") {
  using train::RetrievalTask;
  const std::vector<std::string> values{"1234567", "2345678", "3456789", "4567890"};
  CHECK(train::retrieval_score(RetrievalTask::multivalue, values, " 1234567, 2345678, 3456789 and 4567890.") == 1.0);
  CHECK(train::retrieval_score(RetrievalTask::multivalue, values, " 4567890, 1234567") == 0.5);
  CHECK(train::retrieval_score(RetrievalTask::multivalue, values, " 123456, 99") == 0.0);
  const std::vector<std::string> vars{"ABCDE", "FGHIJ", "KLMNO", "PQRST", "UVWXY"};
  CHECK(train::retrieval_score(RetrievalTask::vt, vars, " abcde fghij KLMNO PQRST UVWXY") == 1.0);  // case insensitive
  CHECK(train::retrieval_score(RetrievalTask::vt, vars, " ABCDE KLMNO") == doctest::Approx(0.4));
  CHECK(train::retrieval_score(RetrievalTask::multikey, {"7654321"}, " the number is 7654321.") == 1.0);
  CHECK(train::retrieval_score(RetrievalTask::multikey, {"7654321"}, " 765432") == 0.0);
  // passkey and needle keep their rule: the first number decides.
  CHECK(train::retrieval_score(RetrievalTask::needle, {"7654321"}, " 1 then 7654321") == 0.0);
  CHECK(train::retrieval_score(RetrievalTask::passkey, {"12345"}, " 12345.") == 1.0);
  // Through run_retrieval: a model that says half the values scores 0.5 and is not correct.
  auto tok = data::load_tokenizer(kEval + "/llama-tok");
  const train::RetrievalPrompt p = train::make_retrieval_prompt(*tok, RetrievalTask::multivalue, 300, 0.5, 4, 0);
  train::RetrievalOptions o;
  o.task = RetrievalTask::multivalue;
  o.lengths = {300};
  o.depths = {0.5};
  o.seed = 4;
  for (const auto& case_ : std::vector<std::pair<std::string, double>>{
           {p.answer, 1.0}, {p.answers[2] + ", " + p.answers[0], 0.5}, {"none", 0.0}}) {
    const std::string& said = case_.first;
    const double score = case_.second;
    CAPTURE(said);
    ScriptedLM lm(tok->vocab_size(), static_cast<int64_t>(p.ids.size()), tok->encode(" " + said, false));
    const train::RetrievalResult r = train::run_retrieval(lm, *tok, o);
    REQUIRE(r.trials.size() == 1);
    CHECK(r.trials[0].score == score);
    CHECK(r.trials[0].correct == (score == 1.0));
    CHECK(r.cells[0].accuracy == score);
    CHECK(r.accuracy == score);
    const nlohmann::json j = nlohmann::json::parse(train::retrieval_results_json({}, o, r));
    CHECK(j["trials"][0]["score"] == score);
    CHECK(j["trials"][0]["answers"].size() == 4);
  }
}
