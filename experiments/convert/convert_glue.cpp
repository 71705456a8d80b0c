#include "experiments/convert/convert_glue.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "train/task_metrics.h"

namespace hh::train {

int64_t GlueRows::tokens() const {
  int64_t n = 0;
  for (const auto& r : ids) n += static_cast<int64_t>(r.size());
  return n;
}

GlueRows tokenize_rows(const data::Tokenizer& tok, const std::vector<std::string>& a, const std::vector<std::string>& b,
                       int64_t max_length, int32_t pad_id) {
  HH_CHECK(b.empty() || b.size() == a.size(), "tokenize_rows: ", a.size(), " texts but ", b.size(), " second texts");
  GlueRows out;
  data::BatchOptions bo;
  bo.padding = data::Padding::longest;
  bo.truncation = true;
  bo.max_length = max_length;
  bo.pad_id = pad_id;
  const size_t chunk = 512;
  for (size_t start = 0; start < a.size(); start += chunk) {
    const size_t end = std::min(a.size(), start + chunk);
    data::BatchEncoding enc;
    if (!b.empty()) {
      std::vector<std::pair<std::string, std::string>> pairs;
      for (size_t i = start; i < end; ++i) pairs.emplace_back(a[i], b[i]);
      enc = data::encode_batch_pairs(tok, pairs, bo);
    } else {
      enc = data::encode_batch(tok, std::vector<std::string>(a.begin() + static_cast<std::ptrdiff_t>(start),
                                                             a.begin() + static_cast<std::ptrdiff_t>(end)),
                               bo);
    }
    const std::vector<int64_t> ids = to_vector<int64_t>(enc.input_ids);
    const std::vector<int64_t> types = to_vector<int64_t>(enc.token_type_ids);
    const int64_t L = enc.input_ids.size(1);
    for (size_t i = start; i < end; ++i) {
      const int64_t r = static_cast<int64_t>(i - start), n = enc.lengths[static_cast<size_t>(r)];
      out.ids.emplace_back(ids.begin() + r * L, ids.begin() + r * L + n);
      out.types.emplace_back(types.begin() + r * L, types.begin() + r * L + n);
      out.labels.push_back(0);
      out.scores.push_back(0.0);
    }
  }
  return out;
}

namespace {

// Tokenizes examples (HF's truncation and templates), keeping each row unpadded.
GlueRows tokenize(const data::GlueTask& task, const std::vector<data::GlueExample>& ex, const data::Tokenizer& tok,
                  int64_t max_length, int32_t pad_id) {
  std::vector<std::string> a, b;
  for (const data::GlueExample& e : ex) {
    a.push_back(e.text_a);
    if (task.pair) b.push_back(e.text_b);
  }
  GlueRows out = tokenize_rows(tok, a, b, max_length, pad_id);
  for (size_t i = 0; i < ex.size(); ++i) {
    out.labels[i] = ex[i].label;
    out.scores[i] = ex[i].score;
  }
  return out;
}

// Rows `which` of `rows`, in that order.
GlueRows take(const GlueRows& rows, const std::vector<int64_t>& which) {
  GlueRows out;
  for (int64_t r : which) {
    const size_t i = static_cast<size_t>(r);
    out.ids.push_back(rows.ids[i]);
    out.types.push_back(rows.types[i]);
    out.labels.push_back(rows.labels[i]);
    out.scores.push_back(rows.scores[i]);
  }
  return out;
}

std::vector<data::GlueExample> read_split(const data::GlueTask& task, const std::string& path, int64_t max_rows,
                                          bool skip_malformed, int64_t* skipped) {
  data::GlueReadOptions o;
  o.max_examples = max_rows;
  o.skip_malformed = skip_malformed;
  data::GlueReadStats stats;
  std::vector<data::GlueExample> ex = data::read_glue(task, path, o, &stats);
  *skipped += stats.skipped;
  return ex;
}

bool is_regression(const data::GlueTask& task) { return task.num_labels == 1; }

}  // namespace

namespace {

void check_data_config(const GlueDataConfig& cfg) {
  HH_CHECK(cfg.max_length >= 3, "GLUE data: max length must be >= 3 (room for the special tokens), got ",
           cfg.max_length);
  HH_CHECK(cfg.val_fraction >= 0 && cfg.val_fraction < 1, "GLUE data: validation fraction must be in [0,1), got ",
           cfg.val_fraction);
  HH_CHECK(cfg.max_train == -1 || cfg.max_train >= 1, "GLUE data: max train must be -1 (all) or >= 1, got ",
           cfg.max_train);
  HH_CHECK(cfg.max_eval == -1 || cfg.max_eval >= 1, "GLUE data: max eval must be -1 (all) or >= 1, got ",
           cfg.max_eval);
}

// d.train and d.val from the tokenized training rows: a held-out part of them, or the test split
// (dev) when val_fraction is 0.
void split_train(GlueData& d, GlueRows all_train, const GlueDataConfig& cfg) {
  const int64_t n = all_train.size();
  if (cfg.val_fraction == 0) {
    d.train = std::move(all_train);
    d.val = d.test;
    return;
  }
  const int64_t n_val = std::max<int64_t>(1, static_cast<int64_t>(cfg.val_fraction * static_cast<double>(n)));
  HH_CHECK(n - n_val >= 1, "GLUE data: ", d.train_path, " has ", n, " rows: too few to hold out ", n_val,
           " for validation (lower the validation fraction, or 0 to validate on dev)");
  std::vector<int64_t> order = epoch_order(n, true, cfg.seed + 7919, 0);
  std::vector<int64_t> val(order.begin(), order.begin() + n_val), rest(order.begin() + n_val, order.end());
  std::sort(val.begin(), val.end());
  std::sort(rest.begin(), rest.end());
  d.val = take(all_train, val);
  d.train = take(all_train, rest);
}

}  // namespace

GlueData load_glue_data(const data::GlueTask& task, const std::string& dir, const data::Tokenizer& tok,
                        const GlueDataConfig& cfg) {
  check_data_config(cfg);
  GlueData d;
  d.task = task;
  d.pad_id = tok.pad_id() >= 0 ? tok.pad_id() : 0;
  d.train_path = data::glue_split_path(task, dir, "train");
  d.dev_path = data::glue_split_path(task, dir, "dev");
  std::vector<data::GlueExample> train = read_split(task, d.train_path, cfg.max_train, cfg.skip_malformed, &d.skipped);
  std::vector<data::GlueExample> dev = read_split(task, d.dev_path, cfg.max_eval, cfg.skip_malformed, &d.skipped);
  GlueRows all_train = tokenize(task, train, tok, cfg.max_length, d.pad_id);
  d.test = tokenize(task, dev, tok, cfg.max_length, d.pad_id);
  if (task.name == "MNLI") {
    // The mismatched dev file is optional: reported when present.
    try {
      d.dev_mismatched_path = data::glue_split_path(task, dir, "dev_mismatched");
    } catch (const Error&) {
      d.dev_mismatched_path.clear();
    }
    if (!d.dev_mismatched_path.empty())
      d.test_mismatched = tokenize(
          task, read_split(task, d.dev_mismatched_path, cfg.max_eval, cfg.skip_malformed, &d.skipped), tok,
          cfg.max_length, d.pad_id);
  }
  split_train(d, std::move(all_train), cfg);
  return d;
}

GlueData load_user_task_data(const std::string& dir, const data::Tokenizer& tok, const GlueDataConfig& cfg) {
  check_data_config(cfg);
  data::UserTask u = data::read_user_task(dir, cfg.max_train, cfg.max_eval);
  GlueData d;
  d.task = u.task;
  d.pad_id = tok.pad_id() >= 0 ? tok.pad_id() : 0;
  d.train_path = u.train_path;
  d.dev_path = u.dev_path;
  d.test = tokenize(u.task, u.dev, tok, cfg.max_length, d.pad_id);
  split_train(d, tokenize(u.task, u.train, tok, cfg.max_length, d.pad_id), cfg);
  return d;
}

std::vector<std::string> glue_metric_names(const data::GlueTask& task) {
  if (task.name == "custom") return task.metrics;  // a user task (data/user_task.h): accuracy first
  std::string key;
  for (char c : task.name)
    if (c != '-') key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::vector<std::string> names = glue_task_metrics(key);
  // MRPC and QQP: GLUE's leaderboard lists F1 first; we keep HF's order (accuracy, f1) but make F1
  // primary as the paper's tables report it.
  if (names.size() == 2 && names[0] == "accuracy" && names[1] == "f1") std::swap(names[0], names[1]);
  return names;
}

void check_model_for_task(const nn::BertForSequenceClassification& model, const data::GlueTask& task,
                          int64_t max_length) {
  const int64_t labels = model.bert->cfg.num_labels;
  HH_CHECK(labels == task.num_labels, "the model (", model.architecture(), ") has num_labels = ", labels,
           " but GLUE ", task.name, " needs ", task.num_labels,
           task.num_labels == 1 ? " (a regression head)" : " classes");
  const int64_t positions = model.bert->cfg.max_position_embeddings;
  HH_CHECK(max_length <= positions, "max length ", max_length, " exceeds the model's ", positions, " positions");
}

GlueBatch make_glue_batch(const GlueRows& rows, const std::vector<int64_t>& which, int32_t pad_id) {
  HH_CHECK(!which.empty(), "make_glue_batch: no rows");
  size_t L = 0;
  for (int64_t r : which) {
    HH_CHECK(r >= 0 && r < rows.size(), "make_glue_batch: row ", r, " out of range [0, ", rows.size(), ")");
    L = std::max(L, rows.ids[static_cast<size_t>(r)].size());
  }
  const size_t B = which.size();
  std::vector<int64_t> ids(B * L, pad_id), types(B * L, 0), mask(B * L, 0);
  GlueBatch b;
  for (size_t i = 0; i < B; ++i) {
    const size_t r = static_cast<size_t>(which[i]);
    for (size_t j = 0; j < rows.ids[r].size(); ++j) {
      ids[i * L + j] = rows.ids[r][j];
      types[i * L + j] = rows.types[r][j];
      mask[i * L + j] = 1;
    }
    b.tokens += static_cast<int64_t>(rows.ids[r].size());
    b.labels.push_back(rows.labels[r]);
    b.scores.push_back(rows.scores[r]);
  }
  const Shape shape{static_cast<int64_t>(B), static_cast<int64_t>(L)};
  b.input_ids = from_vector(ids, shape);
  b.token_type_ids = from_vector(types, shape);
  b.attention_mask = from_vector(mask, shape);
  return b;
}

GlueConversionTask::GlueConversionTask(std::shared_ptr<nn::BertForSequenceClassification> model,
                                       std::shared_ptr<const GlueData> data, GlueTaskConfig cfg)
    : model_(std::move(model)), data_(std::move(data)), cfg_(cfg) {
  HH_CHECK(model_ != nullptr && data_ != nullptr, "GlueConversionTask: no model or no data");
  HH_CHECK(cfg.batch >= 1, "GlueConversionTask: batch must be >= 1, got ", cfg.batch);
  check_model_for_task(*model_, data_->task, 0);
  train_batches_ = RowBatches(data_->train.size(), cfg.batch, true, cfg.seed);
  train_batches_.set_epoch(0);
  val_batches_ = RowBatches(data_->val.size(), cfg.batch, false, 0);
  val_batches_.set_epoch(0);
  test_batches_ = RowBatches(data_->test.size(), cfg.batch, false, 0);
  test_batches_.set_epoch(0);
}

const GlueRows& GlueConversionTask::rows(Split s) const {
  return s == Split::train ? data_->train : s == Split::val ? data_->val : data_->test;
}
const RowBatches& GlueConversionTask::batches_of(Split s) const {
  return s == Split::train ? train_batches_ : s == Split::val ? val_batches_ : test_batches_;
}

GlueBatch GlueConversionTask::batch(Split s, int64_t i) const {
  return make_glue_batch(rows(s), batches_of(s).rows(i), data_->pad_id);
}

Tensor GlueConversionTask::loss(Split s, int64_t i, nn::TraceRequest* trace) {
  GlueBatch b = batch(s, i);
  const Device dev = cfg_.device;
  Tensor logits = model_->forward(b.input_ids.to(dev), b.token_type_ids.to(dev), b.attention_mask.to(dev), trace);
  if (is_regression(data_->task)) {
    Tensor target = from_vector(b.scores, {static_cast<int64_t>(b.scores.size())}, {logits.dtype(), dev});
    return mse_loss(reshape(logits, {-1}), target);
  }
  Tensor target = from_vector(b.labels, {static_cast<int64_t>(b.labels.size())}).to(dev);
  return cross_entropy(logits, target);
}

int64_t GlueConversionTask::tokens(Split s, int64_t i) const {
  const GlueRows& r = rows(s);
  int64_t n = 0;
  for (int64_t row : batches_of(s).rows(i)) n += static_cast<int64_t>(r.ids[static_cast<size_t>(row)].size());
  return n;
}

std::vector<double> GlueConversionTask::predict_rows(const GlueRows& r) {
  NoGradGuard ng;
  model_->eval();
  const Device dev = cfg_.device;
  std::vector<double> out;
  RowBatches order(r.size(), cfg_.batch, false, 0);
  order.set_epoch(0);
  for (int64_t i = 0; i < order.size(); ++i) {
    GlueBatch b = make_glue_batch(r, order.rows(i), data_->pad_id);
    Tensor logits = model_->forward(b.input_ids.to(dev), b.token_type_ids.to(dev), b.attention_mask.to(dev));
    if (is_regression(data_->task)) {
      for (double v : to_vector<double>(reshape(logits, {-1}))) out.push_back(v);
    } else {
      for (int64_t c : to_vector<int64_t>(argmax(logits, 1))) out.push_back(static_cast<double>(c));
    }
  }
  return out;
}

std::vector<double> GlueConversionTask::predict(Split s) { return predict_rows(rows(s)); }

std::vector<double> GlueConversionTask::references(Split s) const {
  const GlueRows& r = rows(s);
  if (is_regression(data_->task)) return r.scores;
  return std::vector<double>(r.labels.begin(), r.labels.end());
}

Metrics GlueConversionTask::evaluate(Split s) {
  const std::vector<std::string> names = glue_metric_names(data_->task);
  Metrics m = glue_metrics(names, predict(s), references(s));
  if (s == Split::test && !data_->test_mismatched.ids.empty()) {
    const GlueRows& mm = data_->test_mismatched;
    std::vector<double> ref(mm.labels.begin(), mm.labels.end());
    m.emplace_back("accuracy_mismatched", glue_metrics({"accuracy"}, predict_rows(mm), ref).front().second);
  }
  return m;
}

}  // namespace hh::train
