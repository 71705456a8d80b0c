#include "experiments/convert/convert_classify.h"

#include <utility>

namespace hh::train {

ClassifierConversionTask::ClassifierConversionTask(std::shared_ptr<nn::EncoderClassifier> model, ClassifySplit train,
                                                   ClassifySplit val, ClassifySplit test, int64_t batch,
                                                   uint64_t seed, Device device)
    : model_(std::move(model)),
      train_(std::move(train)),
      val_(std::move(val)),
      test_(std::move(test)),
      device_(device) {
  HH_CHECK(model_ != nullptr, "ClassifierConversionTask: no model");
  HH_CHECK(batch >= 1, "ClassifierConversionTask: batch must be >= 1, got ", batch);
  for (const ClassifySplit* s : {&train_, &val_, &test_})
    HH_CHECK(s->ids.dim() == 2 && s->labels.dim() == 1 && s->ids.size(0) == s->labels.size(0),
             "ClassifierConversionTask: expected ids (N,L) and labels (N), got ", s->ids.shape(), " and ",
             s->labels.shape());
  train_batches_ = RowBatches(train_.ids.size(0), batch, true, seed);
  val_batches_ = RowBatches(val_.ids.size(0), batch, false, 0);
  test_batches_ = RowBatches(test_.ids.size(0), batch, false, 0);
}

Tensor ClassifierConversionTask::loss(Split s, int64_t i, nn::TraceRequest* trace) {
  const std::vector<int64_t> rows = batches_of(s).rows(i);
  Tensor ids = gather_rows(split(s).ids, rows).to(device_);       // (B,L)
  Tensor labels = gather_rows(split(s).labels, rows).to(device_);  // (B)
  return cross_entropy(model_->forward(ids, Tensor(), trace), labels);
}

int64_t ClassifierConversionTask::tokens(Split s, int64_t i) const {
  return static_cast<int64_t>(batches_of(s).rows(i).size()) * split(s).ids.size(1);
}

Metrics ClassifierConversionTask::evaluate(Split s) {
  NoGradGuard ng;
  model_->eval();
  const RowBatches& b = batches_of(s);
  int64_t correct = 0, total = 0;
  for (int64_t i = 0; i < b.size(); ++i) {
    const std::vector<int64_t> rows = b.rows(i);
    Tensor logits = model_->forward(gather_rows(split(s).ids, rows).to(device_));  // (B,classes)
    auto pred = to_vector<int64_t>(argmax(logits, -1));
    auto label = to_vector<int64_t>(gather_rows(split(s).labels, rows));
    for (size_t k = 0; k < pred.size(); ++k) correct += pred[k] == label[k];
    total += static_cast<int64_t>(pred.size());
  }
  return {{"accuracy", total ? static_cast<double>(correct) / static_cast<double>(total) : 0.0}};
}

}  // namespace hh::train
