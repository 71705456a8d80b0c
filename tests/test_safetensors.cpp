// safetensors reader/writer and atomic file I/O: round trips for every dtype, the exact header
// layout, one negative test per rejection rule (each builds its malformed bytes here), a
// truncation/bit-flip fuzz (Error or a valid parse, never a crash), and sharded checkpoints.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>

#include "autograd/ops.h"
#include "core/atomic_file.h"
#include "core/safetensors.h"
#include "nn/layers.h"
#include "train/checkpoint.h"
#include "tests/op_table.h"

namespace fs = std::filesystem;
using namespace hh;

namespace {

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return s;
}
// A file from header JSON text and raw data bytes.
std::string st_file(const std::string& header, const std::string& data = "") {
  return le64(header.size()) + header + data;
}
// One tensor entry's JSON.
std::string ent(const std::string& dtype, const std::string& shape, uint64_t b, uint64_t e) {
  return "{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" + std::to_string(b) + "," +
         std::to_string(e) + "]}";
}

// Runs f, which must throw hh::Error; checks the message starts with `prefix` and contains each fragment.
void expect_error(const std::function<void()>& f, const std::string& prefix,
                  const std::vector<std::string>& fragments) {
  std::string msg;
  try {
    f();
    FAIL("expected an hh::Error containing: " << (fragments.empty() ? prefix : fragments[0]));
    return;
  } catch (const Error& e) {
    msg = e.what();
  } catch (const std::exception& e) {
    FAIL("expected hh::Error, got another exception: " << e.what());
    return;
  }
  INFO("message: " << msg);
  CHECK(msg.rfind(prefix, 0) == 0);
  for (const auto& frag : fragments) CHECK(msg.find(frag) != std::string::npos);
}
void expect_parse_error(const std::string& bytes, const std::vector<std::string>& fragments) {
  expect_error([&] { parse_safetensors(bytes, "mem.st"); }, "safetensors: mem.st: ", fragments);
}

// Host bytes of a tensor in row-major order.
std::string host_bytes(const Tensor& t) {
  Tensor h = t.detach();
  if (!h.device().is_cpu()) h = h.to(Device::cpu());
  Tensor c = empty(h.shape(), {h.dtype(), Device::cpu()});
  copy_(c, h);
  return std::string(static_cast<const char*>(c.raw_data()), static_cast<size_t>(c.numel()) * itemsize(c.dtype()));
}

struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() / ("hh_st_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// One tensor of every dtype plus a 0-d, a zero-size and two non-contiguous sources.
std::vector<std::pair<std::string, Tensor>> sample_tensors() {
  std::vector<std::pair<std::string, Tensor>> ts;
  ts.emplace_back("f32", from_vector(std::vector<double>{1.5, -2.25, 3, 4, 5, 6}, {2, 3}, {DType::f32}));
  ts.emplace_back("f64.scalar", from_vector(std::vector<double>{3.141592653589793}, {}, {DType::f64}));
  ts.emplace_back("bf16", from_vector(std::vector<double>{1, -2, 0.5, 3.5}, {4}, {DType::bf16}));
  ts.emplace_back("f16", from_vector(std::vector<double>{0.25, -1, 65504, 0.0009765625}, {2, 2}, {DType::f16}));
  ts.emplace_back("i64", from_vector(std::vector<int64_t>{int64_t{1} << 40, -5, 7}, {3}, {DType::i64}));
  ts.emplace_back("i32", from_vector(std::vector<int64_t>{-(int64_t{1} << 30), 5, 0, 1, 2, 3}, {3, 2}, {DType::i32}));
  ts.emplace_back("u8", from_vector(std::vector<int64_t>{0, 255, 17}, {1, 3}, {DType::u8}));
  ts.emplace_back("bool", from_vector(std::vector<int64_t>{1, 0, 1, 1}, {2, 2}, {DType::boolean}));
  ts.emplace_back("i8", from_vector(std::vector<int64_t>{-128, 127, 0, -1, 5, -127}, {2, 3}, {DType::i8}));
  ts.emplace_back("empty", zeros({2, 0, 3}, {DType::f32}));
  // (3,4) transposed to (4,3): strides (1,4), not contiguous.
  ts.emplace_back("transposed", arange(12, {DType::f32}).reshape({3, 4}).transpose(0, 1));
  // elements 2,4,6 of arange(10): offset 2, stride 2.
  ts.emplace_back("sliced", arange(10, {DType::i64}).slice(0, 2, 8, 2));
  return ts;
}

}  // namespace

TEST_CASE("safetensors: round trip of every dtype, 0-d, zero-size and non-contiguous tensors") {
  TempDir dir;
  auto ts = sample_tensors();
  REQUIRE_FALSE(ts[10].second.is_contiguous());
  REQUIRE_FALSE(ts[11].second.is_contiguous());
  // Saved from the device under test too (moved there first), so "any device" is exercised under HH_DEVICE=cuda.
  Device dev = hh::test::test_device();
  std::vector<std::pair<std::string, Tensor>> on_dev;
  for (auto& [n, t] : ts) on_dev.emplace_back(n, t.to(dev));
  std::map<std::string, std::string> meta{{"step", "10"}, {"config", "{\"d\": 64}"}, {"ünï", "cödé"}};
  const std::string path = dir.file("all.safetensors");
  save_safetensors(path, on_dev, meta);
  if (const char* keep = std::getenv("HH_SAFETENSORS_OUT"))
    save_safetensors(keep, ts, meta);  // for tools/check_safetensors.py

  for (Device load_dev : {Device::cpu(), dev}) {
    SafeTensors st = load_safetensors(path, load_dev);
    REQUIRE(st.tensors.size() == ts.size());
    REQUIRE(st.order.size() == ts.size());
    for (size_t i = 0; i < ts.size(); ++i) {
      const std::string& name = ts[i].first;  // not a structured binding: clang 14 cannot capture one in INFO
      const auto& src = ts[i].second;
      INFO("tensor " << name);
      CHECK(st.order[i] == name);
      const Tensor& got = st.tensors.at(name);
      CHECK(got.device() == load_dev);
      CHECK(got.dtype() == src.dtype());
      CHECK(got.shape() == src.shape());
      CHECK(got.is_contiguous());
      CHECK(host_bytes(got) == host_bytes(src));
    }
    CHECK(st.metadata.size() == 4);
    CHECK(st.metadata.at("format") == "pt");
    CHECK(st.metadata.at("step") == "10");
    CHECK(st.metadata.at("config") == "{\"d\": 64}");
    CHECK(st.metadata.at("ünï") == "cödé");
  }
  // Values read back independently of host_bytes.
  SafeTensors st = load_safetensors(path);
  CHECK(to_vector<double>(st.tensors.at("transposed")) == std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK(to_vector<int64_t>(st.tensors.at("sliced")) == std::vector<int64_t>{2, 4, 6});
  CHECK(to_vector<int64_t>(st.tensors.at("i64")) == std::vector<int64_t>{int64_t{1} << 40, -5, 7});
  CHECK(to_vector<double>(st.tensors.at("bf16")) == std::vector<double>{1, -2, 0.5, 3.5});
  CHECK(to_vector<double>(st.tensors.at("f16")) == std::vector<double>{0.25, -1, 65504, 0.0009765625});
  CHECK(st.tensors.at("f64.scalar").item<double>() == 3.141592653589793);
  CHECK(to_vector<uint8_t>(st.tensors.at("bool")) == std::vector<uint8_t>{1, 0, 1, 1});
  CHECK(to_vector<int64_t>(st.tensors.at("i8")) == std::vector<int64_t>{-128, 127, 0, -1, 5, -127});
  CHECK(st.tensors.at("empty").numel() == 0);
  // parse_safetensors on the same bytes agrees with load_safetensors.
  SafeTensors mem = parse_safetensors(read_file(path), path);
  CHECK(mem.order == st.order);
  for (const auto& n : st.order) CHECK(host_bytes(mem.tensors.at(n)) == host_bytes(st.tensors.at(n)));
  // An empty file (no tensors) round-trips too.
  save_safetensors(dir.file("none.safetensors"), {});
  SafeTensors none = load_safetensors(dir.file("none.safetensors"));
  CHECK(none.tensors.empty());
  CHECK(none.metadata.at("format") == "pt");
}

TEST_CASE("safetensors: header layout is byte-exact") {
  Tensor a = from_vector(std::vector<double>{1, 2}, {2}, {DType::f32});
  Tensor b = from_vector(std::vector<int64_t>{7}, {1, 1}, {DType::i64});
  std::string bytes = serialize_safetensors({{"a", a}, {"b.w", b}}, {{"k", "v"}});
  REQUIRE(bytes.size() >= 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  const std::string json =
      "{\"__metadata__\":{\"format\":\"pt\",\"k\":\"v\"},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b.w\":{\"dtype\":\"I64\",\"shape\":[1,1],\"data_offsets\":[8,16]}}";
  CHECK(n % 8 == 0);
  CHECK(n >= json.size());
  CHECK(n < json.size() + 8);
  REQUIRE(bytes.size() == 8 + n + 16);
  CHECK(bytes[8] == '{');
  CHECK(bytes.substr(8, n) == json + std::string(n - json.size(), ' '));
  float fa[2];
  int64_t ib;
  std::memcpy(fa, bytes.data() + 8 + n, 8);
  std::memcpy(&ib, bytes.data() + 8 + n + 8, 8);
  CHECK(fa[0] == 1.0f);
  CHECK(fa[1] == 2.0f);
  CHECK(ib == 7);
}

TEST_CASE("safetensors: whitespace around the header JSON is accepted") {
  std::string data(8, '\0');
  float v[2] = {1.0f, -3.0f};
  std::memcpy(&data[0], v, 8);
  SafeTensors st = parse_safetensors(st_file(" \n\t {\"x\":" + ent("F32", "[2]", 0, 8) + "} \r\n   ", data), "ws");
  CHECK(to_vector<float>(st.tensors.at("x")) == std::vector<float>{1.0f, -3.0f});
  CHECK(st.metadata.empty());
  // A zero-size tensor needs no bytes; __metadata__ may be absent or empty.
  SafeTensors z = parse_safetensors(st_file("{\"__metadata__\":{},\"z\":" + ent("U8", "[0,5]", 0, 0) + "}"), "z");
  CHECK(z.tensors.at("z").shape() == Shape{0, 5});
}

TEST_CASE("safetensors: rejects files shorter than 8 bytes") {
  expect_parse_error("", {"0 bytes", "shorter than the 8-byte header length"});
  expect_parse_error("1234567", {"7 bytes", "shorter than"});
}

TEST_CASE("safetensors: rejects a header length over 100,000,000") {
  expect_parse_error(le64(100000001) + "{}      ", {"header length 100000001 exceeds the limit of 100000000"});
  expect_parse_error(le64(~uint64_t{0}) + "{}", {"exceeds the limit"});
}

TEST_CASE("safetensors: rejects a header that extends beyond the file") {
  expect_parse_error(le64(100) + "{}", {"header length 100 extends beyond the file (10 bytes"});
  expect_parse_error(le64(1), {"header length 1 extends beyond the file (8 bytes"});
}

TEST_CASE("safetensors: rejects invalid UTF-8 in the header") {
  expect_parse_error(st_file("{\"a\xff\":" + ent("U8", "[0]", 0, 0) + "}"),
                     {"header is not valid UTF-8 (bad byte 0xff at header byte 3)"});
  expect_parse_error(st_file("{\"\xc0\xaf\":1}"), {"not valid UTF-8", "0xc0"});  // overlong '/'
  expect_parse_error(st_file("{\"\xed\xa0\x80\":1}"), {"not valid UTF-8", "0xed"});  // surrogate
  expect_parse_error(st_file("{\"\xe2\x82\":1}"), {"not valid UTF-8"});  // cut short
}

TEST_CASE("safetensors: rejects invalid JSON") {
  expect_parse_error(st_file("{\"a\":"), {"header is not valid JSON"});
  expect_parse_error(st_file("{} x"), {"header is not valid JSON"});
  expect_parse_error(st_file(""), {"header is not valid JSON"});
  expect_parse_error(st_file("{\"a\":{\"dtype\":\"F32\",}}"), {"not valid JSON"});
}

TEST_CASE("safetensors: rejects an unknown dtype") {
  expect_parse_error(st_file("{\"w\":" + ent("F8_E4M3", "[1]", 0, 1) + "}", "x"),
                     {"tensor 'w': unknown dtype 'F8_E4M3'", "supported: BF16 F16 F32 F64 I64 I32 U8 I8 BOOL"});
  expect_parse_error(st_file("{\"w\":" + ent("I4", "[2]", 0, 1) + "}", "x"), {"tensor 'w': unknown dtype 'I4'"});
  expect_parse_error(st_file("{\"w\":" + ent("f32", "[1]", 0, 4) + "}", "xxxx"), {"unknown dtype 'f32'"});
  expect_parse_error(st_file("{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", "xxxx"),
                     {"tensor 'w': dtype must be a string"});
}

TEST_CASE("safetensors: rejects duplicate names and duplicate keys") {
  expect_parse_error(st_file("{\"a\":" + ent("U8", "[1]", 0, 1) + ",\"a\":" + ent("U8", "[1]", 1, 2) + "}", "xx"),
                     {"duplicate tensor name 'a'"});
  expect_parse_error(st_file("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", "x"),
                     {"duplicate key 'dtype' inside 'a'"});
  expect_parse_error(st_file("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}"),
                     {"duplicate key 'k' inside '__metadata__'"});
}

TEST_CASE("safetensors: rejects offsets with gaps, overlaps or not starting at 0") {
  // gap between a [0,4) and b [8,12)
  expect_parse_error(
      st_file("{\"a\":" + ent("F32", "[1]", 0, 4) + ",\"b\":" + ent("F32", "[1]", 8, 12) + "}", std::string(12, 'x')),
      {"tensor 'b': data_offsets [8, 12) leave a gap: expected begin 4 (end of tensor 'a')"});
  // the first tensor must start at 0
  expect_parse_error(st_file("{\"a\":" + ent("F32", "[1]", 4, 8) + "}", std::string(8, 'x')),
                     {"tensor 'a': data_offsets [4, 8) leave a gap: expected begin 0 (start of the data section)"});
  // overlap: b [4,12) starts inside a [0,8)
  expect_parse_error(
      st_file("{\"a\":" + ent("F32", "[2]", 0, 8) + ",\"b\":" + ent("F32", "[2]", 4, 12) + "}", std::string(12, 'x')),
      {"tensor 'b': data_offsets [4, 12) overlap tensor 'a' [0, 8)"});
  // header order does not matter, only the sorted offsets
  SafeTensors ok = parse_safetensors(
      st_file("{\"b\":" + ent("U8", "[1]", 1, 2) + ",\"a\":" + ent("U8", "[1]", 0, 1) + "}", "\x01\x02"), "ok");
  CHECK(ok.order == std::vector<std::string>{"a", "b"});
  CHECK(to_vector<uint8_t>(ok.tensors.at("b")) == std::vector<uint8_t>{2});
}

TEST_CASE("safetensors: rejects a byte size that does not match shape and dtype") {
  expect_parse_error(st_file("{\"w\":" + ent("F32", "[3]", 0, 8) + "}", std::string(8, 'x')),
                     {"tensor 'w': shape [3] of dtype F32 needs 12 bytes but data_offsets [0, 8) hold 8"});
  expect_parse_error(st_file("{\"w\":" + ent("BF16", "[]", 0, 4) + "}", std::string(4, 'x')),
                     {"needs 2 bytes", "hold 4"});
}

TEST_CASE("safetensors: element and byte counts use checked arithmetic") {
  expect_parse_error(st_file("{\"w\":" + ent("U8", "[4294967296,4294967296]", 0, 0) + "}"),
                     {"tensor 'w': element count of shape [4294967296,4294967296] overflows"});
  // 2^62 elements fit int64, 2^62 * 8 bytes do not fit u64
  expect_parse_error(st_file("{\"w\":" + ent("F64", "[4611686018427387904]", 0, 0) + "}"),
                     {"tensor 'w': byte size of shape [4611686018427387904] with dtype F64 overflows"});
  // a product that wraps to a small number must not pass: 2^32 * 2^32 = 2^64 ≡ 0
  expect_parse_error(st_file("{\"w\":" + ent("U8", "[0,4294967296,4294967296]", 0, 0) + "}"), {"overflows"});
}

TEST_CASE("safetensors: rejects trailing bytes and tensors beyond the data section") {
  expect_parse_error(
      st_file("{\"w\":" + ent("U8", "[2]", 0, 2) + "}", "abcdef"),
      {"4 trailing bytes after the last tensor (tensors end at data offset 2, the data section has 6 bytes)"});
  expect_parse_error(st_file("{}", "z"), {"1 trailing bytes"});
  expect_parse_error(st_file("{\"w\":" + ent("U8", "[4]", 0, 4) + "}", "ab"),
                     {"tensor 'w': data_offsets [0, 4) extend beyond the data section of 2 bytes"});
}

TEST_CASE("safetensors: rejects malformed shapes") {
  expect_parse_error(st_file("{\"w\":" + ent("U8", "[-1]", 0, 0) + "}"),
                     {"tensor 'w': shape entry 0 must be a non-negative integer, got -1"});
  expect_parse_error(st_file("{\"w\":" + ent("U8", "[1,2.0]", 0, 2) + "}", "xx"),
                     {"shape entry 1 must be a non-negative integer, got 2.0"});
  expect_parse_error(st_file("{\"w\":" + ent("U8", "[\"2\"]", 0, 2) + "}", "xx"),
                     {"shape entry 0 must be a non-negative integer"});
  expect_parse_error(st_file("{\"w\":" + ent("U8", "[1e30]", 0, 0) + "}"),
                     {"shape entry 0 must be a non-negative integer"});
  expect_parse_error(st_file("{\"w\":" + ent("U8", "[9223372036854775808]", 0, 0) + "}"),
                     {"shape entry 0 must be a non-negative integer"});
  expect_parse_error(st_file("{\"w\":" + ent("U8", "2", 0, 2) + "}", "xx"), {"tensor 'w': shape must be an array"});
}

TEST_CASE("safetensors: rejects malformed data_offsets") {
  auto with_offsets = [](const std::string& offs) {
    return st_file("{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":" + offs + "}}", "xx");
  };
  for (const char* offs : {"[0]", "[0,2,2]", "[-1,1]", "[0,2.0]", "[\"0\",2]", "{\"a\":0}", "[]"}) {
    INFO("data_offsets " << offs);
    expect_parse_error(with_offsets(offs), {"tensor 'w': data_offsets must be two non-negative integers [begin, end]"});
  }
  expect_parse_error(with_offsets("[2,0]"), {"tensor 'w': data_offsets [2, 0) have begin > end"});
}

TEST_CASE("safetensors: rejects a non-object header or entry and wrong keys") {
  expect_parse_error(st_file("[1,2]"), {"header JSON must be an object, got array"});
  expect_parse_error(st_file("\"x\""), {"header JSON must be an object, got string"});
  expect_parse_error(st_file("{\"w\":5}"), {"tensor 'w': entry must be an object", "got number"});
  expect_parse_error(st_file("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"foo\":1}}", "x"),
                     {"tensor 'w': unexpected key 'foo'"});
  expect_parse_error(st_file("{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", "x"),
                     {"tensor 'w': missing key 'data_offsets'"});
  expect_parse_error(st_file("{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", "x"),
                     {"tensor 'w': missing key 'dtype'"});
}

TEST_CASE("safetensors: __metadata__ must map strings to strings") {
  expect_parse_error(st_file("{\"__metadata__\":[1]}"), {"__metadata__ must be an object of strings"});
  expect_parse_error(st_file("{\"__metadata__\":{\"step\":10}}"),
                     {"__metadata__ value for key 'step' must be a string, got number"});
  expect_parse_error(st_file("{\"__metadata__\":{\"c\":{\"a\":\"b\"}}}"),
                     {"value for key 'c' must be a string, got object"});
}

TEST_CASE("safetensors: rejects BOOL bytes other than 0 and 1") {
  expect_parse_error(st_file("{\"m\":" + ent("BOOL", "[3]", 0, 3) + "}", std::string("\x01\x00\x02", 3)),
                     {"tensor 'm': BOOL element 2 has byte value 2"});
}

TEST_CASE("safetensors: writer rejects bad names and metadata") {
  Tensor t = zeros({2});
  expect_error(
      [&] {
        serialize_safetensors({{"a", t}, {"a", t}}, {}, "out.st");
      },
      "safetensors: out.st: ", {"duplicate tensor name 'a'"});
  expect_error(
      [&] {
        serialize_safetensors({{"__metadata__", t}}, {}, "out.st");
      },
      "safetensors: out.st: ", {"'__metadata__' is reserved"});
  expect_error(
      [&] {
        serialize_safetensors({{"a", Tensor()}}, {}, "out.st");
      },
      "safetensors: out.st: ", {"tensor 'a' is undefined"});
  expect_error(
      [&] {
        serialize_safetensors({{"a", t}}, {{"format", "np"}}, "out.st");
      },
      "safetensors: out.st: ", {"metadata key 'format' is reserved"});
  expect_error(
      [&] {
        serialize_safetensors({{"a\xff", t}}, {}, "out.st");
      },
      "safetensors: out.st: ", {"not valid UTF-8"});
  CHECK_NOTHROW(serialize_safetensors({{"a", t}}, {{"format", "pt"}}));
}

TEST_CASE("safetensors: loading from a file checks the path and sizes first") {
  TempDir dir;
  const std::string missing = dir.file("missing.safetensors");
  expect_error([&] { load_safetensors(missing); }, "safetensors: " + missing + ": ", {"cannot open", "No such file"});
  const std::string shortf = dir.file("short.safetensors");
  write_file_atomic(shortf, "abc");
  expect_error([&] { load_safetensors(shortf); }, "safetensors: " + shortf + ": ", {"3 bytes, shorter than"});
  // A claimed 99,999,999-byte header in a 16-byte file fails before that buffer is allocated.
  const std::string big = dir.file("big.safetensors");
  write_file_atomic(big, le64(99999999) + "{}      ");
  expect_error([&] { load_safetensors(big); }, "safetensors: " + big + ": ",
               {"header length 99999999 extends beyond the file (16 bytes"});
  const std::string trailing = dir.file("trailing.safetensors");
  write_file_atomic(trailing, st_file("{\"w\":" + ent("U8", "[1]", 0, 1) + "}", "ab"));
  expect_error([&] { load_safetensors(trailing); }, "safetensors: " + trailing + ": ", {"1 trailing bytes"});
  expect_error([&] { load_safetensors(dir.path.string()); }, "safetensors: ", {"not a regular file"});
}

TEST_CASE("safetensors: truncated or bit-flipped files give an Error or a valid parse, never a crash") {
  auto ts = sample_tensors();
  const std::string good = serialize_safetensors(ts, {{"note", "fuzz"}});
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(good[i]);
  const size_t data_size = good.size() - 8 - n;
  int errors = 0, valid = 0, other = 0;
  auto attempt = [&](const std::string& bytes) {
    try {
      SafeTensors st = parse_safetensors(bytes, "fuzz");
      // A parse that succeeds must describe exactly the bytes it holds.
      uint64_t total = 0;
      for (const auto& kv : st.tensors) total += static_cast<uint64_t>(kv.second.numel()) * itemsize(kv.second.dtype());
      uint64_t hn = 0;
      for (int i = 7; i >= 0; --i) hn = (hn << 8) | static_cast<unsigned char>(bytes[i]);
      if (total != bytes.size() - 8 - hn || st.order.size() != st.tensors.size()) ++other;
      ++valid;
    } catch (const Error& e) {
      if (std::string(e.what()).rfind("safetensors: fuzz: ", 0) != 0) ++other;
      ++errors;
    } catch (...) {
      ++other;
    }
  };
  // Every truncation is an error.
  for (size_t len = 0; len < good.size(); ++len) attempt(good.substr(0, len));
  CHECK(errors == static_cast<int>(good.size()));
  CHECK(valid == 0);
  CHECK(other == 0);
  // Single-byte flips over the length prefix and the whole header.
  errors = valid = 0;
  for (size_t pos = 0; pos < 8 + n; ++pos) {
    for (unsigned mask : {0x01u, 0x02u, 0x04u, 0x08u, 0x10u, 0x20u, 0x40u, 0x80u, 0xFFu}) {
      std::string b = good;
      b[pos] = static_cast<char>(static_cast<unsigned char>(b[pos]) ^ mask);
      attempt(b);
    }
  }
  CHECK(other == 0);
  CHECK(errors > 0);
  CHECK(valid > 0);  // e.g. flips inside names or metadata values, or padding turned into other whitespace
  // Random multi-byte damage anywhere (data flips hit the BOOL check or parse as other values).
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string b = good;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      size_t pos = rng() % (trial % 2 ? b.size() : 8 + n);
      b[pos] = static_cast<char>(rng() & 0xFF);
    }
    attempt(b);
  }
  CHECK(other == 0);
  CHECK(data_size > 0);
}

// ---- hostile headers (issue 8): deep nesting, NUL bytes, huge messages, many tensors ----

TEST_CASE("safetensors: a header nested 70,000 deep is rejected, not a stack overflow") {
  const size_t depth = 70000;
  const std::string open_a(depth, '['), close_a(depth, ']');
  std::string open_o, close_o(depth, '}');
  for (size_t i = 0; i < depth; ++i) open_o += "{\"a\":";
  const std::string too_deep = "nests deeper than 64 levels";
  // The root itself, a tensor entry, a shape, __metadata__ and an object chain.
  expect_parse_error(st_file(open_a + close_a), {"header JSON", too_deep});
  expect_parse_error(st_file("{\"w\":" + open_a + close_a + "}"), {too_deep});
  expect_parse_error(st_file("{\"w\":{\"dtype\":\"U8\",\"shape\":" + open_a + close_a + ",\"data_offsets\":[0,0]}}"),
                     {too_deep});
  expect_parse_error(st_file("{\"__metadata__\":" + open_o + "1" + close_o + "}"), {too_deep});
  // Unterminated: the depth limit fires before the parser reaches the end.
  expect_parse_error(st_file(open_a), {too_deep});
  // 64 levels are accepted by the parser (the entry is then rejected for its shape, with a short excerpt).
  std::string deep_ok = "{\"w\":{\"dtype\":\"U8\",\"shape\":" + std::string(62, '[') + std::string(62, ']') +
                        ",\"data_offsets\":[0,0]}}";
  expect_parse_error(st_file(deep_ok), {"tensor 'w': shape entry 0 must be a non-negative integer, got [[[["});
  // The index file goes through the same parser.
  TempDir dir;
  const std::string index = dir.file("model.safetensors.index.json");
  write_file_atomic(index, "{\"weight_map\":" + open_o + "\"x\"" + close_o + "}");
  expect_error([&] { safetensors_index_files(index); }, "safetensors: " + index + ": ", {"index JSON", too_deep});
}

TEST_CASE("safetensors: a NUL byte or garbage inside the header length is an error") {
  // nlohmann stops at a NUL: "{}\0garbage" used to load as an empty file.
  expect_parse_error(st_file(std::string("{}\0garbage", 10)), {"header holds a NUL byte at header byte 2"});
  expect_parse_error(st_file(std::string("{}      \0", 9)), {"NUL byte at header byte 8"});
  expect_parse_error(st_file(std::string("\0{}", 3)), {"NUL byte at header byte 0"});
  expect_parse_error(st_file("{}  garbage"), {"header is not valid JSON"});
  expect_parse_error(st_file("{}{}"), {"header is not valid JSON"});
  // The header length counts exactly: a tensor JSON cut by a short length fails, the rest is data.
  std::string hdr = "{\"w\":" + ent("U8", "[1]", 0, 1) + "}";
  expect_parse_error(le64(hdr.size() - 1) + hdr + "x", {"header is not valid JSON"});
  // Spaces (and other JSON whitespace) as padding stay valid.
  SafeTensors st = parse_safetensors(st_file(hdr + "   \n", "x"), "pad");
  CHECK(st.order == std::vector<std::string>{"w"});
  // The index file too.
  TempDir dir;
  const std::string index = dir.file("model.safetensors.index.json");
  write_file_atomic(index, std::string("{\"weight_map\":{}}\0{\"weight_map\":{\"x\":\"../y\"}}", 45));
  expect_error([&] { safetensors_index_files(index); }, "safetensors: " + index + ": ",
               {"index holds a NUL byte at index byte 17"});
}

TEST_CASE("safetensors: error messages quote a bounded excerpt of hostile text") {
  const std::string big(1000000, 'x');
  auto message = [](const std::string& bytes) -> std::string {
    try {
      parse_safetensors(bytes, "mem.st");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  // An unterminated 1 MB string: nlohmann's message quotes the whole token.
  std::string m = message(st_file("{\"" + big));
  CHECK(m.find("header is not valid JSON") != std::string::npos);
  CHECK(m.size() < 1000);
  // A 1 MB name, a 1 MB value, a 100,000-element entry: all cut short.
  m = message(st_file("{\"" + big + "\":5}"));
  CHECK(m.find("entry must be an object") != std::string::npos);
  CHECK(m.size() < 1000);
  m = message(st_file("{\"w\":\"" + big + "\"}"));
  CHECK(m.find("got string \"xxxx") != std::string::npos);
  CHECK(m.size() < 1000);
  std::string arr = "[0";
  for (int i = 1; i < 100000; ++i) arr += ",0";
  m = message(st_file("{\"w\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":" + arr + "]}}"));
  CHECK(m.find("shape entry 0 must be a non-negative integer") != std::string::npos);
  m = message(st_file("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":" + arr + "]}}"));
  CHECK(m.find("data_offsets must be two non-negative integers [begin, end], got [0,0,0,0") != std::string::npos);
  CHECK(m.size() < 1000);
}

TEST_CASE("safetensors: a 200,000-tensor header parses (header parsing is not quadratic)") {
  // 200k tensors of one U8 each, listed in reverse offset order; data byte i = i % 251.
  const int n = 200000;
  std::string hdr = "{\"__metadata__\":{\"k\":\"v\"}";
  std::string data(n, '\0');
  for (int i = n - 1; i >= 0; --i) {
    hdr += ",\"t" + std::to_string(i) + "\":" + ent("U8", "[1]", i, i + 1);
    data[i] = static_cast<char>(i % 251);
  }
  hdr += "}";
  SafeTensors st = parse_safetensors(st_file(hdr, data), "many");
  REQUIRE(st.order.size() == static_cast<size_t>(n));
  REQUIRE(st.tensors.size() == static_cast<size_t>(n));
  CHECK(st.metadata.at("k") == "v");
  bool ok = true;
  for (int i = 0; i < n && ok; i += 997) {
    ok = st.order[i] == "t" + std::to_string(i) &&
         to_vector<uint8_t>(st.tensors.at(st.order[i])) == std::vector<uint8_t>{static_cast<uint8_t>(i % 251)};
  }
  CHECK(ok);
  CHECK(st.order.back() == "t" + std::to_string(n - 1));
  // The writer is linear too: write them back in data order, read again, same bytes.
  std::vector<std::pair<std::string, Tensor>> ts;
  ts.reserve(n);
  for (const std::string& name : st.order) ts.emplace_back(name, st.tensors.at(name));
  std::string bytes = serialize_safetensors(ts, {{"k", "v"}});
  SafeTensors back = parse_safetensors(bytes, "many2");
  CHECK(back.order == st.order);
  CHECK(bytes.substr(bytes.size() - n) == data);
  // Duplicates among many names are still found.
  expect_parse_error(st_file(hdr.substr(0, hdr.size() - 1) + ",\"t7\":" + ent("U8", "[0]", 0, 0) + "}", data),
                     {"duplicate tensor name 't7'"});
}

TEST_CASE("checkpoint: malformed step counts in the metadata are hh::Error (found by fuzz_json)") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  Generator g(1);
  nn::Linear model(2, 3, true, nn::Init{g});
  train::CheckpointMeta meta;
  meta.step = 12;
  train::save_checkpoint(path, model, nullptr, meta);
  SafeTensors st = load_safetensors(path);
  std::vector<std::pair<std::string, Tensor>> ts;
  for (const std::string& name : st.order) ts.emplace_back(name, st.tensors.at(name));
  for (const char* step : {"twelve", "12abc", "-3", "", "99999999999999999999"}) {
    INFO("hedgehog.step = '" << step << "'");
    std::map<std::string, std::string> md = st.metadata;
    md.erase("format");
    md["hedgehog.step"] = step;
    save_safetensors(path, ts, md);
    train::CheckpointMeta back;
    expect_error([&] { train::load_checkpoint(path, model, nullptr, back); }, "checkpoint " + path,
                 {"metadata 'hedgehog.step' must be a non-negative integer"});
  }
}

TEST_CASE("safetensors: sharded checkpoints via model.safetensors.index.json") {
  TempDir dir;
  Tensor x = from_vector(std::vector<double>{1, 2, 3}, {3}, {DType::f32});
  Tensor y = from_vector(std::vector<int64_t>{4, 5}, {2}, {DType::i64});
  Tensor z = from_vector(std::vector<double>{6}, {1, 1}, {DType::f64});
  save_safetensors(dir.file("model-00001-of-00002.safetensors"), {{"x", x}, {"y", y}}, {{"shard", "1"}});
  save_safetensors(dir.file("model-00002-of-00002.safetensors"), {{"z", z}}, {{"shard", "2"}});
  const std::string index = dir.file("model.safetensors.index.json");
  write_file_atomic(index,
                    "{\"metadata\":{\"total_size\":36},\"weight_map\":{\"z\":\"model-00002-of-00002.safetensors\","
                    "\"x\":\"model-00001-of-00002.safetensors\",\"y\":\"model-00001-of-00002.safetensors\"}}");
  CHECK(safetensors_index_files(index) == std::vector<std::string>{dir.file("model-00001-of-00002.safetensors"),
                                                                   dir.file("model-00002-of-00002.safetensors")});
  SafeTensors st = load_safetensors_sharded(index);
  CHECK(st.order == std::vector<std::string>{"x", "y", "z"});
  CHECK(to_vector<double>(st.tensors.at("x")) == std::vector<double>{1, 2, 3});
  CHECK(to_vector<int64_t>(st.tensors.at("y")) == std::vector<int64_t>{4, 5});
  CHECK(to_vector<double>(st.tensors.at("z")) == std::vector<double>{6});
  CHECK(st.metadata.at("format") == "pt");
  CHECK(st.metadata.at("shard") == "1");  // first shard wins on a clash

  const std::string pre = "safetensors: " + index + ": ";
  auto with_map = [&](const std::string& map) { write_file_atomic(index, "{\"weight_map\":{" + map + "}}"); };
  const std::string s1 = "\"model-00001-of-00002.safetensors\"", s2 = "\"model-00002-of-00002.safetensors\"";
  // an entry whose shard lacks the tensor
  with_map("\"x\":" + s1 + ",\"y\":" + s1 + ",\"z\":" + s2 + ",\"w\":" + s2);
  expect_error([&] { load_safetensors_sharded(index); }, pre,
               {"weight_map entry 'w' -> 'model-00002-of-00002.safetensors'", "has no tensor 'w'"});
  // the same tensor in two shards
  save_safetensors(dir.file("zdup.safetensors"), {{"x", x}});
  with_map("\"x\":" + s1 + ",\"y\":" + s1 + ",\"z\":\"zdup.safetensors\"");
  expect_error([&] { load_safetensors_sharded(index); }, pre, {"tensor 'x' is in two shards"});
  // a shard tensor the map puts elsewhere / does not list
  with_map("\"x\":" + s2 + ",\"y\":" + s1 + ",\"z\":" + s2);
  expect_error([&] { load_safetensors_sharded(index); }, pre,
               {"weight_map puts tensor 'x' in shard 'model-00002-of-00002.safetensors'"});
  with_map("\"y\":" + s1 + ",\"z\":" + s2);
  expect_error([&] { load_safetensors_sharded(index); }, pre, {"holds tensor 'x', which weight_map does not list"});
  // malformed index files
  with_map("\"x\":\"../x.safetensors\"");
  expect_error([&] { safetensors_index_files(index); }, pre, {"not a relative path inside the index's folder"});
  with_map("\"x\":3");
  expect_error([&] { safetensors_index_files(index); }, pre, {"weight_map entry 'x' must name a shard file"});
  with_map("\"x\":" + s1 + ",\"x\":" + s2);
  expect_error([&] { safetensors_index_files(index); }, pre, {"duplicate key 'x' inside 'weight_map'"});
  write_file_atomic(index, "{\"metadata\":{}}");
  expect_error([&] { safetensors_index_files(index); }, pre, {"no \"weight_map\""});
  write_file_atomic(index, "{\"weight_map\":");
  expect_error([&] { safetensors_index_files(index); }, pre, {"index is not valid JSON"});
  with_map("\"q\":\"gone.safetensors\"");
  expect_error([&] { load_safetensors_sharded(index); }, "safetensors: " + dir.file("gone.safetensors") + ": ",
               {"cannot open", "No such file"});
}

TEST_CASE("atomic_file: write, overwrite, read and clear errors") {
  TempDir dir;
  const std::string p = dir.file("f.bin");
  write_file_atomic(p, std::string("a\0b", 3));
  CHECK(read_file(p) == std::string("a\0b", 3));
  write_file_atomic(p, "second");
  CHECK(read_file(p) == "second");
  write_file_atomic(p, "");
  CHECK(read_file(p).empty());
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) {
    CHECK(e.path().filename() == "f.bin");  // no temp file left behind
    ++entries;
  }
  CHECK(entries == 1);
  const std::string nodir = dir.file("no/such/folder/f.bin");
  expect_error([&] { write_file_atomic(nodir, "x"); }, "write_file_atomic: ", {nodir, "No such file or directory"});
  // Renaming over a folder fails; the temp file is removed again.
  fs::create_directories(dir.path / "sub");
  expect_error([&] { write_file_atomic((dir.path / "sub").string(), "x"); }, "write_file_atomic: ", {"rename", "sub"});
  entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path))
    entries += e.path().filename().string().find(".tmp.") != std::string::npos;
  CHECK(entries == 0);
  expect_error([&] { read_file(dir.file("nope")); }, "read_file: ", {dir.file("nope"), "No such file or directory"});
  expect_error([&] { read_file(dir.path.string()); }, "read_file: ", {"not a regular file", "folder"});
}

TEST_CASE("safetensors: load maps the file; views stay private, outlive the result, and misaligned data is copied") {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  // u8 (1 byte) at 0, then an f32 at offset 1: misaligned for a view, so it must be copied.
  std::string header = "{\"a\":" + ent("U8", "[1]", 0, 1) + ",\"b\":" + ent("F32", "[1]", 1, 5) + "}";
  while ((header.size() + 8) % 8) header += ' ';
  float one = 1.5f;
  std::string data(1, '\x07');
  data.append(reinterpret_cast<const char*>(&one), 4);
  write_file_atomic(path, st_file(header, data));
  Tensor b;
  {
    SafeTensors st = load_safetensors(path);
    b = st.tensors.at("b");
    CHECK(to_vector<double>(st.tensors.at("a")) == std::vector<double>{7});
  }
  CHECK(to_vector<double>(b) == std::vector<double>{1.5});

  save_safetensors(path, {{"w", from_vector(std::vector<double>{1, 2, 3}, {3}, {DType::f32})}});
  Tensor w = load_safetensors(path).tensors.at("w");  // the result is gone; the view keeps the mapping
  copy_(w, from_vector(std::vector<double>{9, 9, 9}, {3}, {DType::f32}));
  CHECK(to_vector<double>(w) == std::vector<double>{9, 9, 9});
  // The write went to this process's private copy of the pages, never to the file.
  CHECK(to_vector<double>(load_safetensors(path).tensors.at("w")) == std::vector<double>{1, 2, 3});
  expect_error([&] { load_safetensors(dir.path.string()); }, "safetensors: " + dir.path.string() + ": ",
               {"not a regular file"});
}
