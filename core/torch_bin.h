// PyTorch checkpoint files (pytorch_model.bin) read into the same table as safetensors, without
// running any of their code. Two formats, told apart by their first bytes:
// - the zip archive torch.save writes since 1.6: <name>/data.pkl (a pickle of the state dict whose
//   tensors refer to storages by key), <name>/data/<key> (each storage's raw bytes, stored),
//   <name>/byteorder ("little"; "big" is refused), <name>/version;
// - the legacy format (torch.save(..., _use_new_zipfile_serialization=False)): five pickles in a
//   row (magic number, protocol version 1001, system info, the state dict, the storage keys), then
//   each storage as an 8-byte element count and its bytes.
// The pickles go through core/torch_pickle.h (an allow-list of globals, no code run). The state
// dict must be a dict (or OrderedDict) of string -> tensor (f32/f16/bf16/f64/i64/i32/u8/bool).
// A tensor that is the only user of its storage and contiguous is a view of the file's bytes (no
// copy, as load_safetensors); shared storages (tied weights) and strided views are copied into
// contiguous tensors of their own, so no two loaded tensors share memory. Every size is checked:
// a storage's element count x element size must equal its record, a tensor must lie inside its
// storage, and the views copied may not add up to more than 4 x the file size.
// Errors: hh::Error "torch: <path>: <what>".
#pragma once
#include <string>

#include "core/safetensors.h"

namespace hh {

// Reads a checkpoint file (either format) into CPU tensors; order = the state dict's order.
SafeTensors load_torch_bin(const std::string& path);
// The same from bytes in memory; `origin` names them in errors.
SafeTensors parse_torch_bin(const std::string& bytes, const std::string& origin);
// A sharded checkpoint: pytorch_model.bin.index.json ({"weight_map": {name: shard file}}) and its
// shards, with the checks of load_safetensors_sharded (every listed tensor in its shard, no tensor
// in two shards or unlisted).
SafeTensors load_torch_bin_sharded(const std::string& index_json_path);

}  // namespace hh
