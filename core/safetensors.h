// safetensors: the one weight/checkpoint format (REFERENCE.md §6). A u64 little-endian header
// length N, N bytes of UTF-8 JSON {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}},
// then the data section. The reader validates everything (sizes, offsets, dtypes, UTF-8, JSON
// shape, duplicates, trailing bytes) and throws hh::Error starting with "safetensors: <path>: ".
// The header is exactly N bytes of JSON: whitespace may surround it (the writer pads with spaces),
// anything else (a NUL byte, trailing garbage) is an error. The data offsets must tile the data
// section exactly (sorted by offset: first at 0, each begins where the previous ends, the last
// ends at the file's end): gaps, overlaps and trailing bytes are errors, as in the reference
// implementation. Header parsing is O(n log n) in the number of tensors.
// The writer emits '{' first, a header padded with spaces to a multiple of 8 and
// {"format":"pt"} metadata, and replaces the file atomically.
// Integrity: a file may carry one checksum per tensor in __metadata__ ("hedgehog.checksums":
// "xxh3-64" and "hedgehog.xxh3.<tensor name>": XXH3-64 of the tensor's data bytes as 16 lowercase
// hex digits). Checkpoints and exported models are written with them; every reader verifies them
// when present (a flipped byte is an error naming the tensor and the file). Files without them
// (other writers, files written before checksums existed) load unverified.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace hh {

struct SafeTensors {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;  // the file's __metadata__ (includes "format")
  std::vector<std::string> order;  // names in data-section order (= the order saved)
  bool checksummed = false;        // every tensor had a checksum, and each one matched
};

// The checksum keys of __metadata__ (see the top of this file).
constexpr const char* kSafetensorsChecksumsKey = "hedgehog.checksums";  // value: the algorithm
constexpr const char* kSafetensorsChecksumAlgo = "xxh3-64";
constexpr const char* kSafetensorsChecksumPrefix = "hedgehog.xxh3.";  // + tensor name
// Whether the writer adds checksums. The checksum keys are the writer's own: any given in
// `metadata` (e.g. copied from a loaded file) are dropped and recomputed from the tensors written,
// so a file rewritten from a checksummed one stays checksummed and correct.
enum class Checksums { none, xxh3 };
// XXH3-64 of n bytes (the per-tensor checksum).
uint64_t safetensors_checksum(const void* data, size_t n);

// Largest accepted header (bytes), as in the reference implementation.
constexpr uint64_t kSafetensorsMaxHeader = 100000000;
// Deepest JSON nesting accepted in a header or index file (a header needs 3: root, entry, shape).
// Deeper text is rejected while parsing, so no deep tree is ever built or printed.
constexpr int kSafetensorsMaxJsonDepth = 64;

// Reads a file into CPU tensors (then moves them to `device`). The header length is validated
// against the file size before anything is allocated; tensor bytes are read straight into storage.
SafeTensors load_safetensors(const std::string& path, Device device = Device::cpu());
// Parses a whole file held in memory; `origin` names it in errors.
SafeTensors parse_safetensors(const std::string& bytes, const std::string& origin);

// Writes tensors (any strides, any device; names unique, not "__metadata__") in the given order.
// `metadata` is added to {"format": "pt"} ("format" may only be given as "pt").
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {},
                      Checksums checksums = Checksums::none);
// The same bytes as save_safetensors writes, in memory.
std::string serialize_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                  const std::map<std::string, std::string>& metadata = {},
                                  const std::string& origin = "<memory>", Checksums checksums = Checksums::none);

// A contiguous CPU tensor over `nbytes` of existing memory that `data` keeps alive (a mapped file's
// bytes, for the readers of safetensors and PyTorch files): no copy.
Tensor tensor_view_of(std::shared_ptr<void> data, uint64_t nbytes, const Shape& shape, DType dtype);

// Sharded checkpoints (model.safetensors.index.json: {"weight_map": {name: shard file}}).
// The distinct shard files, sorted, as paths joined with the index file's folder.
std::vector<std::string> safetensors_index_files(const std::string& index_json_path);
// Loads every shard and merges them. Errors: a weight_map entry whose shard lacks that tensor,
// a tensor present in two shards, a shard tensor the weight_map does not list (or lists elsewhere).
// order: shard by shard (files sorted), each in its data-section order; metadata: the union of the
// shards' metadata (first shard wins on a clash).
SafeTensors load_safetensors_sharded(const std::string& index_json_path, Device device = Device::cpu());

}  // namespace hh
