// libFuzzer harness: the safetensors reader. Each input is parsed from memory and loaded from a
// file; both must agree (same error prefix, or the same tensors). An accepted file must describe
// exactly its bytes, and writing it back and reading that again must give the same tensors.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "fuzz/fuzz_common.h"

using namespace hh;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  SafeTensors mem, file;
  const bool mem_ok = fuzz::accepted([&] { mem = parse_safetensors(bytes, "fuzz"); });
  static const std::string path = fuzz::scratch_path("st.safetensors");
  fuzz::write_file(path, bytes);
  const bool file_ok = fuzz::accepted([&] { file = load_safetensors(path); });
  if (mem_ok != file_ok) fuzz::finding("parse_safetensors and load_safetensors disagree on accepting the input");
  if (!mem_ok) return 0;
  if (!fuzz::same_tensors(mem, file) || mem.metadata != file.metadata) fuzz::finding("parse_safetensors and load_safetensors read different tensors");

  // Accepted: the tensors' bytes plus header fill the file exactly.
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  uint64_t total = 0;
  for (const auto& kv : mem.tensors) total += static_cast<uint64_t>(kv.second.numel()) * itemsize(kv.second.dtype());
  if (total != size - 8 - n || mem.order.size() != mem.tensors.size()) fuzz::finding("sizes do not add up");

  // Round trip through the writer ("format" is reserved for "pt" there).
  std::vector<std::pair<std::string, Tensor>> ts;
  for (const std::string& name : mem.order) ts.emplace_back(name, mem.tensors.at(name));
  std::map<std::string, std::string> meta = mem.metadata;
  bool format_ok = !meta.count("format") || meta.at("format") == "pt";
  meta.erase("format");
  std::string again;
  const bool written = fuzz::accepted([&] { again = serialize_safetensors(ts, meta); });
  if (!written) {
    if (format_ok) fuzz::finding("the writer rejects tensors the reader accepted");
    return 0;
  }
  SafeTensors back;
  if (!fuzz::accepted([&] { back = parse_safetensors(again, "again"); })) fuzz::finding("written file is unreadable");
  meta["format"] = "pt";
  if (!fuzz::same_tensors(mem, back) || back.metadata != meta) fuzz::finding("write then read changed the file");
  return 0;
}
