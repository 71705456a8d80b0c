// safetensors reader and writer (rules: REFERENCE.md §6, matching the reference implementation's
// checks). Reading = validate the 8-byte length against the file size, validate the header
// (UTF-8, JSON with duplicate-key detection, entry layout, dtypes, checked sizes, contiguous
// offsets, no trailing bytes, the checksum keys), then copy each tensor's bytes into fresh CPU
// storage (or view the file's mapping), verifying each tensor's checksum when the file has them.
#include "core/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

// xxHash compiled into this file (header-only mode): the static library needs no xxhash library
// at link time, so find_package(hedgehog) consumers link nothing new.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/storage.h"
#include "core/utf8.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

namespace hh {

uint64_t safetensors_checksum(const void* data, size_t n) { return XXH3_64bits(data, n); }

namespace {

// Parsed with std::map objects: nlohmann::ordered_json's objects insert by linear search, which
// made a header of n tensors cost O(n^2). The header's key order is recorded while parsing.
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;  // the writer's small per-tensor objects (key order = layout)

[[noreturn]] void bad(const std::string& origin, const std::string& what) {
  fail(str("safetensors: ", origin, ": ", what));
}

// A name or value quoted for an error message, cut short when huge.
std::string quote(const std::string& s) {
  constexpr size_t kMax = 200;
  if (s.size() <= kMax) return "'" + s + "'";
  return "'" + s.substr(0, kMax) + "...' (" + std::to_string(s.size()) + " bytes)";
}

// Appends v as compact JSON, stopping soon after `out` passes `limit` characters: the cost and the
// recursion depth are bounded by the limit, whatever the size or nesting of v.
void dump_bounded(const json& v, std::string& out, size_t limit) {
  if (out.size() > limit) return;
  if (v.is_array() || v.is_object()) {
    const bool obj = v.is_object();
    out += obj ? '{' : '[';
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (out.size() > limit) return;
      if (it != v.begin()) out += ',';
      if (obj) {
        dump_bounded(json(it.key().substr(0, limit + 1)), out, limit);
        out += ':';
      }
      dump_bounded(it.value(), out, limit);
    }
    out += obj ? '}' : ']';
  } else if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    out += json(s.substr(0, limit + 1)).dump(-1, ' ', false, json::error_handler_t::replace);
  } else {
    out += v.dump();
  }
}

// A JSON value as text for an error message, at most ~80 characters (never throws on odd strings).
std::string excerpt(const json& v) {
  constexpr size_t kMax = 80;
  std::string s;
  dump_bounded(v, s, kMax);
  if (s.size() > kMax) s = s.substr(0, kMax) + "...";
  return s;
}

// A library message (e.g. nlohmann's, which quotes the offending token) cut to a bounded length.
std::string clip(const std::string& s) {
  constexpr size_t kMax = 300;
  if (s.size() <= kMax) return s;
  return s.substr(0, kMax) + "... (" + std::to_string(s.size()) + " characters)";
}

const char* st_dtype_name(DType t) {
  switch (t) {
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::i64: return "I64";
    case DType::i32: return "I32";
    case DType::u8: return "U8";
    case DType::boolean: return "BOOL";
    case DType::i8: return "I8";
  }
  return "?";
}

bool parse_st_dtype(const std::string& s, DType* out) {
  static const std::pair<const char*, DType> table[] = {
      {"BF16", DType::bf16}, {"F16", DType::f16}, {"F32", DType::f32}, {"F64", DType::f64},
      {"I64", DType::i64},   {"I32", DType::i32}, {"U8", DType::u8},   {"I8", DType::i8},
      {"BOOL", DType::boolean}};
  for (const auto& [name, t] : table) {
    if (s == name) {
      *out = t;
      return true;
    }
  }
  return false;
}

// Parsed JSON text plus the key order of its top-level object.
struct ParsedJson {
  json value;
  std::vector<std::string> top_keys;  // keys of the root object, in text order
};

// SAX events -> a json value, with the checks nlohmann does not make: nesting depth (checked at
// each '{' / '[', so a deep tree is never built), keys repeated inside one object, and the key
// order of the root object. Values are built by nlohmann's own DOM builder (what json::parse
// uses). Not json::parse with a callback: its parser rescans the enclosing object at every '}'
// (to drop discarded values), which made a header of n tensors cost O(n^2).
class CheckedJsonBuilder {
 public:
  using Dom = nlohmann::detail::json_sax_dom_parser<json>;
  CheckedJsonBuilder(const std::string& origin, const char* what) : origin_(origin), what_(what), dom_(out.value) {}

  ParsedJson out;

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& text) { return dom_.number_float(v, text); }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t len) {
    open();
    objects_.emplace_back();
    return dom_.start_object(len);
  }
  bool key(json::string_t& k) {
    Level& top = objects_.back();
    if (!top.keys.insert(k).second) {
      if (objects_.size() == 1) bad(origin_, str("duplicate tensor name ", quote(k), " in the ", what_));
      bad(origin_, str("duplicate key ", quote(k), " inside ", quote(objects_[objects_.size() - 2].last_key),
                       " in the ", what_));
    }
    top.last_key = k;
    if (depth_ == 1) out.top_keys.push_back(k);  // a key of the root object
    return dom_.key(k);
  }
  bool end_object() {
    --depth_;
    objects_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t len) {
    open();
    return dom_.start_array(len);
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t pos, const std::string& token, const nlohmann::detail::exception& e) {
    return dom_.parse_error(pos, token, e);  // throws e
  }

 private:
  struct Level {  // one open object
    std::set<std::string> keys;
    std::string last_key;
  };
  void open() {
    if (depth_ >= kSafetensorsMaxJsonDepth) {
      bad(origin_, str(what_, " JSON nests deeper than ", kSafetensorsMaxJsonDepth, " levels"));
    }
    ++depth_;
  }
  const std::string& origin_;
  const char* what_;
  Dom dom_;
  int depth_ = 0;  // containers open
  std::vector<Level> objects_;
};

// Parses JSON text (surrounding whitespace allowed; nothing else may follow the value) and rejects
// what nlohmann would silently accept or could not handle: invalid UTF-8, a raw NUL byte (nlohmann
// stops reading there, so "{}\0garbage" would parse as {}), nesting deeper than
// kSafetensorsMaxJsonDepth (checked while parsing, before a deep tree exists), and a key repeated
// inside one object (nlohmann would keep the last). `what` names the text in errors.
ParsedJson parse_json_checked(const char* p, size_t n, const std::string& origin, const char* what) {
  size_t bad_at = first_invalid_utf8(p, n);
  if (bad_at != std::string::npos) {
    bad(origin, str(what, " is not valid UTF-8 (bad byte 0x", std::hex,
                    static_cast<unsigned>(static_cast<unsigned char>(p[bad_at])), std::dec, " at ", what, " byte ",
                    bad_at, ")"));
  }
  if (const void* nul = std::memchr(p, 0, n)) {
    bad(origin, str(what, " holds a NUL byte at ", what, " byte ", static_cast<const char*>(nul) - p,
                    " (only whitespace may pad the JSON)"));
  }
  CheckedJsonBuilder builder(origin, what);
  try {
    json::sax_parse(p, p + n, &builder, nlohmann::detail::input_format_t::json, /*strict=*/true,
                    /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    bad(origin, str(what, " is not valid JSON: ", clip(e.what())));
  }
  return std::move(builder.out);
}

struct Entry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

struct Header {
  std::vector<Entry> entries;  // sorted by data offsets (stable: ties keep header order)
  std::map<std::string, std::string> metadata;
  bool checksummed = false;
  std::vector<uint64_t> checksums;  // per entry (same order) when checksummed
};

bool is_checksum_key(const std::string& k) {
  return k == kSafetensorsChecksumsKey || k.rfind(kSafetensorsChecksumPrefix, 0) == 0;
}

std::string hex16(uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = digits[v & 0xF];
  return s;
}

bool parse_hex16(const std::string& s, uint64_t* out) {
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

// Validates the checksum keys of the metadata against the entries (before any data is read): with
// "hedgehog.checksums" = "xxh3-64" every tensor needs a well-formed "hedgehog.xxh3.<name>" and
// every such key must name a tensor of the file; without it, no checksum key may appear.
void parse_checksums(Header& h, const std::string& origin) {
  const std::string prefix = kSafetensorsChecksumPrefix;
  auto marker = h.metadata.find(kSafetensorsChecksumsKey);
  if (marker == h.metadata.end()) {
    auto it = h.metadata.lower_bound(prefix);
    if (it != h.metadata.end() && it->first.rfind(prefix, 0) == 0) {
      bad(origin, str("__metadata__ has checksum key ", quote(it->first), " but no '", kSafetensorsChecksumsKey,
                      "' naming the algorithm"));
    }
    return;
  }
  if (marker->second != kSafetensorsChecksumAlgo) {
    bad(origin, str("__metadata__ '", kSafetensorsChecksumsKey, "' is ", quote(marker->second), ", expected '",
                    kSafetensorsChecksumAlgo, "'"));
  }
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < h.entries.size(); ++i) index.emplace(h.entries[i].name, i);
  h.checksums.assign(h.entries.size(), 0);
  std::vector<bool> seen(h.entries.size(), false);
  for (auto it = h.metadata.lower_bound(prefix); it != h.metadata.end() && it->first.rfind(prefix, 0) == 0; ++it) {
    const std::string name = it->first.substr(prefix.size());
    auto e = index.find(name);
    if (e == index.end()) {
      bad(origin, str("__metadata__ ", quote(it->first), " is the checksum of tensor ", quote(name),
                      ", which the file does not hold"));
    }
    if (!parse_hex16(it->second, &h.checksums[e->second])) {
      bad(origin, str("tensor ", quote(name), ": checksum ", quote(it->second), " is not 16 lowercase hex digits"));
    }
    seen[e->second] = true;
  }
  for (size_t i = 0; i < h.entries.size(); ++i) {
    if (!seen[i]) {
      bad(origin, str("tensor ", quote(h.entries[i].name), " has no checksum ('", prefix, h.entries[i].name,
                      "') although the file declares '", kSafetensorsChecksumsKey, "'"));
    }
  }
  h.checksummed = true;
}

// The bytes of entry i against its checksum (when the file has them).
void verify_checksum(const Header& h, size_t i, const void* bytes, uint64_t nbytes, const std::string& origin) {
  if (!h.checksummed) return;
  const uint64_t got = safetensors_checksum(bytes, static_cast<size_t>(nbytes));
  if (got != h.checksums[i]) {
    bad(origin, str("tensor ", quote(h.entries[i].name), ": checksum mismatch (", kSafetensorsChecksumAlgo,
                    " stored ", hex16(h.checksums[i]), ", data hashes to ", hex16(got),
                    "): the tensor's bytes were altered or corrupted"));
  }
}

// Validates one tensor entry {dtype, shape, data_offsets} (exactly these keys).
Entry parse_entry(const std::string& name, const json& v, const std::string& origin) {
  const std::string who = "tensor " + quote(name);
  if (!v.is_object()) {
    bad(origin, str(who, ": entry must be an object {\"dtype\", \"shape\", \"data_offsets\"}, got ", v.type_name(), " ",
                    excerpt(v)));
  }
  for (const auto& kv : v.items()) {
    const std::string& k = kv.key();
    if (k != "dtype" && k != "shape" && k != "data_offsets") {
      bad(origin, str(who, ": unexpected key ", quote(k), " (allowed: dtype, shape, data_offsets)"));
    }
  }
  for (const char* k : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(k)) bad(origin, str(who, ": missing key '", k, "'"));
  }
  Entry e;
  e.name = name;
  const json& dt = v["dtype"];
  if (!dt.is_string()) bad(origin, str(who, ": dtype must be a string, got ", excerpt(dt)));
  if (!parse_st_dtype(dt.get_ref<const std::string&>(), &e.dtype)) {
    bad(origin, str(who, ": unknown dtype ", quote(dt.get_ref<const std::string&>()),
                    " (supported: BF16 F16 F32 F64 I64 I32 U8 I8 BOOL)"));
  }
  const json& sh = v["shape"];
  if (!sh.is_array()) bad(origin, str(who, ": shape must be an array of non-negative integers, got ", excerpt(sh)));
  const uint64_t kI64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t nonzero_product = 1;  // checked: every partial product then fits int64 (strides, numel)
  bool has_zero = false;
  for (size_t i = 0; i < sh.size(); ++i) {
    const json& d = sh[i];
    if (!d.is_number_unsigned() || d.get<uint64_t>() > kI64Max) {
      bad(origin, str(who, ": shape entry ", i, " must be a non-negative integer, got ", excerpt(d), " in shape ",
                      excerpt(sh)));
    }
    uint64_t n = d.get<uint64_t>();
    e.shape.push_back(static_cast<int64_t>(n));
    if (n == 0) {
      has_zero = true;
      continue;
    }
    if (nonzero_product > kI64Max / n) bad(origin, str(who, ": element count of shape ", excerpt(sh), " overflows"));
    nonzero_product *= n;
  }
  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
    bad(origin, str(who, ": data_offsets must be two non-negative integers [begin, end], got ", excerpt(off)));
  }
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  if (e.begin > e.end) bad(origin, str(who, ": data_offsets [", e.begin, ", ", e.end, ") have begin > end"));
  uint64_t numel = has_zero ? 0 : nonzero_product;
  uint64_t item = itemsize(e.dtype);
  if (numel > std::numeric_limits<uint64_t>::max() / item) {
    bad(origin, str(who, ": byte size of shape ", excerpt(sh), " with dtype ", st_dtype_name(e.dtype), " overflows"));
  }
  uint64_t nbytes = numel * item;
  if (nbytes != e.end - e.begin) {
    bad(origin, str(who, ": shape ", excerpt(sh), " of dtype ", st_dtype_name(e.dtype), " needs ", nbytes,
                    " bytes but data_offsets [", e.begin, ", ", e.end, ") hold ", e.end - e.begin));
  }
  return e;
}

// Validates the whole header given the size of the data section that follows it.
Header parse_header(const char* p, size_t n, uint64_t data_size, const std::string& origin) {
  ParsedJson parsed = parse_json_checked(p, n, origin, "header");
  const json& j = parsed.value;
  if (!j.is_object()) bad(origin, str("header JSON must be an object, got ", j.type_name(), " ", excerpt(j)));
  Header h;
  h.entries.reserve(parsed.top_keys.size());
  for (const std::string& key : parsed.top_keys) {  // header order (ties in the sort below keep it)
    const json& v = j.find(key).value();
    if (key == "__metadata__") {
      if (!v.is_object()) bad(origin, str("__metadata__ must be an object of strings, got ", excerpt(v)));
      for (const auto& m : v.items()) {
        if (!m.value().is_string()) {
          bad(origin, str("__metadata__ value for key ", quote(m.key()), " must be a string, got ",
                          m.value().type_name(), " ", excerpt(m.value())));
        }
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    h.entries.push_back(parse_entry(key, v, origin));
  }
  std::stable_sort(h.entries.begin(), h.entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : h.entries) {
    if (e.begin > expected) {
      bad(origin,
          str("tensor ", quote(e.name), ": data_offsets [", e.begin, ", ", e.end, ") leave a gap: expected begin ",
              expected,
              prev ? str(" (end of tensor ", quote(prev->name), ")") : std::string(" (start of the data section)")));
    }
    if (e.begin < expected) {
      bad(origin, str("tensor ", quote(e.name), ": data_offsets [", e.begin, ", ", e.end, ") overlap tensor ",
                      quote(prev->name), " [", prev->begin, ", ", prev->end, ")"));
    }
    if (e.end > data_size) {
      bad(origin, str("tensor ", quote(e.name), ": data_offsets [", e.begin, ", ", e.end,
                      ") extend beyond the data section of ", data_size, " bytes"));
    }
    expected = e.end;
    prev = &e;
  }
  if (expected != data_size) {
    bad(origin, str(data_size - expected, " trailing bytes after the last tensor (tensors end at data offset ",
                    expected, ", the data section has ", data_size, " bytes)"));
  }
  parse_checksums(h, origin);
  return h;
}

uint64_t read_u64_le(const unsigned char* b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}

// The header length against the limit and the file size; returns N.
uint64_t check_prefix(const unsigned char* prefix, uint64_t file_size, const std::string& origin) {
  uint64_t n = read_u64_le(prefix);
  if (n > kSafetensorsMaxHeader) {
    bad(origin, str("header length ", n, " exceeds the limit of ", kSafetensorsMaxHeader, " bytes"));
  }
  if (n > file_size - 8) {
    bad(origin, str("header length ", n, " extends beyond the file (", file_size, " bytes, ", file_size - 8,
                    " after the 8-byte length)"));
  }
  return n;
}

// A bool byte other than 0/1 is undefined behaviour when read.
void check_bool_bytes(const unsigned char* b, uint64_t nbytes, const std::string& name, const std::string& origin) {
  for (uint64_t i = 0; i < nbytes; ++i) {
    if (b[i] > 1) bad(origin, str("tensor ", quote(name), ": BOOL element ", i, " has byte value ", int(b[i]), " (must be 0 or 1)"));
  }
}


// Copies each tensor's bytes (read(data_offset, dst, nbytes)) into new CPU tensors.
template <typename ReadFn>
SafeTensors materialize(const Header& h, const std::string& origin, ReadFn&& read) {
  SafeTensors out;
  out.metadata = h.metadata;
  out.checksummed = h.checksummed;
  for (size_t i = 0; i < h.entries.size(); ++i) {
    const Entry& e = h.entries[i];
    Tensor t = empty(e.shape, {e.dtype, Device::cpu()});
    uint64_t nbytes = e.end - e.begin;
    if (nbytes > 0) read(e.begin, t.raw_data(), nbytes);
    verify_checksum(h, i, t.raw_data(), nbytes, origin);
    if (e.dtype == DType::boolean) check_bool_bytes(static_cast<const unsigned char*>(t.raw_data()), nbytes, e.name, origin);
    out.tensors.emplace(e.name, t);
    out.order.push_back(e.name);
  }
  return out;
}

void move_to(SafeTensors& st, Device device) {
  if (device.is_cpu()) return;
  for (auto& kv : st.tensors) kv.second = kv.second.to(device);
}

// Runs f; an hh::Error not already from this module gets the "safetensors: <origin>: " prefix.
template <typename F>
auto prefixed(const std::string& origin, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    std::string msg = e.what();
    if (msg.rfind("safetensors: ", 0) == 0) throw;
    bad(origin, msg);
  }
}

}  // namespace

SafeTensors parse_safetensors(const std::string& bytes, const std::string& origin) {
  const uint64_t size = bytes.size();
  if (size < 8) bad(origin, str("file is ", size, " bytes, shorter than the 8-byte header length"));
  const auto* u = reinterpret_cast<const unsigned char*>(bytes.data());
  uint64_t n = check_prefix(u, size, origin);
  Header h = parse_header(bytes.data() + 8, static_cast<size_t>(n), size - 8 - n, origin);
  const char* data = bytes.data() + 8 + n;
  return materialize(h, origin, [&](uint64_t off, void* dst, uint64_t nb) { std::memcpy(dst, data + off, nb); });
}

SafeTensors load_safetensors(const std::string& path, Device device) {
  return prefixed(path, [&] {
    std::shared_ptr<MappedFile> file = MappedFile::open(path);
    const uint64_t size = file->size();
    if (size < 8) bad(path, str("file is ", size, " bytes, shorter than the 8-byte header length"));
    const unsigned char* bytes = file->data();
    uint64_t n = check_prefix(bytes, size, path);
    Header h = parse_header(reinterpret_cast<const char*>(bytes) + 8, static_cast<size_t>(n), size - 8 - n, path);
    unsigned char* data = file->data() + 8 + n;
    // Tensors view the mapping (no copy) where the element alignment allows, else get a copy. The
    // mapping lives as long as any view: each view's storage holds the MappedFile.
    SafeTensors st;
    st.metadata = h.metadata;
    st.checksummed = h.checksummed;
    for (size_t i = 0; i < h.entries.size(); ++i) {
      const Entry& e = h.entries[i];
      const uint64_t nbytes = e.end - e.begin;
      unsigned char* p = data + e.begin;
      verify_checksum(h, i, p, nbytes, path);
      if (e.dtype == DType::boolean) check_bool_bytes(p, nbytes, e.name, path);
      Tensor t;
      if (nbytes > 0 && reinterpret_cast<uintptr_t>(p) % itemsize(e.dtype) == 0) {
        t = tensor_view_of(std::shared_ptr<void>(file, p), nbytes, e.shape, e.dtype);
      } else {
        t = empty(e.shape, {e.dtype, Device::cpu()});
        if (nbytes > 0) std::memcpy(t.raw_data(), p, nbytes);
      }
      st.tensors.emplace(e.name, t);
      st.order.push_back(e.name);
    }
    move_to(st, device);
    return st;
  });
}

std::string serialize_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                  const std::map<std::string, std::string>& metadata, const std::string& origin,
                                  Checksums checksums) {
  // The header text is built piece by piece (one insert into an ordered_json object is a linear
  // search, so building the whole header as one object costs O(n^2) in the tensor count). Same
  // bytes as the compact dump: {"__metadata__":{"format":"pt",<sorted metadata>},<tensors in order>}.
  auto jstr = [](const std::string& s) { return json(s).dump(); };
  std::map<std::string, std::string> md;  // the caller's metadata without checksum keys
  bool with_checksums = checksums == Checksums::xxh3;
  for (const auto& [k, v] : metadata) {
    if (first_invalid_utf8(k.data(), k.size()) != std::string::npos ||
        first_invalid_utf8(v.data(), v.size()) != std::string::npos) {
      bad(origin, str("metadata entry ", quote(k), " is not valid UTF-8"));
    }
    if (k == "format") {
      if (v != "pt") bad(origin, str("metadata key 'format' is reserved for \"pt\", got ", quote(v)));
      continue;
    }
    if (is_checksum_key(k)) {  // stale or copied: recomputed below from the bytes written
      with_checksums = true;
      continue;
    }
    md.emplace(k, v);
  }

  std::set<std::string> seen;
  std::vector<Tensor> hosts;
  std::string entries;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") bad(origin, "tensor name '__metadata__' is reserved");
    if (first_invalid_utf8(name.data(), name.size()) != std::string::npos) {
      bad(origin, str("tensor name ", quote(name), " is not valid UTF-8"));
    }
    if (!seen.insert(name).second) bad(origin, str("duplicate tensor name ", quote(name)));
    if (!t.defined()) bad(origin, str("tensor ", quote(name), " is undefined"));
    Tensor h = t.detach();
    if (!h.device().is_cpu()) h = h.to(Device::cpu());
    if (!h.is_contiguous()) {
      Tensor c = empty(h.shape(), {h.dtype(), Device::cpu()});
      copy_(c, h);
      h = c;
    }
    uint64_t nbytes = static_cast<uint64_t>(h.numel()) * itemsize(h.dtype());
    ojson entry = ojson::object();
    entry["dtype"] = st_dtype_name(h.dtype());
    entry["shape"] = h.shape();
    entry["data_offsets"] = {offset, offset + nbytes};
    entries += "," + jstr(name) + ":" + entry.dump();
    if (with_checksums) {
      md[kSafetensorsChecksumPrefix + name] = hex16(safetensors_checksum(h.raw_data(), static_cast<size_t>(nbytes)));
    }
    offset += nbytes;
    hosts.push_back(h);
  }
  if (with_checksums) md[kSafetensorsChecksumsKey] = kSafetensorsChecksumAlgo;
  std::string js = "{\"__metadata__\":{\"format\":\"pt\"";
  for (const auto& [k, v] : md) js += "," + jstr(k) + ":" + jstr(v);
  js += "}" + entries + "}";
  js.append((8 - js.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + js.size() + static_cast<size_t>(offset));
  uint64_t n = js.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  out += js;
  for (const Tensor& h : hosts) {
    size_t nbytes = static_cast<size_t>(h.numel()) * itemsize(h.dtype());
    if (nbytes > 0) out.append(static_cast<const char*>(h.raw_data()), nbytes);
  }
  return out;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata, Checksums checksums) {
  std::string bytes = serialize_safetensors(tensors, metadata, path, checksums);
  prefixed(path, [&] { write_file_atomic(path, bytes); });
}

// ---- sharded checkpoints ----

namespace {

struct Index {
  std::string dir;  // folder of the index file ("" = cwd)
  std::vector<std::pair<std::string, std::string>> entries;  // weight_map: tensor name -> shard file
};

Index read_index(const std::string& index_path) {
  std::string text = prefixed(index_path, [&] {
    InputFile f(index_path);
    if (f.size() > kSafetensorsMaxHeader) {
      bad(index_path, str("index file is ", f.size(), " bytes, over the limit of ", kSafetensorsMaxHeader));
    }
    std::string s(static_cast<size_t>(f.size()), '\0');
    if (!s.empty()) f.read_at(0, &s[0], s.size());
    return s;
  });
  const json j = parse_json_checked(text.data(), text.size(), index_path, "index").value;
  if (!j.is_object()) bad(index_path, str("index JSON must be an object, got ", j.type_name()));
  if (!j.contains("weight_map")) bad(index_path, "index has no \"weight_map\"");
  const json& wm = j["weight_map"];
  if (!wm.is_object())
    bad(index_path, str("\"weight_map\" must be an object {tensor name: shard file}, got ", excerpt(wm)));
  Index idx;
  size_t slash = index_path.find_last_of('/');
  if (slash != std::string::npos) idx.dir = index_path.substr(0, slash + 1);
  for (const auto& kv : wm.items()) {
    if (!kv.value().is_string()) {
      bad(index_path,
          str("weight_map entry ", quote(kv.key()), " must name a shard file (string), got ", excerpt(kv.value())));
    }
    const std::string& file = kv.value().get_ref<const std::string&>();
    bool escapes = file.empty() || file[0] == '/' || file == ".." || file.rfind("../", 0) == 0 ||
                   file.find("/../") != std::string::npos ||
                   (file.size() >= 3 && file.compare(file.size() - 3, 3, "/..") == 0);
    if (escapes) {
      bad(index_path, str("weight_map entry ", quote(kv.key()), " names shard ", quote(file),
                          ", which is not a relative path inside the index's folder"));
    }
    idx.entries.emplace_back(kv.key(), file);
  }
  return idx;
}

std::vector<std::string> shard_names(const Index& idx) {
  std::set<std::string> files;
  for (const auto& e : idx.entries) files.insert(e.second);
  return {files.begin(), files.end()};
}

}  // namespace

std::vector<std::string> safetensors_index_files(const std::string& index_json_path) {
  Index idx = read_index(index_json_path);
  std::vector<std::string> out;
  for (const std::string& f : shard_names(idx)) out.push_back(idx.dir + f);
  return out;
}

SafeTensors load_safetensors_sharded(const std::string& index_json_path, Device device) {
  Index idx = read_index(index_json_path);
  std::map<std::string, std::string> listed(idx.entries.begin(), idx.entries.end());
  std::map<std::string, std::string> found;  // tensor name -> shard it came from
  SafeTensors out;
  const std::vector<std::string> files = shard_names(idx);
  out.checksummed = !files.empty();
  for (const std::string& file : files) {
    SafeTensors shard = load_safetensors(idx.dir + file, device);
    out.checksummed = out.checksummed && shard.checksummed;
    for (const std::string& name : shard.order) {
      auto dup = found.find(name);
      if (dup != found.end()) {
        bad(index_json_path,
            str("tensor ", quote(name), " is in two shards: ", quote(dup->second), " and ", quote(file)));
      }
      auto it = listed.find(name);
      if (it == listed.end())
        bad(index_json_path,
            str("shard ", quote(file), " holds tensor ", quote(name), ", which weight_map does not list"));
      if (it->second != file) {
        bad(index_json_path, str("weight_map puts tensor ", quote(name), " in shard ", quote(it->second),
                                 " but it is in shard ", quote(file)));
      }
      found.emplace(name, file);
      out.tensors.emplace(name, shard.tensors.at(name));
      out.order.push_back(name);
    }
    for (const auto& kv : shard.metadata) out.metadata.emplace(kv.first, kv.second);
  }
  for (const auto& [name, file] : idx.entries) {
    if (!found.count(name)) {
      bad(index_json_path,
          str("weight_map entry ", quote(name), " -> ", quote(file), ": that shard has no tensor ", quote(name)));
    }
  }
  return out;
}

Tensor tensor_view_of(std::shared_ptr<void> data, uint64_t nbytes, const Shape& shape, DType dtype) {
  auto storage = std::make_shared<Storage>();
  storage->data = std::move(data);
  storage->nbytes = static_cast<size_t>(nbytes);
  storage->device = Device::cpu();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

}  // namespace hh
