#include "experiments/convert/convert_samsum.h"

#include <algorithm>
#include <utility>

#include "autograd/grad_mode.h"
#include "autograd/ops/nn.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "nn/models/generate.h"
#include "train/task_metrics.h"

namespace hh::train {

SamsumRow encode_samsum(const data::Tokenizer& tok, const data::SamsumExample& ex, int64_t max_length,
                        int64_t prompt_limit) {
  HH_CHECK(max_length >= 2, "encode_samsum: max_length must be >= 2, got ", max_length);
  HH_CHECK(prompt_limit >= 2, "encode_samsum: the prompt limit must be >= 2, got ", prompt_limit);
  HH_CHECK(tok.eos_id() >= 0, "encode_samsum: the tokenizer has no end token");
  SamsumRow r;
  r.prompt = tok.encode(data::samsum_prompt(ex), true);  // bos + prompt
  r.prompt_len = static_cast<int64_t>(r.prompt.size());
  r.ids = r.prompt;
  const std::vector<int32_t> summary = tok.encode(ex.summary, false);
  r.ids.insert(r.ids.end(), summary.begin(), summary.end());
  r.ids.push_back(tok.eos_id());
  if (static_cast<int64_t>(r.ids.size()) > max_length) r.ids.resize(static_cast<size_t>(max_length));
  r.prompt_len = std::min<int64_t>(r.prompt_len, static_cast<int64_t>(r.ids.size()));
  if (static_cast<int64_t>(r.prompt.size()) > prompt_limit) {
    std::vector<int32_t> p = {r.prompt.front()};
    p.insert(p.end(), r.prompt.end() - (prompt_limit - 1), r.prompt.end());
    r.prompt = std::move(p);
  }
  r.reference = ex.summary;
  return r;
}

SamsumData make_samsum_data(const data::Tokenizer& tok, const std::vector<data::SamsumExample>& train,
                            const std::vector<data::SamsumExample>& val, const std::vector<data::SamsumExample>& test,
                            int64_t max_length, int64_t prompt_limit) {
  SamsumData d;
  const auto encode = [&](const std::vector<data::SamsumExample>& exs, std::vector<SamsumRow>& rows, bool count) {
    for (const auto& ex : exs) {
      rows.push_back(encode_samsum(tok, ex, max_length, prompt_limit));
      const SamsumRow& r = rows.back();
      if (!count) continue;
      const int64_t full = static_cast<int64_t>(tok.encode(data::samsum_prompt(ex), true).size() +
                                                tok.encode(ex.summary, false).size() + 1);
      d.cut += full > max_length;
      d.dropped += !r.scored();
    }
  };
  encode(train, d.train, true);
  encode(val, d.val, true);
  encode(test, d.test, false);
  return d;
}

std::vector<int32_t> greedy_generate(nn::CausalLM& lm, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                                     int32_t eos) {
  nn::Sampler greedy(nn::SamplingOptions{0.0, 0, 1.0, 0});
  nn::GenerateOptions o;
  o.max_new_tokens = max_new_tokens;
  if (eos >= 0) o.eos = {eos};
  o.keep_eos = false;
  const nn::Generation g = nn::generate(lm, std::vector<int64_t>(prompt.begin(), prompt.end()), greedy, o);
  return std::vector<int32_t>(g.ids.begin(), g.ids.end());
}

SamsumConversionTask::SamsumConversionTask(std::shared_ptr<nn::CausalLM> model,
                                           std::shared_ptr<const data::Tokenizer> tok,
                                           std::shared_ptr<const SamsumData> data, SamsumTaskConfig cfg)
    : model_(std::move(model)), tok_(std::move(tok)), data_(std::move(data)), cfg_(cfg) {
  HH_CHECK(model_ && tok_ && data_, "SamsumConversionTask: no model, tokenizer or data");
  HH_CHECK(cfg.batch >= 1, "SamsumConversionTask: batch must be >= 1, got ", cfg.batch);
  HH_CHECK(cfg.max_new_tokens >= 1, "SamsumConversionTask: max_new_tokens must be >= 1");
  HH_CHECK(cfg.eos_id >= 0, "SamsumConversionTask: no end token id");
  const char* names[] = {"train", "validation", "test"};
  for (int k = 0; k < 3; ++k) {
    const auto& rows = rows_of(static_cast<Split>(k));
    for (size_t r = 0; r < rows.size(); ++r)
      if (rows[r].scored()) loss_rows_[k].push_back(static_cast<int64_t>(r));
    HH_CHECK(!loss_rows_[k].empty(), "SamsumConversionTask: the ", names[k],
             " split has no dialogue with a summary token inside max_length");
  }
  const int64_t P = model_->max_positions();
  for (const auto* rows : {&data_->train, &data_->val, &data_->test})
    for (const auto& r : *rows)
      HH_CHECK(P < 0 || static_cast<int64_t>(r.ids.size()) <= P + 1, "SamsumConversionTask: a sequence of ",
               r.ids.size(), " tokens exceeds the model's ", P, " positions (lower max_length)");
  train_batches_ = RowBatches(static_cast<int64_t>(loss_rows_[0].size()), cfg.batch, true, cfg.seed);
  val_batches_ = RowBatches(static_cast<int64_t>(loss_rows_[1].size()), cfg.batch, false, 0);
  test_batches_ = RowBatches(static_cast<int64_t>(loss_rows_[2].size()), cfg.batch, false, 0);
}

const std::vector<SamsumRow>& SamsumConversionTask::rows_of(Split s) const {
  return s == Split::train ? data_->train : s == Split::val ? data_->val : data_->test;
}
const RowBatches& SamsumConversionTask::batches_of(Split s) const {
  return s == Split::train ? train_batches_ : s == Split::val ? val_batches_ : test_batches_;
}
const std::vector<int64_t>& SamsumConversionTask::loss_rows_of(Split s) const {
  return loss_rows_[static_cast<int>(s)];
}

void SamsumConversionTask::batch(Split s, int64_t i, Tensor& inputs, Tensor& targets) const {
  const auto& rows = rows_of(s);
  std::vector<const SamsumRow*> picked;
  int64_t L = 1;
  for (int64_t k : batches_of(s).rows(i)) {
    picked.push_back(&rows[static_cast<size_t>(loss_rows_of(s)[static_cast<size_t>(k)])]);
    L = std::max<int64_t>(L, static_cast<int64_t>(picked.back()->ids.size()) - 1);
  }
  const int64_t B = static_cast<int64_t>(picked.size());
  std::vector<int64_t> in(static_cast<size_t>(B * L), cfg_.pad_id), tg(static_cast<size_t>(B * L), -100);
  for (int64_t b = 0; b < B; ++b) {
    const SamsumRow& r = *picked[static_cast<size_t>(b)];
    const int64_t n = static_cast<int64_t>(r.ids.size()) - 1;  // inputs ids[0..n), targets ids[1..n]
    for (int64_t j = 0; j < n; ++j) {
      in[static_cast<size_t>(b * L + j)] = r.ids[static_cast<size_t>(j)];
      if (j + 1 >= r.prompt_len) tg[static_cast<size_t>(b * L + j)] = r.ids[static_cast<size_t>(j + 1)];
    }
  }
  inputs = from_vector(in, {B, L}).to(cfg_.device);
  targets = from_vector(tg, {B, L}).to(cfg_.device);
}

Tensor SamsumConversionTask::loss(Split s, int64_t i, nn::TraceRequest* trace) {
  Tensor inputs, targets;
  batch(s, i, inputs, targets);
  Tensor logits = model_->forward(inputs, trace);
  return cross_entropy(reshape(logits, {-1, logits.size(2)}), reshape(targets, {-1}), -100);
}

void SamsumConversionTask::trace(Split s, int64_t i, nn::TraceRequest& trace) {
  Tensor inputs, targets;
  batch(s, i, inputs, targets);
  model_->hidden(inputs, &trace);
}

int64_t SamsumConversionTask::tokens(Split s, int64_t i) const {
  int64_t n = 0;
  for (int64_t k : batches_of(s).rows(i))
    n += static_cast<int64_t>(rows_of(s)[static_cast<size_t>(loss_rows_of(s)[static_cast<size_t>(k)])].ids.size()) - 1;
  return n;
}

Metrics SamsumConversionTask::evaluate(Split s) {
  model_->eval();
  const auto& rows = rows_of(s);
  const size_t n = cfg_.max_eval > 0 ? std::min(rows.size(), static_cast<size_t>(cfg_.max_eval)) : rows.size();
  predictions_.clear();
  std::vector<std::string> refs;
  for (size_t k = 0; k < n; ++k) {
    predictions_.push_back(tok_->decode(greedy_generate(*model_, rows[k].prompt, cfg_.max_new_tokens, cfg_.eos_id), true));
    refs.push_back(rows[k].reference);
  }
  HH_CHECK(!refs.empty(), "SamsumConversionTask: no dialogue to evaluate");
  const Rouge r = rouge_corpus(predictions_, refs);
  return {{"rouge1", r.rouge1.f1}, {"rouge2", r.rouge2.f1}, {"rougeL", r.rougeL.f1}};
}

}  // namespace hh::train
