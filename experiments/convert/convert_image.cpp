#include "experiments/convert/convert_image.h"

#include <algorithm>
#include <filesystem>
#include <utility>

namespace hh::train {

namespace fs = std::filesystem;

namespace {

std::vector<int64_t> all_rows(int64_t n) {
  std::vector<int64_t> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r[static_cast<size_t>(i)] = i;
  return r;
}

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}
bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

}  // namespace

std::pair<std::vector<int64_t>, std::vector<int64_t>> hold_out(const std::vector<int64_t>& rows, double fraction,
                                                               uint64_t seed) {
  HH_CHECK(fraction >= 0.0 && fraction < 1.0, "hold_out: fraction must be in [0, 1), got ", fraction);
  const int64_t n = static_cast<int64_t>(rows.size());
  int64_t k = static_cast<int64_t>(fraction * static_cast<double>(n));
  if (fraction > 0 && k == 0 && n >= 2) k = 1;
  const std::vector<int64_t> order = epoch_order(n, true, seed, 0);
  std::vector<char> held(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < k; ++i) held[static_cast<size_t>(order[static_cast<size_t>(i)])] = 1;
  std::pair<std::vector<int64_t>, std::vector<int64_t>> out;
  for (int64_t i = 0; i < n; ++i) (held[static_cast<size_t>(i)] ? out.second : out.first).push_back(rows[static_cast<size_t>(i)]);
  return out;
}

std::vector<int64_t> cap_rows(const std::vector<int64_t>& rows, int64_t max, uint64_t seed) {
  const int64_t n = static_cast<int64_t>(rows.size());
  if (max <= 0 || max >= n) return rows;
  std::vector<int64_t> order = epoch_order(n, true, seed, 0);
  order.resize(static_cast<size_t>(max));
  std::sort(order.begin(), order.end());
  std::vector<int64_t> out;
  for (int64_t i : order) out.push_back(rows[static_cast<size_t>(i)]);
  return out;
}

ImageData read_image_data(const std::string& dir, double test_fraction, uint64_t seed) {
  HH_CHECK(!dir.empty(), "--data: empty path");
  HH_CHECK(is_dir(dir), "--data: ", dir, ": not a folder (expected the CIFAR-10 binary files or class sub-folders)");
  ImageData d;
  const fs::path root(dir);
  if (is_file(root / "data_batch_1.bin")) {
    d.layout = "cifar10";
    std::vector<std::string> files;
    for (int i = 1; is_file(root / ("data_batch_" + std::to_string(i) + ".bin")); ++i)
      files.push_back((root / ("data_batch_" + std::to_string(i) + ".bin")).string());
    const fs::path test = root / "test_batch.bin";
    HH_CHECK(is_file(test), "--data: ", dir, ": CIFAR-10 folder (data_batch_1.bin) without ", test.string());
    const fs::path meta = root / "batches.meta.txt";
    std::vector<std::string> classes = is_file(meta) ? data::read_cifar10_meta(meta.string()) : std::vector<std::string>{};
    d.train = std::make_shared<data::ImageDataset>(data::read_cifar10(files, classes));
    d.test = std::make_shared<data::ImageDataset>(data::read_cifar10({test.string()}, classes));
  } else if (is_dir(root / "train")) {
    d.layout = "folders";
    const fs::path test = is_dir(root / "test") ? root / "test" : root / "val";
    HH_CHECK(is_dir(test), "--data: ", dir, ": has a train/ folder but neither test/ nor val/");
    d.train = std::make_shared<data::ImageDataset>(data::read_image_folder((root / "train").string()));
    d.test = std::make_shared<data::ImageDataset>(data::read_image_folder(test.string()));
    HH_CHECK(d.train->classes == d.test->classes, "--data: ", dir, ": the class folders of train/ (",
             d.train->classes.size(), ") and ", test.filename().string(), "/ (", d.test->classes.size(), ") differ");
  } else {
    d.layout = "folder";
    HH_CHECK(test_fraction > 0 && test_fraction < 1, "--test-fraction must be in (0, 1) for a single class folder, got ",
             test_fraction);
    d.train = std::make_shared<data::ImageDataset>(data::read_image_folder(dir));
    d.test = d.train;
  }
  HH_CHECK(d.train->size() >= 1, "--data: ", dir, ": no training images");
  if (d.layout == "folder") {
    auto [train, test] = hold_out(all_rows(d.train->size()), test_fraction, seed + 17);
    d.train_rows = std::move(train);
    d.test_rows = std::move(test);
  } else {
    d.train_rows = all_rows(d.train->size());
    d.test_rows = all_rows(d.test->size());
  }
  HH_CHECK(!d.test_rows.empty(), "--data: ", dir, ": no test images");
  return d;
}

ImagePreprocess vit_preprocess(const std::string& model_folder, int64_t image_size) {
  const fs::path pre = fs::path(model_folder) / "preprocessor_config.json";
  return is_file(pre) ? ImagePreprocess::load(pre.string(), image_size) : ImagePreprocess::defaults(image_size);
}

double topk_accuracy(const Tensor& logits, const Tensor& labels, int64_t k) {
  HH_CHECK(logits.dim() == 2, "topk_accuracy: logits must be (N,C), got ", logits.shape());
  const int64_t n = logits.size(0), c = logits.size(1);
  HH_CHECK(labels.dim() == 1 && labels.size(0) == n, "topk_accuracy: labels must be (", n, "), got ", labels.shape());
  HH_CHECK(k >= 1, "topk_accuracy: k must be >= 1, got ", k);
  if (n == 0) return 0.0;
  const std::vector<float> v = to_vector<float>(logits.to(Device::cpu()).to(DType::f32));
  const std::vector<int64_t> y = to_vector<int64_t>(labels.to(Device::cpu()));
  int64_t hits = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = y[static_cast<size_t>(i)];
    HH_CHECK(t >= 0 && t < c, "topk_accuracy: label ", t, " of row ", i, " is not in [0, ", c, ")");
    const float lt = v[static_cast<size_t>(i * c + t)];
    int64_t above = 0;  // classes ranked before the label
    for (int64_t j = 0; j < c; ++j) {
      const float lj = v[static_cast<size_t>(i * c + j)];
      if (lj > lt || (lj == lt && j < t)) ++above;
    }
    if (above < k) ++hits;
  }
  return static_cast<double>(hits) / static_cast<double>(n);
}

ImageConversionTask::ImageConversionTask(std::shared_ptr<nn::ViTForImageClassification> model, ImageSplit train,
                                         ImageSplit val, ImageSplit test, ImageTaskConfig cfg)
    : model_(std::move(model)), train_(std::move(train)), val_(std::move(val)), test_(std::move(test)), cfg_(cfg) {
  HH_CHECK(model_ != nullptr, "ImageConversionTask: no model");
  HH_CHECK(cfg_.batch >= 1, "ImageConversionTask: batch must be >= 1, got ", cfg_.batch);
  const int64_t labels = model_->vit->cfg.num_labels;
  for (const ImageSplit* s : {&train_, &val_, &test_}) {
    HH_CHECK(s->data != nullptr, "ImageConversionTask: a split has no dataset");
    const int64_t classes = static_cast<int64_t>(s->data->classes.size());
    HH_CHECK(classes == labels, "the data has ", classes, " classes but the model has num_labels = ", labels,
             " (its classifier must match the data's classes)");
    for (int64_t r : s->rows) HH_CHECK(r >= 0 && r < s->data->size(), "ImageConversionTask: row ", r, " out of range");
  }
  HH_CHECK(train_.size() >= 1, "ImageConversionTask: no training images");
  HH_CHECK(val_.size() >= 1, "ImageConversionTask: no validation images");
  train_batches_ = RowBatches(train_.size(), cfg_.batch, true, cfg_.seed);
  val_batches_ = RowBatches(val_.size(), cfg_.batch, false, 0);
  test_batches_ = RowBatches(test_.size(), cfg_.batch, false, 0);
}

const ImageSplit& ImageConversionTask::split(Split s) const {
  return s == Split::train ? train_ : s == Split::val ? val_ : test_;
}
const RowBatches& ImageConversionTask::batches_of(Split s) const {
  return s == Split::train ? train_batches_ : s == Split::val ? val_batches_ : test_batches_;
}

std::vector<int64_t> ImageConversionTask::batch_rows(Split s, int64_t i) const {
  const ImageSplit& sp = split(s);
  std::vector<int64_t> rows;
  for (int64_t r : batches_of(s).rows(i)) rows.push_back(sp.rows[static_cast<size_t>(r)]);
  return rows;
}

Tensor ImageConversionTask::loss(Split s, int64_t i, nn::TraceRequest* trace) {
  const std::vector<int64_t> rows = batch_rows(s, i);
  const data::ImageDataset& d = *split(s).data;
  Tensor pixels = d.batch(rows, cfg_.preprocess).to(cfg_.device);  // (B,3,H,W)
  Tensor labels = d.batch_labels(rows).to(cfg_.device);           // (B)
  return cross_entropy(model_->forward(pixels, trace), labels);
}

int64_t ImageConversionTask::tokens(Split s, int64_t i) const {
  return static_cast<int64_t>(batches_of(s).rows(i).size()) * (1 + model_->vit->cfg.num_patches());
}

Metrics ImageConversionTask::evaluate(Split s) {
  model_->eval();
  NoGradGuard ng;
  const data::ImageDataset& d = *split(s).data;
  std::vector<Tensor> logits, labels;
  for (int64_t i = 0; i < batches(s); ++i) {
    const std::vector<int64_t> rows = batch_rows(s, i);
    logits.push_back(model_->forward(d.batch(rows, cfg_.preprocess).to(cfg_.device)).to(Device::cpu()));
    labels.push_back(d.batch_labels(rows));
  }
  HH_CHECK(!logits.empty(), "ImageConversionTask: the split has no images to evaluate");
  Tensor all_logits = cat(logits, 0), all_labels = cat(labels, 0);
  Metrics m{{"top1", topk_accuracy(all_logits, all_labels, 1)}};
  if (model_->vit->cfg.num_labels >= 5) m.emplace_back("top5", topk_accuracy(all_logits, all_labels, 5));
  return m;
}

}  // namespace hh::train
