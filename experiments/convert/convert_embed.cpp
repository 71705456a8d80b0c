#include "experiments/convert/convert_embed.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <utility>

#include "autograd/ops.h"
#include "core/atomic_file.h"
#include "core/progress.h"
#include "core/quote.h"
#include "core/regular_file.h"
#include "train/task_metrics.h"

namespace hh::train {

EmbedLoss parse_embed_loss(const std::string& text, const std::string& what) {
  if (text == "cosine") return EmbedLoss::cosine;
  if (text == "mse") return EmbedLoss::mse;
  fail(str(what, ": unknown loss ", quote_text(text), " (cosine or mse)"));
}

namespace {

// Rows `which` of `rows`, in that order.
GlueRows take_rows(const GlueRows& rows, const std::vector<int64_t>& which) {
  GlueRows out;
  for (int64_t r : which) {
    const size_t i = static_cast<size_t>(r);
    out.ids.push_back(rows.ids[i]);
    out.types.push_back(rows.types[i]);
    out.labels.push_back(0);
    out.scores.push_back(0.0);
  }
  return out;
}

// The pooled (and, when configured, normalized) embeddings of one padded batch, with autograd.
Tensor pooled(const nn::HFModel& model, const GlueBatch& b, const EmbedTaskConfig& cfg, nn::TraceRequest* trace) {
  const Device dev = cfg.device;
  const Tensor mask = b.attention_mask.to(dev);
  const Tensor h = nn::text_encoder_hidden(model, b.input_ids.to(dev), b.token_type_ids.to(dev), mask, trace);
  HH_CHECK(h.defined(), "embedding conversion: ", model.architecture(), " is not a BERT-family model");
  Tensor e = nn::pool_hidden(h, mask, cfg.embedding.pooling);
  return cfg.embedding.normalize ? nn::l2_normalize(e) : e;
}

}  // namespace

EmbedData load_embed_texts(const std::string& path, const data::Tokenizer& tok, const EmbedDataConfig& cfg) {
  HH_CHECK(cfg.max_length >= 3, "embedding data: max length must be >= 3 (room for the special tokens), got ",
           cfg.max_length);
  HH_CHECK(cfg.val_fraction > 0 && cfg.test_fraction > 0 && cfg.val_fraction + cfg.test_fraction < 1,
           "embedding data: validation and test fractions must be > 0 and sum to < 1, got ", cfg.val_fraction, " and ",
           cfg.test_fraction);
  check_regular_file(path, "embedding data");
  EmbedData d;
  d.path = path;
  d.pad_id = tok.pad_id() >= 0 ? tok.pad_id() : 0;
  std::vector<std::string> texts;
  std::istringstream in(read_file(path));
  std::string line;
  while (std::getline(in, line) && (cfg.max_texts < 0 || static_cast<int64_t>(texts.size()) < cfg.max_texts)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) {
      ++d.empty_lines;
      continue;
    }
    texts.push_back(line);
  }
  const int64_t n = static_cast<int64_t>(texts.size());
  const int64_t n_val = std::max<int64_t>(1, static_cast<int64_t>(cfg.val_fraction * static_cast<double>(n)));
  const int64_t n_test = std::max<int64_t>(1, static_cast<int64_t>(cfg.test_fraction * static_cast<double>(n)));
  HH_CHECK(n - n_val - n_test >= 1, "embedding data: ", path, " has ", n, " texts: too few for ", n_val,
           " validation, ", n_test, " test and at least one training text");
  const GlueRows all = tokenize_rows(tok, texts, {}, cfg.max_length, d.pad_id);
  const std::vector<int64_t> order = epoch_order(n, true, cfg.seed + 7919, 0);
  d.test = take_rows(all, std::vector<int64_t>(order.begin(), order.begin() + n_test));
  d.val = take_rows(all, std::vector<int64_t>(order.begin() + n_test, order.begin() + n_test + n_val));
  d.train = take_rows(all, std::vector<int64_t>(order.begin() + n_test + n_val, order.end()));
  return d;
}

Tensor embed_rows(const nn::HFModel& model, const GlueRows& rows, int32_t pad_id, const EmbedTaskConfig& cfg,
                  const std::function<void(int64_t)>& on_rows) {
  NoGradGuard ng;
  std::vector<Tensor> parts;
  for (int64_t at = 0; at < rows.size(); at += cfg.batch) {
    std::vector<int64_t> which;
    for (int64_t r = at; r < std::min(rows.size(), at + cfg.batch); ++r) which.push_back(r);
    parts.push_back(pooled(model, make_glue_batch(rows, which, pad_id), cfg, nullptr).to(DType::f32).to(Device::cpu()));
    if (on_rows) on_rows(static_cast<int64_t>(which.size()));
  }
  return cat(parts, 0);
}

void teacher_embeddings(EmbedData& data, const nn::HFModel& teacher, const EmbedTaskConfig& cfg) {
  // The teacher embeds every text once before any training: a progress bar over all of them.
  ProgressOptions po;
  po.label = "teacher embeddings";
  po.total = data.train.size() + data.val.size() + data.test.size();
  Progress bar(po);
  int64_t done = 0;
  const auto on_rows = [&](int64_t n) { bar.update(done += n); };
  data.teacher_train = embed_rows(teacher, data.train, data.pad_id, cfg, on_rows);
  data.teacher_val = embed_rows(teacher, data.val, data.pad_id, cfg, on_rows);
  data.teacher_test = embed_rows(teacher, data.test, data.pad_id, cfg, on_rows);
  bar.finish();
}

EmbeddingFidelity embedding_fidelity(const Tensor& student, const Tensor& teacher) {
  HH_CHECK(student.dim() == 2 && student.shape() == teacher.shape(), "embedding_fidelity: shapes ", student.shape(),
           " and ", teacher.shape(), " differ");
  EmbeddingFidelity f;
  const int64_t n = student.size(0);
  const std::vector<double> ss = to_vector<double>(nn::cosine_similarity(student, student));  // (N,N)
  const std::vector<double> tt = to_vector<double>(nn::cosine_similarity(teacher, teacher));
  const std::vector<double> st = to_vector<double>(nn::cosine_similarity(student, teacher));
  for (int64_t i = 0; i < n; ++i) f.mean_cosine += st[static_cast<size_t>(i * n + i)] / static_cast<double>(n);
  if (n < 2) return f;
  std::vector<double> a, b;
  int64_t same = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t best_s = -1, best_t = -1;
    for (int64_t j = 0; j < n; ++j) {
      if (j == i) continue;
      const size_t k = static_cast<size_t>(i * n + j);
      if (j > i) {
        a.push_back(ss[k]);
        b.push_back(tt[k]);
      }
      if (best_s < 0 || ss[k] > ss[static_cast<size_t>(i * n + best_s)]) best_s = j;
      if (best_t < 0 || tt[k] > tt[static_cast<size_t>(i * n + best_t)]) best_t = j;
    }
    same += best_s == best_t;
  }
  f.spearman = n >= 3 ? spearman(a, b) : 0.0;
  f.nn_agreement = static_cast<double>(same) / static_cast<double>(n);
  return f;
}

EmbeddingConversionTask::EmbeddingConversionTask(std::shared_ptr<nn::HFModel> student,
                                                 std::shared_ptr<const EmbedData> data, EmbedTaskConfig cfg)
    : model_(std::move(student)), data_(std::move(data)), cfg_(std::move(cfg)) {
  HH_CHECK(data_->teacher_train.defined() && data_->teacher_val.defined() && data_->teacher_test.defined(),
           "EmbeddingConversionTask: the teacher's embeddings are not computed (teacher_embeddings)");
  train_batches_ = RowBatches(data_->train.size(), cfg_.batch, true, cfg_.seed);
  train_batches_.set_epoch(0);
  val_batches_ = RowBatches(data_->val.size(), cfg_.batch, false, 0);
  val_batches_.set_epoch(0);
  test_batches_ = RowBatches(data_->test.size(), cfg_.batch, false, 0);
  test_batches_.set_epoch(0);
}

const GlueRows& EmbeddingConversionTask::rows(Split s) const {
  return s == Split::train ? data_->train : s == Split::val ? data_->val : data_->test;
}
const Tensor& EmbeddingConversionTask::teacher(Split s) const {
  return s == Split::train ? data_->teacher_train : s == Split::val ? data_->teacher_val : data_->teacher_test;
}
const RowBatches& EmbeddingConversionTask::batches_of(Split s) const {
  return s == Split::train ? train_batches_ : s == Split::val ? val_batches_ : test_batches_;
}

Tensor EmbeddingConversionTask::loss(Split s, int64_t i, nn::TraceRequest* trace) {
  const std::vector<int64_t> which = batches_of(s).rows(i);
  const Tensor e = pooled(*model_, make_glue_batch(rows(s), which, data_->pad_id), cfg_, trace);  // (b,C)
  const Tensor t = gather_rows(teacher(s), which).to(e.dtype()).to(cfg_.device);                 // (b,C)
  if (cfg_.loss == EmbedLoss::mse) return mse_loss(e, t);
  // 1 - cos per row, mean over the batch (the teacher rows are constants)
  const Tensor cos = sum(mul(nn::l2_normalize(e), nn::l2_normalize(t)), {1});
  return sub(1.0, mean(cos));
}

int64_t EmbeddingConversionTask::tokens(Split s, int64_t i) const {
  int64_t n = 0;
  for (int64_t r : batches_of(s).rows(i)) n += static_cast<int64_t>(rows(s).ids[static_cast<size_t>(r)].size());
  return n;
}

Metrics EmbeddingConversionTask::evaluate(Split s) {
  model_->eval();  // as the other tasks: the driver sets the mode each stage needs
  const EmbeddingFidelity f = embedding_fidelity(embed_rows(*model_, rows(s), data_->pad_id, cfg_), teacher(s));
  return {{"cosine", f.mean_cosine}, {"spearman", f.spearman}, {"nn_agreement", f.nn_agreement}};
}

}  // namespace hh::train
