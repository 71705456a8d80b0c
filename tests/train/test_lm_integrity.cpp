// issue 27's repro in process: a finished train_lm run whose checkpoint has NaN written over
// model.transformer.wte.weight (under a valid checksum, so only the finiteness check can see it)
// or a byte flipped in it must not resume as "ok": resuming throws, naming the file and the tensor.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/generator.h"
#include "core/safetensors.h"
#include "data/token_shards.h"
#include "experiments/lm/lm_train.h"
#include "tests/temp_dir.h"

using namespace hh;

namespace {

std::vector<int32_t> cycle_stream(int64_t n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7) % 12);
  return ids;
}

train::LmTrainConfig tiny_run(const std::string& out) {
  train::LmTrainConfig c;
  c.model = train::lm_model_preset("tiny");
  c.model.vocab_size = 16;
  c.model.n_positions = 32;
  c.attention.mixer = nn::Mixer::softmax();
  c.context = 32;
  c.batch = 4;
  c.steps = 3;
  c.eval_every = 0;
  c.eval_windows = 2;
  c.out_dir = out;
  c.progress = false;
  return c;
}

}  // namespace

TEST_CASE("train_lm: a finished run's checkpoint with NaN or a flipped byte in its weights is not resumed") {
  test::TempDir dir("lm_integrity");
  std::filesystem::create_directories(dir.file("data"));
  data::write_token_shard(dir.file("data/train_00000.bin"), cycle_stream(2000), 16);
  const data::TokenDataset train_split = data::TokenDataset::open(dir.file("data"), "train");
  const std::vector<int32_t> valid = cycle_stream(300);
  auto comm = make_communicator("none");
  train::LmTrainConfig c = tiny_run(dir.file("run"));
  REQUIRE(train::train_language_model(c, train_split, valid, *comm).status == "ok");
  const std::string ckpt = train::lm_checkpoint_path(c.out_dir);
  const std::string good = read_file(ckpt);
  c.resume = true;
  REQUIRE(train::train_language_model(c, train_split, valid, *comm).status == "ok");  // intact: resumes

  // NaN over the embedding, the file rewritten with correct checksums.
  const std::string wte = "model.transformer.wte.weight";
  SafeTensors st = load_safetensors(ckpt);
  REQUIRE(st.checksummed);
  std::vector<std::pair<std::string, Tensor>> ts;
  for (const std::string& name : st.order) {
    Tensor t = st.tensors.at(name).contiguous();
    if (name == wte) {
      std::vector<float> v = to_vector<float>(t);
      for (float& x : v) x = std::nanf("");
      t = from_vector(v, t.shape());
    }
    ts.emplace_back(name, t);
  }
  std::map<std::string, std::string> md = st.metadata;
  md.erase("format");
  save_safetensors(ckpt, ts, md);
  REQUIRE(load_safetensors(ckpt).checksummed);
  CHECK_THROWS_WITH_AS(train::train_language_model(c, train_split, valid, *comm),
                       doctest::Contains(("checkpoint " + ckpt + ": tensor '" + wte + "' holds a non-finite value").c_str()),
                       Error);
  CHECK_THROWS_WITH_AS(train::load_lm_checkpoint_model(ckpt), doctest::Contains("non-finite"), Error);  // sampling too

  // One byte flipped inside the embedding's data: the checksum names it.
  std::string bytes = good;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  const size_t at = bytes.find("\"" + wte + "\"");
  REQUIRE(at != std::string::npos);
  const size_t offsets = bytes.find("\"data_offsets\":[", at) + 16;
  const uint64_t begin = std::stoull(bytes.substr(offsets, 20));
  bytes[static_cast<size_t>(8 + n + begin + 5)] ^= 0x01;
  write_file_atomic(ckpt, bytes);
  CHECK_THROWS_WITH_AS(train::train_language_model(c, train_split, valid, *comm),
                       doctest::Contains(("safetensors: " + ckpt + ": tensor '" + wte + "': checksum mismatch").c_str()),
                       Error);
}
