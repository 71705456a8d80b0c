// Integrity of saved weights (issue 27 item 2): per-tensor XXH3-64 checksums in safetensors files
// (written for checkpoints and exports, verified by every reader: a flipped byte names the tensor
// and the file), files without checksums still loading (checkpoints with a one-line warning), and
// checkpoints holding NaN or infinity under a valid checksum refused on resume, naming the tensor.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/atomic_file.h"
#include "core/safetensors.h"
#include "nn/layers.h"
#include "train/checkpoint.h"
#include "train/optim.h"
#include "tests/error_of.h"
#include "tests/temp_dir.h"

using namespace hh;
using hh::test::error_of;

namespace {

// Offset in the file of the first data byte of tensor `name` (from the header).
uint64_t data_offset_of(const std::string& bytes, const std::string& name) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  const nlohmann::json h = nlohmann::json::parse(bytes.substr(8, static_cast<size_t>(n)));
  return 8 + n + h.at(name).at("data_offsets").at(0).get<uint64_t>();
}

// Flips one byte of tensor `name`'s data (its `at`-th byte) in the file at `path`.
void flip_byte(const std::string& path, const std::string& name, uint64_t at = 0) {
  std::string bytes = read_file(path);
  bytes[static_cast<size_t>(data_offset_of(bytes, name) + at)] ^= 0x10;
  write_file_atomic(path, bytes);
}

// The file's tensors in data order, for rewriting.
std::vector<std::pair<std::string, Tensor>> tensors_of(const SafeTensors& st) {
  std::vector<std::pair<std::string, Tensor>> ts;
  for (const std::string& name : st.order) ts.emplace_back(name, st.tensors.at(name).contiguous());
  return ts;
}

// Rewrites `path` without its checksum keys: a file as written before checksums existed.
void strip_checksums(const std::string& path) {
  SafeTensors st = load_safetensors(path);
  std::map<std::string, std::string> md;
  for (const auto& [k, v] : st.metadata)
    if (k != "format" && k != kSafetensorsChecksumsKey && k.rfind(kSafetensorsChecksumPrefix, 0) != 0) md[k] = v;
  save_safetensors(path, tensors_of(st), md);
}

// Captures std::cerr while alive.
struct CaptureCerr {
  std::ostringstream text;
  std::streambuf* old = std::cerr.rdbuf(text.rdbuf());
  ~CaptureCerr() { std::cerr.rdbuf(old); }
};

Tensor f32(std::vector<double> v, Shape s) { return from_vector(v, s, {DType::f32}); }

}  // namespace

TEST_CASE("integrity: the checksum is XXH3-64 (pinned values, so other tools can verify files)") {
  CHECK(safetensors_checksum("", 0) == 0x2d06800538d394c2ULL);
  CHECK(safetensors_checksum("hedgehog", 8) == 0x5220570f22f9d99cULL);
}

TEST_CASE("integrity: checksummed files round-trip and name their algorithm and tensors") {
  test::TempDir dir("integrity");
  const std::string path = dir.file("w.safetensors");
  const Tensor a = f32({1, 2, 3, 4}, {2, 2});
  const Tensor b = from_vector(std::vector<int64_t>{7, 8}, {2}, {DType::i64});
  const Tensor e = zeros({0, 3});
  save_safetensors(path, {{"a", a}, {"b.w", b}, {"empty", e}}, {{"k", "v"}}, Checksums::xxh3);
  for (int from_memory = 0; from_memory < 2; ++from_memory) {
    CAPTURE(from_memory);
    SafeTensors st = from_memory ? parse_safetensors(read_file(path), path) : load_safetensors(path);
    CHECK(st.checksummed);
    CHECK(st.metadata.at("hedgehog.checksums") == "xxh3-64");
    CHECK(st.metadata.at("hedgehog.xxh3.a") == "a82f522ec4510db4");  // XXH3-64 of the 16 bytes of 1,2,3,4 (f32 LE)
    CHECK(st.metadata.at("hedgehog.xxh3.a").size() == 16);
    CHECK(st.metadata.count("hedgehog.xxh3.b.w") == 1);
    CHECK(st.metadata.count("hedgehog.xxh3.empty") == 1);
    CHECK(st.metadata.at("k") == "v");
    CHECK(to_vector<float>(st.tensors.at("a")) == std::vector<float>{1, 2, 3, 4});
  }
  // Without the option nothing is added (the plain HF layout), and the file is not checksummed.
  save_safetensors(dir.file("plain.safetensors"), {{"a", a}}, {{"k", "v"}});
  SafeTensors plain = load_safetensors(dir.file("plain.safetensors"));
  CHECK_FALSE(plain.checksummed);
  CHECK(plain.metadata.size() == 2);
  // Checksum keys given by the caller (copied from a loaded file, or stale) are recomputed from
  // the bytes written: a rewrite with other tensors stays correct and checksummed.
  SafeTensors st = load_safetensors(path);
  std::map<std::string, std::string> md = st.metadata;
  md.erase("format");
  md["hedgehog.xxh3.a"] = "0000000000000000";
  save_safetensors(path, {{"a", f32({5, 6, 7, 8}, {2, 2})}, {"b.w", b}, {"empty", e}}, md);
  SafeTensors again = load_safetensors(path);
  CHECK(again.checksummed);
  CHECK(again.metadata.at("hedgehog.xxh3.a") != "0000000000000000");
  CHECK(again.metadata.at("hedgehog.xxh3.a") != st.metadata.at("hedgehog.xxh3.a"));
  CHECK(again.metadata.at("hedgehog.xxh3.b.w") == st.metadata.at("hedgehog.xxh3.b.w"));
}

TEST_CASE("integrity: a byte flipped inside a tensor's data is an error naming the tensor and the file") {
  test::TempDir dir("integrity");
  const std::string path = dir.file("w.safetensors");
  save_safetensors(path, {{"first", f32({1, 2}, {2})}, {"layer.0.weight", f32({0.5, -0.25, 3, 4, 5, 6}, {2, 3})}},
                   {}, Checksums::xxh3);
  flip_byte(path, "layer.0.weight", 13);
  error_of([&] { load_safetensors(path); },
           {"safetensors: " + path + ": ", "tensor 'layer.0.weight'", "checksum mismatch", "xxh3-64"});
  error_of([&] { parse_safetensors(read_file(path), path); },
           {"safetensors: " + path + ": ", "tensor 'layer.0.weight'", "checksum mismatch"});
  // A sharded folder names the shard.
  save_safetensors(dir.file("s1.safetensors"), {{"x", f32({1}, {1})}}, {}, Checksums::xxh3);
  save_safetensors(dir.file("s2.safetensors"), {{"y", f32({2, 3}, {2})}}, {}, Checksums::xxh3);
  write_file_atomic(dir.file("index.json"), R"({"weight_map":{"x":"s1.safetensors","y":"s2.safetensors"}})");
  CHECK(load_safetensors_sharded(dir.file("index.json")).checksummed);
  flip_byte(dir.file("s2.safetensors"), "y", 7);
  error_of([&] { load_safetensors_sharded(dir.file("index.json")); },
           {dir.file("s2.safetensors"), "tensor 'y'", "checksum mismatch"});
}

TEST_CASE("integrity: malformed checksum metadata is an error") {
  test::TempDir dir("integrity");
  const std::string path = dir.file("w.safetensors");
  const std::vector<std::pair<std::string, Tensor>> ts{{"x", f32({1, 2}, {2})}, {"y", f32({3}, {1})}};
  save_safetensors(path, ts, {}, Checksums::xxh3);
  const SafeTensors good = load_safetensors(path);
  // Rewrites the header's metadata by hand (the writer would recompute the keys).
  auto with_metadata = [&](const std::map<std::string, std::string>& md) {
    nlohmann::json h = nlohmann::json::object();
    h["__metadata__"] = md;
    h["x"] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}};
    h["y"] = {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {8, 12}}};
    const std::string js = h.dump();
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((js.size() >> (8 * i)) & 0xFF);
    const float v[3] = {1, 2, 3};
    return out + js + std::string(reinterpret_cast<const char*>(v), 12);
  };
  std::map<std::string, std::string> md = good.metadata;
  CHECK(parse_safetensors(with_metadata(md), "ok").checksummed);
  auto refused = [&](std::map<std::string, std::string> m, const std::string& fragment) {
    error_of([&] { parse_safetensors(with_metadata(m), "bad.st"); }, {"safetensors: bad.st: ", fragment});
  };
  {
    auto m = md;
    m["hedgehog.checksums"] = "md5";
    refused(m, "'hedgehog.checksums' is 'md5', expected 'xxh3-64'");
  }
  {
    auto m = md;
    m.erase("hedgehog.xxh3.y");
    refused(m, "tensor 'y' has no checksum");
  }
  {
    auto m = md;
    m["hedgehog.xxh3.z"] = md.at("hedgehog.xxh3.y");
    refused(m, "checksum of tensor 'z', which the file does not hold");
  }
  {
    auto m = md;
    m.erase("hedgehog.checksums");
    refused(m, "no 'hedgehog.checksums'");
  }
  {
    auto m = md;
    m["hedgehog.xxh3.x"] = "XYZ";
    refused(m, "tensor 'x': checksum 'XYZ' is not 16 lowercase hex digits");
  }
  {
    auto m = md;
    std::swap(m["hedgehog.xxh3.x"], m["hedgehog.xxh3.y"]);
    refused(m, "tensor 'x': checksum mismatch");
  }
}

TEST_CASE("integrity: checkpoints carry checksums; a flipped byte is refused naming the tensor and file") {
  test::TempDir dir("integrity");
  const std::string path = dir.file("ckpt.safetensors");
  Generator g(1);
  nn::Linear model(3, 4, true, nn::Init{g});
  train::AdamW opt(train::single_group(model, 0.0), 1e-2);
  train::CheckpointMeta meta;
  meta.step = 5;
  train::save_checkpoint(path, model, &opt, meta);
  SafeTensors st = load_safetensors(path);
  CHECK(st.checksummed);
  {
    CaptureCerr err;
    train::CheckpointMeta back;
    train::load_checkpoint(path, model, &opt, back);
    CHECK(back.step == 5);
    CHECK(err.text.str().empty());  // no warning for a checksummed file
  }
  flip_byte(path, "model.weight", 2);
  train::CheckpointMeta back;
  error_of([&] { train::load_checkpoint(path, model, &opt, back); },
           {path, "tensor 'model.weight'", "checksum mismatch"});
}

TEST_CASE("integrity: a checkpoint without checksums (written before them) loads with a one-line warning") {
  test::TempDir dir("integrity");
  const std::string path = dir.file("old.safetensors");
  Generator g(2);
  nn::Linear model(2, 3, true, nn::Init{g});
  const std::vector<float> w = to_vector<float>(model.weight);
  train::CheckpointMeta meta;
  meta.step = 7;
  train::save_checkpoint(path, model, nullptr, meta);
  strip_checksums(path);
  REQUIRE_FALSE(load_safetensors(path).checksummed);
  Generator g2(99);
  nn::Linear other(2, 3, true, nn::Init{g2});
  CaptureCerr err;
  train::CheckpointMeta back;
  train::load_checkpoint(path, other, nullptr, back);
  CHECK(back.step == 7);
  CHECK(to_vector<float>(other.weight) == w);
  const std::string text = err.text.str();
  CHECK(text.rfind("warning: checkpoint " + path + " has no checksums", 0) == 0);
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);
}

TEST_CASE("integrity: non-finite weights or optimizer state under a valid checksum are refused on resume") {
  test::TempDir dir("integrity");
  const std::string path = dir.file("nan.safetensors");
  Generator g(3);
  nn::Linear model(2, 3, true, nn::Init{g});
  train::AdamW opt(train::single_group(model, 0.0), 1e-2);
  train::CheckpointMeta meta;
  meta.tensors["loss_history"] = f32({1, std::nan("")}, {2});  // the caller's own tensors are not checked
  train::save_checkpoint(path, model, &opt, meta);
  const SafeTensors good = load_safetensors(path);
  const std::vector<std::string> names = good.order;
  // Every model / optimizer tensor, NaN or +-inf at some element, each dtype that can hold one:
  // rewritten with correct checksums, so only the finiteness check can catch it.
  struct Case {
    std::string tensor;
    double value;
    const char* shown;
  };
  std::vector<Case> cases;
  for (const std::string& n : names)
    if (n.rfind("extra.", 0) != 0) cases.push_back({n, std::nan(""), "nan"});
  REQUIRE(cases.size() >= 4);  // weight, bias and AdamW's moments
  cases.push_back({"model.weight", std::numeric_limits<double>::infinity(), "inf"});
  cases.push_back({"model.bias", -std::numeric_limits<double>::infinity(), "-inf"});
  for (const Case& c : cases) {
    CAPTURE(c.tensor);
    CAPTURE(c.shown);
    std::vector<std::pair<std::string, Tensor>> ts = tensors_of(good);
    std::map<std::string, std::string> md = good.metadata;
    md.erase("format");
    for (auto& [n, t] : ts) {
      if (n != c.tensor) continue;
      std::vector<double> v = to_vector<double>(t);
      v.back() = c.value;
      t = from_vector(v, t.shape(), {t.dtype()});
    }
    save_safetensors(path, ts, md);
    REQUIRE(load_safetensors(path).checksummed);
    train::CheckpointMeta back;
    error_of([&] { train::load_checkpoint(path, model, &opt, back); },
             {"checkpoint " + path, "tensor '" + c.tensor + "' holds a non-finite value (" + std::string(c.shown),
              "refusing to resume"});
  }
  // bf16 / f16 weights too (checked on their bits).
  for (DType dt : {DType::bf16, DType::f16}) {
    CAPTURE(static_cast<int>(dt));
    const std::string p2 = dir.file("half.safetensors");
    Generator g2(4);
    nn::Linear half(2, 2, false, nn::Init{g2, Device::cpu(), dt});
    train::CheckpointMeta m;
    train::save_checkpoint(p2, half, nullptr, m);
    train::CheckpointMeta back;
    train::load_checkpoint(p2, half, nullptr, back);  // finite: fine
    SafeTensors st = load_safetensors(p2);
    std::vector<std::pair<std::string, Tensor>> ts = tensors_of(st);
    std::map<std::string, std::string> md = st.metadata;
    md.erase("format");
    ts[0].second = from_vector(std::vector<double>{1, 2, std::nan(""), 4}, {2, 2}, {dt});
    save_safetensors(p2, ts, md);
    error_of([&] { train::load_checkpoint(p2, half, nullptr, back); },
             {"tensor 'model.weight' holds a non-finite value (nan at element 2)"});
  }
}
