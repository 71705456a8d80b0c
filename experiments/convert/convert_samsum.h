// SAMSum dialogue summarization as a ConversionTask (convert_llama; paper Table 11): a CausalLM
// trained on "<bos>" + samsum_prompt(example) + summary + "<eos>" with the loss on the summary and
// end tokens only (the prompt's targets are -100), every sequence cut to max_length tokens; the
// metric is ROUGE-1/2/L (F1, rouge_score's definition) of greedy summaries generated token by token
// with CausalLM::step (a KV cache for softmax layers, the recurrent state for linear ones), at most
// max_new_tokens of them, cut at the first end token. Generation is expensive: max_eval caps the
// dialogues evaluated per split.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/batching.h"
#include "data/samsum.h"
#include "data/tokenizer.h"
#include "nn/models/hf_model.h"
#include "train/convert/convert.h"

namespace hh::train {

// One dialogue as token ids: ids = bos + prompt + summary + eos (cut to max_length), the first
// prompt_len of which are the prompt (not scored).
struct SamsumRow {
  std::vector<int32_t> ids;
  int64_t prompt_len = 0;
  std::vector<int32_t> prompt;  // the generation prompt: bos + prompt, cut as generation_prompt does
  std::string reference;        // the summary
  bool scored() const { return prompt_len < static_cast<int64_t>(ids.size()); }  // a summary token survived the cut
};

// Every split tokenized once, shared by the rows' students.
struct SamsumData {
  std::vector<SamsumRow> train, val, test;
  int64_t cut = 0;      // training/validation sequences longer than max_length (cut at the end)
  int64_t dropped = 0;  // of those, the ones left without a summary token (in no loss batch; still generated)
};

// The ids of one example for training (see SamsumRow). eos < 0 is an error.
SamsumRow encode_samsum(const data::Tokenizer& tok, const data::SamsumExample& ex, int64_t max_length,
                        int64_t prompt_limit);
// prompt_limit: the longest generation prompt (a longer one keeps its first token, the BOS, and its
// last prompt_limit - 1 tokens: the end of the dialogue and the "Summary:" cue).
SamsumData make_samsum_data(const data::Tokenizer& tok, const std::vector<data::SamsumExample>& train,
                            const std::vector<data::SamsumExample>& val, const std::vector<data::SamsumExample>& test,
                            int64_t max_length, int64_t prompt_limit);

// Greedy decoding with lm.step: feeds `prompt` (B = 1) one token at a time, then appends the argmax
// token until `eos` (not returned), max_new_tokens tokens, or the model's last position.
std::vector<int32_t> greedy_generate(nn::CausalLM& lm, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                                     int32_t eos);

struct SamsumTaskConfig {
  int64_t batch = 1;            // sequences per training batch (padded to the longest)
  int64_t max_new_tokens = 100;
  int64_t max_eval = 0;         // dialogues generated per evaluation (0 = every one of the split)
  int32_t pad_id = 0;           // id written on padding (never scored)
  int32_t eos_id = -1;
  uint64_t seed = 0;
  Device device = Device::cpu();
  // The softmax teacher for logit distillation (LogitStage), run without gradients; null = none.
  std::shared_ptr<nn::CausalLM> teacher;
};

class SamsumConversionTask : public CausalLmTask {
 public:
  SamsumConversionTask(std::shared_ptr<nn::CausalLM> model, std::shared_ptr<const data::Tokenizer> tok,
                       std::shared_ptr<const SamsumData> data, SamsumTaskConfig cfg);
  nn::Module& model() override { return *model_; }
  nn::CausalLM& lm() override { return *model_; }
  int64_t batches(Split s) const override { return batches_of(s).size(); }
  void shuffle(int64_t epoch) override { train_batches_.set_epoch(epoch); }
  Tensor loss(Split s, int64_t i, nn::TraceRequest* trace) override;
  // Stage 1 and fidelity need only the attention traces: the last hidden state, no vocabulary head.
  void trace(Split s, int64_t i, nn::TraceRequest& trace) override;
  int64_t tokens(Split s, int64_t i) const override;  // input tokens of the batch (padding excluded)
  // {"rouge1", "rouge2", "rougeL"} F1 in [0,1] over the first max_eval dialogues of the split.
  Metrics evaluate(Split s) override;
  // The summaries evaluate() generated last (decoded, special tokens skipped).
  const std::vector<std::string>& predictions() const { return predictions_; }
  // (B,L) inputs and targets of batch i (L = longest input of the batch).
  void batch(Split s, int64_t i, Tensor& inputs, Tensor& targets) const override;

 protected:
  nn::CausalLM* teacher() const override { return cfg_.teacher.get(); }

 private:
  const std::vector<SamsumRow>& rows_of(Split s) const;
  const RowBatches& batches_of(Split s) const;
  const std::vector<int64_t>& loss_rows_of(Split s) const;
  std::shared_ptr<nn::CausalLM> model_;
  std::shared_ptr<const data::Tokenizer> tok_;
  std::shared_ptr<const SamsumData> data_;
  SamsumTaskConfig cfg_;
  std::vector<int64_t> loss_rows_[3];  // per split: the rows with a scored token (what batches index)
  RowBatches train_batches_, val_batches_, test_batches_;
  std::vector<std::string> predictions_;
};

}  // namespace hh::train
