// Associative recall as a ConversionTask (the offline demonstration's part (a)): a causal decoder
// (nn::DecoderLM) on AR sequences, next-token cross-entropy on the query's answer (and, with the
// recall or all targets, on more positions: ArTargets), accuracy on the query's answer.
#pragma once
#include <cstdint>
#include <memory>

#include "data/associative_recall.h"
#include "data/batching.h"
#include "nn/transformer.h"
#include "experiments/ar/ar_experiment.h"
#include "train/convert/convert.h"

namespace hh::train {

struct ArTaskConfig {
  int64_t batch = 32;
  ArTargets targets = ArTargets::recall;
  uint64_t seed = 0;  // batch order
  Device device = Device::cpu();
};

class ArConversionTask : public ConversionTask {
 public:
  // train/val/test: (N,L) rows of one ArDataset (val usually held out of its training split).
  ArConversionTask(std::shared_ptr<nn::DecoderLM> model, const ArConfig& data, ArSplit train, ArSplit val,
                   ArSplit test, ArTaskConfig cfg);
  nn::Module& model() override { return *model_; }
  nn::DecoderLM& decoder() { return *model_; }
  int64_t batches(Split s) const override { return batches_of(s).size(); }
  void shuffle(int64_t epoch) override { train_batches_.set_epoch(epoch); }
  Tensor loss(Split s, int64_t i, nn::TraceRequest* trace) override;
  int64_t tokens(Split s, int64_t i) const override;
  Metrics evaluate(Split s) override;  // {"accuracy"} on the answer position, in [0,1]

 private:
  const ArSplit& split(Split s) const;
  const RowBatches& batches_of(Split s) const;
  std::shared_ptr<nn::DecoderLM> model_;
  ArConfig data_;
  ArSplit train_, val_, test_;
  Tensor train_targets_;  // dense or answer-only targets of the training rows
  ArTaskConfig cfg_;
  RowBatches train_batches_, val_batches_, test_batches_;
};

}  // namespace hh::train
