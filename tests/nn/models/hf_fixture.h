// Helpers for the encoder (BERT, ViT) tests: the fixture folders, a temporary copy to corrupt, and the
// relative comparison used for parity with transformers.
#pragma once
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/tensor.h"

// (A namespace of their own: tests/nn/models/decoder_test_util.h has helpers of the same names.)
namespace hh::test::enc {

inline std::string hf_fixture(const std::string& name) { return std::string(HH_SOURCE_DIR) + "/tests/fixtures/hf/" + name; }

// A fresh folder under the temp directory holding a copy of a fixture; removed on destruction.
struct FixtureCopy {
  std::filesystem::path path;
  explicit FixtureCopy(const std::string& fixture) {
    namespace fs = std::filesystem;
    static int counter = 0;
    path = fs::temp_directory_path() / ("hh_hf_" + fixture + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
    for (const auto& e : fs::directory_iterator(hf_fixture(fixture))) fs::copy_file(e.path(), path / e.path().filename());
  }
  ~FixtureCopy() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  FixtureCopy(const FixtureCopy&) = delete;
  FixtureCopy& operator=(const FixtureCopy&) = delete;
  std::string str() const { return path.string(); }
  std::string file(const std::string& name) const { return (path / name).string(); }

  nlohmann::json config() const {
    std::ifstream f(file("config.json"));
    return nlohmann::json::parse(f);
  }
  void write_config(const nlohmann::json& j) const { std::ofstream(file("config.json")) << j.dump(2); }
  // Rewrites model.safetensors with the tensors `edit` leaves in the list.
  template <typename F>
  void edit_weights(F edit) const {
    SafeTensors st = load_safetensors(file("model.safetensors"));
    std::vector<std::pair<std::string, Tensor>> list;
    for (const auto& n : st.order) list.emplace_back(n, st.tensors.at(n));
    edit(list);
    save_safetensors(file("model.safetensors"), list);
  }
};

// max |got - want| / max |want| (both moved to the CPU as f64).
inline double rel_error(const Tensor& got, const Tensor& want) {
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> a = to_vector<double>(got.to(Device::cpu()).to(DType::f64));
  const std::vector<double> b = to_vector<double>(want.to(Device::cpu()).to(DType::f64));
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / std::max(scale, 1e-30);
}

inline bool all_finite(const Tensor& t) {
  for (double v : to_vector<double>(t.to(Device::cpu()).to(DType::f64)))
    if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace hh::test::enc
