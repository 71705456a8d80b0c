// A minimal zip archive reader for the PyTorch checkpoint format (core/torch_bin.h): the central
// directory (zip64 when the archive needs it) and each entry's local file header. Only STORED
// entries can be read (torch.save writes every record STORED); a compressed or encrypted entry is
// listed, and refused with a message naming it when its bytes are asked for. Every offset and
// length is checked against the archive's size. Errors are hh::Error with a plain message (the
// caller adds the file name).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace hh {

struct ZipEntry {
  std::string name;
  uint16_t method = 0;        // 0 = STORED, 8 = deflate, ...
  bool encrypted = false;
  uint64_t header_offset = 0;  // of the local file header
  uint64_t size = 0;           // bytes as stored (= uncompressed size for STORED)
  uint64_t uncompressed = 0;
};

class ZipArchive {
 public:
  // Reads the directory of the archive held in data[0, size) (the bytes must outlive this object).
  ZipArchive(const unsigned char* data, uint64_t size);

  const std::vector<ZipEntry>& entries() const { return entries_; }
  // The entry of that name, or nullptr.
  const ZipEntry* find(const std::string& name) const;
  // The bytes of a STORED entry: a pointer into the archive, e.size bytes long. Checks its local
  // header (signature, name, bounds); a compressed or encrypted entry is an error naming it.
  const unsigned char* data(const ZipEntry& e) const;

  // True when the bytes start like a zip archive ("PK\3\4", or an empty archive's "PK\5\6").
  static bool looks_like_zip(const unsigned char* data, uint64_t size);

 private:
  const unsigned char* data_;
  uint64_t size_;
  std::vector<ZipEntry> entries_;
  std::unordered_map<std::string, size_t> by_name_;  // name -> index in entries_
};

}  // namespace hh
