// libFuzzer harness: a prepared LM data folder as train_lm reads it. The input is meta.json, a
// line "\n--shard--\n", then the bytes of the one shard train_00000.bin (written into a private
// folder). meta.json is read (read_prepared_info), the split is opened (TokenDataset::open), and
// when both are accepted every id is read back, checked against the vocabulary, and windows are
// drawn from it as training does. Every reader must accept its file or reject it with hh::Error.
#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/lm_prepare.h"
#include "data/token_shards.h"
#include "fuzz/fuzz_common.h"

using namespace hh;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  static const std::string sep = "\n--shard--\n";
  const size_t cut = input.find(sep);
  const std::string meta = cut == std::string::npos ? input : input.substr(0, cut);
  const std::string shard = cut == std::string::npos ? std::string() : input.substr(cut + sep.size());
  static const std::string dir = [] {
    std::string d = fuzz::scratch_path("shards.d");
    ::mkdir(d.c_str(), 0700);
    return d;
  }();
  fuzz::write_file(dir + "/meta.json", meta);
  fuzz::write_file(data::token_shard_path(dir, "train", 0), shard);

  data::PreparedInfo info;
  const bool meta_ok = fuzz::accepted([&] { info = data::read_prepared_info(dir); });
  if (meta_ok && (info.vocab_size < 1 || info.eos_id < -1 || info.eos_id >= info.vocab_size))
    fuzz::finding("read_prepared_info accepted a vocabulary size or eos id out of range");
  fuzz::accepted([&] {
    const data::TokenDataset ds = data::TokenDataset::open(dir, "train");
    const std::vector<int32_t> ids = ds.all();
    if (static_cast<int64_t>(ids.size()) != ds.size()) fuzz::finding("TokenDataset::all() and size() disagree");
    for (int32_t id : ids)
      if (id < 0 || id >= ds.vocab_size()) fuzz::finding("an id outside the shard's vocabulary was returned");
    if (ds.size() >= 5) {
      const data::WindowSampler sampler(ds, 4, 7);
      const Tensor rows = sampler.rows(0, 3);  // (3, 5)
      if (rows.size(0) != 3 || rows.size(1) != 5) fuzz::finding("WindowSampler::rows has the wrong shape");
    }
  });
  return 0;
}
