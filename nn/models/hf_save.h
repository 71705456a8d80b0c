// Writing a (converted) model back as an HF folder: config.json is the source folder's config plus
// a "hedgehog" section naming the attention (mixer, linear form, feature-map settings), so that
// load_hf_model rebuilds the same model from the folder; model.safetensors holds the weights under
// HF names and layouts (HFModel::hf_state_dict) plus the ".feature_map." tensors; the tokenizer
// and preprocessor files of the source folder are copied. The folder is written all or nothing:
// the files go to a hidden stage folder <out>/.hh-export.<pid>.<n> and are swapped in when all are
// complete (config.json last), so a failure (a full disk) leaves a previous export as it was, and
// a stage left by a killed process is finished or removed by the next export into the folder.
// model.safetensors carries a checksum per tensor (core/safetensors.h).
// A converted Llama, Mistral, Qwen2, Qwen3 or GPT-2 folder (a linear or hybrid mixer), BERT or ViT
// folder (a linear mixer) also loads in transformers: it carries modeling_hedgehog.py
// (nn/models/export/, embedded by the build), config.json's model_type becomes "hedgehog_<family>"
// ("hedgehog_llama", "hedgehog_bert", ...) and its "auto_map" names that module's classes
// (AutoModelForCausalLM; AutoModel, and AutoModelForSequenceClassification /
// AutoModelForImageClassification for a classifier), so Auto*.from_pretrained(folder,
// trust_remote_code=True) computes the engine's outputs. A feature map that module does not
// implement (its FEATURE_MAPS) is refused. Gated folders and hybrid encoders keep the
// "hedgehog_<family>" model_type without an auto_map (transformers refuses them); other families
// load in the engine only.
#pragma once
#include <string>
#include <vector>

#include "nn/models/hf_model.h"

namespace hh::nn {

// LoRA adapters must be merged first (an error says so). The weights are written in their own dtype,
// or with weights = int8 as a quantized folder (nn/models/hf_int8.h: every Linear's int8 values and
// scales, config.json's quantization_config; the model on the CPU in f32). An f32 save drops a
// hedgehog_int8 quantization_config of the source config.
void save_hf_model(const HFModel& model, const std::string& out_folder, const std::string& source_folder,
                   WeightFormat weights = WeightFormat::f32);
// The same with the source config.json given as text (config_origin names it in errors) and the
// tokenizer files copied from files_folder ("" = none): a model trained from scratch.
void save_hf_model(const HFModel& model, const std::string& out_folder, const std::string& config_json,
                   const std::string& config_origin, const std::string& files_folder,
                   WeightFormat weights = WeightFormat::f32);

// config_json (an HF config.json's text) with the "hedgehog" section of `options` (replaced; none
// for softmax) and, for a converted folder of a family above, the model_type and auto_map that point
// transformers to modeling_hedgehog.py: the config.json save_hf_model writes. Errors name
// config_origin.
std::string config_with_hedgehog_section(const std::string& config_json, const std::string& config_origin,
                                         const HFModelOptions& options);
namespace internal {
// The feature-map names of a modeling_hedgehog.py text (its FEATURE_MAPS = ("elu", ...) line):
// what a converted folder may use. An error when the line is missing or malformed.
std::vector<std::string> exported_feature_maps(const std::string& module_text);
}  // namespace internal

// The "hedgehog" section of a config.json, applied to `options` (mixer, form, chunk, eps, feature
// map) when `config` has one; a malformed section is an error naming the file and the key.
void apply_hedgehog_section(const HFConfig& config, HFModelOptions& options);

}  // namespace hh::nn
