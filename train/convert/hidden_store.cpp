#include "train/convert/hidden_store.h"

#include <cstdio>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

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

int64_t ShardFolder::write_stamped(size_t i, const std::vector<std::pair<std::string, Tensor>>& tensors,
                                   const std::vector<Stamp>& stamp) const {
  std::map<std::string, std::string> metadata;
  for (const Stamp& e : stamp) metadata[e.key] = e.value;
  return write(i, tensors, metadata, Checksums::xxh3);
}

std::optional<SafeTensors> ShardFolder::read_stamped(size_t i, const std::vector<Stamp>& stamp, std::string& why) const {
  if (!exists(i)) {
    why = "is missing";
    return std::nullopt;
  }
  std::optional<SafeTensors> f;
  try {
    f = read(i);  // verifies every tensor's checksum
  } catch (const Error& e) {
    why = str("cannot be read (", e.what(), ")");
    return std::nullopt;
  }
  if (!f->checksummed) {
    why = "has no checksums";
    return std::nullopt;
  }
  for (const Stamp& e : stamp) {
    auto it = f->metadata.find(e.key);
    if (it == f->metadata.end() || it->second != e.value) {
      why = e.otherwise;
      return std::nullopt;
    }
  }
  return f;
}

uint64_t batch_checksum(const std::vector<Tensor>& tensors) {
  std::string acc;
  for (const Tensor& x : tensors) {
    const Tensor h = x.detach().to(Device::cpu()).contiguous();
    const uint64_t c = safetensors_checksum(h.raw_data(), static_cast<size_t>(h.numel()) * itemsize(h.dtype()));
    acc += str(h.dtype(), h.shape(), checksum_hex(c), ";");
  }
  return safetensors_checksum(acc.data(), acc.size());
}

std::string checksum_hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void ShardFolder::remove(size_t i) const {
  std::error_code ec;
  std::filesystem::remove(path(i), ec);
}

void ShardFolder::remove_all() const {
  std::error_code ec;
  std::vector<std::filesystem::path> mine;
  for (std::filesystem::directory_iterator it(folder_, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().rfind(prefix_ + "-", 0) == 0) mine.push_back(it->path());
  for (const auto& p : mine) std::filesystem::remove(p, ec);
}

HiddenStore::HiddenStore(HiddenPlace place, Device device, std::string folder) : place_(place), device_(device) {
  if (place_ == HiddenPlace::disk) {
    HH_CHECK(!folder.empty(), "hidden states on disk: no folder given");
    shards_.emplace(std::move(folder), "hidden");
    shards_->remove_all();  // a killed run's (never read: each shard is put before it is read)
  }
}

std::vector<ShardFolder::Stamp> HiddenStore::stamp(size_t i) const {
  return {{"hedgehog.hidden.batch", std::to_string(i), "holds another batch's hidden state"},
          {"hedgehog.hidden.checksum", checksum_hex(checksums_[i]), "is not the hidden state this run wrote"}};
}

HiddenStore::~HiddenStore() {
  for (size_t i = 0; i < written_.size(); ++i)
    if (written_[i]) shards_->remove(i);
}

void HiddenStore::put(size_t i, const Tensor& x) {
  if (slots_.size() <= i) {
    slots_.resize(i + 1);
    written_.resize(i + 1, false);
    checksums_.resize(i + 1, 0);
  }
  switch (place_) {
    case HiddenPlace::device: slots_[i] = x.to(device_); break;
    case HiddenPlace::host: slots_[i] = x.to(Device::cpu()); break;
    case HiddenPlace::disk: {
      checksums_[i] = batch_checksum({x});
      const int64_t bytes = shards_->write_stamped(i, {{"hidden", x}}, stamp(i));
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
  std::string why;
  const std::optional<SafeTensors> f = shards_->read_stamped(i, stamp(i), why);
  HH_CHECK(f, "hidden states: ", shards_->path(i), " ", why,
           " (the file was changed while the run used it): refusing to use it");
  auto it = f->tensors.find("hidden");
  HH_CHECK(it != f->tensors.end(), "hidden states: ", shards_->path(i), " lacks its tensor");
  return it->second.to(device_);
}

}  // namespace hh::train
