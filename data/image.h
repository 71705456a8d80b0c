// Images for the vision models: read a PNG (libpng) or a binary PPM/PGM into 8-bit RGB, resize
// as transformers' image processors do (PIL's bilinear filter), then rescale and normalize into
// (3,H,W) f32 pixel_values with the settings of an HF preprocessor_config.json.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hh {

// 8-bit RGB, rows top to bottom, pixels interleaved: rgb[(y * width + x) * 3 + c].
struct RgbImage {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> rgb;
};

// PNG (any bit depth / color type: gray and palette become RGB, alpha is dropped as PIL's
// convert("RGB") does, 16-bit samples are reduced to 8) or binary PPM (P6) / PGM (P5), chosen by
// the file's first bytes. Errors name the file and what is wrong with it.
// One known difference from Pillow: a PNG whose gAMA chunk is far from sRGB is gamma-corrected to
// sRGB by libpng (Pillow ignores gAMA); files without gAMA, or with the usual 1/2.2, read the same.
RgbImage read_image(const std::string& path);

// Resizes with PIL's BILINEAR filter (a triangle filter widened by the scale when shrinking, the
// horizontal pass first, each pass rounded to 8 bits), which transformers' ViTImageProcessor uses.
RgbImage resize_bilinear(const RgbImage& img, int64_t height, int64_t width);

// The fields of preprocessor_config.json that change pixel_values.
struct ImagePreprocess {
  bool do_resize = true;
  int64_t height = 224, width = 224;  // "size": {"height", "width"}
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::vector<double> image_mean{0.5, 0.5, 0.5}, image_std{0.5, 0.5, 0.5};

  // Reads a preprocessor_config.json; a missing "size" takes image_size. Errors name file and key.
  static ImagePreprocess load(const std::string& path, int64_t image_size);
  // The defaults (0.5 mean and std) at image_size x image_size, for a folder without the file.
  static ImagePreprocess defaults(int64_t image_size);
};

// (3,H,W) f32 on the CPU: resized when the size differs (and do_resize), x * rescale_factor,
// then (x - mean) / std per channel, in f32 as transformers computes it.
Tensor image_to_pixels(const RgbImage& img, const ImagePreprocess& p);

}  // namespace hh
