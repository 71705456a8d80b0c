// PyTorch checkpoint reader (see torch_bin.h): find the pickle(s) and storage bytes of the zip or
// legacy format, unpickle with the restricted machine, check each storage against its bytes, then
// turn the state dict's tensors into hh tensors (views of the file, or contiguous copies).
#include "core/torch_bin.h"

#include <cstring>
#include <map>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/checked.h"
#include "core/error.h"
#include "core/storage.h"
#include "core/torch_pickle.h"
#include "core/zip_reader.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the PyTorch checkpoint reader assumes a little-endian host");

namespace hh {

namespace {

using torch_pickle::Kind;
using torch_pickle::Pickle;
using torch_pickle::Value;

constexpr uint64_t kMaxIndexBytes = 100000000;

std::string shown(const std::string& s) {
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 120; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  }
  return out + (s.size() > 120 ? "...'" : "'");
}

struct StorageInfo {
  DType dtype = DType::f32;
  int64_t numel = 0;
  int users = 0;  // tensors of the state dict that use it
  const unsigned char* bytes = nullptr;
};

// The state dict found in a pickle: its entries in order and the storages they use.
struct StateDict {
  std::vector<std::pair<std::string, uint32_t>> entries;  // name -> tensor value
  std::map<std::string, StorageInfo> storages;           // key -> storage
};

StateDict collect(const Pickle& p) {
  const Value& root = p.values[p.root];
  HH_CHECK(root.kind == Kind::dict, "the checkpoint holds ",
           root.kind == Kind::list ? "a list" : root.kind == Kind::tuple ? "a tuple" : "something other than a dict",
           ", not a state dict (a dict of name -> tensor)");
  StateDict sd;
  std::set<std::string> names;
  for (size_t i = 0; i + 1 < root.items.size(); i += 2) {
    const Value& k = p.values[root.items[i]];
    const Value& v = p.values[root.items[i + 1]];
    HH_CHECK(k.kind == Kind::string, "the state dict has a key that is not a string (entry ", i / 2, ")");
    HH_CHECK(v.kind == Kind::tensor, "state dict entry ", shown(k.text),
             " is not a tensor (only a dict of name -> tensor is read)");
    HH_CHECK(names.insert(k.text).second, "state dict entry ", shown(k.text), " appears twice");
    sd.entries.emplace_back(k.text, root.items[i + 1]);
    const Value& s = p.values[v.storage];
    auto [it, fresh] = sd.storages.emplace(s.text, StorageInfo{});
    StorageInfo& info = it->second;
    if (fresh) {
      info.dtype = s.dtype;
      info.numel = s.integer;
    } else {
      HH_CHECK(info.dtype == s.dtype && info.numel == s.integer, "storage ", shown(s.text), " is referred to as ",
               info.numel, " x ", dtype_name(info.dtype), " and as ", s.integer, " x ", dtype_name(s.dtype));
    }
    ++info.users;
  }
  return sd;
}

int64_t storage_bytes(const std::string& key, const StorageInfo& s) {
  return checked_mul(s.numel, static_cast<int64_t>(itemsize(s.dtype)), str("storage ", shown(key), "'s size in bytes"));
}

// A contiguous CPU tensor over existing bytes (`keep` owns them).
Tensor view_of(const std::shared_ptr<void>& keep, const unsigned char* p, uint64_t nbytes, const Shape& shape, DType dtype) {
  return tensor_view_of(std::shared_ptr<void>(keep, const_cast<unsigned char*>(p)), nbytes, shape, dtype);
}

bool is_contiguous_layout(const std::vector<int64_t>& size, const std::vector<int64_t>& stride) {
  int64_t expected = 1;
  for (size_t d = size.size(); d-- > 0;) {
    if (size[d] != 1 && stride[d] != expected) return false;
    expected *= size[d];  // no overflow: the element count was checked
  }
  return true;
}

// Copies a strided view (offset, size, stride in elements of `item` bytes) into dst, contiguous.
void copy_strided(unsigned char* dst, const unsigned char* src, int64_t offset, const std::vector<int64_t>& size,
                  const std::vector<int64_t>& stride, size_t item) {
  const size_t nd = size.size();
  if (nd == 0) {
    std::memcpy(dst, src + offset * static_cast<int64_t>(item), item);
    return;
  }
  const int64_t inner = size[nd - 1], inner_stride = stride[nd - 1];
  if (inner == 0) return;
  std::vector<int64_t> idx(nd - 1, 0);
  for (;;) {
    int64_t base = offset;
    for (size_t d = 0; d + 1 < nd; ++d) base += idx[d] * stride[d];
    const unsigned char* s = src + base * static_cast<int64_t>(item);
    if (inner_stride == 1) {
      std::memcpy(dst, s, static_cast<size_t>(inner) * item);
      dst += static_cast<size_t>(inner) * item;
    } else {
      for (int64_t j = 0; j < inner; ++j, dst += item) std::memcpy(dst, s + j * inner_stride * static_cast<int64_t>(item), item);
    }
    size_t d = nd - 1;
    while (d > 0) {
      --d;
      if (++idx[d] < size[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (nd == 1) return;
  }
}

// The state dict's tensors, once every storage has its bytes.
SafeTensors materialize(const Pickle& p, const StateDict& sd, const std::shared_ptr<void>& keep, uint64_t file_size) {
  const uint64_t copy_limit = 4 * file_size + 65536;
  uint64_t copied = 0;
  SafeTensors out;
  for (const auto& [name, index] : sd.entries) {
    const Value& v = p.values[index];
    const std::string& key = p.values[v.storage].text;
    const StorageInfo& s = sd.storages.at(key);
    const size_t item = itemsize(v.dtype);
    const Shape shape(v.size.begin(), v.size.end());
    const int64_t numel = numel_of(shape);  // fits: checked by the unpickler
    const uint64_t nbytes = static_cast<uint64_t>(
        checked_mul(numel, static_cast<int64_t>(item), str("tensor ", shown(name), "'s size in bytes")));
    const unsigned char* first = s.bytes + v.integer * static_cast<int64_t>(item);  // inside: checked
    Tensor t;
    if (numel > 0 && s.users == 1 && is_contiguous_layout(v.size, v.stride) &&
        reinterpret_cast<uintptr_t>(first) % item == 0) {
      t = view_of(keep, first, nbytes, shape, v.dtype);
    } else {
      copied += nbytes;
      HH_CHECK(copied <= copy_limit, "the views of shared storages copy more than ", copy_limit,
               " bytes (4 x the file size) by tensor ", shown(name));
      t = empty(shape, {v.dtype, Device::cpu()});
      if (numel > 0) copy_strided(static_cast<unsigned char*>(t.raw_data()), s.bytes, v.integer, v.size, v.stride, item);
    }
    if (v.dtype == DType::boolean && numel > 0) {
      const auto* b = static_cast<const unsigned char*>(t.raw_data());
      for (int64_t i = 0; i < numel; ++i)
        HH_CHECK(b[i] <= 1, "bool tensor ", shown(name), " holds the byte ", static_cast<int>(b[i]), " (not 0 or 1)");
    }
    out.tensors.emplace(name, t);
    out.order.push_back(name);
  }
  return out;
}

SafeTensors read_zip(const unsigned char* data, uint64_t size, const std::shared_ptr<void>& keep) {
  ZipArchive zip(data, size);
  HH_CHECK(!zip.entries().empty(), "the zip archive is empty (not a PyTorch checkpoint)");
  const std::string& first = zip.entries().front().name;
  const size_t slash = first.find('/');
  HH_CHECK(slash != std::string::npos && slash > 0, "zip entry ", shown(first),
           " is not inside a folder: not a PyTorch checkpoint archive");
  const std::string prefix = first.substr(0, slash + 1);
  const ZipEntry* pkl = zip.find(prefix + "data.pkl");
  HH_CHECK(pkl, "the zip archive has no ", shown(prefix + "data.pkl"), ": not a PyTorch checkpoint");
  if (const ZipEntry* bo = zip.find(prefix + "byteorder")) {
    const std::string order(reinterpret_cast<const char*>(zip.data(*bo)), static_cast<size_t>(bo->size));
    HH_CHECK(order == "little", "the checkpoint's byteorder is ", shown(order),
             " (only little-endian checkpoints are read)");
  }
  const unsigned char* pk = zip.data(*pkl);
  Pickle p;
  try {
    p = torch_pickle::unpickle(pk, pkl->size);
  } catch (const Error& e) {
    fail(str(prefix, "data.pkl: ", e.what()));
  }
  StateDict sd = collect(p);
  for (auto& [key, s] : sd.storages) {
    const std::string record = prefix + "data/" + key;
    const ZipEntry* e = zip.find(record);
    HH_CHECK(e, "storage ", shown(key), " has no record ", shown(record));
    const int64_t want = storage_bytes(key, s);
    HH_CHECK(e->size == static_cast<uint64_t>(want), "storage ", shown(key), " is ", s.numel, " x ",
             dtype_name(s.dtype), " = ", want, " bytes, but its record ", shown(record), " holds ", e->size, " bytes");
    s.bytes = zip.data(*e);
  }
  return materialize(p, sd, keep, size);
}

SafeTensors read_legacy(const unsigned char* data, uint64_t size, const std::shared_ptr<void>& keep) {
  static const unsigned char kMagic[] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
  auto next = [&](uint64_t at, const char* what) {
    try {
      return torch_pickle::unpickle(data, size, at);
    } catch (const Error& e) {
      fail(str("legacy format, ", what, ": ", e.what()));
    }
  };
  Pickle magic = next(0, "magic number");
  const Value& m = magic.values[magic.root];
  HH_CHECK(m.kind == Kind::big_integer && m.text == std::string(reinterpret_cast<const char*>(kMagic), sizeof kMagic),
           "not a PyTorch checkpoint: neither a zip archive nor the legacy format's magic number");
  Pickle proto = next(magic.end, "protocol version");
  const Value& pv = proto.values[proto.root];
  HH_CHECK(pv.kind == Kind::integer && pv.integer == 1001, "legacy format: protocol version ",
           pv.kind == Kind::integer ? str(pv.integer) : std::string("(not an int)"), " (1001 is read)");
  Pickle info = next(proto.end, "system info");
  const Value& iv = info.values[info.root];
  HH_CHECK(iv.kind == Kind::dict, "legacy format: the system info is not a dict");
  for (size_t i = 0; i + 1 < iv.items.size(); i += 2) {
    const Value& k = info.values[iv.items[i]];
    const Value& v = info.values[iv.items[i + 1]];
    if (k.kind == Kind::string && k.text == "little_endian")
      HH_CHECK(v.kind == Kind::boolean && v.boolean, "legacy format: a big-endian checkpoint (only little-endian is read)");
  }
  Pickle p = next(info.end, "state dict");
  StateDict sd = collect(p);
  Pickle keys = next(p.end, "storage keys");
  const Value& kv = keys.values[keys.root];
  HH_CHECK(kv.kind == Kind::list, "legacy format: the storage keys are not a list");
  uint64_t pos = keys.end;
  for (uint32_t ki : kv.items) {
    const Value& k = keys.values[ki];
    HH_CHECK(k.kind == Kind::string, "legacy format: a storage key is not a string");
    auto it = sd.storages.find(k.text);
    HH_CHECK(it != sd.storages.end(), "legacy format: storage ", shown(k.text), " is listed but no tensor uses it");
    StorageInfo& s = it->second;
    HH_CHECK(!s.bytes, "legacy format: storage ", shown(k.text), " is listed twice");
    HH_CHECK(size - pos >= 8, "legacy format: storage ", shown(k.text), " starts at byte ", pos,
             ", past the end of the file (truncated?)");
    int64_t n = 0;
    std::memcpy(&n, data + pos, 8);
    HH_CHECK(n == s.numel, "legacy format: storage ", shown(k.text), " holds ", n, " elements but its tensors say ",
             s.numel);
    const int64_t nb = storage_bytes(k.text, s);
    HH_CHECK(static_cast<uint64_t>(nb) <= size - pos - 8, "legacy format: storage ", shown(k.text), " (", nb,
             " bytes at byte ", pos + 8, ") runs past the end of the ", size, "-byte file (truncated?)");
    s.bytes = data + pos + 8;
    pos += 8 + static_cast<uint64_t>(nb);
  }
  for (const auto& [key, s] : sd.storages)
    HH_CHECK(s.bytes, "legacy format: storage ", shown(key), " is used but its bytes are not in the file");
  return materialize(p, sd, keep, size);
}

SafeTensors read_any(const unsigned char* data, uint64_t size, const std::shared_ptr<void>& keep) {
  if (ZipArchive::looks_like_zip(data, size)) return read_zip(data, size, keep);
  HH_CHECK(size >= 2 && data[0] == 0x80, "not a PyTorch checkpoint: neither a zip archive (torch.save since 1.6) "
                                         "nor the legacy pickle format (file of ", size, " bytes)");
  return read_legacy(data, size, keep);
}

// Runs f; an hh::Error gets the "torch: <origin>: " prefix (a shard's own errors keep theirs).
template <typename F>
auto prefixed(const std::string& origin, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    std::string msg = e.what();
    if (msg.rfind("torch: ", 0) == 0) throw;
    if (msg.rfind("safetensors: ", 0) == 0) msg = msg.substr(13);  // the shared index checks
    if (msg.rfind(origin + ": ", 0) == 0) msg = msg.substr(origin.size() + 2);
    fail(str("torch: ", origin, ": ", msg));
  }
}

}  // namespace

SafeTensors load_torch_bin(const std::string& path) {
  return prefixed(path, [&] {
    std::shared_ptr<MappedFile> file = MappedFile::open(path);
    const unsigned char* d = file->data();
    return read_any(d, file->size(), file);
  });
}

SafeTensors parse_torch_bin(const std::string& bytes, const std::string& origin) {
  return prefixed(origin, [&] {
    auto copy = std::make_shared<std::string>(bytes);
    return read_any(reinterpret_cast<const unsigned char*>(copy->data()), copy->size(), copy);
  });
}

SafeTensors load_torch_bin_sharded(const std::string& index_json_path) {
  return prefixed(index_json_path, [&] {
    // The shared index checks (JSON depth, weight_map layout, shard paths inside the folder).
    (void)safetensors_index_files(index_json_path);
    InputFile f(index_json_path);
    HH_CHECK(f.size() <= kMaxIndexBytes, "index file is ", f.size(), " bytes, over the limit of ", kMaxIndexBytes);
    std::string text(static_cast<size_t>(f.size()), '\0');
    if (!text.empty()) f.read_at(0, &text[0], text.size());
    std::map<std::string, std::string> listed;
    std::set<std::string> files;
    try {
      const nlohmann::json index = nlohmann::json::parse(text);
      for (const auto& kv : index.at("weight_map").items()) {
        listed.emplace(kv.key(), kv.value().get<std::string>());
        files.insert(kv.value().get<std::string>());
      }
    } catch (const nlohmann::json::exception& e) {
      fail(str("index file changed while read: ", e.what()));
    }
    const size_t slash = index_json_path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "" : index_json_path.substr(0, slash + 1);
    std::map<std::string, std::string> found;
    SafeTensors out;
    for (const std::string& file : files) {
      SafeTensors shard = load_torch_bin(dir + file);
      for (const std::string& name : shard.order) {
        auto dup = found.find(name);
        HH_CHECK(dup == found.end(), "tensor ", shown(name), " is in two shards: ", shown(dup->second), " and ", shown(file));
        auto it = listed.find(name);
        HH_CHECK(it != listed.end(), "shard ", shown(file), " holds tensor ", shown(name), ", which weight_map does not list");
        HH_CHECK(it->second == file, "weight_map puts tensor ", shown(name), " in shard ", shown(it->second),
                 " but it is in shard ", shown(file));
        found.emplace(name, file);
        out.tensors.emplace(name, shard.tensors.at(name));
        out.order.push_back(name);
      }
    }
    for (const auto& [name, file] : listed)
      HH_CHECK(found.count(name), "weight_map entry ", shown(name), " -> ", shown(file), ": that shard has no tensor ",
               shown(name));
    return out;
  });
}

}  // namespace hh
