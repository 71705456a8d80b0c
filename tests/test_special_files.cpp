// Readers never block on special files (issue 27, item 3): a FIFO (or a device, or a folder) where a
// config, safetensors file, sharded index target, token shard, meta.json, tokenizer file, image,
// data file or checkpoint is expected is refused at once with an error naming the path and the kind
// of file. Were a reader to open the FIFO blocking again, each FIFO's watchdog opens its write end
// after a few seconds (the reader then sees an empty file and the expected message is missing: the
// case fails instead of hanging); the CTest TIMEOUT of hh_tests catches anything else.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/regular_file.h"
#include "core/safetensors.h"
#include "data/glue.h"
#include "data/image.h"
#include "data/image_dataset.h"
#include "data/lm_prepare.h"
#include "data/lra.h"
#include "data/samsum.h"
#include "data/text_corpus.h"
#include "data/token_shards.h"
#include "data/tokenizer.h"
#include "data/word_order.h"
#include "nn/layers.h"
#include "nn/models/hf_config.h"
#include "nn/models/hf_model.h"
#include "tests/temp_dir.h"
#include "train/checkpoint.h"
#include "train/metrics_log.h"

namespace fs = std::filesystem;
using namespace hh;
using hh::test::TempDir;

namespace {

std::string fixture(const std::string& rel) { return std::string(HH_SOURCE_DIR) + "/tests/fixtures/" + rel; }

// A FIFO at `path` (replacing any file there) with a watchdog: after `after`, while the FIFO
// exists, its write end is opened and closed again (a reader blocked on it wakes up with
// end-of-file) and so is its read end (a writer blocked in open wakes up), instead of hanging.
class Fifo {
 public:
  explicit Fifo(std::string path, std::chrono::milliseconds after = std::chrono::seconds(5)) : path_(std::move(path)) {
    std::error_code ec;
    fs::remove(path_, ec);
    REQUIRE_MESSAGE(::mkfifo(path_.c_str(), 0600) == 0, "mkfifo ", path_);
    watchdog_ = std::thread([this, after] {
      const auto deadline = std::chrono::steady_clock::now() + after;
      while (!done_) {
        if (std::chrono::steady_clock::now() >= deadline) {
          int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);  // succeeds only while a reader waits
          if (fd >= 0) ::close(fd);
          fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // wakes a writer blocked in open
          if (fd >= 0) ::close(fd);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
  }
  ~Fifo() {
    done_ = true;
    watchdog_.join();
  }
  Fifo(const Fifo&) = delete;
  Fifo& operator=(const Fifo&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::atomic<bool> done_{false};
  std::thread watchdog_;
};

// Runs `f`, which must throw hh::Error naming `path` and `kind` ("a FIFO", ...) within two seconds.
void refuses(const std::function<void()>& f, const std::string& path, const std::string& kind = "a FIFO") {
  const auto start = std::chrono::steady_clock::now();
  std::string msg;
  try {
    f();
  } catch (const Error& e) {
    msg = e.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CAPTURE(msg);
  CHECK(msg.find(path) != std::string::npos);
  CHECK(msg.find("not a regular file (" + kind + ")") != std::string::npos);
  CHECK(seconds < 2.0);
}

// A copy of a fixture folder (its files only) in `dir`.
std::string copy_folder(const std::string& from, const TempDir& dir, const std::string& name) {
  const fs::path to = dir.path / name;
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from))
    if (e.is_regular_file()) fs::copy_file(e.path(), to / e.path().filename());
  return to.string();
}

}  // namespace

TEST_CASE("special files: open_regular_file, read_file, InputFile and MappedFile refuse FIFOs, devices, folders") {
  TempDir dir("special_core");
  Fifo fifo(dir.file("fifo"));
  refuses([&] { ::close(open_regular_file(fifo.path(), "test")); }, fifo.path());
  refuses([&] { check_regular_file(fifo.path(), "test"); }, fifo.path());
  refuses([&] { read_file(fifo.path()); }, fifo.path());
  refuses([&] { InputFile f(fifo.path()); }, fifo.path());
  refuses([&] { MappedFile::open(fifo.path()); }, fifo.path());
  refuses([&] { read_file("/dev/zero"); }, "/dev/zero", "a character device");
  refuses([&] { MappedFile::open("/dev/zero"); }, "/dev/zero", "a character device");
  refuses([&] { read_file(dir.path.string()); }, dir.path.string(), "a folder");
  // A symbolic link to a FIFO is followed and refused too.
  fs::create_symlink(fifo.path(), dir.path / "link");
  refuses([&] { read_file(dir.file("link")); }, dir.file("link"));
  // Regular files and missing ones behave as before.
  dir.write("ok.txt", "abc");
  CHECK(read_file(dir.file("ok.txt")) == "abc");
  CHECK_NOTHROW(check_regular_file(dir.file("missing"), "test"));
  CHECK_THROWS_WITH_AS(read_file(dir.file("missing")), doctest::Contains("No such file"), Error);
}

TEST_CASE("special files: config.json, preprocessor_config.json and images") {
  TempDir dir("special_config");
  {
    Fifo fifo(dir.file("config.json"));
    refuses([&] { nn::HFConfig::load(fifo.path()); }, fifo.path());
    refuses([&] { nn::load_hf_model(dir.path.string()); }, fifo.path());
  }
  Fifo png(dir.file("image.png"));
  refuses([&] { read_image(png.path()); }, png.path());
  refuses([&] { read_image("/dev/zero"); }, "/dev/zero", "a character device");  // never read to 8 GB
  Fifo pre(dir.file("preprocessor_config.json"));
  refuses([&] { ImagePreprocess::load(pre.path(), 32); }, pre.path());
}

TEST_CASE("special files: safetensors files, sharded index and its targets, checkpoints") {
  TempDir dir("special_st");
  const std::string gpt2 = copy_folder(fixture("hf/gpt2-tiny"), dir, "gpt2");
  {
    Fifo fifo(gpt2 + "/model.safetensors");
    refuses([&] { load_safetensors(fifo.path()); }, fifo.path());
    refuses([&] { nn::load_hf_model(gpt2); }, fifo.path());
  }
  const std::string llama = copy_folder(fixture("hf/llama-tiny"), dir, "llama");
  {
    Fifo target(llama + "/model-00003-of-00005.safetensors");  // named by the index
    refuses([&] { load_safetensors_sharded(llama + "/model.safetensors.index.json"); }, target.path());
    refuses([&] { nn::load_hf_model(llama); }, target.path());
  }
  {
    Fifo index(llama + "/model.safetensors.index.json");
    refuses([&] { load_safetensors_sharded(index.path()); }, index.path());
  }
  // A checkpoint as --resume reads it.
  Fifo ckpt(dir.file("checkpoint.safetensors"));
  Generator g(0);
  nn::Linear model(2, 2, true, nn::Init{g});
  train::CheckpointMeta meta;
  refuses([&] { train::load_checkpoint(ckpt.path(), model, nullptr, meta); }, ckpt.path());
  // The metrics log a resumed run appends to (opening a FIFO for writing blocks too).
  Fifo log(dir.file("metrics.jsonl"));
  refuses([&] { MetricsLog m(log.path(), true); }, log.path());
}

TEST_CASE("special files: token shards and meta.json") {
  TempDir dir("special_shards");
  data::write_token_shard(data::token_shard_path(dir.path.string(), "valid", 0), {1, 2, 3}, 10);
  {
    Fifo shard(data::token_shard_path(dir.path.string(), "train", 0));
    refuses([&] { data::TokenShard::open(shard.path()); }, shard.path());
    refuses([&] { data::TokenDataset::open(dir.path.string(), "train"); }, shard.path());
  }
  Fifo meta(dir.file("meta.json"));
  refuses([&] { data::read_prepared_info(dir.path.string()); }, meta.path());
  // An input file for `prepare` that is a FIFO.
  Fifo input(dir.file("input.txt"));
  data::PrepareOptions o;
  o.inputs = {input.path()};
  o.out_dir = dir.file("out");
  CHECK_THROWS_WITH_AS(data::prepare_lm_data(o), doctest::Contains("not a regular file"), Error);
}

TEST_CASE("special files: tokenizer files (tokenizer.json, vocab.json, merges.txt, vocab.txt)") {
  TempDir dir("special_tok");
  struct Case {
    const char* fixture;
    const char* file;
  };
  for (const Case& c : {Case{"tokenizers/bert", "tokenizer.json"}, Case{"tokenizers/llama", "tokenizer.json"},
                        Case{"tokenizers/bytebpe", "tokenizer.json"}, Case{"tokenizers/gpt2", "vocab.json"},
                        Case{"tokenizers/gpt2", "merges.txt"}}) {
    CAPTURE(c.fixture);
    CAPTURE(c.file);
    const std::string folder = copy_folder(fixture(c.fixture), dir, std::string(c.fixture).substr(11) + "_" + c.file);
    Fifo fifo(folder + "/" + c.file);
    refuses([&] { data::load_tokenizer(folder); }, fifo.path());
  }
  // vocab.txt alone (a WordPiece folder without tokenizer.json).
  const std::string bert = dir.file("vocab_only");
  fs::create_directories(bert);
  Fifo vocab(bert + "/vocab.txt");
  refuses([&] { data::load_tokenizer(bert); }, vocab.path());
}

TEST_CASE("special files: text, TSV, JSON and binary data files") {
  TempDir dir("special_data");
  Fifo fifo(dir.file("data"));
  refuses([&] { data::read_text_file(fifo.path()); }, fifo.path());
  refuses([&] { data::read_glue(data::glue_task("cola"), fifo.path()); }, fifo.path());
  refuses([&] { data::read_samsum(fifo.path()); }, fifo.path());
  refuses([&] { data::read_cifar10({fifo.path()}); }, fifo.path());
  refuses([&] { data::read_cifar10_meta(fifo.path()); }, fifo.path());
  refuses([&] { data::make_word_order({fifo.path()}, data::WordOrderConfig{}); }, fifo.path());
  // An LRA split file.
  const std::string listops = copy_folder(fixture("lra/listops"), dir, "listops");
  Fifo split(listops + "/basic_val.tsv");
  CHECK_THROWS_WITH_AS(data::read_lra_split(data::LraTask::listops, listops, "val"),
                       doctest::Contains("not a regular file"), Error);
}
