// Token shards: token-id streams on disk for LM training, prepared once (data/lm_prepare.h) and
// memory-mapped by every run, so a 100M-token corpus costs no load time and no private memory.
//
// One shard file, all little-endian:
//   offset  0  char[8]  magic "HHTOKEN1" (no terminating NUL)
//   offset  8  uint32   version = 1
//   offset 12  uint32   bytes_per_id: 2 or 4
//   offset 16  uint64   vocab_size (>= 1, <= 2^31): every id is in [0, vocab_size)
//   offset 24  uint64   count: how many ids follow
//   offset 32  count ids, uint16 (bytes_per_id 2, only when vocab_size <= 65536) or uint32
// The file is exactly 32 + count * bytes_per_id bytes. The smallest width that fits is the default
// (GPT-2's 50,257 ids fit uint16: half the size of uint32).
//
// A split ("train", "valid", "test") of a prepared folder is the shards <dir>/<split>_00000.bin,
// <split>_00001.bin, ... read back to back as one stream (TokenDataset).
//
// Training windows (WindowSampler): window i of context L is the L + 1 ids starting at start(i),
// a pure function of (seed, i): the splitmix64 stream seeded with mix(seed),
//   x = mix(mix(seed) + (i + 1) * 0x9E3779B97F4A7C15),
// reduced to [0, size - L - 1] without bias by rejection (a draw in the incomplete top range of
// 2^64 is re-mixed until it falls below the largest multiple of the range; in practice never), then
// x mod (size - L). mix is splitmix64's finalizer. Nothing else is state: a trainer that saved how
// many windows it used resumes exactly, and data-parallel ranks take disjoint slices of the same
// global window indices.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hh {
class MappedFile;
}

namespace hh::data {

constexpr int64_t kTokenShardHeaderBytes = 32;

// The bytes per id a shard of `vocab_size` uses: bytes_per_id 2 or 4 as asked (2 with vocab_size >
// 65536 is the error "vocabulary of N does not fit uint16 shards"), 0 = the smallest that fits.
// vocab_size must be in [1, 2^31].
int token_shard_width(int64_t vocab_size, int bytes_per_id = 0);

// Writes a shard atomically (core/atomic_file.h). bytes_per_id: 2, 4 or 0 (the smallest that fits
// vocab_size). Errors: ids outside [0, vocab_size) (naming the first bad one and its position),
// vocab_size outside [1, 2^31], bytes_per_id 2 with vocab_size > 65536 ("vocabulary of N does not
// fit uint16 shards"), any other bytes_per_id.
void write_token_shard(const std::string& path, const std::vector<int32_t>& ids, int64_t vocab_size,
                       int bytes_per_id = 0);

// One shard, memory-mapped read-only. Movable, not copyable. Every id read is checked against the
// header's vocab_size (a corrupt file is an error naming it and the position, never a wrong id).
class TokenShard {
 public:
  // Errors name the file: missing or unreadable, shorter than the header, wrong magic, version,
  // bytes_per_id, vocab_size, or a size other than 32 + count * bytes_per_id (truncated or trailing).
  static TokenShard open(const std::string& path);

  TokenShard(TokenShard&&) noexcept = default;
  TokenShard& operator=(TokenShard&&) noexcept = default;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;
  ~TokenShard();

  int64_t size() const { return count_; }
  int64_t vocab_size() const { return vocab_size_; }
  int bytes_per_id() const { return bytes_per_id_; }
  const std::string& path() const { return path_; }

  int32_t at(int64_t i) const;                              // bounds-checked
  void read(int64_t begin, int64_t n, int64_t* out) const;  // ids [begin, begin + n), bounds-checked
  void read(int64_t begin, int64_t n, int32_t* out) const;

 private:
  TokenShard() = default;
  template <typename T>
  void read_ids(int64_t begin, int64_t n, T* out) const;

  std::shared_ptr<MappedFile> file_;
  std::string path_;
  const unsigned char* ids_ = nullptr;  // the first id
  int64_t count_ = 0, vocab_size_ = 0;
  int bytes_per_id_ = 0;
};

// The shard file of `split` number `index` in `dir`: <dir>/<split>_<index, 5 digits>.bin.
std::string token_shard_path(const std::string& dir, const std::string& split, int64_t index);

// A split: its shards read as one stream. Copies share the mapped shards.
class TokenDataset {
 public:
  // Opens <dir>/<split>_00000.bin, _00001.bin, ... up to the first number missing. Errors: no shard
  // at all, a gap (a later-numbered shard exists after a missing one), shards that disagree on
  // vocab_size, and each shard's own errors.
  static TokenDataset open(const std::string& dir, const std::string& split);

  int64_t size() const { return offsets_.empty() ? 0 : offsets_.back(); }
  int64_t vocab_size() const { return vocab_size_; }
  int64_t num_shards() const { return static_cast<int64_t>(shards_->size()); }
  const std::string& name() const { return name_; }  // "<dir>/<split>" for messages

  void read(int64_t begin, int64_t n, int64_t* out) const;  // may span shards; bounds-checked
  std::vector<int32_t> all() const;                          // the whole split (evaluation windows)

 private:
  TokenDataset() = default;
  std::shared_ptr<const std::vector<TokenShard>> shards_;
  std::vector<int64_t> offsets_;  // offsets_[k] = first stream position after shard k
  int64_t vocab_size_ = 0;
  std::string name_;
};

// The 64-bit finalizer of splitmix64 (a bijection with full avalanche).
uint64_t splitmix64_mix(uint64_t x);

// Seeded random training windows over a split (see the header comment).
class WindowSampler {
 public:
  // context >= 1; error if data.size() < context + 1.
  WindowSampler(const TokenDataset& data, int64_t context, uint64_t seed);

  int64_t context() const { return context_; }
  uint64_t seed() const { return seed_; }
  int64_t start(int64_t i) const;  // i >= 0; in [0, size - context - 1]
  // (count, context + 1) i64 CPU tensor: windows first .. first + count - 1 (first >= 0, count >= 0).
  Tensor rows(int64_t first, int64_t count) const;

 private:
  TokenDataset data_;
  int64_t context_;
  uint64_t seed_, key_;
  uint64_t range_;  // size - context: how many start positions there are
};

}  // namespace hh::data
