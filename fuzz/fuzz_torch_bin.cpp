// libFuzzer harness: the PyTorch checkpoint reader (core/torch_bin.h: zip archive, legacy format,
// restricted unpickler). Each input is read twice: as a whole file (parsed from memory and loaded
// from a file: both must agree), and as the data.pkl of a zip archive the harness builds around it
// (with four 64-byte storage records "0".."3"), so mutations reach the unpickler without having to
// keep a zip directory intact. An accepted checkpoint's tensors must be contiguous, hold their
// bytes, and survive a safetensors write and read unchanged.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/torch_bin.h"
#include "fuzz/fuzz_common.h"

using namespace hh;

namespace {

void put16(std::string& s, uint32_t v) {
  for (int i = 0; i < 2; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// A zip archive of STORED entries (no CRCs: the reader does not check them).
std::string make_zip(const std::vector<std::pair<std::string, std::string>>& files) {
  std::string out, central;
  for (const auto& [name, data] : files) {
    const uint32_t offset = static_cast<uint32_t>(out.size());
    put32(out, 0x04034b50);
    put16(out, 20), put16(out, 0), put16(out, 0), put16(out, 0), put16(out, 0);
    put32(out, 0), put32(out, static_cast<uint32_t>(data.size())), put32(out, static_cast<uint32_t>(data.size()));
    put16(out, static_cast<uint32_t>(name.size())), put16(out, 0);
    out += name;
    out += data;
    put32(central, 0x02014b50);
    put16(central, 20), put16(central, 20), put16(central, 0), put16(central, 0), put16(central, 0), put16(central, 0);
    put32(central, 0), put32(central, static_cast<uint32_t>(data.size())), put32(central, static_cast<uint32_t>(data.size()));
    put16(central, static_cast<uint32_t>(name.size())), put16(central, 0), put16(central, 0), put16(central, 0),
        put16(central, 0);
    put32(central, 0), put32(central, offset);
    central += name;
  }
  const uint32_t cd_offset = static_cast<uint32_t>(out.size());
  out += central;
  put32(out, 0x06054b50);
  put16(out, 0), put16(out, 0), put16(out, static_cast<uint32_t>(files.size())), put16(out, static_cast<uint32_t>(files.size()));
  put32(out, static_cast<uint32_t>(central.size())), put32(out, cd_offset), put16(out, 0);
  return out;
}

// An accepted checkpoint: contiguous tensors whose bytes round-trip through safetensors.
void check_accepted(const SafeTensors& st, size_t input_size) {
  uint64_t total = 0;
  std::vector<std::pair<std::string, Tensor>> list;
  for (const std::string& name : st.order) {
    const Tensor& t = st.tensors.at(name);
    if (!t.is_contiguous()) fuzz::finding("a loaded tensor is not contiguous");
    total += static_cast<uint64_t>(t.numel()) * itemsize(t.dtype());
    list.emplace_back(name, t);
  }
  // Views of the file plus copies (at most 4 x the file + 64 KiB): never more.
  if (total > 5 * static_cast<uint64_t>(input_size) + 65536 + 4096) fuzz::finding("tensors larger than the bound");
  // (safetensors reserves the name "__metadata__"; a state dict may use it.)
  if (st.tensors.count("__metadata__")) return;
  std::string again;
  if (!fuzz::accepted([&] { again = serialize_safetensors(list); })) fuzz::finding("safetensors rejects the tensors");
  SafeTensors back;
  if (!fuzz::accepted([&] { back = parse_safetensors(again, "again"); })) fuzz::finding("written file is unreadable");
  if (!fuzz::same_tensors(st, back)) fuzz::finding("safetensors round trip changed the tensors");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  // 1. The input as a checkpoint file: memory and file agree.
  SafeTensors mem, file;
  const bool mem_ok = fuzz::accepted([&] { mem = parse_torch_bin(bytes, "fuzz"); });
  static const std::string path = fuzz::scratch_path("torch.bin");
  fuzz::write_file(path, bytes);
  const bool file_ok = fuzz::accepted([&] { file = load_torch_bin(path); });
  if (mem_ok != file_ok) fuzz::finding("parse_torch_bin and load_torch_bin disagree on accepting the input");
  if (mem_ok) {
    if (!fuzz::same_tensors(mem, file)) fuzz::finding("parse_torch_bin and load_torch_bin read different tensors");
    check_accepted(mem, size);
  }
  // 2. The input as data.pkl with four storage records.
  std::vector<std::pair<std::string, std::string>> files = {{"archive/data.pkl", bytes}, {"archive/byteorder", "little"}};
  for (int k = 0; k < 4; ++k) {
    std::string rec(64, '\0');
    for (size_t i = 0; i < rec.size(); ++i) rec[i] = static_cast<char>((i * 7 + static_cast<size_t>(k)) & 0x01);
    files.emplace_back("archive/data/" + std::to_string(k), rec);
  }
  const std::string zip = make_zip(files);
  SafeTensors wrapped;
  if (fuzz::accepted([&] { wrapped = parse_torch_bin(zip, "fuzz-zip"); })) check_accepted(wrapped, zip.size());
  return 0;
}
