#include "data/image.h"

#include <png.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/regular_file.h"

namespace hh {

namespace {

// PIL's decompression-bomb limit (2 x Image.MAX_IMAGE_PIXELS, where Image.open raises): a small
// file declaring more pixels (a 1 MB PNG of 16384^2 decodes to 1.8 GB) is refused before decoding.
constexpr int64_t kMaxPixels = 2 * int64_t(89478485);

std::string read_file(const std::string& path) {
  check_regular_file(path, "image");  // a FIFO blocks; /dev/zero would be read until memory runs out
  std::ifstream f(path, std::ios::binary);
  HH_CHECK(f.good(), "image: cannot open ", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  HH_CHECK(!f.bad(), "image: cannot read ", path);
  return ss.str();
}

RgbImage read_png(const std::string& bytes, const std::string& path) {
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&img, bytes.data(), bytes.size()))
    fail(str("image: ", path, ": not a readable PNG (", img.message, ")"));
  if (int64_t(img.width) * int64_t(img.height) > kMaxPixels) {
    png_image_free(&img);
    fail(str("image: ", path, ": ", img.width, "x", img.height, " pixels is too large (over ", kMaxPixels,
             " pixels, PIL's decompression-bomb limit)"));
  }
  // RGBA keeps the colour channels as stored (8-bit output is not premultiplied); the alpha
  // channel is then dropped, as PIL's convert("RGB").
  img.format = PNG_FORMAT_RGBA;
  std::vector<uint8_t> rgba(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, rgba.data(), 0, nullptr)) {
    const std::string msg = img.message;
    png_image_free(&img);
    fail(str("image: ", path, ": corrupt PNG (", msg, ")"));
  }
  RgbImage out;
  out.height = img.height;
  out.width = img.width;
  out.rgb.resize(size_t(out.height * out.width * 3));
  for (int64_t i = 0; i < out.height * out.width; ++i)
    for (int c = 0; c < 3; ++c) out.rgb[size_t(i * 3 + c)] = rgba[size_t(i * 4 + c)];
  return out;
}

// Netpbm header: magic, width, height, maxval, separated by whitespace and '#' comments; one
// whitespace byte precedes the samples.
RgbImage read_pnm(const std::string& bytes, const std::string& path) {
  const bool color = bytes[1] == '6';
  size_t pos = 2;
  auto next_int = [&](const char* what) -> int64_t {
    while (pos < bytes.size()) {
      if (bytes[pos] == '#') {
        while (pos < bytes.size() && bytes[pos] != '\n') ++pos;
      } else if (std::isspace(static_cast<unsigned char>(bytes[pos]))) {
        ++pos;
      } else {
        break;
      }
    }
    int64_t v = 0;
    size_t start = pos;
    while (pos < bytes.size() && std::isdigit(static_cast<unsigned char>(bytes[pos])) && pos - start < 9)
      v = v * 10 + (bytes[pos++] - '0');
    HH_CHECK(pos > start && v > 0, "image: ", path, ": bad PPM/PGM header (", what, ")");
    return v;
  };
  const int64_t width = next_int("width"), height = next_int("height"), maxval = next_int("maxval");
  HH_CHECK(maxval <= 65535, "image: ", path, ": PPM/PGM maxval ", maxval, " is above 65535");
  HH_CHECK(width * height <= kMaxPixels, "image: ", path, ": ", width, "x", height, " pixels is too large (over ",
           kMaxPixels, " pixels, PIL's decompression-bomb limit)");
  HH_CHECK(pos < bytes.size() && std::isspace(static_cast<unsigned char>(bytes[pos])), "image: ", path,
           ": bad PPM/PGM header (no whitespace before the samples)");
  ++pos;
  const int64_t channels = color ? 3 : 1, bps = maxval < 256 ? 1 : 2;
  const int64_t need = width * height * channels * bps;
  HH_CHECK(int64_t(bytes.size() - pos) >= need, "image: ", path, ": truncated PPM/PGM (", bytes.size() - pos,
           " bytes of samples, ", need, " needed)");
  RgbImage out;
  out.height = height;
  out.width = width;
  out.rgb.resize(size_t(height * width * 3));
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + pos);
  for (int64_t i = 0; i < height * width; ++i)
    for (int64_t c = 0; c < 3; ++c) {
      const int64_t s = i * channels + (color ? c : 0);
      const int64_t v = bps == 1 ? p[s] : (int64_t(p[2 * s]) << 8 | p[2 * s + 1]);
      HH_CHECK(v <= maxval, "image: ", path, ": sample ", v, " above maxval ", maxval);
      out.rgb[size_t(i * 3 + c)] = static_cast<uint8_t>(maxval == 255 ? v : (v * 255 + maxval / 2) / maxval);
    }
  return out;
}

// PIL's resampling coefficients for one axis (Resample.c, bilinear): per output index, the first
// input index and the fixed-point weights (22 fractional bits), normalized to sum to one.
constexpr int kPrecisionBits = 32 - 8 - 2;

struct AxisCoeffs {
  std::vector<int64_t> start, count;
  std::vector<std::vector<int64_t>> weights;
};

AxisCoeffs bilinear_coeffs(int64_t in, int64_t out) {
  const double scale = double(in) / double(out), filterscale = std::max(scale, 1.0), support = 1.0 * filterscale;
  AxisCoeffs a;
  for (int64_t o = 0; o < out; ++o) {
    const double center = (double(o) + 0.5) * scale;
    int64_t lo = std::max<int64_t>(0, int64_t(center - support + 0.5));
    int64_t hi = std::min<int64_t>(in, int64_t(center + support + 0.5));
    std::vector<double> w;
    double total = 0;
    for (int64_t x = lo; x < hi; ++x) {
      const double t = std::abs((double(x) - center + 0.5) / filterscale);
      w.push_back(t < 1.0 ? 1.0 - t : 0.0);
      total += w.back();
    }
    std::vector<int64_t> fixed;
    for (double v : w) {
      const double k = (total != 0 ? v / total : v) * double(1 << kPrecisionBits);
      fixed.push_back(int64_t(k < 0 ? k - 0.5 : k + 0.5));
    }
    a.start.push_back(lo);
    a.count.push_back(hi - lo);
    a.weights.push_back(fixed);
  }
  return a;
}

uint8_t clip8(int64_t acc) {
  const int64_t v = acc >> kPrecisionBits;
  return static_cast<uint8_t>(std::clamp<int64_t>(v, 0, 255));
}

// One pass along x (horizontal) or y: src (h, w, 3) -> (h', w', 3) with the other size unchanged.
RgbImage resample_axis(const RgbImage& src, int64_t new_size, bool horizontal) {
  const int64_t in = horizontal ? src.width : src.height;
  const AxisCoeffs a = bilinear_coeffs(in, new_size);
  RgbImage dst;
  dst.height = horizontal ? src.height : new_size;
  dst.width = horizontal ? new_size : src.width;
  dst.rgb.resize(size_t(dst.height * dst.width * 3));
  for (int64_t y = 0; y < dst.height; ++y)
    for (int64_t x = 0; x < dst.width; ++x) {
      const int64_t o = horizontal ? x : y;
      for (int64_t c = 0; c < 3; ++c) {
        int64_t acc = int64_t(1) << (kPrecisionBits - 1);
        for (int64_t k = 0; k < a.count[size_t(o)]; ++k) {
          const int64_t i = a.start[size_t(o)] + k;
          const int64_t sy = horizontal ? y : i, sx = horizontal ? i : x;
          acc += int64_t(src.rgb[size_t((sy * src.width + sx) * 3 + c)]) * a.weights[size_t(o)][size_t(k)];
        }
        dst.rgb[size_t((y * dst.width + x) * 3 + c)] = clip8(acc);
      }
    }
  return dst;
}

std::string json_text(const nlohmann::json& j) { return j.dump(); }

}  // namespace

RgbImage read_image(const std::string& path) {
  const std::string bytes = read_file(path);
  static const unsigned char png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), png_magic, 8) == 0) return read_png(bytes, path);
  if (bytes.size() >= 2 && bytes[0] == 'P' && (bytes[1] == '6' || bytes[1] == '5')) return read_pnm(bytes, path);
  fail(str("image: ", path, ": not a PNG or binary PPM/PGM file (unknown signature)"));
}

RgbImage resize_bilinear(const RgbImage& img, int64_t height, int64_t width) {
  HH_CHECK(height > 0 && width > 0, "image: cannot resize to ", height, "x", width);
  HH_CHECK(height <= kMaxPixels / width, "image: cannot resize to ", height, "x", width, " (over ", kMaxPixels, " pixels)");
  HH_CHECK(img.height > 0 && img.width > 0, "image: cannot resize an empty image");
  RgbImage out = img;
  if (width != img.width) out = resample_axis(out, width, true);  // PIL: horizontal first
  if (height != img.height) out = resample_axis(out, height, false);
  return out;
}

ImagePreprocess ImagePreprocess::defaults(int64_t image_size) {
  ImagePreprocess p;
  p.height = p.width = image_size;
  return p;
}

ImagePreprocess ImagePreprocess::load(const std::string& path, int64_t image_size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail(str("image: ", path, ": invalid JSON (", e.what(), ")"));
  }
  HH_CHECK(j.is_object(), "image: ", path, ": expected a JSON object");
  ImagePreprocess p = defaults(image_size);
  auto get_bool = [&](const char* key, bool& out) {
    if (!j.contains(key) || j[key].is_null()) return;
    HH_CHECK(j[key].is_boolean(), "image: ", path, ": \"", key, "\" must be true or false, got ", json_text(j[key]));
    out = j[key].get<bool>();
  };
  auto get_number = [&](const nlohmann::json& v, const std::string& key) {
    HH_CHECK(v.is_number(), "image: ", path, ": \"", key, "\" must be a number, got ", json_text(v));
    return v.get<double>();
  };
  auto get_triple = [&](const char* key, std::vector<double>& out) {
    if (!j.contains(key) || j[key].is_null()) return;
    const auto& v = j[key];
    if (v.is_number()) {
      out.assign(3, v.get<double>());
      return;
    }
    HH_CHECK(v.is_array() && v.size() == 3, "image: ", path, ": \"", key, "\" must be a number or 3 numbers, got ",
             json_text(v));
    for (size_t c = 0; c < 3; ++c) out[c] = get_number(v[c], key);
  };
  get_bool("do_resize", p.do_resize);
  get_bool("do_rescale", p.do_rescale);
  get_bool("do_normalize", p.do_normalize);
  if (j.contains("rescale_factor") && !j["rescale_factor"].is_null())
    p.rescale_factor = get_number(j["rescale_factor"], "rescale_factor");
  get_triple("image_mean", p.image_mean);
  get_triple("image_std", p.image_std);
  for (double s : p.image_std) HH_CHECK(s != 0.0, "image: ", path, ": \"image_std\" has a zero");
  if (j.contains("size") && !j["size"].is_null()) {
    const auto& s = j["size"];
    HH_CHECK(s.is_object() && s.contains("height") && s.contains("width"), "image: ", path,
             ": \"size\" must be {\"height\": H, \"width\": W} (other forms are not supported), got ", json_text(s));
    HH_CHECK(s["height"].is_number_integer() && s["width"].is_number_integer() && s["height"].get<int64_t>() > 0 &&
                 s["width"].get<int64_t>() > 0,
             "image: ", path, ": \"size\" height and width must be positive integers, got ", json_text(s));
    p.height = s["height"].get<int64_t>();
    p.width = s["width"].get<int64_t>();
  }
  // Images are resized to this size: bounded as decoded images are, before anything is allocated
  // (a size of 2^31 x 2^31 took 10 GB before ending in std::bad_alloc).
  HH_CHECK(p.width <= 0 || p.height <= kMaxPixels / p.width, "image: ", path, ": \"size\" ", p.height, "x", p.width,
           " is too large (over ", kMaxPixels, " pixels)");
  return p;
}

Tensor image_to_pixels(const RgbImage& img, const ImagePreprocess& p) {
  HH_CHECK(p.image_mean.size() == 3 && p.image_std.size() == 3, "image: image_mean and image_std need 3 values");
  const RgbImage& r = (p.do_resize && (img.height != p.height || img.width != p.width))
                          ? resize_bilinear(img, p.height, p.width)
                          : img;
  const int64_t H = r.height, W = r.width;
  std::vector<float> out(size_t(3 * H * W));
  for (int64_t c = 0; c < 3; ++c) {
    const float mean = static_cast<float>(p.image_mean[size_t(c)]), sd = static_cast<float>(p.image_std[size_t(c)]);
    for (int64_t i = 0; i < H * W; ++i) {
      const double v = r.rgb[size_t(i * 3 + c)];
      // transformers: rescale in f64 then cast to f32; normalize in f32.
      float x = p.do_rescale ? static_cast<float>(v * p.rescale_factor) : static_cast<float>(v);
      if (p.do_normalize) x = (x - mean) / sd;
      out[size_t(c * H * W + i)] = x;
    }
  }
  return from_vector(out, {3, H, W});
}

}  // namespace hh
