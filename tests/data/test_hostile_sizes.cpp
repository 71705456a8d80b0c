// Sizes and paths from data files are bounded before use (issue 27, item 4): an image header or a
// preprocessor_config.json declaring more pixels than PIL's decompression-bomb limit is refused
// before anything is allocated, a token id far beyond the vocabulary's size is refused before a
// table of that size exists, and a Pathfinder metadata line cannot point outside the data root.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/image.h"
#include "data/lra.h"
#include "data/tokenizer.h"
#include "tests/temp_dir.h"

using namespace hh;
using hh::test::TempDir;

namespace {

uint32_t crc32(const std::string& bytes) {
  uint32_t c = 0xffffffffu;
  for (unsigned char b : bytes) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return c ^ 0xffffffffu;
}

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string chunk(const std::string& type, const std::string& data) {
  return be32(static_cast<uint32_t>(data.size())) + type + data + be32(crc32(type + data));
}

// A PNG of a few dozen bytes whose header declares width x height 8-bit RGB pixels.
std::string png_declaring(uint32_t width, uint32_t height) {
  const std::string ihdr = be32(width) + be32(height) + std::string("\x08\x02\x00\x00\x00", 5);
  const std::string idat("\x78\x9c\x03\x00\x00\x00\x00\x01", 8);  // a tiny zlib stream
  return std::string("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", ihdr) + chunk("IDAT", idat) + chunk("IEND", "");
}

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("hostile sizes: an image header declaring 16384^2 pixels is refused before decoding") {
  TempDir dir("hostile_png");
  const std::string png = dir.write("bomb.png", png_declaring(16384, 16384));
  const auto start = std::chrono::steady_clock::now();
  std::string e = error_of([&] { read_image(png); });
  CHECK_MESSAGE(e.find(png + ": 16384x16384 pixels is too large") != std::string::npos, e);
  const std::string ppm = dir.write("bomb.ppm", "P6 16384 16384 255\n" + std::string(16, '\0'));
  e = error_of([&] { read_image(ppm); });
  CHECK_MESSAGE(e.find(ppm + ": 16384x16384 pixels is too large") != std::string::npos, e);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 2.0);
}

TEST_CASE("hostile sizes: preprocessor_config.json size 2^31 x 2^31 is refused when read") {
  TempDir dir("hostile_pre");
  const std::string pre =
      dir.write("preprocessor_config.json", R"({"size": {"height": 2147483648, "width": 2147483648}})");
  const std::string e = error_of([&] { ImagePreprocess::load(pre, 32); });
  CHECK_MESSAGE(e.find(pre + ": \"size\" 2147483648x2147483648 is too large") != std::string::npos, e);
  CHECK_THROWS_WITH_AS(resize_bilinear(RgbImage{1, 1, {0, 0, 0}}, int64_t{1} << 31, int64_t{1} << 31),
                       doctest::Contains("cannot resize to 2147483648x2147483648"), Error);
  CHECK_NOTHROW(ImagePreprocess::load(dir.write("ok.json", R"({"size": {"height": 224, "width": 224}})"), 32));
}

TEST_CASE("hostile sizes: a Pathfinder metadata line cannot leave the data root") {
  for (const std::string line : {"/dev zero 0 0", "imgs/0 /etc/passwd 0 0", "../outside sample_0.png 0 0",
                                 "imgs/0 ../../x.png 0 0"}) {
    CAPTURE(line);
    TempDir dir("hostile_pf");
    dir.write("metadata/0.npy", line + "\n");
    const std::string e = error_of([&] { data::read_lra_split(data::LraTask::pathfinder, dir.path.string(), "train"); });
    CHECK_MESSAGE(e.find("leaves the data folder") != std::string::npos, e);
    CHECK(e.find(dir.file("metadata/0.npy") + ":1") != std::string::npos);
  }
}

TEST_CASE("hostile sizes: a token id of 1e9 in a vocabulary is refused before a table of that size is allocated") {
  // (Before: a table of 1e9 strings, 32 GB, was allocated first: std::bad_alloc, or minutes.)
  struct Case {
    const char* fixture;
    const char* file;
    std::vector<std::string> vocab_path;  // where the token -> id object is in the file
  };
  for (const Case& c : {Case{"bert", "tokenizer.json", {"model", "vocab"}}, Case{"llama", "tokenizer.json", {"model", "vocab"}},
                        Case{"gpt2", "vocab.json", {}}}) {
    CAPTURE(c.fixture);
    TempDir dir("hostile_tok");
    const std::string from = std::string(HH_SOURCE_DIR) + "/tests/fixtures/tokenizers/" + c.fixture;
    for (const auto& e : std::filesystem::directory_iterator(from))
      std::filesystem::copy_file(e.path(), dir.path / e.path().filename());
    std::ifstream in(dir.file(c.file));
    nlohmann::json j = nlohmann::json::parse(in);
    nlohmann::json* vocab = &j;
    for (const std::string& k : c.vocab_path) vocab = &(*vocab)[k];
    REQUIRE(vocab->is_object());
    REQUIRE(vocab->contains("a"));
    (*vocab)["a"] = 1000000000;  // inside the [0, 2^30) range the readers accept
    dir.write(c.file, j.dump());
    const auto start = std::chrono::steady_clock::now();
    const std::string e = error_of([&] { data::load_tokenizer(dir.path.string()); });
    CHECK_MESSAGE(e.find("no token has id") != std::string::npos, e);
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 5.0);
  }
}
