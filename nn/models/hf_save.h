// Writing a (converted) model back as an HF folder: config.json is the source folder's config plus
// a "hedgehog" section naming the attention (mixer, linear form, feature-map settings), so that
// load_hf_model rebuilds the same model from the folder; model.safetensors holds the weights under
// HF names and layouts (HFModel::hf_state_dict) plus the ".feature_map." tensors; the tokenizer
// and preprocessor files of the source folder are copied. The folder is written all or nothing:
// the files go to a hidden stage folder <out>/.hh-export.<pid>.<n> and are swapped in when all are
// complete (config.json last), so a failure (a full disk) leaves a previous export as it was, and
// a stage left by a killed process is finished or removed by the next export into the folder.
// model.safetensors carries a checksum per tensor (core/safetensors.h).
#pragma once
#include <string>

#include "nn/models/hf_model.h"

namespace hh::nn {

// LoRA adapters must be merged first (an error says so). The weights are written in their own dtype.
void save_hf_model(const HFModel& model, const std::string& out_folder, const std::string& source_folder);
// The same with the source config.json given as text (config_origin names it in errors) and the
// tokenizer files copied from files_folder ("" = none): a model trained from scratch.
void save_hf_model(const HFModel& model, const std::string& out_folder, const std::string& config_json,
                   const std::string& config_origin, const std::string& files_folder);

// config_json (an HF config.json's text) with the "hedgehog" section of `options` (replaced; none
// for softmax): the config.json save_hf_model writes. Errors name config_origin.
std::string config_with_hedgehog_section(const std::string& config_json, const std::string& config_origin,
                                         const HFModelOptions& options);
// The "hedgehog" section of a config.json, applied to `options` (mixer, form, chunk, eps, feature
// map) when `config` has one; a malformed section is an error naming the file and the key.
void apply_hedgehog_section(const HFConfig& config, HFModelOptions& options);

}  // namespace hh::nn
