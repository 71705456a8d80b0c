// Helpers shared by the decoder tests (GPT-2, Llama, load_hf_model): fixture paths, the
// references, a relative error, and a scratch copy of a fixture folder to break on purpose.
#pragma once
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/tensor.h"

namespace hh::test {

inline std::string hf_fixture(const std::string& name) { return std::string(HH_SOURCE_DIR) + "/tests/fixtures/hf/" + name; }

inline SafeTensors hf_reference(const std::string& name) {
  return load_safetensors(hf_fixture(name) + "/reference.safetensors");
}

// max |a - b| / max |b| over all elements (the "relative" of the parity targets; elementwise
// relative error is meaningless for logits near 0).
inline double rel_err(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto x = to_vector<double>(a), y = to_vector<double>(b);
  double diff = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return diff / scale;
}

inline bool all_finite(const Tensor& t) {
  for (double v : to_vector<double>(t))
    if (!std::isfinite(v)) return false;
  return true;
}

// A copy of a fixture folder in the temp directory, removed at scope exit.
class ScratchFolder {
 public:
  explicit ScratchFolder(const std::string& fixture) {
    namespace fs = std::filesystem;
    static int counter = 0;
    path_ = (fs::temp_directory_path() /
             ("hh_dec_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" + fixture))
                .string();
    fs::create_directories(path_);
    for (const auto& e : fs::directory_iterator(hf_fixture(fixture)))
      fs::copy_file(e.path(), fs::path(path_) / e.path().filename());
  }
  ~ScratchFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::string read(const std::string& name) const {
    std::ifstream in(file(name));
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  void write(const std::string& name, const std::string& text) const { std::ofstream(file(name)) << text; }
  // Replaces the first occurrence of `from` in a file (REQUIREs that it is there).
  void replace(const std::string& name, const std::string& from, const std::string& to) const {
    std::string text = read(name);
    const auto at = text.find(from);
    REQUIRE_MESSAGE(at != std::string::npos, name, " has no '", from, "'");
    write(name, text.replace(at, from.size(), to));
  }

 private:
  std::string path_;
};

}  // namespace hh::test

#include "autograd/ops.h"
#include "nn/models/hf_model.h"

namespace hh::test {

// Greedy decoding through step(): the prompt (1,P) token by token, then `n` argmax tokens.
// Returns prompt + generated ids (1, P+n) on the host, as transformers' generate() does.
inline std::vector<int64_t> greedy_decode(nn::CausalLM& lm, const Tensor& prompt, int64_t n) {
  std::vector<int64_t> ids = to_vector<int64_t>(prompt);
  nn::DecodeState state = lm.start_decoding();
  Tensor logits;
  for (int64_t t : ids) logits = lm.step(from_vector(std::vector<int64_t>{t}, {1, 1}).to(prompt.device()), state);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t next = to_vector<int64_t>(argmax(logits, -1))[0];
    ids.push_back(next);
    if (i + 1 < n) logits = lm.step(from_vector(std::vector<int64_t>{next}, {1, 1}).to(prompt.device()), state);
  }
  return ids;
}

// Logits of every position through step() (B,L,V), for comparison with forward().
inline Tensor stepwise_logits(nn::CausalLM& lm, const Tensor& ids) {
  nn::DecodeState state = lm.start_decoding();
  std::vector<Tensor> out;
  for (int64_t t = 0; t < ids.size(1); ++t) out.push_back(lm.step(slice(ids, 1, t, t + 1), state));
  CHECK(state.pos == ids.size(1));
  return cat(out, 1);
}

}  // namespace hh::test
