// The teacher's hidden states between blocks of layer-wise attention transfer, one (B,L,C) tensor
// per batch, kept where they fit: on the model's device, in host memory, or in shard files on disk
// (one safetensors file per batch, memory-mapped when read back), so a model whose activations for
// every batch exceed memory still converts block by block.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace hh::train {

enum class HiddenPlace { device, host, disk };
HiddenPlace parse_hidden_place(const std::string& s);  // "device" | "host" | "disk"
const char* hidden_place_name(HiddenPlace p);

class HiddenStore {
 public:
  // `folder` (disk only) is created if needed; the shard files written are removed on destruction.
  HiddenStore(HiddenPlace place, Device device, std::string folder = "");
  ~HiddenStore();
  HiddenStore(const HiddenStore&) = delete;
  HiddenStore& operator=(const HiddenStore&) = delete;

  // Stores batch i's hidden state (any device); replaces what was there.
  void put(size_t i, const Tensor& x);
  // Batch i's hidden state on the model's device (from disk: read through a memory map).
  Tensor get(size_t i) const;
  size_t size() const { return slots_.size(); }
  int64_t bytes_on_disk() const { return disk_bytes_; }

 private:
  std::string shard(size_t i) const;
  HiddenPlace place_;
  Device device_;
  std::string folder_;
  std::vector<Tensor> slots_;  // device/host: the tensors; disk: undefined placeholders
  std::vector<bool> written_;
  int64_t disk_bytes_ = 0;
};

}  // namespace hh::train
