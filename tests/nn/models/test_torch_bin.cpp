// PyTorch checkpoint files (core/torch_bin.h): the torch.save fixtures of
// tools/make_torch_bin_fixtures.py (zip and legacy formats, every dtype, shared storages, strided
// views, Parameters, pickle protocol 4, a sharded index) load to exactly the tensors of their
// safetensors twins; an HF folder holding only pytorch_model.bin gives the same logits as the
// safetensors folder; every hostile file and every truncation gives hh::Error naming the file.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <string>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/torch_bin.h"
#include "nn/models/bert.h"
#include "nn/models/hf_model.h"
#include "nn/models/hf_weights.h"
#include "tests/nn/models/hf_fixture.h"
#include "tests/temp_dir.h"

using namespace hh;
using namespace hh::nn;
using hh::test::enc::hf_fixture;
using hh::test::enc::rel_error;

namespace {

std::string fixture(const std::string& name) { return std::string(HH_SOURCE_DIR) + "/tests/fixtures/torch_bin/" + name; }

std::string bytes_of(const Tensor& t) {
  REQUIRE(t.is_contiguous());
  return std::string(static_cast<const char*>(t.raw_data()), static_cast<size_t>(t.numel()) * itemsize(t.dtype()));
}

// Same names, dtypes, shapes and bytes.
void check_same(const SafeTensors& got, const SafeTensors& want) {
  std::set<std::string> a, b;
  for (const auto& kv : got.tensors) a.insert(kv.first);
  for (const auto& kv : want.tensors) b.insert(kv.first);
  std::string names;
  for (const auto& n : a) names += n + " ";
  names += "| want ";
  for (const auto& n : b) names += n + " ";
  CAPTURE(names);
  REQUIRE(a == b);
  CHECK(got.order.size() == got.tensors.size());
  for (const auto& kv : want.tensors) {
    const std::string& name = kv.first;
    const Tensor& w = kv.second;
    CAPTURE(name);
    const Tensor& g = got.tensors.at(name);
    CHECK(g.dtype() == w.dtype());
    CHECK(g.shape() == w.shape());
    CHECK(bytes_of(g) == bytes_of(w));
  }
}

std::string slurp(const std::string& path) { return read_file(path); }

doctest::Contains has(const std::string& s) { return doctest::Contains(s.c_str()); }

}  // namespace

TEST_CASE("torch_bin: torch.save fixtures load to the tensors of their safetensors twins") {
  for (const char* name : {"dtypes", "dtypes_legacy", "views", "views_legacy", "module", "parameters"}) {
    CAPTURE(name);
    const std::string bin = fixture(std::string(name) + ".bin");
    const SafeTensors want = load_safetensors(fixture(std::string(name) + ".safetensors"));
    const SafeTensors got = load_torch_bin(bin);
    check_same(got, want);
    check_same(parse_torch_bin(slurp(bin), "mem"), want);  // from memory: the same
  }
  // Pickle protocol 4 (FRAME, MEMOIZE, SHORT_BINUNICODE, STACK_GLOBAL): the same state dict.
  check_same(load_torch_bin(fixture("module_proto4.bin")), load_safetensors(fixture("module.safetensors")));
}

TEST_CASE("torch_bin: the state dict's order, shared storages and strided views") {
  const SafeTensors v = load_torch_bin(fixture("views.bin"));
  const std::vector<std::string> order = {"base", "tied", "rows", "transposed", "columns", "half_t", "bf_row", "bf_slice"};
  CHECK(v.order == order);
  const Tensor& base = v.tensors.at("base");
  const Tensor& tied = v.tensors.at("tied");
  // Tied tensors come out equal but not sharing memory (each copied from the shared storage).
  CHECK(bytes_of(base) == bytes_of(tied));
  CHECK(base.raw_data() != tied.raw_data());
  CHECK(to_vector<float>(v.tensors.at("transposed")) ==
        std::vector<float>({0, 0.75, 1.5, 2.25, 0.125, 0.875, 1.625, 2.375, 0.25, 1, 1.75, 2.5, 0.375, 1.125, 1.875,
                            2.625, 0.5, 1.25, 2, 2.75, 0.625, 1.375, 2.125, 2.875}));
  CHECK(v.tensors.at("columns").shape() == Shape({4, 2}));
  CHECK(to_vector<float>(v.tensors.at("columns")) == std::vector<float>({0.125, 0.375, 0.875, 1.125, 1.625, 1.875, 2.375, 2.625}));
  CHECK(v.tensors.at("bf_row").dtype() == DType::bf16);
  CHECK(v.tensors.at("half_t").dtype() == DType::f16);
  // A storage used by one contiguous tensor is not copied: the tensor views the file's bytes.
  const SafeTensors d = load_torch_bin(fixture("dtypes.bin"));
  CHECK(d.tensors.at("scalar").shape() == Shape({}));
  CHECK(d.tensors.at("scalar").item<double>() == 2.5);
  CHECK(d.tensors.at("empty").shape() == Shape({2, 0, 3}));
}

TEST_CASE("torch_bin: a sharded pytorch_model.bin.index.json") {
  check_same(load_torch_bin_sharded(fixture("sharded/pytorch_model.bin.index.json")),
             load_safetensors(fixture("sharded.safetensors")));
  hh::test::TempDir dir("torchbin_shards");
  for (const auto& e : std::filesystem::directory_iterator(fixture("sharded")))
    std::filesystem::copy_file(e.path(), dir.path / e.path().filename());
  const std::string index = dir.file("pytorch_model.bin.index.json");
  std::string text = slurp(index);
  const std::string listed = "\"a.bias\": \"pytorch_model-00001-of-00002.bin\"";
  REQUIRE(text.find(listed) != std::string::npos);
  // A tensor said to be in the other shard, then a tensor no shard holds.
  std::string moved = text;
  moved.replace(moved.find(listed), listed.size(), "\"a.bias\": \"pytorch_model-00002-of-00002.bin\"");
  dir.write("pytorch_model.bin.index.json", moved);
  CHECK_THROWS_WITH_AS(load_torch_bin_sharded(index), has("torch: " + index + ": weight_map puts tensor 'a.bias'"),
                       Error);
  std::string extra = text;
  extra.replace(extra.find(listed), listed.size(), listed + ", \"c.weight\": \"pytorch_model-00001-of-00002.bin\"");
  dir.write("pytorch_model.bin.index.json", extra);
  CHECK_THROWS_WITH_AS(load_torch_bin_sharded(index), has("that shard has no tensor 'c.weight'"), Error);
  std::string escape = text;
  escape.replace(escape.find(listed), listed.size(), "\"a.bias\": \"../x.bin\"");
  dir.write("pytorch_model.bin.index.json", escape);
  CHECK_THROWS_WITH_AS(load_torch_bin_sharded(index), has("torch: " + index + ": "), Error);
}

TEST_CASE("torch_bin: hostile files give an error naming the file and what was found") {
  const std::pair<const char*, const char*> cases[] = {
      {"os_system.bin", "GLOBAL 'os system' is not allowed"},
      {"builtins_eval.bin", "GLOBAL 'builtins eval' is not allowed"},
      {"legacy_os_system.bin", "GLOBAL 'posix system' is not allowed"},
      {"stack_global.bin", "GLOBAL 'os system' is not allowed"},
      {"truncated.bin", "no end-of-central-directory record"},
      {"truncated_tail.bin", "no end-of-central-directory record"},
      {"size_lies.bin", "is 1000 x f32 = 4000 bytes, but its record 'archive/data/0' holds 16 bytes"},
      {"view_past_storage.bin", "reaches element 5 of a storage of 4 elements"},
      {"offset_past_storage.bin", "reaches element 4 of a storage of 4 elements"},
      {"size_overflow.bin", "does not fit a 64-bit integer"},
      {"deep_lists.bin", "values nested more than 100 deep"},
      {"deep_marks.bin", "MARKs nested more than 100 deep"},
      {"compressed.bin", "is compressed (method 8, deflate)"},
      {"unknown_opcode.bin", "opcode 0x69 ('i') is not accepted"},
      {"not_a_dict.bin", "not a state dict"},
      {"no_stop.bin", "without a STOP opcode"},
      {"bad_memo.bin", "reads memo slot 7, which was never written"},
      {"long_string.bin", "runs past the end of the pickle"},
  };
  std::set<std::string> covered;
  for (const auto& c : cases) {
    const char* name = c.first;
    const char* what = c.second;
    CAPTURE(name);
    const std::string path = fixture(std::string("hostile/") + name);
    covered.insert(name);
    CHECK_THROWS_WITH_AS(load_torch_bin(path), has("torch: " + path + ": "), Error);
    CHECK_THROWS_WITH_AS(load_torch_bin(path), has(what), Error);
    CHECK_THROWS_WITH_AS(parse_torch_bin(slurp(path), "mem"), has(what), Error);
  }
  for (const auto& e : std::filesystem::directory_iterator(fixture("hostile")))
    CHECK_MESSAGE(covered.count(e.path().filename().string()), "hostile fixture without a test: " << e.path().filename().string());
  // A tensor name that is not UTF-8 (found by fuzz_torch_bin: safetensors could not write it back).
  const std::string crash = std::string(HH_SOURCE_DIR) + "/fuzz/corpus/fuzz_torch_bin/finding_invalid_utf8_name.bin";
  CHECK_THROWS_WITH_AS(load_torch_bin(crash), has("views/data.pkl: pickle byte 534: a string that is not valid UTF-8"), Error);
  // Not a checkpoint at all.
  CHECK_THROWS_WITH_AS(parse_torch_bin("hello", "x.bin"), has("torch: x.bin: not a PyTorch checkpoint"), Error);
  CHECK_THROWS_WITH_AS(parse_torch_bin("", "x.bin"), has("torch: x.bin: not a PyTorch checkpoint"), Error);
  CHECK_THROWS_WITH_AS(load_torch_bin(fixture("nothing.bin")), has(fixture("nothing.bin")), Error);
}

TEST_CASE("torch_bin: every truncation and many byte flips of the fixtures are read or refused, never a crash") {
  for (const char* name : {"views.bin", "views_legacy.bin", "module_proto4.bin"}) {
    CAPTURE(name);
    const std::string good = slurp(fixture(name));
    for (size_t n = 0; n < good.size(); ++n) CHECK_THROWS_AS(parse_torch_bin(good.substr(0, n), "cut"), Error);
    // Flip every byte in turn (a flip in tensor data just changes a value; in a header or the
    // pickle it must be refused or give some tensors).
    for (size_t i = 0; i < good.size(); ++i) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ 0x5a);
      try {
        (void)parse_torch_bin(bad, "flip");
      } catch (const Error&) {
      }
    }
  }
}

TEST_CASE("torch_bin: an HF folder with only pytorch_model.bin loads and gives the safetensors folder's logits") {
  hh::test::TempDir dir("torchbin_bert");
  std::filesystem::copy_file(hf_fixture("bert-tiny") + "/config.json", dir.path / "config.json");
  std::filesystem::copy_file(fixture("bert-tiny/pytorch_model.bin"), dir.path / "pytorch_model.bin");
  check_same(read_hf_weights(dir.path.string()), load_safetensors(hf_fixture("bert-tiny") + "/model.safetensors"));
  auto from_bin = std::dynamic_pointer_cast<BertForSequenceClassification>(load_hf_model(dir.path.string()));
  auto from_st = std::dynamic_pointer_cast<BertForSequenceClassification>(load_hf_model(hf_fixture("bert-tiny")));
  REQUIRE(from_bin);
  REQUIRE(from_st);
  const SafeTensors r = load_safetensors(hf_fixture("bert-tiny") + "/reference.safetensors");
  const Tensor& ids = r.tensors.at("input_ids");
  const Tensor& types = r.tensors.at("token_type_ids");
  const Tensor& mask = r.tensors.at("attention_mask");
  const Tensor a = from_bin->forward(ids, types, mask);
  const Tensor b = from_st->forward(ids, types, mask);
  CHECK(to_vector<float>(a) == to_vector<float>(b));
  CHECK(rel_error(a, r.tensors.at("logits")) < 1e-4);

  // GPT-2 from transformers' state_dict in the legacy format: lm_head.weight shares wte's storage.
  hh::test::TempDir gpt("torchbin_gpt2");
  for (const char* f : {"config.json", "generation_config.json"})
    std::filesystem::copy_file(hf_fixture("gpt2-tiny") + "/" + f, gpt.path / f);
  std::filesystem::copy_file(fixture("gpt2-tiny/pytorch_model.bin"), gpt.path / "pytorch_model.bin");
  const SafeTensors gw = read_hf_weights(gpt.path.string());
  CHECK(bytes_of(gw.tensors.at("lm_head.weight")) == bytes_of(gw.tensors.at("transformer.wte.weight")));
  const SafeTensors gr = load_safetensors(hf_fixture("gpt2-tiny") + "/reference.safetensors");
  const Tensor gids = gr.tensors.at("input_ids");
  const Tensor ga = load_causal_lm(gpt.path.string())->forward(gids);
  CHECK(to_vector<float>(ga) == to_vector<float>(load_causal_lm(hf_fixture("gpt2-tiny"))->forward(gids)));
  CHECK(rel_error(ga, gr.tensors.at("logits")) < 1e-4);

  // A hostile pytorch_model.bin: the loader names it.
  hh::test::TempDir bad("torchbin_bad");
  std::filesystem::copy_file(hf_fixture("bert-tiny") + "/config.json", bad.path / "config.json");
  std::filesystem::copy_file(fixture("hostile/os_system.bin"), bad.path / "pytorch_model.bin");
  CHECK_THROWS_WITH_AS(load_hf_model(bad.path.string()),
                       has("torch: " + bad.file("pytorch_model.bin") + ": archive/data.pkl: pickle byte 2: GLOBAL 'os system'"), Error);
  // safetensors wins when both exist (the hostile .bin is never read).
  std::filesystem::copy_file(hf_fixture("bert-tiny") + "/model.safetensors", bad.path / "model.safetensors");
  CHECK_NOTHROW(load_hf_model(bad.path.string()));
  // Neither: the message lists all four names.
  hh::test::TempDir empty("torchbin_empty");
  std::filesystem::copy_file(hf_fixture("bert-tiny") + "/config.json", empty.path / "config.json");
  CHECK_THROWS_WITH_AS(read_hf_weights(empty.path.string()), has("nor pytorch_model.bin or pytorch_model.bin.index.json"),
                       Error);
}
