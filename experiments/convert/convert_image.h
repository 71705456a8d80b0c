// Image classification as a ConversionTask (convert_vit): a ViTForImageClassification on an
// ImageDataset (CIFAR-10 binary files or a folder of class sub-folders), pixel values made per batch
// with the model folder's preprocessing, cross-entropy on the labels, top-1 accuracy (and top-5
// when there are at least 5 classes). ViT is an encoder: its mixer is bidirectional (non-causal).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/batching.h"
#include "data/image_dataset.h"
#include "nn/models/vit.h"
#include "train/convert/convert.h"

namespace hh::train {

// Some rows of a dataset (shared: every student of a study reads the same images).
struct ImageSplit {
  std::shared_ptr<const data::ImageDataset> data;
  std::vector<int64_t> rows;
  int64_t size() const { return static_cast<int64_t>(rows.size()); }
};

// The train and test images of --data DIR, detected by layout:
//   DIR/data_batch_1.bin present: CIFAR-10 binary; train = data_batch_1.bin, _2, ... (consecutive
//     ones present), test = test_batch.bin (required), names from batches.meta.txt when present;
//   DIR/train a folder: train = read_image_folder(DIR/train), test = DIR/test (else DIR/val);
//   otherwise DIR is one folder of class sub-folders; test = a seeded `test_fraction` of it.
// `layout` says which ("cifar10", "folders", "folder"). Errors name the folder or file.
struct ImageData {
  std::string layout;
  std::shared_ptr<const data::ImageDataset> train, test;  // the same dataset for layout "folder"
  std::vector<int64_t> train_rows, test_rows;
};
ImageData read_image_data(const std::string& dir, double test_fraction, uint64_t seed);

// Splits `rows` into (kept, held out): a seeded random `fraction` (at least one row when fraction
// > 0 and there are 2+ rows) is held out; both parts keep ascending order.
std::pair<std::vector<int64_t>, std::vector<int64_t>> hold_out(const std::vector<int64_t>& rows, double fraction,
                                                               uint64_t seed);
// At most `max` rows of `rows` (max <= 0: all), a seeded random choice in ascending order (class
// folders list their images class by class, so the first rows would be one class).
std::vector<int64_t> cap_rows(const std::vector<int64_t>& rows, int64_t max, uint64_t seed);

// folder/preprocessor_config.json, else the defaults at image_size (as hf_run).
ImagePreprocess vit_preprocess(const std::string& model_folder, int64_t image_size);

// Top-k accuracy of logits (N,C) against labels (N) i64, in [0,1]: a row counts when its label is
// among its k highest logits (ties broken towards the lower class index).
double topk_accuracy(const Tensor& logits, const Tensor& labels, int64_t k);

struct ImageTaskConfig {
  int64_t batch = 32;
  uint64_t seed = 0;  // training batch order
  ImagePreprocess preprocess;
  Device device = Device::cpu();
};

class ImageConversionTask : public ConversionTask {
 public:
  // Every split's labels must lie in [0, num_labels) and the datasets must have num_labels classes
  // (an error naming both counts).
  ImageConversionTask(std::shared_ptr<nn::ViTForImageClassification> model, ImageSplit train, ImageSplit val,
                      ImageSplit test, ImageTaskConfig cfg);
  nn::Module& model() override { return *model_; }
  void keep_softmax(const std::vector<int64_t>& layers) override { model_->keep_softmax(layers); }
  nn::ViTForImageClassification& vit() { return *model_; }
  std::shared_ptr<nn::ViTForImageClassification> vit_ptr() const { return model_; }
  int64_t batches(Split s) const override { return batches_of(s).size(); }
  void shuffle(int64_t epoch) override { train_batches_.set_epoch(epoch); }
  Tensor loss(Split s, int64_t i, nn::TraceRequest* trace) override;
  int64_t tokens(Split s, int64_t i) const override;  // images × (1 + patches)
  Metrics evaluate(Split s) override;  // {"top1"} and, with 5+ classes, {"top5"}; in [0,1]

 private:
  const ImageSplit& split(Split s) const;
  const RowBatches& batches_of(Split s) const;
  std::vector<int64_t> batch_rows(Split s, int64_t i) const;  // dataset rows of batch i
  std::shared_ptr<nn::ViTForImageClassification> model_;
  ImageSplit train_, val_, test_;
  ImageTaskConfig cfg_;
  RowBatches train_batches_, val_batches_, test_batches_;
};

}  // namespace hh::train
