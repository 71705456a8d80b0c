#include "train/convert/hidden_store.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "core/error.h"

namespace hh::train {

HiddenPlace parse_hidden_place(const std::string& s) {
  if (s == "device") return HiddenPlace::device;
  if (s == "host") return HiddenPlace::host;
  if (s == "disk") return HiddenPlace::disk;
  fail(str("unknown place for hidden states '", s, "' (device, host or disk)"));
}

const char* hidden_place_name(HiddenPlace p) {
  switch (p) {
    case HiddenPlace::device: return "device";
    case HiddenPlace::host: return "host";
    case HiddenPlace::disk: return "disk";
  }
  return "?";
}

ShardFolder::ShardFolder(std::string folder, std::string prefix) : folder_(std::move(folder)), prefix_(std::move(prefix)) {
  HH_CHECK(!folder_.empty(), "shards on disk: no folder given");
  std::error_code ec;
  std::filesystem::create_directories(folder_, ec);
  HH_CHECK(!ec && std::filesystem::is_directory(folder_), "shards on disk: cannot create folder ", folder_, ": ",
           ec.message());
}

std::string ShardFolder::path(size_t i) const {
  return (std::filesystem::path(folder_) / (prefix_ + "-" + std::to_string(i) + ".safetensors")).string();
}

bool ShardFolder::exists(size_t i) const {
  std::error_code ec;
  return std::filesystem::is_regular_file(path(i), ec);
}

int64_t ShardFolder::write(size_t i, const std::vector<std::pair<std::string, Tensor>>& tensors,
                           const std::map<std::string, std::string>& metadata, Checksums checksums) const {
  save_safetensors(path(i), tensors, metadata, checksums);
  int64_t bytes = 0;
  for (const auto& kv : tensors) bytes += kv.second.numel() * static_cast<int64_t>(itemsize(kv.second.dtype()));
  return bytes;
}

SafeTensors ShardFolder::read(size_t i) const { return load_safetensors(path(i)); }

void ShardFolder::remove(size_t i) const {
  std::error_code ec;
  std::filesystem::remove(path(i), ec);
}

HiddenStore::HiddenStore(HiddenPlace place, Device device, std::string folder) : place_(place), device_(device) {
  if (place_ == HiddenPlace::disk) {
    HH_CHECK(!folder.empty(), "hidden states on disk: no folder given");
    shards_.emplace(std::move(folder), "hidden");
  }
}

HiddenStore::~HiddenStore() {
  for (size_t i = 0; i < written_.size(); ++i)
    if (written_[i]) shards_->remove(i);
}

void HiddenStore::put(size_t i, const Tensor& x) {
  if (slots_.size() <= i) {
    slots_.resize(i + 1);
    written_.resize(i + 1, false);
  }
  switch (place_) {
    case HiddenPlace::device: slots_[i] = x.to(device_); break;
    case HiddenPlace::host: slots_[i] = x.to(Device::cpu()); break;
    case HiddenPlace::disk: {
      const int64_t bytes = shards_->write(i, {{"hidden", x}});
      if (!written_[i]) disk_bytes_ += bytes;
      written_[i] = true;
      break;
    }
  }
}

Tensor HiddenStore::get(size_t i) const {
  HH_CHECK(i < slots_.size() && (place_ != HiddenPlace::disk || written_[i]), "hidden states: batch ", i,
           " was never stored");
  if (place_ != HiddenPlace::disk) return slots_[i].to(device_);
  SafeTensors f = shards_->read(i);
  auto it = f.tensors.find("hidden");
  HH_CHECK(it != f.tensors.end(), "hidden states: ", shards_->path(i), " lacks its tensor");
  return it->second.to(device_);
}

}  // namespace hh::train
