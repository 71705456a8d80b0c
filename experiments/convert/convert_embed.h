// An embedding model converted on raw text alone (convert_bert --task embed): no labels. The texts
// of one file (one per line) are split into train / validation / test and tokenized once; the
// softmax teacher's pooled sentence embeddings (the folder's sentence-transformers pooling and
// normalization, nn/models/embedding.h) are computed once for every text. Stage 1 distills the
// attention weights as for any task; stage 2 trains the student to give the teacher's embeddings
// (1 - cosine, or the mean squared error). Metrics, the first primary: the mean cosine of student
// and teacher embeddings, the Spearman correlation of their pairwise similarity matrices, and the
// rate at which a text's nearest neighbour is the same under both.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "experiments/convert/convert_glue.h"
#include "nn/models/embedding.h"
#include "nn/models/hf_model.h"
#include "train/convert/convert.h"

namespace hh::train {

enum class EmbedLoss { cosine, mse };
EmbedLoss parse_embed_loss(const std::string& text, const std::string& what);  // "cosine" or "mse"

struct EmbedDataConfig {
  int64_t max_length = 128;    // tokens per text, specials included (truncated as HF does)
  int64_t max_texts = -1;      // read at most this many texts (-1: all)
  double val_fraction = 0.1;   // of the texts, held out for early stopping
  double test_fraction = 0.1;  // of the texts, held out for the reported metrics
  uint64_t seed = 0;           // which texts go where
};

// The texts of every split, tokenized (GlueRows: ids and token types, unpadded; no labels), and the
// teacher's embeddings of each (N,C) f32 on the CPU once teacher_embeddings has run.
struct EmbedData {
  std::string path;
  GlueRows train, val, test;
  Tensor teacher_train, teacher_val, teacher_test;
  int64_t empty_lines = 0;     // skipped
  int32_t pad_id = 0;
};

// Reads `path` (UTF-8 text, one text per line; empty lines skipped and counted), shuffles with
// cfg.seed and splits it. Errors name the file; each split needs at least one text.
EmbedData load_embed_texts(const std::string& path, const data::Tokenizer& tok, const EmbedDataConfig& cfg);

struct EmbedTaskConfig {
  int64_t batch = 32;
  uint64_t seed = 0;            // training batch order
  Device device = Device::cpu();
  nn::EmbeddingConfig embedding;  // pooling and normalization (the teacher folder's)
  EmbedLoss loss = EmbedLoss::cosine;
};

// The pooled embeddings of `rows` by a BERT-family model (nn::text_encoder_hidden), no grad,
// batched: (N,C) f32 on the CPU.
// on_rows (may be empty) is told how many rows each batch embedded (progress).
Tensor embed_rows(const nn::HFModel& model, const GlueRows& rows, int32_t pad_id, const EmbedTaskConfig& cfg,
                  const std::function<void(int64_t)>& on_rows = {});

// Fills data.teacher_* with the teacher's embeddings of every split.
void teacher_embeddings(EmbedData& data, const nn::HFModel& teacher, const EmbedTaskConfig& cfg);

struct EmbeddingFidelity {
  double mean_cosine = 0;   // mean over texts of cos(student_i, teacher_i)
  double spearman = 0;      // of the off-diagonal pairwise cosine similarities, student vs teacher
  double nn_agreement = 0;  // fraction of texts whose nearest other text is the same for both
};
// student, teacher (N,C); N >= 2 for the last two (0 otherwise).
EmbeddingFidelity embedding_fidelity(const Tensor& student, const Tensor& teacher);

class EmbeddingConversionTask : public ConversionTask {
 public:
  EmbeddingConversionTask(std::shared_ptr<nn::HFModel> student, std::shared_ptr<const EmbedData> data,
                          EmbedTaskConfig cfg);
  nn::Module& model() override { return *model_; }
  void keep_softmax(const std::vector<int64_t>& layers) override { model_->keep_softmax(layers); }
  int64_t batches(Split s) const override { return batches_of(s).size(); }
  void shuffle(int64_t epoch) override { train_batches_.set_epoch(epoch); }
  // The student's pooled embeddings of batch i against the teacher's (cfg.loss), mean over the batch.
  Tensor loss(Split s, int64_t i, nn::TraceRequest* trace) override;
  int64_t tokens(Split s, int64_t i) const override;
  // cosine (primary), spearman, nn_agreement on the split.
  Metrics evaluate(Split s) override;

 private:
  const GlueRows& rows(Split s) const;
  const Tensor& teacher(Split s) const;
  const RowBatches& batches_of(Split s) const;
  std::shared_ptr<nn::HFModel> model_;
  std::shared_ptr<const EmbedData> data_;
  EmbedTaskConfig cfg_;
  RowBatches train_batches_, val_batches_, test_batches_;
};

}  // namespace hh::train
