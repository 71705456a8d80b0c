// Causal language modelling as a ConversionTask (convert_gpt2): a CausalLM over windows of a token
// stream (data/text_corpus.h). Loss: next-token cross-entropy averaged over the scored positions of
// a batch. Metric: perplexity = exp(mean negative log-likelihood over every scored token of the
// split), lower is better. Training uses lm_blocks windows, validation and test lm_strided ones (each
// token after the first scored exactly once, with at least context - stride tokens of context).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/batching.h"
#include "data/text_corpus.h"
#include "data/tokenizer.h"
#include "nn/models/hf_model.h"
#include "train/convert/convert.h"

namespace hh::train {

struct LmTaskConfig {
  int64_t batch = 8;       // windows per batch
  uint64_t seed = 0;       // training batch order
  int32_t pad_id = 0;      // id written past the end of the stream (never scored)
  Device device = Device::cpu();
  // The softmax teacher for logit distillation (LogitStage), run without gradients; null = none.
  std::shared_ptr<nn::CausalLM> teacher;
};

class LmConversionTask : public CausalLmTask {
 public:
  using Windows = std::shared_ptr<const data::LmWindows>;  // shared by the rows' students
  // Every split needs at least one window; all three share one context length, which must not
  // exceed the model's positions.
  LmConversionTask(std::shared_ptr<nn::CausalLM> model, Windows train, Windows val, Windows test, LmTaskConfig cfg);
  nn::Module& model() override { return *model_; }
  nn::CausalLM& lm() override { return *model_; }
  int64_t batches(Split s) const override { return batches_of(s).size(); }
  void shuffle(int64_t epoch) override { train_batches_.set_epoch(epoch); }
  Tensor loss(Split s, int64_t i, nn::TraceRequest* trace) override;
  // Stage 1 and fidelity need only the attention traces: the last hidden state, no vocabulary head.
  void trace(Split s, int64_t i, nn::TraceRequest& trace) override;
  int64_t tokens(Split s, int64_t i) const override;  // scored predictions in the batch
  // {"perplexity", "nll"}: exp of, and, the mean NLL (nats) over every scored token of the split.
  Metrics evaluate(Split s) override;
  bool higher_is_better() const override { return false; }
  // (B,L) inputs and (B,L) targets of batch i.
  void batch(Split s, int64_t i, Tensor& inputs, Tensor& targets) const override;

 protected:
  nn::CausalLM* teacher() const override { return cfg_.teacher.get(); }

 private:
  const data::LmWindows& windows(Split s) const;
  const RowBatches& batches_of(Split s) const;
  std::shared_ptr<nn::CausalLM> model_;
  Windows train_, val_, test_;
  LmTaskConfig cfg_;
  RowBatches train_batches_, val_batches_, test_batches_;
};

// The ids of a text file for LM training: the tokenizer's ids without special tokens. With
// max_tokens > 0 at most that many: only a prefix of the text (cut at a line end) is encoded, grown
// until it gives max_tokens ids or is the whole file.
std::vector<int32_t> encode_corpus(const std::string& text, const data::Tokenizer& tok, int64_t max_tokens);

}  // namespace hh::train
