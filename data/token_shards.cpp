#include "data/token_shards.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/regular_file.h"

namespace hh::data {

namespace {

constexpr char kMagic[8] = {'H', 'H', 'T', 'O', 'K', 'E', 'N', '1'};
constexpr uint32_t kVersion = 1;
constexpr int64_t kMaxVocab = int64_t{1} << 31;  // ids are int32

// Little-endian integers of any width, whatever the host's byte order.
template <typename T>
void store_le(char* out, T v) {
  for (size_t b = 0; b < sizeof(T); ++b) out[b] = static_cast<char>((static_cast<uint64_t>(v) >> (8 * b)) & 0xFF);
}
template <typename T>
T get_le(const unsigned char* p) {
  uint64_t v = 0;
  for (size_t b = 0; b < sizeof(T); ++b) v |= static_cast<uint64_t>(p[b]) << (8 * b);
  return static_cast<T>(v);
}

}  // namespace

int token_shard_width(int64_t vocab_size, int bytes_per_id) {
  HH_CHECK(vocab_size >= 1 && vocab_size <= kMaxVocab, "token shard: vocab_size ", vocab_size, " is outside [1, 2^31]");
  if (bytes_per_id == 0) return vocab_size <= 65536 ? 2 : 4;
  HH_CHECK(bytes_per_id == 2 || bytes_per_id == 4, "token shard: bytes_per_id ", bytes_per_id, " (2, 4 or 0 = the smallest that fits)");
  HH_CHECK(bytes_per_id == 4 || vocab_size <= 65536, "token shard: vocabulary of ", vocab_size,
           " does not fit uint16 shards (ids up to ", vocab_size - 1, " > 65535; use 4 bytes per id)");
  return bytes_per_id;
}

void write_token_shard(const std::string& path, const std::vector<int32_t>& ids, int64_t vocab_size, int bytes_per_id) {
  const int width = token_shard_width(vocab_size, bytes_per_id);
  for (size_t i = 0; i < ids.size(); ++i)
    HH_CHECK(ids[i] >= 0 && ids[i] < vocab_size, "token shard ", path, ": id ", ids[i], " at position ", i,
             " is outside the vocabulary [0, ", vocab_size, ")");
  std::string bytes(static_cast<size_t>(kTokenShardHeaderBytes) + ids.size() * static_cast<size_t>(width), '\0');
  char* p = bytes.data();
  std::memcpy(p, kMagic, sizeof(kMagic));
  store_le<uint32_t>(p + 8, kVersion);
  store_le<uint32_t>(p + 12, static_cast<uint32_t>(width));
  store_le<uint64_t>(p + 16, static_cast<uint64_t>(vocab_size));
  store_le<uint64_t>(p + 24, ids.size());
  p += kTokenShardHeaderBytes;
  if (width == 2) {
    for (size_t i = 0; i < ids.size(); ++i) store_le<uint16_t>(p + 2 * i, static_cast<uint16_t>(ids[i]));
  } else {
    for (size_t i = 0; i < ids.size(); ++i) store_le<uint32_t>(p + 4 * i, static_cast<uint32_t>(ids[i]));
  }
  write_file_atomic(path, bytes);
}

// ---- TokenShard ----

TokenShard::~TokenShard() = default;

TokenShard TokenShard::open(const std::string& path) {
  TokenShard s;
  s.path_ = path;
  std::error_code ec;
  HH_CHECK(std::filesystem::exists(path, ec), "token shard ", path, ": no such file");
  check_regular_file(path, "token shard");  // a FIFO or device is named as such (and never opened)
  s.file_ = MappedFile::open(path);  // errors name the path and the OS error
  const uint64_t size = s.file_->size();
  const unsigned char* p = s.file_->data();
  HH_CHECK(size >= static_cast<uint64_t>(kTokenShardHeaderBytes), "token shard ", path, ": ", size,
           " bytes, shorter than the 32-byte header (truncated, or not a token shard)");
  HH_CHECK(std::memcmp(p, kMagic, sizeof(kMagic)) == 0, "token shard ", path,
           ": wrong magic (the first 8 bytes are not \"HHTOKEN1\"; not a token shard)");
  const uint32_t version = get_le<uint32_t>(p + 8), width = get_le<uint32_t>(p + 12);
  const uint64_t vocab = get_le<uint64_t>(p + 16), count = get_le<uint64_t>(p + 24);
  HH_CHECK(version == kVersion, "token shard ", path, ": version ", version, " (this build reads version ", kVersion, ")");
  HH_CHECK(width == 2 || width == 4, "token shard ", path, ": bytes_per_id ", width, " (2 or 4)");
  HH_CHECK(vocab >= 1 && vocab <= static_cast<uint64_t>(kMaxVocab), "token shard ", path, ": vocab_size ", vocab,
           " is outside [1, 2^31]");
  HH_CHECK(width == 4 || vocab <= 65536, "token shard ", path, ": vocab_size ", vocab, " does not fit its uint16 ids");
  const uint64_t payload = size - static_cast<uint64_t>(kTokenShardHeaderBytes);
  const bool truncated = count > payload / width || count * width > payload;  // (the first guards overflow)
  HH_CHECK(!truncated && count * width == payload, "token shard ", path, ": the header says ", count, " ids of ", width,
           " bytes (", kTokenShardHeaderBytes, " + ", count, " * ", width, " bytes) but the file has ", size, " bytes (",
           truncated ? "truncated" : "trailing bytes", ")");
  s.ids_ = p + kTokenShardHeaderBytes;
  s.count_ = static_cast<int64_t>(count);
  s.vocab_size_ = static_cast<int64_t>(vocab);
  s.bytes_per_id_ = static_cast<int>(width);
  return s;
}

template <typename T>
void TokenShard::read_ids(int64_t begin, int64_t n, T* out) const {
  HH_CHECK(begin >= 0 && n >= 0 && begin <= count_ - n, "token shard ", path_, ": read of [", begin, ", ", begin + n,
           ") outside [0, ", count_, ")");
  const unsigned char* p = ids_ + begin * bytes_per_id_;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = bytes_per_id_ == 2 ? static_cast<int64_t>(get_le<uint16_t>(p + 2 * i))
                                          : static_cast<int64_t>(get_le<uint32_t>(p + 4 * i));
    if (id >= vocab_size_)
      fail(str("token shard ", path_, ": id ", id, " at position ", begin + i, " is outside the vocabulary [0, ",
               vocab_size_, ") (a corrupt file)"));
    out[i] = static_cast<T>(id);
  }
}

int32_t TokenShard::at(int64_t i) const {
  int32_t id = 0;
  read_ids(i, 1, &id);
  return id;
}

void TokenShard::read(int64_t begin, int64_t n, int64_t* out) const { read_ids(begin, n, out); }
void TokenShard::read(int64_t begin, int64_t n, int32_t* out) const { read_ids(begin, n, out); }

// ---- TokenDataset ----

std::string token_shard_path(const std::string& dir, const std::string& split, int64_t index) {
  HH_CHECK(index >= 0 && index <= 99999, "token shards: shard number ", index, " is outside [0, 99999]");
  char name[16];
  std::snprintf(name, sizeof(name), "_%05lld.bin", static_cast<long long>(index));
  return (std::filesystem::path(dir) / (split + name)).string();
}

TokenDataset TokenDataset::open(const std::string& dir, const std::string& split) {
  namespace fs = std::filesystem;
  TokenDataset d;
  d.name_ = (fs::path(dir) / split).string();
  std::error_code ec;
  HH_CHECK(fs::is_directory(dir, ec), "token shards: ", dir, " is not a folder");
  std::vector<TokenShard> shards;
  for (int64_t k = 0;; ++k) {
    const std::string path = token_shard_path(dir, split, k);
    if (!fs::exists(path, ec)) break;
    shards.push_back(TokenShard::open(path));
  }
  HH_CHECK(!shards.empty(), "token shards: no ", token_shard_path(dir, split, 0), " (split '", split,
           "' was not prepared in ", dir, ")");
  // A later-numbered shard after the first missing number means a shard was lost.
  const std::string prefix = split + "_";
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool numbered = name.size() == prefix.size() + 9 && name.compare(0, prefix.size(), prefix) == 0 &&
                          name.compare(name.size() - 4, 4, ".bin") == 0 &&
                          std::all_of(name.begin() + static_cast<std::ptrdiff_t>(prefix.size()), name.end() - 4,
                                      [](char c) { return c >= '0' && c <= '9'; });
    if (numbered && std::stoll(name.substr(prefix.size(), 5)) >= static_cast<long long>(shards.size()))
      fail(str("token shards: ", e.path().string(), " exists but ",
               token_shard_path(dir, split, static_cast<int64_t>(shards.size())), " is missing (a lost shard)"));
  }
  d.vocab_size_ = shards[0].vocab_size();
  int64_t total = 0;
  for (const TokenShard& s : shards) {
    HH_CHECK(s.vocab_size() == d.vocab_size_, "token shards: ", s.path(), " has vocab_size ", s.vocab_size(), " but ",
             shards[0].path(), " has ", d.vocab_size_, " (shards of different tokenizers)");
    total += s.size();
    d.offsets_.push_back(total);
  }
  d.shards_ = std::make_shared<const std::vector<TokenShard>>(std::move(shards));
  return d;
}

void TokenDataset::read(int64_t begin, int64_t n, int64_t* out) const {
  HH_CHECK(begin >= 0 && n >= 0 && begin <= size() - n, "token dataset ", name_, ": read of [", begin, ", ", begin + n,
           ") outside [0, ", size(), ")");
  // The shard holding `begin`: the first whose end is past it.
  size_t k = static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), begin) - offsets_.begin());
  while (n > 0) {
    const int64_t shard_begin = k == 0 ? 0 : offsets_[k - 1];
    const int64_t take = std::min(n, offsets_[k] - begin);
    (*shards_)[k].read(begin - shard_begin, take, out);
    out += take;
    begin += take;
    n -= take;
    ++k;
  }
}

std::vector<int32_t> TokenDataset::all() const {
  std::vector<int32_t> ids(static_cast<size_t>(size()));
  int64_t at = 0;
  for (const TokenShard& s : *shards_) {
    s.read(0, s.size(), ids.data() + at);
    at += s.size();
  }
  return ids;
}

// ---- WindowSampler ----

uint64_t splitmix64_mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

WindowSampler::WindowSampler(const TokenDataset& data, int64_t context, uint64_t seed)
    : data_(data), context_(context), seed_(seed), key_(splitmix64_mix(seed)), range_(0) {
  HH_CHECK(context >= 1, "window sampler: context must be >= 1, got ", context);
  HH_CHECK(data.size() >= context + 1, "window sampler: ", data.name(), " has ", data.size(),
           " tokens, fewer than one window of context + 1 = ", context + 1);
  range_ = static_cast<uint64_t>(data.size() - context);
}

int64_t WindowSampler::start(int64_t i) const {
  HH_CHECK(i >= 0, "window sampler: window index ", i, " is negative");
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
  uint64_t x = splitmix64_mix(key_ + (static_cast<uint64_t>(i) + 1) * kGolden);
  // Unbiased: accept x below the largest multiple of range_ that fits in 2^64.
  const uint64_t limit = UINT64_MAX - (UINT64_MAX % range_ + 1) % range_;  // = k * range_ - 1
  while (x > limit) x = splitmix64_mix(x);
  return static_cast<int64_t>(x % range_);
}

Tensor WindowSampler::rows(int64_t first, int64_t count) const {
  HH_CHECK(first >= 0 && count >= 0, "window sampler: rows(", first, ", ", count, "): first and count must be >= 0");
  const int64_t width = context_ + 1;
  Tensor out = empty({count, width}, Options(DType::i64, Device::cpu()));
  int64_t* p = out.data<int64_t>();
  for (int64_t r = 0; r < count; ++r) data_.read(start(first + r), width, p + r * width);
  return out;
}

}  // namespace hh::data
