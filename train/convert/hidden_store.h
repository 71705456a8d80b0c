// The teacher's hidden states between blocks of layer-wise attention transfer, one (B,L,C) tensor
// per batch, kept where they fit: on the model's device, in host memory, or in shard files on disk
// (one safetensors file per batch, memory-mapped when read back), so a model whose activations for
// every batch exceed memory still converts block by block. The shard files are a ShardFolder, which
// the teacher's top-k logit cache (train/convert/logit_cache.h) uses too.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/safetensors.h"
#include "core/tensor.h"

namespace hh::train {

// Numbered safetensors shards "<prefix>-<i>.safetensors" in one folder (created if needed): each
// written atomically (a temp file renamed over the old one, so a tensor still mapped from the old
// file stays valid and a crash never leaves half a shard under its name) and read back through a
// memory map (no copy).
class ShardFolder {
 public:
  ShardFolder(std::string folder, std::string prefix);
  std::string path(size_t i) const;
  bool exists(size_t i) const;
  // Writes shard i (tensors on any device); returns the bytes of tensor data written. With
  // checksums every read verifies them (a damaged shard is an error naming it).
  int64_t write(size_t i, const std::vector<std::pair<std::string, Tensor>>& tensors,
                const std::map<std::string, std::string>& metadata = {}, Checksums checksums = Checksums::none) const;
  SafeTensors read(size_t i) const;  // CPU tensors viewing the mapped file

  // A stamped shard says what it stands for in its metadata (the writer's fingerprint, the checksum
  // of the batch it was made from, ...), so a shard swapped, rewritten or left by another run is
  // never taken for the one wanted. write_stamped writes the stamp and a checksum per tensor.
  struct Stamp {
    std::string key, value;
    std::string otherwise;  // what a shard whose value differs is: "holds another batch's ..."
  };
  int64_t write_stamped(size_t i, const std::vector<std::pair<std::string, Tensor>>& tensors,
                        const std::vector<Stamp>& stamp) const;
  // Shard i when it is the one `stamp` describes: present, readable with every tensor's checksum
  // verified, and each stamp entry equal; else std::nullopt and `why` ("is missing", "cannot be read
  // (...)", "has no checksums", or the first differing entry's `otherwise`).
  std::optional<SafeTensors> read_stamped(size_t i, const std::vector<Stamp>& stamp, std::string& why) const;
  void remove(size_t i) const;       // if present; errors ignored
  // Removes every file of this prefix in the folder ("<prefix>-*": shards and their temp files), as
  // a killed run leaves them; errors ignored.
  void remove_all() const;
  const std::string& folder() const { return folder_; }

 private:
  std::string folder_, prefix_;
};

// XXH3-64 over the bytes of each tensor in turn, with their dtypes and shapes (any device;
// contiguous copies on the host): what a stamped shard records of the batch it stands for.
uint64_t batch_checksum(const std::vector<Tensor>& tensors);
// A checksum as the 16 hex digits a stamp holds.
std::string checksum_hex(uint64_t v);

enum class HiddenPlace { device, host, disk };
HiddenPlace parse_hidden_place(const std::string& s);  // "device" | "host" | "disk"
const char* hidden_place_name(HiddenPlace p);

class HiddenStore {
 public:
  // `folder` (disk only) is created if needed, and the shards a killed run left in it are removed;
  // the shard files written are removed on destruction.
  HiddenStore(HiddenPlace place, Device device, std::string folder = "");
  ~HiddenStore();
  HiddenStore(const HiddenStore&) = delete;
  HiddenStore& operator=(const HiddenStore&) = delete;

  // Stores batch i's hidden state (any device); replaces what was there. On disk the shard is
  // stamped with its batch and the checksum of the state (kept here as well).
  void put(size_t i, const Tensor& x);
  // Batch i's hidden state on the model's device (from disk: read through a memory map). A shard
  // on disk that is not the one put() wrote (swapped with another, a byte changed, rewritten)
  // is an error naming it: never used.
  Tensor get(size_t i) const;
  size_t size() const { return slots_.size(); }
  int64_t bytes_on_disk() const { return disk_bytes_; }

 private:
  HiddenPlace place_;
  Device device_;
  std::vector<ShardFolder::Stamp> stamp(size_t i) const;  // disk: what shard i must say

  std::optional<ShardFolder> shards_;  // disk only
  std::vector<Tensor> slots_;  // device/host: the tensors; disk: undefined placeholders
  std::vector<bool> written_;
  std::vector<uint64_t> checksums_;  // disk: each shard's batch_checksum of the state put
  int64_t disk_bytes_ = 0;
};

}  // namespace hh::train
