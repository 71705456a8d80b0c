// ViT from an HF folder: parity with transformers on the vit-tiny fixture (40x40, 8x8 patches),
// the image path (PNG -> pixel_values), every feature map, and bad input naming the culprit.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/image.h"
#include "nn/models/hf_model.h"
#include "nn/models/vit.h"
#include "tests/nn/models/hf_fixture.h"
#include "tests/op_table.h"

using namespace hh;
using namespace hh::nn;
using hh::test::enc::FixtureCopy;
using hh::test::enc::hf_fixture;
using hh::test::enc::rel_error;

namespace {

struct VitRef {
  Tensor pixels, logits, hidden;
};

VitRef vit_ref(Device d) {
  SafeTensors r = load_safetensors(hf_fixture("vit-tiny") + "/reference.safetensors", d);
  return {r.tensors.at("pixel_values"), r.tensors.at("logits"), r.tensors.at("last_hidden_state")};
}

std::shared_ptr<ViTForImageClassification> load_classifier(const std::string& folder, const HFModelOptions& o) {
  auto m = std::dynamic_pointer_cast<ViTForImageClassification>(load_hf_model(folder, o));
  REQUIRE(m != nullptr);
  return m;
}

HFModelOptions on_test_device() {
  HFModelOptions o;
  o.device = hh::test::test_device();
  return o;
}

}  // namespace

TEST_CASE("vit: logits and encoder output match transformers (40x40 image, 8x8 patches)") {
  const HFModelOptions o = on_test_device();
  auto m = load_classifier(hf_fixture("vit-tiny"), o);
  const VitRef r = vit_ref(o.device);
  Tensor hidden;
  Tensor logits = m->forward(r.pixels, nullptr, &hidden);
  CHECK(logits.shape() == Shape({2, 5}));
  CHECK(hidden.shape() == Shape({2, 26, 32}));  // CLS + 25 patches
  CHECK(logits.device() == o.device);
  CHECK(rel_error(hidden, r.hidden) < 1e-4);
  CHECK(rel_error(logits, r.logits) < 1e-4);
}

TEST_CASE("vit: parameters carry transformers' names") {
  auto m = load_classifier(hf_fixture("vit-tiny"), HFModelOptions{});
  for (const char* n : {"vit.embeddings.cls_token", "vit.embeddings.position_embeddings",
                        "vit.embeddings.patch_embeddings.projection.weight",
                        "vit.encoder.layer.0.layernorm_before.weight", "vit.encoder.layer.0.attention.attention.query.bias",
                        "vit.encoder.layer.1.attention.output.dense.weight", "vit.encoder.layer.1.layernorm_after.bias",
                        "vit.encoder.layer.1.intermediate.dense.weight", "vit.encoder.layer.1.output.dense.bias",
                        "vit.layernorm.weight", "classifier.weight"})
    CHECK_NOTHROW(m->parameter(n));
  CHECK(m->parameter("vit.embeddings.patch_embeddings.projection.weight").shape() == Shape({32, 3, 8, 8}));
}

TEST_CASE("vit: a ViTModel folder (no classifier, a pooler) loads, with or without the vit. prefix") {
  const VitRef r = vit_ref(Device::cpu());
  for (bool prefix : {false, true}) {
    CAPTURE(prefix);
    FixtureCopy f("vit-tiny");
    f.edit_weights([prefix](auto& list) {
      std::vector<std::pair<std::string, Tensor>> kept;
      for (auto& [n, t] : list)
        if (n.rfind("vit.", 0) == 0) kept.emplace_back(prefix ? n : n.substr(4), t);
      kept.emplace_back(prefix ? "vit.pooler.dense.weight" : "pooler.dense.weight", eye(32));
      kept.emplace_back(prefix ? "vit.pooler.dense.bias" : "pooler.dense.bias", zeros({32}));
      list = kept;
    });
    auto j = f.config();
    j["architectures"] = {"ViTModel"};
    f.write_config(j);
    auto m = std::dynamic_pointer_cast<ViTModel>(load_hf_model(f.str(), HFModelOptions{}));
    REQUIRE(m != nullptr);
    REQUIRE(m->pooler != nullptr);
    Tensor before;
    Tensor h = m->forward(r.pixels, nullptr, &before);
    CHECK(rel_error(before, r.hidden) < 1e-4);
    // The identity pooler gives tanh of the normed CLS token.
    CHECK(rel_error(m->pool(h), tanh(select(h, 1, 0))) < 1e-6);
  }
}

TEST_CASE("vit: image.png through the preprocessing path gives the reference pixel_values and logits") {
  const std::string dir = hf_fixture("vit-tiny");
  RgbImage img = read_image(dir + "/image.png");
  CHECK(img.height == 40);
  CHECK(img.width == 40);
  ImagePreprocess p = ImagePreprocess::load(dir + "/preprocessor_config.json", 40);
  CHECK(p.height == 40);
  Tensor pixels = image_to_pixels(img, p);
  const VitRef r = vit_ref(Device::cpu());
  Tensor want = select(r.pixels, 0, 0);
  CHECK(pixels.shape() == Shape({3, 40, 40}));
  // Bit-exact: the same f64 rescale, f32 cast and f32 normalize as transformers.
  CHECK(amax(abs(sub(pixels, want))).item<double>() == 0.0);
  auto m = load_classifier(dir, HFModelOptions{});
  CHECK(rel_error(m->forward(unsqueeze(pixels, 0)), slice(r.logits, 0, 0, 1)) < 1e-4);

  SUBCASE("the same pixels from a binary PPM") {
    FixtureCopy f("vit-tiny");
    std::ofstream ppm(f.file("image.ppm"), std::ios::binary);
    ppm << "P6\n# a comment\n40 40\n255\n";
    ppm.write(reinterpret_cast<const char*>(img.rgb.data()), std::streamsize(img.rgb.size()));
    ppm.close();
    RgbImage back = read_image(f.file("image.ppm"));
    CHECK(back.rgb == img.rgb);
  }
}

TEST_CASE("vit: PNG colour types read as Pillow's convert(\"RGB\") (alpha dropped, gray and palette expanded)") {
  // tests/fixtures/images (tools/make_image_fixtures.py): each PNG next to Pillow's RGB as a PPM.
  const std::string dir = std::string(HH_SOURCE_DIR) + "/tests/fixtures/images/";
  for (const std::string name : {"rgb8", "rgba8", "gray8", "gray_alpha8", "palette"}) {
    CAPTURE(name);
    RgbImage png = read_image(dir + name + ".png"), want = read_image(dir + name + ".ppm");
    CHECK(png.height == 5);
    CHECK(png.width == 6);
    CHECK(png.rgb == want.rgb);
  }
}

TEST_CASE("vit: PIL-style bilinear resize") {
  RgbImage img;
  img.height = 2;
  img.width = 4;
  // Row 0: 0, 100, 200, 255 in every channel; row 1: the same plus 10 (capped).
  for (int y = 0; y < 2; ++y)
    for (int v : {0, 100, 200, 255})
      for (int c = 0; c < 3; ++c) img.rgb.push_back(static_cast<uint8_t>(std::min(255, v + 10 * y)));
  // Same size: unchanged.
  CHECK(resize_bilinear(img, 2, 4).rgb == img.rgb);
  // Expected values from Pillow 13's Image.resize(..., BILINEAR) on the same image (channel 0).
  auto channel0 = [](const RgbImage& r) {
    std::vector<int> v;
    for (size_t i = 0; i < r.rgb.size(); i += 3) v.push_back(r.rgb[i]);
    return v;
  };
  CHECK(channel0(resize_bilinear(img, 2, 2)) == std::vector<int>{71, 209, 81, 215});
  CHECK(channel0(resize_bilinear(img, 4, 4)) ==
        std::vector<int>{0, 100, 200, 255, 3, 103, 203, 255, 8, 108, 208, 255, 10, 110, 210, 255});
  CHECK(channel0(resize_bilinear(img, 3, 3)) == std::vector<int>{30, 150, 239, 35, 155, 241, 40, 160, 242});
  // A resized image goes through image_to_pixels at the model's size.
  ImagePreprocess p = ImagePreprocess::defaults(3);
  CHECK(image_to_pixels(img, p).shape() == Shape({3, 3, 3}));
}

TEST_CASE("vit: every feature map (quadratic vs non-causal), traces") {
  const VitRef r = vit_ref(hh::test::test_device());
  for (const std::string& fm : feature_map_names()) {
    CAPTURE(fm);
    HFModelOptions o = on_test_device();
    o.mixer = nn::parse_mixer(fm, "test");
    o.seed = 5;
    o.form = LinearForm::quadratic;
    auto quad = load_classifier(hf_fixture("vit-tiny"), o);
    o.form = LinearForm::noncausal;
    auto lin = load_classifier(hf_fixture("vit-tiny"), o);
    Tensor a = quad->forward(r.pixels), b = lin->forward(r.pixels);
    CHECK(a.shape() == Shape({2, 5}));
    CHECK(hh::test::enc::all_finite(a));
    CHECK(rel_error(b, a) < 1e-4);
    TraceRequest tr;
    tr.teacher = true;
    lin->forward(r.pixels, &tr);
    REQUIRE(tr.layers.size() == 2);
    CHECK(tr.layers[1].weights.shape() == Shape({2, 4, 26, 26}));
    CHECK(tr.layers[1].teacher.shape() == Shape({2, 4, 26, 26}));
  }
}

TEST_CASE("vit: bad input names the culprit") {
  auto config_error = [](const std::string& key, const nlohmann::json& value, const std::string& expected) {
    CAPTURE(key);
    FixtureCopy f("vit-tiny");
    auto j = f.config();
    if (value.is_discarded())
      j.erase(key);
    else
      j[key] = value;
    f.write_config(j);
    CHECK_THROWS_WITH_AS(load_hf_model(f.str(), HFModelOptions{}), doctest::Contains(expected.c_str()), hh::Error);
  };
  config_error("patch_size", nlohmann::json(nlohmann::json::value_t::discarded), "missing key \"patch_size\"");
  config_error("image_size", "40", "\"image_size\" must be an integer");
  config_error("hidden_act", "swiglu", "hidden_act 'swiglu' is not supported");
  config_error("patch_size", 7, "\"patch_size\" (7) does not divide \"image_size\" (40)");
  config_error("architectures", {"ViTForMaskedImageModeling"}, "unsupported architecture ViTForMaskedImageModeling");
  config_error("qkv_bias", false, "unexpected [vit.encoder.layer.0.attention.attention.key.bias");
  config_error("image_size", 48, "wrong shape for vit.embeddings.position_embeddings");

  SUBCASE("wrong image size and channels") {
    auto m = load_classifier(hf_fixture("vit-tiny"), HFModelOptions{});
    CHECK_THROWS_WITH_AS(m->forward(zeros({1, 3, 32, 40})), doctest::Contains("image of 32x40 pixels, the model takes image_size = 40"),
                         hh::Error);
    CHECK_THROWS_WITH_AS(m->forward(zeros({1, 1, 40, 40})), doctest::Contains("1 channels, the model num_channels = 3"),
                         hh::Error);
    CHECK_THROWS_WITH_AS(m->forward(zeros({3, 40, 40})), doctest::Contains("pixel_values must be (B,C,H,W)"), hh::Error);
  }
  SUBCASE("bad image files") {
    FixtureCopy f("vit-tiny");
    std::ofstream(f.file("junk.png"), std::ios::binary) << "GIF89a...";
    CHECK_THROWS_WITH_AS(read_image(f.file("junk.png")), doctest::Contains("junk.png: not a PNG or binary PPM"), hh::Error);
    std::ofstream(f.file("short.ppm"), std::ios::binary) << "P6 4 4 255\n\x01\x02";
    CHECK_THROWS_WITH_AS(read_image(f.file("short.ppm")), doctest::Contains("short.ppm: truncated PPM"), hh::Error);
    {
      std::ifstream in(f.file("image.png"), std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::ofstream(f.file("cut.png"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    }
    CHECK_THROWS_WITH_AS(read_image(f.file("cut.png")), doctest::Contains("cut.png"), hh::Error);
    CHECK_THROWS_WITH_AS(read_image(f.file("none.png")), doctest::Contains("cannot open"), hh::Error);
    std::ofstream(f.file("pre.json")) << R"({"image_mean": [0.5, 0.5], "size": {"height": 40, "width": 40}})";
    CHECK_THROWS_WITH_AS(ImagePreprocess::load(f.file("pre.json"), 40), doctest::Contains("\"image_mean\" must be"),
                         hh::Error);
    std::ofstream(f.file("pre2.json")) << R"({"size": {"shortest_edge": 40}})";
    CHECK_THROWS_WITH_AS(ImagePreprocess::load(f.file("pre2.json"), 40), doctest::Contains("\"size\" must be"), hh::Error);
  }
}

TEST_CASE("vit: bf16 parameters (options.dtype) take f32 pixels and stay near the f32 reference") {
  HFModelOptions o = on_test_device();
  o.dtype = DType::bf16;
  auto m = load_classifier(hf_fixture("vit-tiny"), o);
  const VitRef r = vit_ref(o.device);
  Tensor logits = m->forward(r.pixels);
  CHECK(logits.dtype() == DType::bf16);
  // bf16 keeps 8 significant bits: a check that nothing breaks, not a parity target.
  CHECK(rel_error(logits, r.logits) < 5e-2);
}
