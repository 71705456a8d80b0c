// Image datasets (data/image_dataset.h): CIFAR-10 binary records (planes to interleaved RGB,
// labels, class names) and class-folder datasets, with their batches and the errors for
// malformed files (naming the file and the record).
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/temp_dir.h"
#include "data/image.h"
#include "data/image_dataset.h"

using namespace hh;
using namespace hh::data;
namespace fs = std::filesystem;

namespace {

const std::string kImages = std::string(HH_SOURCE_DIR) + "/tests/fixtures/images/";

using TempDir = test::TempDir;

// The pixel value a test record stores for (record, channel, index in the plane).
uint8_t pixel(int record, int c, int i) { return static_cast<uint8_t>((record * 7 + c * 50 + i * 3) % 256); }

// One CIFAR-10 record: the label byte, then planes R, G, B of 1024 bytes.
std::string cifar_record(int record, int label) {
  std::string s(1, static_cast<char>(label));
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 1024; ++i) s += static_cast<char>(pixel(record, c, i));
  return s;
}

// A binary PPM of w x h whose pixel (x, y) channel c is (x * 40 + y * 10 + c) % 256.
std::string ppm(int w, int h) {
  std::string s = "P6\n" + std::to_string(w) + " " + std::to_string(h) + "\n255\n";
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) s += static_cast<char>((x * 40 + y * 10 + c) % 256);
  return s;
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

ImagePreprocess no_resize(int64_t side) {
  ImagePreprocess p = ImagePreprocess::defaults(side);
  p.do_resize = false;
  return p;
}

}  // namespace

TEST_CASE("image dataset: CIFAR-10 records become interleaved RGB with their labels") {
  TempDir dir("imgds");
  const std::string a = dir.write("data_batch_1.bin", cifar_record(0, 3) + cifar_record(1, 9));
  const std::string b = dir.write("data_batch_2.bin", cifar_record(2, 0));
  const ImageDataset d = read_cifar10({a, b});
  REQUIRE(d.size() == 3);
  CHECK(d.h == 32);
  CHECK(d.w == 32);
  CHECK(d.labels == std::vector<int64_t>{3, 9, 0});
  CHECK(d.classes == cifar10_default_classes());
  CHECK(d.classes[3] == "cat");
  CHECK(d.pixels.size() == size_t(3 * 3072));
  bool same = true;
  for (int r = 0; r < 3; ++r) {
    const RgbImage img = d.image(r);
    same = same && img.height == 32 && img.width == 32;
    for (int i = 0; i < 1024; ++i)
      for (int c = 0; c < 3; ++c) same = same && img.rgb[size_t(i * 3 + c)] == pixel(r, c, i);
  }
  CHECK(same);
  // Batches: each row as image_to_pixels gives it, stacked; labels as i64.
  const Tensor x = d.batch({2, 0}, no_resize(32));
  CHECK(x.shape() == Shape{2, 3, 32, 32});
  const std::vector<float> v = to_vector<float>(x);
  // Row 0 is record 2; channel 1 (G), pixel (y=1, x=2) -> plane index 34. (v/255 - 0.5) / 0.5.
  CHECK(v[size_t(1 * 1024 + 34)] == doctest::Approx((pixel(2, 1, 34) / 255.0 - 0.5) / 0.5).epsilon(1e-6));
  CHECK(v[size_t(3072 + 2 * 1024 + 1023)] == doctest::Approx((pixel(0, 2, 1023) / 255.0 - 0.5) / 0.5).epsilon(1e-6));
  ImagePreprocess up = ImagePreprocess::defaults(48);  // ViT-style resize on the way
  const Tensor y = d.batch({1, 2}, up);
  CHECK(y.shape() == Shape{2, 3, 48, 48});
  const std::vector<float> y1 = to_vector<float>(image_to_pixels(d.image(2), up));
  const std::vector<float> yv = to_vector<float>(y);
  CHECK(std::vector<float>(yv.begin() + 3 * 48 * 48, yv.end()) == y1);
  CHECK(to_vector<int64_t>(d.batch_labels({1, 0, 2})) == std::vector<int64_t>{9, 3, 0});
  CHECK_THROWS_WITH_AS(d.batch({3}, up), doctest::Contains("row 3 out of range [0, 3)"), Error);
  CHECK_THROWS_WITH_AS(d.batch_labels({-1}), doctest::Contains("row -1 out of range"), Error);
}

TEST_CASE("image dataset: malformed CIFAR-10 files name the file and the record") {
  TempDir dir("imgds");
  const std::string short_file = dir.write("short.bin", cifar_record(0, 1) + std::string(5, '\0'));
  CHECK_THROWS_WITH_AS(read_cifar10({short_file}), doctest::Contains("short.bin: size 3078 bytes is not a multiple of the 3073-byte record"),
                       Error);
  const std::string bad_label = dir.write("label.bin", cifar_record(0, 1) + cifar_record(1, 10));
  CHECK_THROWS_WITH_AS(read_cifar10({bad_label}), doctest::Contains("label.bin: record 1 (byte 3073): label 10 is not in 0..9"),
                       Error);
  CHECK_THROWS_WITH_AS(read_cifar10({dir.write("empty.bin", "")}), doctest::Contains("empty.bin: the file is empty"), Error);
  CHECK_THROWS_WITH_AS(read_cifar10({dir.file("missing.bin")}), doctest::Contains("missing.bin: cannot open"), Error);
  CHECK_THROWS_WITH_AS(read_cifar10({}), doctest::Contains("no files"), Error);
}

TEST_CASE("image dataset: CIFAR-10 split folders and batches.meta.txt") {
  TempDir dir("imgds");
  for (int i = 1; i <= 5; ++i) dir.write("data_batch_" + std::to_string(i) + ".bin", cifar_record(i, i));
  dir.write("test_batch.bin", cifar_record(0, 7) + cifar_record(9, 8));
  const ImageDataset train = read_cifar10_split(dir.path.string(), "train");
  CHECK(train.labels == std::vector<int64_t>{1, 2, 3, 4, 5});
  CHECK(train.image(4).rgb[0] == pixel(5, 0, 0));
  CHECK(train.classes[0] == "airplane");
  dir.write("batches.meta.txt", "a0\nb1\nc2\nd3\ne4\nf5\ng6\nh7\ni8\nj9 \n\n");
  const ImageDataset test = read_cifar10_split(dir.path.string(), "test");
  CHECK(test.labels == std::vector<int64_t>{7, 8});
  CHECK(test.classes == std::vector<std::string>{"a0", "b1", "c2", "d3", "e4", "f5", "g6", "h7", "i8", "j9"});
  dir.write("batches.meta.txt", "a0\nb1\n\nd3\ne4\nf5\ng6\nh7\ni8\nj9\n");
  CHECK_THROWS_WITH_AS(read_cifar10_split(dir.path.string(), "test"), doctest::Contains("batches.meta.txt:3: empty class name"), Error);
  dir.write("batches.meta.txt", "a0\nb1\n");
  CHECK_THROWS_WITH_AS(read_cifar10_split(dir.path.string(), "test"), doctest::Contains("expected 10 class names (one a line), found 2"),
                       Error);
  CHECK_THROWS_WITH_AS(read_cifar10_split(dir.path.string(), "valid"), doctest::Contains("unknown split 'valid' (valid: train, test)"),
                       Error);
  fs::remove(dir.path / "data_batch_3.bin");
  CHECK_THROWS_WITH_AS(read_cifar10_split(dir.path.string(), "train"),
                       doctest::Contains(("no file " + dir.file("data_batch_3.bin")).c_str()), Error);
}

TEST_CASE("image dataset: class folders sorted as ImageFolder, decoded per batch") {
  TempDir dir("imgds");
  dir.write("root/dog/b.ppm", ppm(4, 3));
  dir.write("root/dog/a.PPM", ppm(4, 3));
  dir.write("root/cat/z.png", file_bytes(kImages + "rgb8.png"));
  dir.write("root/cat/sub/c.ppm", ppm(6, 5));
  dir.write("root/cat/.DS_Store", "junk");
  const ImageDataset d = read_image_folder(dir.file("root"));
  CHECK(d.classes == std::vector<std::string>{"cat", "dog"});
  REQUIRE(d.size() == 4);
  CHECK(d.files == std::vector<std::string>{dir.file("root/cat/z.png"), dir.file("root/cat/sub/c.ppm"),
                                            dir.file("root/dog/a.PPM"), dir.file("root/dog/b.ppm")});
  CHECK(d.labels == std::vector<int64_t>{0, 0, 1, 1});
  CHECK(d.pixels.empty());
  CHECK(d.image(0).rgb == read_image(kImages + "rgb8.ppm").rgb);  // the PNG decodes as its PPM twin
  const RgbImage a = d.image(2);
  CHECK(a.width == 4);
  CHECK(a.height == 3);
  CHECK(int(a.rgb[size_t((2 * 4 + 3) * 3 + 1)]) == (3 * 40 + 2 * 10 + 1));
  const Tensor x = d.batch({3, 0, 1}, ImagePreprocess::defaults(8));
  CHECK(x.shape() == Shape{3, 3, 8, 8});
  // Images of different sizes cannot be stacked without resizing; the error names the file.
  CHECK_THROWS_WITH_AS(d.batch({2, 1}, no_resize(4)), doctest::Contains("c.ppm) gives pixel values of shape"), Error);
  CHECK(d.batch({2, 3}, no_resize(4)).shape() == Shape{2, 3, 3, 4});
  CHECK(to_vector<int64_t>(d.batch_labels({3, 0})) == std::vector<int64_t>{1, 0});
}

TEST_CASE("image dataset: bad class folders") {
  TempDir dir("imgds");
  CHECK_THROWS_WITH_AS(read_image_folder(dir.file("nope")), doctest::Contains("nope: not a directory"), Error);
  dir.write("root/readme.txt", "x");
  CHECK_THROWS_WITH_AS(read_image_folder(dir.file("root")), doctest::Contains("root: no class sub-folders"), Error);
  dir.write("root/cat/a.ppm", ppm(2, 2));
  fs::create_directories(dir.path / "root/dog/empty");
  CHECK_THROWS_WITH_AS(read_image_folder(dir.file("root")), doctest::Contains("class 'dog' has no images"), Error);
  dir.write("root/dog/photo.jpg", "x");
  CHECK_THROWS_WITH_AS(read_image_folder(dir.file("root")), doctest::Contains("photo.jpg: not a PNG/PPM/PGM image"), Error);
  fs::remove(dir.path / "root/dog/photo.jpg");
  dir.write("root/dog/broken.ppm", "P6\n2 2\n255\nxx");
  const ImageDataset d = read_image_folder(dir.file("root"));
  CHECK_THROWS_WITH_AS(d.batch({1}, ImagePreprocess::defaults(2)), doctest::Contains("broken.ppm"), Error);
  // Rows are decoded in parallel; the error is the first failing row's, every time.
  dir.write("root/dog/also_broken.ppm", "P6\n0 2\n255\n");
  const ImageDataset e = read_image_folder(dir.file("root"));
  REQUIRE(e.files[1] == dir.file("root/dog/also_broken.ppm"));
  for (int i = 0; i < 5; ++i) {
    std::string msg;
    try {
      e.batch({0, 0, 2, 0, 1, 0}, ImagePreprocess::defaults(2));
    } catch (const Error& err) {
      msg = err.what();
    }
    CHECK(msg.find(dir.file("root/dog/broken.ppm")) != std::string::npos);
    CHECK(msg.find("also_broken") == std::string::npos);
  }
}
