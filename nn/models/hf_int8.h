// Int8 HF folders (issue 37): a model's Linears saved quantized and read back exactly.
// A quantized folder is an HF folder whose config.json has
//   "quantization_config": {"quant_method": "hedgehog_int8", "bits": 8,
//                           "scheme": "symmetric per output channel", ...}
// and whose model.safetensors holds, for every Linear of the model, "<name>.weight" as an I8
// tensor (out, in) (the Linear's layout, also for GPT-2's Conv1D weights, which f32 files store
// (in, out)) with values in [-127, 127], and "<name>.weight_scale" F32 (out), each finite and > 0:
// weight ≈ values · scale per output row (core/prepacked.h's quantize_per_channel). Every other
// tensor (embeddings, norms, biases, a tied LM head's embedding) is stored as it was.
// transformers skips a quant_method it does not know (with a warning) and would read the int8 values
// as float weights, so config.json's model_type becomes "hedgehog_<family>" without an auto_map (as a
// gated folder's): Auto*.from_pretrained refuses the unknown model type (a class named directly,
// LlamaForCausalLM.from_pretrained, only warns and misreads them). The engine loads the folder
// with int8 weights equal to those quantized at load from the f32 folder: the values and
// scales are installed in each Linear's WeightCache (never re-quantized), and the Linear's f32
// weight holds the dequantized values q · s (4 bytes per weight besides the 1 of the int8 form),
// so the paths that read it (training, CUDA after a move, export) still run.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/prepacked.h"
#include "core/safetensors.h"
#include "nn/models/hf_config.h"
#include "nn/module.h"

namespace hh::nn {

constexpr const char* kInt8QuantMethod = "hedgehog_int8";
constexpr const char* kInt8ScaleSuffix = "_scale";  // "<name>.weight" + this: the weight's scales

// The weight format a folder stores, from its config.json's "quantization_config": f32 when absent,
// int8 for quant_method "hedgehog_int8" with bits 8. Another quant_method (GPTQ, AWQ, bitsandbytes
// ...), other bits or a malformed section is an error naming the file and the key.
WeightFormat hf_stored_weights(const HFConfig& config);
// The same, read from folder/config.json.
WeightFormat hf_folder_stored_weights(const std::string& folder);

// The weight format an app runs `folder` in, given its --weights value (`given`: set on the command
// line, not the default): a quantized folder runs in int8, and f32 asked for explicitly is an error
// saying why. The config is read (its errors name it).
WeightFormat folder_weights(const std::string& folder, WeightFormat asked, bool given, const std::string& flag);

// config_json (an HF config.json's text, `origin` names it in errors) with "quantization_config"
// set for `format`: the hedgehog_int8 section for int8; removed for f32 when it is ours (another
// quant_method is an error: the f32 weights written are not that method's).
std::string config_with_stored_weights(const std::string& config_json, const std::string& origin,
                                       WeightFormat format);

// The tensors of an int8 folder from the model's HF tensors (HFModel::hf_state_dict, same names as
// the model's parameters): every Linear's "<name>.weight" becomes its int8 values (out, in) I8
// followed by "<name>.weight_scale" (out) F32, taken from the Linear's int8 weight (its installed
// or prepared one: quantized now if it runs in f32), the rest as given. The model must be on the
// CPU in f32; an error names a Linear whose weight is not among the tensors.
std::vector<std::pair<std::string, Tensor>> int8_folder_tensors(const Module& model, NamedTensors hf_tensors);

// How errors about a folder's weights name them: folder/model.safetensors when the folder has that
// one file, else the folder (sharded weights).
std::string hf_weights_file(const std::string& folder);

// One int8 weight of a file: values (out, in) I8, scales (out) F32.
struct FileInt8Weight {
  Tensor values, scales;
  std::string scale_name;
};
// Every I8 tensor of `weights` with its scale, checked: the I8 tensor 2-d, named "<x>.weight",
// values in [-127, 127]; its "<x>.weight_scale" present, F32, of shape (out), every scale finite
// and > 0; no scale tensor without its I8 weight. Errors start "hf: <file>: " (folder/model.safetensors,
// or the folder when its weights are sharded) and name the tensor. Keyed by the I8 tensor's file name.
std::map<std::string, FileInt8Weight> find_int8_weights(const SafeTensors& weights, const std::string& folder);
// values · scales per row: (out, in) f32, on the CPU.
Tensor dequantize_int8(const FileInt8Weight& w);
// The weight in core/prepacked.h's int8 form (prepare_int8 of its values and scales).
std::shared_ptr<const PreparedWeight> prepare_file_int8(const FileInt8Weight& w);
// How many Linears of `model` hold an int8 weight installed from a file (WeightCache::install).
int64_t count_installed_int8(Module& model);

}  // namespace hh::nn
