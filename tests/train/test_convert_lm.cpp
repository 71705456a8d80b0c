// The causal-LM conversion tasks (experiments/convert/convert_lm, experiments/convert/convert_samsum) on the committed fixtures:
// windows and targets, perplexity against an independent computation and transformers' own value,
// SAMSum encoding and loss masks, greedy generation against step decoding by hand and against the
// full forward, the ROUGE wiring, and a one-epoch conversion of a small GPT-2.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "experiments/convert/convert_lm.h"
#include "train/convert/convert_report.h"
#include "experiments/convert/convert_samsum.h"
#include "train/task_metrics.h"

using namespace hh;

namespace {

const std::string kWiki = std::string(HH_SOURCE_DIR) + "/tests/fixtures/wikitext";
const std::string kGpt2 = kWiki + "/gpt2-bytes";
const std::string kLlama = std::string(HH_SOURCE_DIR) + "/tests/fixtures/hf/llama-tiny-tok";
const std::string kSamsum = std::string(HH_SOURCE_DIR) + "/tests/fixtures/samsum";

std::shared_ptr<nn::CausalLM> load(const std::string& folder, const std::string& mixer = "softmax") {
  nn::HFModelOptions o;
  o.mixer = nn::parse_mixer(mixer, "test");
  o.seed = 3;
  return nn::load_causal_lm(folder, o);
}

struct Wiki {
  std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer(kGpt2);
  std::vector<int32_t> train_ids = tok->encode(data::read_text_file(kWiki + "/wiki.train.raw"), false);
  std::vector<int32_t> val_ids = tok->encode(data::read_text_file(kWiki + "/wiki.valid.raw"), false);
  std::unique_ptr<train::LmConversionTask> task(const std::string& mixer, int64_t context, int64_t stride,
                                                int64_t batch = 4) const {
    auto tr = std::make_shared<const data::LmWindows>(data::lm_blocks(train_ids, context));
    auto va = std::make_shared<const data::LmWindows>(data::lm_strided(val_ids, context, stride));
    train::LmTaskConfig c;
    c.batch = batch;
    return std::make_unique<train::LmConversionTask>(load(kGpt2, mixer), tr, va, va, c);
  }
};

// Σ -log softmax(logits)[target] over the targets != -100, in double.
double nll_sum(const Tensor& logits, const Tensor& targets, int64_t& count) {
  const int64_t V = logits.size(-1);
  const auto lg = to_vector<double>(reshape(logits, {-1, V}));
  const auto tg = to_vector<int64_t>(reshape(targets, {-1}));
  double s = 0;
  for (size_t r = 0; r < tg.size(); ++r) {
    if (tg[r] == -100) continue;
    double m = -1e300, z = 0;
    for (int64_t v = 0; v < V; ++v) m = std::max(m, lg[r * V + v]);
    for (int64_t v = 0; v < V; ++v) z += std::exp(lg[r * V + v] - m);
    s += -(lg[r * V + static_cast<size_t>(tg[r])] - m - std::log(z));
    ++count;
  }
  return s;
}

}  // namespace

TEST_CASE("convert_lm: training windows and targets, loss = next-token cross-entropy") {
  Wiki w;
  auto task = w.task("softmax", 16, 8);
  const int64_t T = static_cast<int64_t>(w.train_ids.size());
  CHECK(task->batches(train::Split::train) == ((T - 1) / 16 + 3) / 4);
  // Batch 0 of the validation split (not shuffled): window 0 reads ids[0..16) and scores ids[1..16].
  int64_t count = 0;
  const auto& ids = w.val_ids;
  std::vector<int64_t> x(ids.begin(), ids.begin() + 16), y(ids.begin() + 1, ids.begin() + 17);
  NoGradGuard ng;
  Tensor logits = task->lm().forward(from_vector(x, {1, 16}));
  const double ref = nll_sum(logits, from_vector(y, {1, 16}), count);
  CHECK(count == 16);
  // The task's loss on a batch of the first window alone equals that mean.
  auto one = w.task("softmax", 16, 8, 1);
  CHECK(one->loss(train::Split::val, 0, nullptr).item<double>() == doctest::Approx(ref / 16).epsilon(1e-5));
  CHECK(one->tokens(train::Split::val, 0) == 16);
  CHECK(one->tokens(train::Split::val, 1) == 8);  // the second window scores only its last 8
}

TEST_CASE("convert_lm: perplexity is exp of the mean NLL, and matches transformers on the fixture") {
  Wiki w;
  auto task = w.task("softmax", 32, 16, 3);
  const train::Metrics m = task->evaluate(train::Split::val);
  REQUIRE(m.size() == 2);
  CHECK(m[0].first == "perplexity");
  CHECK(!task->higher_is_better());
  // Independently: every strided window through forward, NLL summed in double over scored targets.
  const auto va = data::lm_strided(w.val_ids, 32, 16);
  double s = 0;
  int64_t count = 0;
  NoGradGuard ng;
  for (int64_t k = 0; k < va.size(); ++k) {
    Tensor tok = va.tokens({k});
    s += nll_sum(task->lm().forward(slice(tok, 1, 0, 32).contiguous()), va.targets({k}), count);
  }
  CHECK(count == static_cast<int64_t>(w.val_ids.size()) - 1);
  CHECK(m[1].second == doctest::Approx(s / static_cast<double>(count)).epsilon(1e-5));
  CHECK(m[0].second == doctest::Approx(std::exp(s / static_cast<double>(count))).epsilon(1e-5));
  // transformers' value on the same windows (tools/make_lm_fixtures.py).
  std::ifstream f(kGpt2 + "/reference.json");
  const auto ref = nlohmann::json::parse(f);
  CHECK(ref["valid_scored"].get<int64_t>() == count);
  CHECK(m[0].second == doctest::Approx(ref["valid_perplexity"].get<double>()).epsilon(1e-4));
}

TEST_CASE("convert_lm: encode_corpus with a token budget is a prefix of the whole encoding") {
  Wiki w;
  const std::string text = data::read_text_file(kWiki + "/wiki.train.raw");
  const auto part = train::encode_corpus(text, *w.tok, 100);
  REQUIRE(part.size() == 100);
  CHECK(std::equal(part.begin(), part.end() - 1, w.train_ids.begin()));
  CHECK(train::encode_corpus(text, *w.tok, 0) == w.train_ids);
  CHECK(train::encode_corpus(text, *w.tok, 1 << 30) == w.train_ids);
}

TEST_CASE("convert_lm: the task refuses a context longer than the model's positions") {
  Wiki w;
  CHECK_THROWS_WITH(w.task("softmax", 65, 8), doctest::Contains("exceeds the model's 64 positions"));
}

TEST_CASE("convert_lm: one epoch of conversion on a small GPT-2 lowers the KL and keeps a finite perplexity") {
  Wiki w;
  auto task = w.task("hedgehog", 32, 16, 8);
  const double kl0 = train::measure_fidelity(*task, train::Split::val, 0, true).kl_mean;
  train::ConvertConfig cfg;
  cfg.quiet = true;
  cfg.distill.epochs = 1;
  cfg.finetune.epochs = 1;
  cfg.finetune.lr = 1e-3;
  const train::ConvertResult r = train::convert(*task, cfg);
  CHECK(r.distill.steps == task->batches(train::Split::train));
  const double kl1 = train::measure_fidelity(*task, train::Split::val, 0, true).kl_mean;
  CHECK(kl1 < kl0);
  REQUIRE(!r.finetuned.empty());
  CHECK(std::isfinite(r.finetuned[0].second));
  CHECK(r.finetuned[0].second < r.swapped[0].second);  // finetuning lowers the swapped model's perplexity
}

// ---- SAMSum ----

TEST_CASE("convert_samsum: ids are bos + prompt + summary + eos, the loss only on the summary and eos") {
  auto tok = data::load_tokenizer(kLlama);
  const auto train = data::read_samsum(kSamsum + "/train.json");
  const train::SamsumRow r = train::encode_samsum(*tok, train[1], 64, 63);
  const auto prompt = tok->encode(data::samsum_prompt(train[1]), true);
  const auto summary = tok->encode(train[1].summary, false);
  CHECK(prompt.front() == tok->bos_id());
  REQUIRE(r.ids.size() == prompt.size() + summary.size() + 1);
  CHECK(std::equal(prompt.begin(), prompt.end(), r.ids.begin()));
  CHECK(std::equal(summary.begin(), summary.end(), r.ids.begin() + static_cast<int64_t>(prompt.size())));
  CHECK(r.ids.back() == tok->eos_id());
  CHECK(r.prompt_len == static_cast<int64_t>(prompt.size()));
  CHECK(r.prompt == prompt);
  // Cut to 50: the summary loses its end; a cut inside the prompt leaves nothing to score.
  CHECK(train::encode_samsum(*tok, train[1], 50, 63).ids.size() == 50);
  CHECK(!train::encode_samsum(*tok, train[1], 20, 63).scored());
  // A long generation prompt keeps BOS and its last tokens.
  const auto cut = train::encode_samsum(*tok, train[1], 64, 10).prompt;
  REQUIRE(cut.size() == 10);
  CHECK(cut[0] == tok->bos_id());
  CHECK(std::equal(cut.begin() + 1, cut.end(), prompt.end() - 9));

  // Batches: inputs ids[0..n-1), targets ids[j+1] from the prompt's last token on, -100 elsewhere.
  std::shared_ptr<const data::Tokenizer> stok(tok.release());
  const auto val = data::read_samsum(kSamsum + "/val.json"), test = data::read_samsum(kSamsum + "/test.json");
  auto d = std::make_shared<const train::SamsumData>(train::make_samsum_data(*stok, train, val, test, 64, 63));
  train::SamsumTaskConfig c;
  c.batch = 2;
  c.eos_id = stok->eos_id();
  c.pad_id = 0;
  train::SamsumConversionTask task(load(kLlama), stok, d, c);
  Tensor in, tg;
  task.batch(train::Split::val, 0, in, tg);  // val rows 0 and 1
  const int64_t L = in.size(1);
  const auto iv = to_vector<int64_t>(in), tv = to_vector<int64_t>(tg);
  int64_t longest = 0;
  for (int b = 0; b < 2; ++b) {
    const train::SamsumRow& row = d->val[static_cast<size_t>(b)];
    const int64_t n = static_cast<int64_t>(row.ids.size()) - 1;
    longest = std::max(longest, n);
    for (int64_t j = 0; j < L; ++j) {
      const size_t k = static_cast<size_t>(b * L + j);
      CHECK(iv[k] == (j < n ? row.ids[static_cast<size_t>(j)] : 0));
      CHECK(tv[k] == (j < n && j + 1 >= row.prompt_len ? row.ids[static_cast<size_t>(j + 1)] : -100));
    }
  }
  CHECK(L == longest);
  CHECK(task.tokens(train::Split::val, 0) == static_cast<int64_t>(d->val[0].ids.size() + d->val[1].ids.size() - 2));
  CHECK(std::isfinite(task.loss(train::Split::val, 0, nullptr).item<double>()));
}

TEST_CASE("convert_samsum: greedy generation equals step decoding by hand and the full forward") {
  for (const std::string mixer : {"softmax", "hedgehog"}) {
    CAPTURE(mixer);
    auto lm = load(kLlama, mixer);
    const std::vector<int32_t> prompt = {1, 705, 330, 500, 329};
    const auto g = train::greedy_generate(*lm, prompt, 12, -1);  // no end token: 12 tokens
    REQUIRE(g.size() == 12);
    // By hand with step().
    NoGradGuard ng;
    nn::DecodeState st = lm->start_decoding();
    int64_t next = 0;
    for (int32_t id : prompt) next = argmax(reshape(lm->step(from_vector(std::vector<int64_t>{id}, {1, 1}), st), {-1}), 0).item<int64_t>();
    for (size_t k = 0; k < g.size(); ++k) {
      CHECK(g[k] == next);
      next = argmax(reshape(lm->step(from_vector(std::vector<int64_t>{g[k]}, {1, 1}), st), {-1}), 0).item<int64_t>();
    }
    // The full forward over prompt + generated: each generated token is the argmax of the position before.
    std::vector<int64_t> seq(prompt.begin(), prompt.end());
    seq.insert(seq.end(), g.begin(), g.end());
    Tensor logits = lm->forward(from_vector(seq, {1, static_cast<int64_t>(seq.size())}));
    const auto am = to_vector<int64_t>(argmax(logits, -1));
    for (size_t k = 0; k < g.size(); ++k) CHECK(am[prompt.size() - 1 + k] == g[k]);
    // Cut at the first end token: with eos = g[3], three tokens come back.
    const auto cut = train::greedy_generate(*lm, prompt, 12, g[3]);
    CHECK(cut == std::vector<int32_t>(g.begin(), g.begin() + static_cast<int64_t>(std::find(g.begin(), g.end(), g[3]) - g.begin())));
    // The model's 64 positions end generation: a 60-token prompt gets at most 5 tokens.
    std::vector<int32_t> long_prompt(60, 705);
    CHECK(train::greedy_generate(*lm, long_prompt, 100, -1).size() == 5);
  }
}

TEST_CASE("convert_samsum: evaluate is rouge_corpus of the generated summaries against the references") {
  std::shared_ptr<const data::Tokenizer> tok(data::load_tokenizer(kLlama).release());
  const auto tr = data::read_samsum(kSamsum + "/train.json"), va = data::read_samsum(kSamsum + "/val.json"),
             te = data::read_samsum(kSamsum + "/test.json");
  auto d = std::make_shared<const train::SamsumData>(train::make_samsum_data(*tok, tr, va, te, 60, 59));
  CHECK(d->cut == 2);  // train t1 (63 tokens) and t3 (61) are longer than 60 with their summary
  train::SamsumTaskConfig c;
  c.eos_id = tok->eos_id();
  c.max_new_tokens = 6;
  c.max_eval = 1;
  auto lm = load(kLlama);
  train::SamsumConversionTask task(lm, tok, d, c);
  const train::Metrics m = task.evaluate(train::Split::test);
  REQUIRE(task.predictions().size() == 1);  // max_eval
  const auto expect = tok->decode(train::greedy_generate(*lm, d->test[0].prompt, 6, tok->eos_id()), true);
  CHECK(task.predictions()[0] == expect);
  const train::Rouge r = train::rouge_corpus({expect}, {te[0].summary});
  REQUIRE(m.size() == 3);
  CHECK(m[0] == std::make_pair(std::string("rouge1"), r.rouge1.f1));
  CHECK(m[1] == std::make_pair(std::string("rouge2"), r.rouge2.f1));
  CHECK(m[2] == std::make_pair(std::string("rougeL"), r.rougeL.f1));
}

TEST_CASE("convert_lm: one epoch of distillation and finetuning on gpt2-tiny (an id stream, no tokenizer)") {
  // gpt2-tiny (5 heads, vocab 101, 32 positions): windows over a fixed pseudo-random stream.
  std::vector<int32_t> ids;
  for (int i = 0; i < 600; ++i) ids.push_back(static_cast<int32_t>((i * 37 + (i / 7) * 11) % 101));
  const std::vector<int32_t> val(ids.begin(), ids.begin() + 120);
  auto tr = std::make_shared<const data::LmWindows>(data::lm_blocks(ids, 16));
  auto va = std::make_shared<const data::LmWindows>(data::lm_strided(val, 16, 8));
  train::LmTaskConfig c;
  c.batch = 8;
  train::LmConversionTask task(load(std::string(HH_SOURCE_DIR) + "/tests/fixtures/hf/gpt2-tiny", "hedgehog"), tr, va,
                               va, c);
  std::map<std::string, std::vector<float>> before;
  for (auto& [name, t] : task.model().state_dict()) before[name] = to_vector<float>(t);
  train::ConvertConfig cfg;
  cfg.quiet = true;
  cfg.distill.epochs = 1;
  cfg.finetune.epochs = 0;
  const train::ConvertResult r = train::convert(task, cfg);
  CHECK(r.distill.steps == 5);  // 37 windows of 16 in batches of 8
  CHECK(r.distill.tokens == 37 * 16);
  int changed = 0;
  for (const auto& kv : task.model().state_dict()) {
    const std::string& name = kv.first;
    const bool same = to_vector<float>(kv.second) == before[name];
    if (train::is_feature_map_param(name)) changed += !same;
    else CHECK_MESSAGE(same, name);  // stage 1 leaves every teacher weight bit for bit
  }
  CHECK(changed == 4);  // weight and bias of the map in each of the 2 layers
  REQUIRE(!r.distilled.empty());
  CHECK(std::isfinite(r.distilled[0].second));
}

TEST_CASE("convert_report: the recovered fraction of a lower-is-better metric is teacher / student") {
  train::ConversionReport rep;
  rep.percent = false;
  rep.higher_is_better = false;
  rep.teacher = {{"perplexity", 10.0}};
  train::ConversionOutcome o;
  o.row = {"Hedgehog", nn::parse_mixer("hedgehog", "test"), true};
  o.test = {{"perplexity", 12.5}};
  o.result.swapped = {{"perplexity", 20.0}};
  rep.rows.push_back(o);
  const std::string table = train::conversion_table(rep);
  CAPTURE(table);
  CHECK(table.find("Hedgehog                      12.50    80.0%") != std::string::npos);
  rep.higher_is_better = true;
  CHECK(train::conversion_table(rep).find("12.50   125.0%") != std::string::npos);
}
