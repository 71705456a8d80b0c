#include "train/convert/hidden_store.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "core/error.h"
#include "core/safetensors.h"

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

HiddenStore::HiddenStore(HiddenPlace place, Device device, std::string folder)
    : place_(place), device_(device), folder_(std::move(folder)) {
  if (place_ != HiddenPlace::disk) return;
  HH_CHECK(!folder_.empty(), "hidden states on disk: no folder given");
  std::error_code ec;
  std::filesystem::create_directories(folder_, ec);
  HH_CHECK(!ec && std::filesystem::is_directory(folder_), "hidden states on disk: cannot create folder ", folder_,
           ": ", ec.message());
}

HiddenStore::~HiddenStore() {
  std::error_code ec;
  for (size_t i = 0; i < written_.size(); ++i)
    if (written_[i]) std::filesystem::remove(shard(i), ec);
}

std::string HiddenStore::shard(size_t i) const {
  return (std::filesystem::path(folder_) / ("hidden-" + std::to_string(i) + ".safetensors")).string();
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
      // Written to a new file and renamed over the old one: a tensor still mapped from the old file
      // stays valid.
      save_safetensors(shard(i), {{"hidden", x}});
      if (!written_[i]) disk_bytes_ += x.numel() * static_cast<int64_t>(itemsize(x.dtype()));
      written_[i] = true;
      break;
    }
  }
}

Tensor HiddenStore::get(size_t i) const {
  HH_CHECK(i < slots_.size() && (place_ != HiddenPlace::disk || written_[i]), "hidden states: batch ", i,
           " was never stored");
  if (place_ != HiddenPlace::disk) return slots_[i].to(device_);
  SafeTensors f = load_safetensors(shard(i));
  auto it = f.tensors.find("hidden");
  HH_CHECK(it != f.tensors.end(), "hidden states: ", shard(i), " lacks its tensor");
  return it->second.to(device_);
}

}  // namespace hh::train
