#include "data/image_dataset.h"

#include <algorithm>
#include <cctype>
#include <exception>
#include <filesystem>
#include <fstream>
#include <utility>

#include "core/error.h"
#include "core/regular_file.h"

namespace hh::data {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kCifarSide = 32;
constexpr int64_t kCifarPixels = kCifarSide * kCifarSide;   // per channel
constexpr int64_t kCifarRecord = 1 + 3 * kCifarPixels;      // 3073 bytes

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void check_rows(const ImageDataset& d, const std::vector<int64_t>& rows) {
  for (int64_t r : rows) HH_CHECK(r >= 0 && r < d.n, "image dataset: row ", r, " out of range [0, ", d.n, ")");
}

}  // namespace

RgbImage ImageDataset::image(int64_t i) const {
  HH_CHECK(i >= 0 && i < n, "image dataset: row ", i, " out of range [0, ", n, ")");
  if (!files.empty()) return read_image(files[static_cast<size_t>(i)]);
  RgbImage img;
  img.height = h;
  img.width = w;
  const size_t size = static_cast<size_t>(h * w * 3);
  const auto first = pixels.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(i) * size);
  img.rgb.assign(first, first + static_cast<std::ptrdiff_t>(size));
  return img;
}

Tensor ImageDataset::batch(const std::vector<int64_t>& rows, const ImagePreprocess& p) const {
  check_rows(*this, rows);
  HH_CHECK(!rows.empty(), "image dataset: empty batch");
  // Decoding and resizing dominate (PIL's resize to 224 costs ~20 ms an image): rows in parallel.
  // An error is kept per row and the first failing row's is thrown, whatever the thread count.
  const int64_t B = static_cast<int64_t>(rows.size());
  std::vector<Tensor> xs(rows.size());
  std::vector<std::string> errors(rows.size());
#pragma omp parallel for schedule(dynamic)
  for (int64_t r = 0; r < B; ++r) {
    try {
      xs[static_cast<size_t>(r)] = image_to_pixels(image(rows[static_cast<size_t>(r)]), p);
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
  }
  for (const std::string& e : errors)
    if (!e.empty()) fail(e);
  const Shape one = xs[0].shape();
  std::vector<float> out;
  out.reserve(rows.size() * static_cast<size_t>(xs[0].numel()));
  for (size_t r = 0; r < rows.size(); ++r) {
    HH_CHECK(xs[r].shape() == one, "image dataset: image ", rows[r], files.empty() ? "" : " (" + files[static_cast<size_t>(rows[r])] + ")",
             " gives pixel values of shape ", xs[r].shape(), ", the batch's first gives ", one,
             "; preprocess with do_resize to stack images of different sizes");
    const std::vector<float> v = to_vector<float>(xs[r]);
    out.insert(out.end(), v.begin(), v.end());
  }
  return from_vector(out, {B, one[0], one[1], one[2]});
}

Tensor ImageDataset::batch_labels(const std::vector<int64_t>& rows) const {
  check_rows(*this, rows);
  std::vector<int64_t> out;
  for (int64_t r : rows) out.push_back(labels[static_cast<size_t>(r)]);
  return from_vector(out, {static_cast<int64_t>(rows.size())});
}

std::vector<std::string> cifar10_default_classes() {
  return {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
}

ImageDataset read_cifar10(const std::vector<std::string>& files, std::vector<std::string> classes) {
  HH_CHECK(!files.empty(), "cifar10: no files given");
  if (classes.empty()) classes = cifar10_default_classes();
  HH_CHECK(classes.size() == 10, "cifar10: expected 10 class names, got ", classes.size());
  ImageDataset d;
  d.h = d.w = kCifarSide;
  d.classes = std::move(classes);
  std::vector<uint8_t> record(static_cast<size_t>(kCifarRecord));
  for (const std::string& path : files) {
    std::error_code ec;
    HH_CHECK(!fs::is_directory(path, ec), "cifar10: ", path, ": is a directory, not a batch file");
    check_regular_file(path, "cifar10");  // a FIFO would block the open below forever
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    HH_CHECK(f.good(), "cifar10: ", path, ": cannot open the file");
    const std::streamoff size = f.tellg();
    HH_CHECK(size > 0, "cifar10: ", path, ": the file is empty");
    HH_CHECK(size % kCifarRecord == 0, "cifar10: ", path, ": size ", size, " bytes is not a multiple of the ",
             kCifarRecord, "-byte record (1 label byte + 3072 pixel bytes)");
    f.seekg(0);
    const int64_t count = size / kCifarRecord;
    d.pixels.reserve(d.pixels.size() + static_cast<size_t>(count * 3 * kCifarPixels));
    for (int64_t r = 0; r < count; ++r) {
      f.read(reinterpret_cast<char*>(record.data()), kCifarRecord);
      HH_CHECK(f.gcount() == kCifarRecord, "cifar10: ", path, ": read error in record ", r);
      HH_CHECK(record[0] <= 9, "cifar10: ", path, ": record ", r, " (byte ", r * kCifarRecord, "): label ",
               int(record[0]), " is not in 0..9");
      d.labels.push_back(record[0]);
      for (int64_t i = 0; i < kCifarPixels; ++i)  // planes R, G, B -> interleaved
        for (int64_t c = 0; c < 3; ++c) d.pixels.push_back(record[static_cast<size_t>(1 + c * kCifarPixels + i)]);
    }
  }
  d.n = static_cast<int64_t>(d.labels.size());
  return d;
}

std::vector<std::string> read_cifar10_meta(const std::string& path) {
  check_regular_file(path, "cifar10");
  std::ifstream f(path, std::ios::binary);
  HH_CHECK(f.good(), "cifar10: ", path, ": cannot open the file");
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(f, line)) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    lines.push_back(line);
  }
  HH_CHECK(!f.bad(), "cifar10: ", path, ": read error");
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  for (size_t i = 0; i < lines.size(); ++i)
    HH_CHECK(!lines[i].empty(), "cifar10: ", path, ":", i + 1, ": empty class name");
  HH_CHECK(lines.size() == 10, "cifar10: ", path, ": expected 10 class names (one a line), found ", lines.size());
  return lines;
}

ImageDataset read_cifar10_split(const std::string& dir, const std::string& split) {
  std::vector<std::string> files;
  if (split == "train") {
    for (int i = 1; i <= 5; ++i) files.push_back((fs::path(dir) / ("data_batch_" + std::to_string(i) + ".bin")).string());
  } else if (split == "test") {
    files.push_back((fs::path(dir) / "test_batch.bin").string());
  } else {
    fail(str("cifar10: unknown split '", split, "' (valid: train, test)"));
  }
  for (const auto& f : files) {
    std::error_code ec;
    HH_CHECK(fs::is_regular_file(f, ec), "cifar10: ", split, ": no file ", f);
  }
  const std::string meta = (fs::path(dir) / "batches.meta.txt").string();
  std::error_code ec;
  return read_cifar10(files, fs::exists(meta, ec) ? read_cifar10_meta(meta) : std::vector<std::string>{});
}

ImageDataset read_image_folder(const std::string& root) {
  std::error_code ec;
  HH_CHECK(fs::is_directory(root, ec), "image folder: ", root, ": not a directory");
  ImageDataset d;
  try {
    for (const auto& e : fs::directory_iterator(root))
      if (e.is_directory()) d.classes.push_back(e.path().filename().string());
    std::sort(d.classes.begin(), d.classes.end());
    HH_CHECK(!d.classes.empty(), "image folder: ", root, ": no class sub-folders");
    for (size_t c = 0; c < d.classes.size(); ++c) {
      const fs::path dir = fs::path(root) / d.classes[c];
      std::vector<std::pair<std::string, std::string>> found;  // (folder, name), sorted as ImageFolder
      for (const auto& e : fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink)) {
        if (e.is_directory()) continue;
        const std::string name = e.path().filename().string();
        if (!name.empty() && name[0] == '.') continue;  // hidden files (.DS_Store, ...)
        const std::string ext = lower(e.path().extension().string());
        HH_CHECK(ext == ".png" || ext == ".ppm" || ext == ".pgm", "image folder: ", e.path().string(),
                 ": not a PNG/PPM/PGM image (convert JPEG and other formats to PNG first)");
        found.emplace_back(e.path().parent_path().string(), name);
      }
      HH_CHECK(!found.empty(), "image folder: ", dir.string(), ": class '", d.classes[c], "' has no images");
      std::sort(found.begin(), found.end());
      for (const auto& [folder, name] : found) {
        d.files.push_back((fs::path(folder) / name).string());
        d.labels.push_back(static_cast<int64_t>(c));
      }
    }
  } catch (const fs::filesystem_error& e) {
    fail(str("image folder: ", root, ": ", e.what()));
  }
  d.n = static_cast<int64_t>(d.files.size());
  return d;
}

}  // namespace hh::data
