#include "experiments/ar/ar_convert.h"

#include <utility>

#include "experiments/ar/ar_experiment.h"

namespace hh::train {

ArConversionTask::ArConversionTask(std::shared_ptr<nn::DecoderLM> model, const ArConfig& data, ArSplit train,
                                   ArSplit val, ArSplit test, ArTaskConfig cfg)
    : model_(std::move(model)),
      data_(data),
      train_(std::move(train)),
      val_(std::move(val)),
      test_(std::move(test)),
      cfg_(cfg) {
  HH_CHECK(model_ != nullptr, "ArConversionTask: no model");
  HH_CHECK(cfg.batch >= 1, "ArConversionTask: batch must be >= 1, got ", cfg.batch);
  train_targets_ = ar_training_targets(train_.inputs, train_.targets, data_, cfg.targets);
  train_batches_ = RowBatches(train_.inputs.size(0), cfg.batch, true, cfg.seed);
  val_batches_ = RowBatches(val_.inputs.size(0), cfg.batch, false, 0);
  test_batches_ = RowBatches(test_.inputs.size(0), cfg.batch, false, 0);
}

const ArSplit& ArConversionTask::split(Split s) const {
  return s == Split::train ? train_ : s == Split::val ? val_ : test_;
}
const RowBatches& ArConversionTask::batches_of(Split s) const {
  return s == Split::train ? train_batches_ : s == Split::val ? val_batches_ : test_batches_;
}

Tensor ArConversionTask::loss(Split s, int64_t i, nn::TraceRequest* trace) {
  const std::vector<int64_t> rows = batches_of(s).rows(i);
  const ArSplit& sp = split(s);
  Tensor ids = gather_rows(sp.inputs, rows).to(cfg_.device);                                   // (B,L)
  Tensor tg = gather_rows(s == Split::train ? train_targets_ : sp.targets, rows).to(cfg_.device);  // (B,L)
  Tensor logits = model_->forward(ids, trace);                                                  // (B,L,V)
  return cross_entropy(reshape(logits, {-1, data_.vocab}), reshape(tg, {-1}), kArIgnoreIndex);
}

int64_t ArConversionTask::tokens(Split s, int64_t i) const {
  return static_cast<int64_t>(batches_of(s).rows(i).size()) * data_.seq_len;
}

Metrics ArConversionTask::evaluate(Split s) {
  model_->eval();
  return {{"accuracy", ar_accuracy(*model_, split(s), cfg_.batch, cfg_.device)}};
}

}  // namespace hh::train
