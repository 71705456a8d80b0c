#include "experiments/convert/convert_lm.h"

#include <cmath>
#include <utility>

#include "autograd/grad_mode.h"
#include "autograd/ops/nn.h"
#include "autograd/ops/shape.h"

namespace hh::train {

LmConversionTask::LmConversionTask(std::shared_ptr<nn::CausalLM> model, Windows train, Windows val, Windows test,
                                   LmTaskConfig cfg)
    : model_(std::move(model)), train_(std::move(train)), val_(std::move(val)), test_(std::move(test)), cfg_(cfg) {
  HH_CHECK(model_ != nullptr, "LmConversionTask: no model");
  HH_CHECK(train_ && val_ && test_, "LmConversionTask: a split has no windows");
  HH_CHECK(cfg.batch >= 1, "LmConversionTask: batch must be >= 1, got ", cfg.batch);
  const char* names[] = {"train", "validation", "test"};
  const data::LmWindows* w[] = {train_.get(), val_.get(), test_.get()};
  for (int k = 0; k < 3; ++k) {
    HH_CHECK(w[k]->size() >= 1, "LmConversionTask: the ", names[k], " split has no window (too few tokens)");
    HH_CHECK(w[k]->context == train_->context, "LmConversionTask: the ", names[k], " windows have context ",
             w[k]->context, ", the training windows ", train_->context);
  }
  const int64_t P = model_->max_positions();
  HH_CHECK(P < 0 || train_->context <= P, "LmConversionTask: context ", train_->context, " exceeds the model's ", P,
           " positions");
  train_batches_ = RowBatches(train_->size(), cfg.batch, true, cfg.seed);
  val_batches_ = RowBatches(val_->size(), cfg.batch, false, 0);
  test_batches_ = RowBatches(test_->size(), cfg.batch, false, 0);
}

const data::LmWindows& LmConversionTask::windows(Split s) const {
  return s == Split::train ? *train_ : s == Split::val ? *val_ : *test_;
}
const RowBatches& LmConversionTask::batches_of(Split s) const {
  return s == Split::train ? train_batches_ : s == Split::val ? val_batches_ : test_batches_;
}

void LmConversionTask::batch(Split s, int64_t i, Tensor& inputs, Tensor& targets) const {
  const std::vector<int64_t> rows = batches_of(s).rows(i);
  const data::LmWindows& w = windows(s);
  Tensor tok = w.tokens(rows, cfg_.pad_id);                      // (B, L+1)
  inputs = slice(tok, 1, 0, w.context).contiguous().to(cfg_.device);  // the model reads the first L
  targets = w.targets(rows).to(cfg_.device);                     // (B, L), -100 where not scored
}

Tensor LmConversionTask::loss(Split s, int64_t i, nn::TraceRequest* trace) {
  Tensor inputs, targets;
  batch(s, i, inputs, targets);
  Tensor logits = model_->forward(inputs, trace);  // (B,L,V)
  return cross_entropy(reshape(logits, {-1, logits.size(2)}), reshape(targets, {-1}), data::kLmIgnoreIndex);
}

void LmConversionTask::trace(Split s, int64_t i, nn::TraceRequest& trace) {
  Tensor inputs, targets;
  batch(s, i, inputs, targets);
  model_->hidden(inputs, &trace);
}

int64_t LmConversionTask::tokens(Split s, int64_t i) const {
  const data::LmWindows& w = windows(s);
  int64_t n = 0;
  for (int64_t v : to_vector<int64_t>(w.targets(batches_of(s).rows(i)))) n += v != data::kLmIgnoreIndex;
  return n;
}

Metrics LmConversionTask::evaluate(Split s) {
  NoGradGuard no_grad;
  model_->eval();
  double nll = 0;
  int64_t scored = 0;
  for (int64_t i = 0; i < batches(s); ++i) {
    Tensor inputs, targets;
    batch(s, i, inputs, targets);
    Tensor logits = model_->forward(inputs);
    Tensor sum = cross_entropy(reshape(logits, {-1, logits.size(2)}), reshape(targets, {-1}), data::kLmIgnoreIndex,
                               0.0, Reduction::sum);
    nll += sum.to(Device::cpu()).to(DType::f64).item<double>();
    scored += tokens(s, i);
  }
  HH_CHECK(scored > 0, "LmConversionTask: no scored token in the split");
  const double mean = nll / static_cast<double>(scored);
  return {{"perplexity", std::exp(mean)}, {"nll", mean}};
}

std::vector<int32_t> encode_corpus(const std::string& text, const data::Tokenizer& tok, int64_t max_tokens) {
  if (max_tokens <= 0) return tok.encode(text, false);
  size_t bytes = static_cast<size_t>(max_tokens) * 8;  // English BPE: ~4 bytes a token
  for (;;) {
    size_t cut = bytes >= text.size() ? text.size() : text.find('\n', bytes);
    if (cut == std::string::npos) cut = text.size();
    std::vector<int32_t> ids = tok.encode(std::string_view(text).substr(0, cut), false);
    if (static_cast<int64_t>(ids.size()) >= max_tokens || cut == text.size()) {
      if (static_cast<int64_t>(ids.size()) > max_tokens) ids.resize(static_cast<size_t>(max_tokens));
      return ids;
    }
    bytes *= 2;
  }
}

}  // namespace hh::train
