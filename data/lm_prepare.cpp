#include "data/lm_prepare.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/regular_file.h"
#include "data/text_corpus.h"
#include "data/token_shards.h"
#include "data/tokenizer_bytes.h"
#include "data/tokenizer_gpt2.h"
#include "data/unicode.h"

namespace hh::data {

namespace fs = std::filesystem;

namespace {

constexpr const char* kMetaName = "meta.json";
// <out>/.hh-prepare.<pid>.<n>: a preparation being built (hidden: never an input, never a shard).
constexpr const char* kStagePrefix = ".hh-prepare.";
constexpr const char* kSplits[] = {"train", "valid", "test"};
constexpr size_t kGroupBytes = size_t{64} << 20;  // text read and tokenized together (many small files)

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }
bool is_ascii_printable(char c) { return c >= 0x21 && c <= 0x7E; }

int resolve_threads(int threads) {
  if (threads > 0) return threads;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// Runs job(i) for every i in [0, n) on `threads` threads, the calling thread one of them: it calls
// after_main_job() after each job it ran (progress reports stay on one thread). The first exception
// stops the other threads from taking new jobs and is rethrown once they have all stopped.
void run_parallel(size_t n, int threads, const std::function<void(size_t)>& job,
                  const std::function<void()>& after_main_job) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  const auto worker = [&](size_t t, bool main) {
    try {
      while (!failed.load()) {
        const size_t i = next.fetch_add(1);
        if (i >= n) break;
        job(i);
        if (main) after_main_job();
      }
    } catch (...) {
      errors[t] = std::current_exception();
      failed = true;
    }
  };
  std::vector<std::thread> pool;
  const size_t helpers = std::min(static_cast<size_t>(threads) - 1, n > 0 ? n - 1 : 0);
  for (size_t t = 1; t <= helpers; ++t) pool.emplace_back(worker, t, false);
  worker(0, true);
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

// A whole input file as UTF-8 text; an error naming the file when it is empty, has a NUL byte or is
// not UTF-8 (with the line and the byte in the line).
std::string read_document(const std::string& path) {
  std::string text = read_file(path);  // names the path and the OS error
  HH_CHECK(!text.empty(), "prepare: ", path, ": empty file (nothing to tokenize)");
  const size_t nul = text.find('\0');
  if (nul != std::string::npos) {
    const int64_t line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(nul), '\n');
    const size_t line_start = nul == 0 ? 0 : text.rfind('\n', nul - 1) + 1;  // npos + 1 == 0
    fail(str("prepare: ", path, ":", line, ": NUL byte at byte ", nul - line_start + 1,
             " of the line (a binary file, not UTF-8 text)"));
  }
  if (!unicode::is_valid_utf8(text)) {
    try {
      read_text_file(path);  // throws naming the line and the byte of the first bad sequence
    } catch (const Error& e) {
      fail(str("prepare: ", e.what(), " (a binary file, or text in another encoding: convert it to UTF-8)"));
    }
    fail(str("prepare: ", path, ": invalid UTF-8"));
  }
  return text;
}

bool is_hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

bool is_wikitext_folder(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && (fs::is_regular_file(fs::path(dir) / "wiki.train.raw", ec) ||
                                       fs::is_regular_file(fs::path(dir) / "wiki.train.tokens", ec));
}

// True when `p` is the folder `dir` (the same file, however spelled); false when either is missing.
bool same_folder(const fs::path& p, const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(p, ec) && fs::equivalent(p, dir, ec);
}

struct Document {
  std::string path;
  std::string split;  // WikiText: its split; empty: cut into train and valid by valid_fraction
};

std::vector<Document> collect_documents(const PrepareOptions& o) {
  HH_CHECK(!o.inputs.empty(), "prepare: no input files or folders given");
  std::vector<Document> docs;
  std::error_code ec;
  for (const std::string& in : o.inputs) {
    HH_CHECK(fs::exists(in, ec), "prepare: input ", in, ": no such file or folder");
    if (is_wikitext_folder(in)) {
      HH_CHECK(o.inputs.size() == 1, "prepare: ", in,
               " is a WikiText folder (it has wiki.train.*), which must be the only input; got ", o.inputs.size());
      for (const char* split : kSplits) {
        const bool present = fs::is_regular_file(fs::path(in) / (std::string("wiki.") + split + ".raw"), ec) ||
                             fs::is_regular_file(fs::path(in) / (std::string("wiki.") + split + ".tokens"), ec);
        if (present || std::string(split) != "test") docs.push_back({wikitext_split_path(in, split), split});
      }
      return docs;
    }
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> files;
      fs::recursive_directory_iterator it(in, ec), end;
      HH_CHECK(!ec, "prepare: input ", in, ": cannot list the folder: ", ec.message());
      for (; it != end; it.increment(ec)) {
        HH_CHECK(!ec, "prepare: input ", in, ": cannot list the folder: ", ec.message());
        const fs::path p = it->path();
        if (is_hidden(p) || same_folder(p, o.out_dir)) {  // the output may live inside an input folder
          if (it->is_directory(ec)) it.disable_recursion_pending();
          continue;
        }
        if (it->is_regular_file(ec)) files.push_back(p.string());
      }
      HH_CHECK(!files.empty(), "prepare: input folder ", in, " has no files (hidden files are skipped)");
      std::sort(files.begin(), files.end());
      for (std::string& f : files) docs.push_back({std::move(f), ""});
    } else {
      HH_CHECK(fs::is_regular_file(in, ec), "prepare: input ", in, ": not a regular file or a folder");
      docs.push_back({in, ""});
    }
  }
  return docs;
}

// The token stream of one split, written as shards of shard_tokens ids as it grows. Documents are
// separated by `separator` (none when < 0).
class SplitWriter {
 public:
  SplitWriter(std::string dir, std::string split, int64_t vocab_size, int bytes_per_id, int64_t shard_tokens,
              int32_t separator)
      : dir_(std::move(dir)), split_(std::move(split)), vocab_size_(vocab_size), bytes_per_id_(bytes_per_id),
        shard_tokens_(shard_tokens), separator_(separator) {}

  // The next append() starts a new document: the separator goes first if the split has tokens.
  void begin_document() { separator_due_ = total_ > 0 && separator_ >= 0; }
  void append(const int32_t* ids, int64_t n) {
    if (n == 0) return;
    if (separator_due_) {
      separator_due_ = false;
      append_ids(&separator_, 1);
    }
    append_ids(ids, n);
  }
  // Writes the last shard (an empty one when the split has no token at all). Returns the files.
  const std::vector<std::string>& finish() {
    if (!buffer_.empty() || files_.empty()) flush();
    return files_;
  }
  int64_t total() const { return total_; }

 private:
  void append_ids(const int32_t* ids, int64_t n) {
    while (n > 0) {
      const int64_t take = std::min(n, shard_tokens_ - static_cast<int64_t>(buffer_.size()));
      buffer_.insert(buffer_.end(), ids, ids + take);
      ids += take;
      n -= take;
      total_ += take;
      if (static_cast<int64_t>(buffer_.size()) == shard_tokens_) flush();
    }
  }
  void flush() {
    const std::string path = token_shard_path(dir_, split_, static_cast<int64_t>(files_.size()));
    write_token_shard(path, buffer_, vocab_size_, bytes_per_id_);
    files_.push_back(path);
    buffer_.clear();
  }

  std::string dir_, split_;
  int64_t vocab_size_;
  int bytes_per_id_;
  int64_t shard_tokens_;
  int32_t separator_;
  bool separator_due_ = false;
  std::vector<int32_t> buffer_;
  std::vector<std::string> files_;
  int64_t total_ = 0;
};

// Removes <dir>/<split>_NNNNN.bin files of the known splits whose names are not in `keep`.
void remove_stale_shards(const std::string& dir, const std::vector<std::string>& keep) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    bool shard_name = false;
    for (const char* split : kSplits) {
      const std::string prefix = std::string(split) + "_";
      shard_name = shard_name ||
                   (name.size() == prefix.size() + 9 && name.compare(0, prefix.size(), prefix) == 0 &&
                    name.compare(name.size() - 4, 4, ".bin") == 0);
    }
    if (shard_name && std::find(keep.begin(), keep.end(), name) == keep.end()) fs::remove(e.path(), ec);
  }
}

std::string tokenizer_for_meta(const std::string& spec) {
  if (spec == "bytes") return spec;
  std::error_code ec;
  const fs::path abs = fs::absolute(spec, ec);
  return ec ? spec : abs.lexically_normal().string();
}

// Makes the renames into `dir` durable (a folder that cannot be fsynced, EINVAL, is let be).
void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  HH_CHECK(fd >= 0, "prepare: cannot open folder ", dir, " to fsync it: ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  HH_CHECK(rc == 0 || err == EINVAL, "prepare: fsync of folder ", dir, " failed: ", std::strerror(err));
}

// Swaps the complete preparation in `stage` (its meta.json written last) into `dir`:
//   1. dir/meta.json is removed: from here on dir is not "prepared", so no reader takes a mix;
//   2. the stage's shards (the files its meta.json lists) are renamed into dir;
//   3. dir's other shards (of the previous preparation) are removed;
//   4. the stage's meta.json is renamed into dir (dir is prepared again, with the new result);
//   5. the stage is removed.
// Every step can run again after a crash at any point (a shard renamed already is in dir), so a
// stage that holds a meta.json is always rolled forward, by this run or the next (recover_stages).
// The previous result stays untouched until the new one is complete in the stage.
void commit_stage(const std::string& dir, const std::string& stage) {
  const std::string staged_meta = (fs::path(stage) / kMetaName).string();
  const nlohmann::json meta = nlohmann::json::parse(read_file(staged_meta), nullptr, false);
  HH_CHECK(meta.is_object() && meta.contains("files") && meta["files"].is_array(), "prepare: ", staged_meta,
           " has no \"files\" list");
  std::vector<std::string> names;
  for (const auto& f : meta["files"]) {
    HH_CHECK(f.is_string() && fs::path(f.get<std::string>()).filename() == f.get<std::string>() &&
                 f.get<std::string>() != "." && f.get<std::string>() != "..",
             "prepare: ", staged_meta, ": \"files\" must hold plain file names");
    names.push_back(f.get<std::string>());
  }
  const std::string meta_path = (fs::path(dir) / kMetaName).string();
  if (::unlink(meta_path.c_str()) != 0 && errno != ENOENT)
    fail(str("prepare: cannot remove the old ", meta_path, ": ", std::strerror(errno)));
  for (const std::string& name : names) {
    const std::string from = (fs::path(stage) / name).string(), to = (fs::path(dir) / name).string();
    if (::rename(from.c_str(), to.c_str()) == 0) continue;
    const int err = errno;
    std::error_code ec;
    HH_CHECK(err == ENOENT && fs::is_regular_file(to, ec), "prepare: cannot move ", from, " to ", to, ": ",
             std::strerror(err));  // ENOENT with the shard in place: renamed before a crash
  }
  remove_stale_shards(dir, names);
  fsync_dir(dir);  // the shards are in place before meta.json says so
  if (::rename(staged_meta.c_str(), meta_path.c_str()) != 0)
    fail(str("prepare: cannot move ", staged_meta, " to ", meta_path, ": ", std::strerror(errno)));
  fsync_dir(dir);
  std::error_code ec;
  fs::remove_all(stage, ec);
}

// Finishes or removes the stages in `dir` whose preparation died (SIGKILL, power loss: no unwinding
// ran): a complete one (with meta.json) is rolled forward (commit_stage), an incomplete one removed;
// the stages of live processes are left alone (temp_owner_gone). Housekeeping: errors are ignored.
void recover_stages(const std::string& dir) {
  std::error_code ec;
  std::vector<fs::path> stages;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kStagePrefix, 0) != 0 || !e.is_directory(ec) || e.is_symlink(ec)) continue;
    const std::string rest = name.substr(std::string(kStagePrefix).size());
    const size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string::npos || dot > 9 ||
        rest.find_first_not_of("0123456789") != dot || rest.find_first_not_of("0123456789", dot + 1) != std::string::npos)
      continue;
    if (temp_owner_gone(e.path().string(), std::stoll(rest.substr(0, dot)))) stages.push_back(e.path());
  }
  std::sort(stages.begin(), stages.end());
  for (const fs::path& stage : stages) {
    try {
      if (fs::is_regular_file(stage / kMetaName, ec)) commit_stage(dir, stage.string());
    } catch (const Error&) {
    }
    fs::remove_all(stage, ec);
  }
}

}  // namespace

// ---- parallel tokenizing ----

std::vector<size_t> lm_text_cuts(std::string_view text, size_t chunk_bytes) {
  HH_CHECK(chunk_bytes >= 1, "lm_text_cuts: chunk_bytes must be >= 1");
  std::vector<size_t> cuts;
  size_t last = 0;
  for (size_t p = chunk_bytes; p < text.size(); ++p) {
    if (p - last < chunk_bytes || !is_ascii_printable(text[p - 1]) || !is_ascii_space(text[p])) continue;
    cuts.push_back(p);
    last = p;
  }
  return cuts;
}

bool lm_tokenizer_allows_cuts(const Tokenizer& tok) {
  if (dynamic_cast<const ByteTokenizer*>(&tok)) return true;
  if (!dynamic_cast<const Gpt2Tokenizer*>(&tok)) return false;
  // A probe: GPT-2 BPE with add_prefix_space would put a space before each piece.
  const std::string probe = "a b\nc\n\nd\t!e";
  std::vector<int32_t> pieces;
  size_t begin = 0;
  for (size_t cut : lm_text_cuts(probe, 1)) {
    const std::vector<int32_t> ids = tok.encode(std::string_view(probe).substr(begin, cut - begin), false);
    pieces.insert(pieces.end(), ids.begin(), ids.end());
    begin = cut;
  }
  const std::vector<int32_t> last = tok.encode(std::string_view(probe).substr(begin), false);
  pieces.insert(pieces.end(), last.begin(), last.end());
  return pieces == tok.encode(probe, false);
}

std::vector<int32_t> lm_encode_parallel(const Tokenizer& tok, std::string_view text, int threads, size_t chunk_bytes) {
  if (!lm_tokenizer_allows_cuts(tok)) return tok.encode(text, false);
  std::vector<size_t> bounds = lm_text_cuts(text, chunk_bytes);
  bounds.insert(bounds.begin(), 0);
  bounds.push_back(text.size());
  std::vector<std::vector<int32_t>> parts(bounds.size() - 1);
  run_parallel(parts.size(), resolve_threads(threads),
               [&](size_t i) { parts[i] = tok.encode(text.substr(bounds[i], bounds[i + 1] - bounds[i]), false); },
               [] {});
  std::vector<int32_t> ids;
  size_t total = 0;
  for (const auto& p : parts) total += p.size();
  ids.reserve(total);
  for (const auto& p : parts) ids.insert(ids.end(), p.begin(), p.end());
  return ids;
}

// ---- prepare ----

namespace {

// prepare_lm_data after the checks: tokenizes `docs` into shards in `stage`, then writes meta.json
// there (last: a stage with meta.json is complete). result.files name the files as they will be in
// o.out_dir once the stage is committed.
PrepareResult write_prepared(const PrepareOptions& o, const Tokenizer& tok, int width, const std::vector<Document>& docs,
                             const std::string& stage) {
  const std::string meta_path = (fs::path(stage) / kMetaName).string();
  const int64_t vocab = tok.vocab_size();
  const int32_t eos = tok.eos_id();
  const int threads = resolve_threads(o.threads);
  const bool cuts = lm_tokenizer_allows_cuts(tok);
  std::error_code ec;
  std::map<std::string, SplitWriter> writers;
  const auto writer = [&](const std::string& split) -> SplitWriter& {
    auto it = writers.find(split);
    if (it == writers.end())
      it = writers.emplace(split, SplitWriter(stage, split, vocab, width, o.shard_tokens, eos)).first;
    return it->second;
  };
  if (docs.front().split.empty()) {  // make both splits exist even when valid_fraction leaves one empty
    writer("train");
    writer("valid");
  }

  uint64_t total_bytes = 0;
  for (const Document& d : docs) {
    const uintmax_t size = fs::file_size(d.path, ec);
    if (!ec) total_bytes += static_cast<uint64_t>(size);  // only for the progress bar: a bad file fails when read
  }
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  std::optional<Progress> progress;
  if (o.progress) {
    ProgressOptions po;
    po.label = "tokenizing (MiB)";
    po.total = static_cast<int64_t>((total_bytes + kMiB - 1) / kMiB);
    progress.emplace(po);
  }
  std::atomic<uint64_t> bytes_done{0};
  std::atomic<int64_t> tokens_done{0};
  const auto report = [&] {
    if (progress)
      progress->update(static_cast<int64_t>(bytes_done.load() / kMiB),
                       {{"Mtokens", static_cast<double>(tokens_done.load()) / 1e6}});
  };

  // Documents in groups of about kGroupBytes of text: read, cut into pieces, tokenized on all threads.
  for (size_t first = 0; first < docs.size();) {
    std::vector<std::string> texts;
    size_t group_bytes = 0, last = first;
    for (; last < docs.size() && (last == first || group_bytes < kGroupBytes); ++last) {
      texts.push_back(read_document(docs[last].path));
      group_bytes += texts.back().size();
    }
    struct Piece {
      size_t doc;  // index into texts
      std::string_view text;
      std::vector<int32_t> ids;
    };
    std::vector<Piece> pieces;
    for (size_t d = 0; d < texts.size(); ++d) {
      const std::string_view text = texts[d];
      size_t begin = 0;
      if (cuts) {
        for (size_t cut : lm_text_cuts(text, static_cast<size_t>(o.chunk_bytes))) {
          pieces.push_back({d, text.substr(begin, cut - begin), {}});
          begin = cut;
        }
      }
      pieces.push_back({d, text.substr(begin), {}});
    }
    run_parallel(pieces.size(), threads,
                 [&](size_t i) {
                   pieces[i].ids = tok.encode(pieces[i].text, false);
                   bytes_done += pieces[i].text.size();
                   tokens_done += static_cast<int64_t>(pieces[i].ids.size());
                 },
                 report);
    // In document order, each document's pieces go to its split(s): a WikiText file to its split, any
    // other document's first n - n_valid ids to train and the rest to valid.
    for (size_t p = 0, d = 0; d < texts.size(); ++d) {
      const size_t doc_end = static_cast<size_t>(
          std::find_if(pieces.begin() + static_cast<std::ptrdiff_t>(p), pieces.end(), [&](const Piece& x) { return x.doc != d; }) -
          pieces.begin());
      int64_t n = 0;
      for (size_t q = p; q < doc_end; ++q) n += static_cast<int64_t>(pieces[q].ids.size());
      const Document& doc = docs[first + d];
      const int64_t n_valid = doc.split.empty() ? std::llround(static_cast<double>(n) * o.valid_fraction) : 0;
      SplitWriter& head = writer(doc.split.empty() ? "train" : doc.split);
      head.begin_document();
      if (doc.split.empty()) writer("valid").begin_document();
      int64_t at = 0;  // the document's position of the piece's first id
      for (; p < doc_end; ++p) {
        const int32_t* ids = pieces[p].ids.data();
        const int64_t len = static_cast<int64_t>(pieces[p].ids.size());
        const int64_t to_head = std::clamp(n - n_valid - at, int64_t{0}, len);
        head.append(ids, to_head);
        if (to_head < len) writer("valid").append(ids + to_head, len - to_head);
        at += len;
        std::vector<int32_t>().swap(pieces[p].ids);
      }
    }
    first = last;
  }

  PrepareResult result;
  result.vocab_size = vocab;
  std::vector<std::string> names;
  for (auto& [split, w] : writers) {
    for (const std::string& f : w.finish()) {
      names.push_back(fs::path(f).filename().string());
      result.files.push_back((fs::path(o.out_dir) / names.back()).string());
    }
    result.tokens[split] = w.total();
  }
  if (progress) {
    progress->update(static_cast<int64_t>((bytes_done.load() + kMiB - 1) / kMiB));  // all done: the rounded-up total
    progress->finish({{"Mtokens", static_cast<double>(tokens_done.load()) / 1e6}});
  }
  nlohmann::json meta;
  meta["format"] = "hedgehog token shards";
  meta["version"] = 1;
  meta["tokenizer"] = tokenizer_for_meta(o.tokenizer);
  meta["vocab_size"] = vocab;
  meta["eos_id"] = eos;
  meta["bytes_per_id"] = width;
  meta["shard_tokens"] = o.shard_tokens;
  meta["tokens"] = result.tokens;
  meta["files"] = names;
  meta["inputs"] = o.inputs;  // as given (a folder stands for its files)
  meta["documents"] = docs.size();
  write_file_atomic(meta_path, meta.dump(2) + "\n");
  result.files.push_back((fs::path(o.out_dir) / kMetaName).string());
  return result;
}

}  // namespace

PrepareResult prepare_lm_data(const PrepareOptions& o) {
  HH_CHECK(!o.out_dir.empty(), "prepare: no output folder given");
  HH_CHECK(o.valid_fraction >= 0.0 && o.valid_fraction < 1.0, "prepare: valid_fraction ", o.valid_fraction,
           " is outside [0, 1)");
  HH_CHECK(o.shard_tokens >= 1, "prepare: shard_tokens must be >= 1, got ", o.shard_tokens);
  HH_CHECK(o.threads >= 0, "prepare: threads must be >= 0 (0 = all cores), got ", o.threads);
  HH_CHECK(o.chunk_bytes >= 1, "prepare: chunk_bytes must be >= 1, got ", o.chunk_bytes);
  const std::shared_ptr<Tokenizer> tok = make_lm_tokenizer(o.tokenizer);
  const int64_t vocab = tok->vocab_size();
  const int width = token_shard_width(vocab, o.bytes_per_id);  // before any work: a too-small width fails now
  const std::vector<Document> docs = collect_documents(o);

  ensure_writable_dir(o.out_dir);
  recover_stages(o.out_dir);  // a preparation killed mid-way: finish its swap, or drop its stage
  // The new result is built in a hidden stage folder inside out_dir (the same file system, even
  // when out_dir is a mount point) and swapped in only when complete: until then the previous
  // preparation stays as it was, and a failure removes only the stage.
  static std::atomic<int> counter{0};
  std::string stage;
  std::error_code ec;
  for (int attempt = 0; attempt < 100 && stage.empty(); ++attempt) {
    const fs::path p = fs::path(o.out_dir) / str(kStagePrefix, ::getpid(), ".", counter.fetch_add(1));
    if (fs::create_directory(p, ec)) stage = p.string();
    HH_CHECK(!ec, "prepare: cannot create the folder ", p.string(), ": ", ec.message());
  }
  HH_CHECK(!stage.empty(), "prepare: cannot create a unique stage folder in ", o.out_dir);
  PrepareResult r;
  try {
    r = write_prepared(o, *tok, width, docs, stage);
  } catch (...) {
    fs::remove_all(stage, ec);  // out_dir is as it was
    throw;
  }
  try {
    commit_stage(o.out_dir, stage);
  } catch (const Error& e) {  // the stage is complete: the next preparation into out_dir rolls it forward
    fail(str(e.what(), " (the complete new preparation is in ", stage, "; running prepare into ", o.out_dir,
             " again finishes the swap)"));
  }
  return r;
}

PreparedInfo read_prepared_info(const std::string& dir) {
  const std::string path = (fs::path(dir) / kMetaName).string();
  std::error_code ec;
  check_regular_file(path, "prepared data");  // a FIFO is named as such (and never opened)
  HH_CHECK(fs::is_regular_file(path, ec), "prepared data: ", path,
           " is missing (the folder was not prepared, or its preparation did not finish)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail(str("prepared data: ", path, ": not valid JSON: ", e.what()));
  }
  HH_CHECK(j.is_object(), "prepared data: ", path, ": not a JSON object");
  const auto need = [&](const char* key, bool ok, const char* what) {
    HH_CHECK(j.contains(key) && ok, "prepared data: ", path, ": \"", key, "\" is missing or not ", what);
  };
  need("tokenizer", j.contains("tokenizer") && j["tokenizer"].is_string(), "a string");
  need("vocab_size", j.contains("vocab_size") && j["vocab_size"].is_number_integer() && j["vocab_size"].get<int64_t>() >= 1,
       "an integer >= 1");
  need("eos_id", j.contains("eos_id") && j["eos_id"].is_number_integer() && j["eos_id"].get<int64_t>() >= -1,
       "an integer >= -1");
  need("tokens", j.contains("tokens") && j["tokens"].is_object(), "an object");
  PreparedInfo info;
  info.tokenizer = j["tokenizer"].get<std::string>();
  info.vocab_size = j["vocab_size"].get<int64_t>();
  HH_CHECK(j["eos_id"].get<int64_t>() < info.vocab_size, "prepared data: ", path, ": eos_id ", j["eos_id"].get<int64_t>(),
           " is outside the vocabulary of ", info.vocab_size);
  info.eos_id = j["eos_id"].get<int32_t>();
  for (const auto& [split, n] : j["tokens"].items()) {
    HH_CHECK(n.is_number_integer() && n.get<int64_t>() >= 0, "prepared data: ", path, ": tokens.", split,
             " is not a count >= 0");
    info.tokens[split] = n.get<int64_t>();
  }
  return info;
}

}  // namespace hh::data
