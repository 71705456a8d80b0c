// A restricted unpickler for PyTorch state dicts (core/torch_bin.h). It interprets the pickle
// opcodes torch.save emits (protocol 2, and the protocol 4 forms FRAME, MEMOIZE, SHORT_BINUNICODE,
// STACK_GLOBAL) into a tree of plain values, and never runs or imports anything: a GLOBAL is
// accepted only from a fixed allow-list (collections.OrderedDict, torch._utils._rebuild_tensor_v2,
// torch._utils._rebuild_parameter, torch.<Float|Half|BFloat16|Double|Long|Int|Byte|Bool>Storage),
// and "calling" one (REDUCE) only builds a value of this file's own kinds. Any other GLOBAL and any
// other opcode is an hh::Error naming it. Nesting depth, the number of values and every length are
// bounded; storages (BINPERSID) are kept as references (key, dtype, element count) for the caller
// to resolve, tensors as (storage, offset, size, stride) checked to lie inside their storage.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace hh::torch_pickle {

enum class Kind : uint8_t { none, boolean, integer, big_integer, floating, string, tuple, list, dict, global, storage, tensor };

// The allowed globals.
enum class Global : uint8_t { ordered_dict, rebuild_tensor_v2, rebuild_parameter, storage_type };

struct Value {
  Kind kind = Kind::none;
  bool boolean = false;
  int64_t integer = 0;         // integer; tensor: storage offset (elements); storage: element count
  double floating = 0;
  std::string text;            // string; big_integer: its LONG1 bytes (little-endian); storage: key
  std::vector<uint32_t> items;  // tuple, list: elements; dict: key, value, key, value, ...
  Global global = Global::ordered_dict;
  DType dtype = DType::f32;    // storage type global, storage, tensor
  uint32_t storage = 0;        // tensor: index of its storage value
  std::vector<int64_t> size, stride;  // tensor
  int depth = 1;               // nesting depth (containers)
};

struct Pickle {
  std::vector<Value> values;  // the root and everything it refers to (indices into this vector)
  uint32_t root = 0;
  uint64_t end = 0;  // offset just past the STOP opcode
};

// Limits: containers nested deeper than kMaxDepth (values or MARKs), more than kMaxValues values
// or memo entries, tensors of more than kMaxDims dimensions are errors. (Every other length is
// bounded by the bytes left in the pickle.)
constexpr int kMaxDepth = 100;
constexpr uint64_t kMaxValues = uint64_t(1) << 22;
constexpr size_t kMaxDims = 64;

// Reads one pickle from data[start, size), up to and including its STOP. A persistent id (a
// storage) is ('storage', <storage type>, key, location, element count) as the zip format writes
// it, or the same with a sixth item None (the legacy format's view metadata).
// Errors (hh::Error): "pickle byte <offset>: <what>".
Pickle unpickle(const unsigned char* data, uint64_t size, uint64_t start = 0);

}  // namespace hh::torch_pickle
