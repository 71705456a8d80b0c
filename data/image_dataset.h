// Image classification data for the vision conversion: the CIFAR-10 binary files, or a folder of
// class sub-folders as torchvision's ImageFolder reads it. Images stay 8-bit (CIFAR-10 in memory:
// 50,000 x 3 x 32 x 32 bytes = 150 MB; folders: file names only, decoded when a batch asks) and
// become f32 pixel values per batch with the model's preprocessing (data/image.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/image.h"

namespace hh::data {

struct ImageDataset {
  int64_t n = 0;                      // number of images
  std::vector<int64_t> labels;        // n class indices into `classes`
  std::vector<std::string> classes;   // class names
  // In memory (CIFAR-10): n images of h x w, interleaved RGB as RgbImage keeps it, image i at
  // pixels[i * h * w * 3].
  int64_t h = 0, w = 0;
  std::vector<uint8_t> pixels;
  // From a folder: the file of each image (pixels stays empty), decoded on demand.
  std::vector<std::string> files;

  int64_t size() const { return n; }
  RgbImage image(int64_t i) const;
  // (B, 3, H, W) f32 on the CPU: image_to_pixels of each row, stacked. All rows must come out the
  // same size (preprocessing with do_resize, or images of one size).
  Tensor batch(const std::vector<int64_t>& rows, const ImagePreprocess& p) const;
  Tensor batch_labels(const std::vector<int64_t>& rows) const;  // (B) i64
};

// The ten CIFAR-10 class names, in label order ("airplane" ... "truck").
std::vector<std::string> cifar10_default_classes();

// CIFAR-10 binary files: records of 1 label byte (0..9) and 3072 pixel bytes (1024 R, then G, then
// B, rows of 32). The images of all files, in order. A size that is not a whole number of records,
// a label above 9, or an unreadable file is an error naming the file (and the record, 0-based).
// classes: the names to attach (empty: cifar10_default_classes()).
ImageDataset read_cifar10(const std::vector<std::string>& files, std::vector<std::string> classes = {});

// The split of an extracted cifar-10-batches-bin folder: "train" (data_batch_1.bin .. _5.bin) or
// "test" (test_batch.bin), with the class names of batches.meta.txt when that file is there (ten
// non-empty lines; trailing empty lines are fine), else the default names.
ImageDataset read_cifar10_split(const std::string& dir, const std::string& split);
// The ten names of a batches.meta.txt file; anything else is an error naming the file and line.
std::vector<std::string> read_cifar10_meta(const std::string& path);

// root/<class>/.../<image>: classes are the sub-folders of root sorted by name, labels their index,
// images every file below a class folder (sub-folders included) sorted by folder then name, as
// torchvision's ImageFolder. Images must be .png, .ppm or .pgm (any case); another file is an error
// naming it, except hidden files (a name starting with '.'), which are not images. A root without
// class folders, or a class folder without images, is an error.
ImageDataset read_image_folder(const std::string& root);

}  // namespace hh::data
