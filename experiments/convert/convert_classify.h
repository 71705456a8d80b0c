// Sequence classification with nn::EncoderClassifier as a ConversionTask (the offline
// demonstration's part (b)): fixed-length token rows, cross-entropy, accuracy. Bidirectional:
// linear students run the non-causal form.
#pragma once
#include <cstdint>
#include <memory>

#include "data/batching.h"
#include "nn/transformer.h"
#include "train/convert/convert.h"

namespace hh::train {

struct ClassifySplit {
  Tensor ids;     // (N, L) i64
  Tensor labels;  // (N) i64 in [0, classes)
};

class ClassifierConversionTask : public ConversionTask {
 public:
  ClassifierConversionTask(std::shared_ptr<nn::EncoderClassifier> model, ClassifySplit train, ClassifySplit val,
                           ClassifySplit test, int64_t batch, uint64_t seed, Device device = Device::cpu());
  nn::Module& model() override { return *model_; }
  const std::shared_ptr<nn::EncoderClassifier>& encoder() const { return model_; }
  int64_t batches(Split s) const override { return batches_of(s).size(); }
  void shuffle(int64_t epoch) override { train_batches_.set_epoch(epoch); }
  Tensor loss(Split s, int64_t i, nn::TraceRequest* trace) override;
  int64_t tokens(Split s, int64_t i) const override;
  Metrics evaluate(Split s) override;  // {"accuracy"} in [0,1]

 private:
  const ClassifySplit& split(Split s) const { return s == Split::train ? train_ : s == Split::val ? val_ : test_; }
  const RowBatches& batches_of(Split s) const {
    return s == Split::train ? train_batches_ : s == Split::val ? val_batches_ : test_batches_;
  }
  std::shared_ptr<nn::EncoderClassifier> model_;
  ClassifySplit train_, val_, test_;
  Device device_;
  RowBatches train_batches_, val_batches_, test_batches_;
};

}  // namespace hh::train
