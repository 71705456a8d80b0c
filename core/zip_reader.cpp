// Minimal zip reader (see zip_reader.h). Layout (PKWARE APPNOTE): the end-of-central-directory
// record (EOCD, 22 bytes + comment) at the end; when a count, size or offset there is saturated, the
// zip64 EOCD locator just before it points at the zip64 EOCD record. The central directory lists
// each entry (46 bytes + name + extra + comment; zip64 sizes and offsets in extra field 0x0001);
// each entry's data follows its local file header (30 bytes + name + extra).
#include "core/zip_reader.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace hh {

namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEocdSig = 0x06054b50;
constexpr uint32_t kZip64EocdSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
constexpr uint64_t kEocdSize = 22, kCentralSize = 46, kLocalSize = 30;

uint16_t u16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t u32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t u64(const unsigned char* p) { return static_cast<uint64_t>(u32(p)) | (static_cast<uint64_t>(u32(p + 4)) << 32); }

// An entry name for a message: printable ASCII kept, the rest escaped, cut when long.
std::string shown(const std::string& s) {
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 120; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (s.size() > 120) out += "...";
  return out + "'";
}

// [off, off + n) lies inside [0, size).
bool inside(uint64_t off, uint64_t n, uint64_t size) { return off <= size && n <= size - off; }

}  // namespace

bool ZipArchive::looks_like_zip(const unsigned char* data, uint64_t size) {
  return size >= 4 && (u32(data) == kLocalSig || u32(data) == kEocdSig);
}

ZipArchive::ZipArchive(const unsigned char* data, uint64_t size) : data_(data), size_(size) {
  HH_CHECK(size >= kEocdSize, "zip: the file is ", size, " bytes, too short for a zip archive (truncated?)");
  // The EOCD: the last signature whose comment ends exactly at the end of the file (or, for files
  // with trailing bytes, the last one whose comment fits).
  const uint64_t lowest = size - kEocdSize > 65535 ? size - kEocdSize - 65535 : 0;
  uint64_t eocd = UINT64_MAX;
  for (uint64_t p = size - kEocdSize + 1; p-- > lowest;) {
    if (u32(data + p) == kEocdSig && u16(data + p + 20) <= size - p - kEocdSize) {
      eocd = p;
      break;
    }
  }
  HH_CHECK(eocd != UINT64_MAX, "zip: no end-of-central-directory record (a truncated or damaged archive)");
  const unsigned char* e = data + eocd;
  HH_CHECK(u16(e + 4) == 0 && u16(e + 6) == 0, "zip: archives split over several disks are not supported");
  uint64_t count = u16(e + 10), cd_size = u32(e + 12), cd_offset = u32(e + 16);
  if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
    HH_CHECK(eocd >= 20 && u32(data + eocd - 20) == kZip64LocatorSig,
             "zip: the end-of-central-directory record needs zip64 but has no zip64 locator");
    const uint64_t z = u64(data + eocd - 20 + 8);
    HH_CHECK(inside(z, 56, eocd - 20) && u32(data + z) == kZip64EocdSig, "zip: the zip64 locator points at byte ", z,
             ", where there is no zip64 end-of-central-directory record");
    count = u64(data + z + 32);
    cd_size = u64(data + z + 40);
    cd_offset = u64(data + z + 48);
  }
  HH_CHECK(inside(cd_offset, cd_size, size), "zip: the central directory (", cd_size, " bytes at byte ", cd_offset,
           ") lies outside the ", size, "-byte file (truncated?)");
  HH_CHECK(count <= cd_size / kCentralSize, "zip: the central directory claims ", count, " entries in ", cd_size,
           " bytes");
  entries_.reserve(static_cast<size_t>(count));
  uint64_t p = cd_offset;
  const uint64_t end = cd_offset + cd_size;
  for (uint64_t i = 0; i < count; ++i) {
    HH_CHECK(inside(p, kCentralSize, end) && u32(data + p) == kCentralSig, "zip: central directory entry ", i,
             " at byte ", p, " is missing or damaged");
    const unsigned char* c = data + p;
    const uint64_t name_len = u16(c + 28), extra_len = u16(c + 30), comment_len = u16(c + 32);
    const uint64_t var = name_len + extra_len + comment_len;
    HH_CHECK(inside(p + kCentralSize, var, end), "zip: central directory entry ", i, " runs past the directory");
    ZipEntry z;
    z.name.assign(reinterpret_cast<const char*>(c + kCentralSize), static_cast<size_t>(name_len));
    z.method = u16(c + 10);
    z.encrypted = (u16(c + 8) & 1) != 0;
    z.size = u32(c + 20);
    z.uncompressed = u32(c + 24);
    z.header_offset = u32(c + 42);
    // zip64 extra field: the saturated values, in this order.
    const unsigned char* x = c + kCentralSize + name_len;
    const unsigned char* xend = x + extra_len;
    while (xend - x >= 4) {
      const uint16_t id = u16(x), len = u16(x + 2);
      HH_CHECK(xend - x - 4 >= len, "zip: entry ", shown(z.name), " has a damaged extra field");
      if (id == 0x0001) {
        const unsigned char* q = x + 4;
        const unsigned char* qend = q + len;
        auto take = [&](uint64_t& v) {
          if (v != 0xFFFFFFFF) return;
          HH_CHECK(qend - q >= 8, "zip: entry ", shown(z.name), " has a short zip64 extra field");
          v = u64(q);
          q += 8;
        };
        take(z.uncompressed);
        take(z.size);
        take(z.header_offset);
      }
      x += 4 + len;
    }
    HH_CHECK(by_name_.emplace(z.name, entries_.size()).second, "zip: entry ", shown(z.name), " appears twice");
    HH_CHECK(inside(z.header_offset, kLocalSize, size), "zip: entry ", shown(z.name), "'s local header (byte ",
             z.header_offset, ") lies outside the ", size, "-byte file (truncated?)");
    entries_.push_back(std::move(z));
    p += kCentralSize + var;
  }
}

const ZipEntry* ZipArchive::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

const unsigned char* ZipArchive::data(const ZipEntry& e) const {
  HH_CHECK(!e.encrypted, "zip: entry ", shown(e.name), " is encrypted");
  HH_CHECK(e.method == 0, "zip: entry ", shown(e.name), " is compressed (method ", e.method,
           e.method == 8 ? ", deflate" : "",
           "); only stored entries are read (torch.save writes every entry stored: re-save the checkpoint with "
           "torch.save, or as safetensors)");
  HH_CHECK(e.size == e.uncompressed, "zip: stored entry ", shown(e.name), " has a size of ", e.size,
           " bytes but an uncompressed size of ", e.uncompressed);
  const unsigned char* h = data_ + e.header_offset;  // inside the file: checked by the constructor
  HH_CHECK(u32(h) == kLocalSig, "zip: entry ", shown(e.name), " has no local file header at byte ", e.header_offset);
  const uint64_t name_len = u16(h + 26), extra_len = u16(h + 28);
  const uint64_t start = e.header_offset + kLocalSize + name_len + extra_len;
  HH_CHECK(inside(e.header_offset + kLocalSize, name_len, size_) &&
               std::memcmp(h + kLocalSize, e.name.data(), std::min<uint64_t>(name_len, e.name.size())) == 0 &&
               name_len == e.name.size(),
           "zip: entry ", shown(e.name), "'s local header names another file");
  HH_CHECK(inside(start, e.size, size_), "zip: entry ", shown(e.name), " (", e.size, " bytes at byte ", start,
           ") runs past the end of the ", size_, "-byte file (truncated?)");
  return data_ + start;
}

}  // namespace hh
