// Weights of an HF model folder into a Module whose parameter names are HF's own.
// The folder holds model.safetensors, or model.safetensors.index.json and its shards (else a
// PyTorch pytorch_model.bin or pytorch_model.bin.index.json, read by core/torch_bin.h); f32, bf16
// and f16 tensors are cast to each parameter's dtype. A family passes a rename (the few names
// that differ: GPT-2's "transformer." prefix, old BERT "LayerNorm.gamma/beta"; "" drops a tensor,
// e.g. GPT-2's attn.bias masks) and a transform (GPT-2's Conv1D weights are stored (in, out)).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/prepacked.h"
#include "core/safetensors.h"
#include "nn/attention.h"
#include "nn/mixer.h"
#include "nn/module.h"

namespace hh::nn {

// How an imported model is built: the attention every layer uses (softmax as trained, or a feature
// map in one of the linear forms, whose new weights are drawn from `seed`), and where it lives.
struct HFModelOptions {
  Mixer mixer;  // softmax, or a feature map
  LinearForm form = LinearForm::chunked;
  int64_t chunk = 64;
  double eps = 1e-6;
  int64_t window = 64;  // hybrid mixers: the sliding window W
  // Layers (0-based) that keep softmax attention under a linear or hybrid mixer (RADLADS / LoLCATs'
  // kept layers); save_hf_model writes them to config.json's "hedgehog" section.
  std::vector<int64_t> softmax_layers;
  Gate gate = Gate::none;  // linear mixers: the gate on the state (config.json hedgehog.gate)
  GateOutput gate_output = GateOutput::normalizer;  // gated mixers (config.json hedgehog.gate_output)
  FeatureMapConfig feature_map;  // name/heads/head_dim are filled in per layer
  Device device = Device::cpu();
  DType dtype = DType::f32;  // parameter dtype after loading (the file may hold bf16/f16)
  // Every Linear's inference weights (nn::set_weight_format): f32, int8 quantized per output
  // channel, or bf16 (rounded), prepared at load time (CPU and f32 only; embeddings and norms stay f32).
  WeightFormat weights = WeightFormat::f32;
  // Inference apps (hf_run, hh_serve): prepare every Linear's weight at load (f32: packed, about
  // doubling their memory; int8 always is), so the first forward does not pay for it.
  bool prepare_weights = false;
  uint64_t seed = 0;
  // false: the HF weights are allocated but not drawn, because they are loaded next (load_hf_model
  // sets this; drawing 124M random numbers took longer than reading the file). New feature-map
  // weights are always drawn.
  bool draw_weights = true;
  // > 0: a base checkpoint (BertModel) gets a fresh classification head of this many labels, as
  // transformers' from_pretrained(num_labels=N) on it: the head (and a pooler the file lacks) is
  // drawn from `seed`, the rest loaded. The model is then the family's classifier.
  int64_t new_head_labels = 0;
};

// The options layer `layer` is built with: softmax (ungated) when it is one of softmax_layers.
HFModelOptions layer_options(const HFModelOptions& o, int64_t layer);
// softmax_layers must name distinct layers in [0, layers) and needs a linear mixer; errors start
// with `where`.
void check_softmax_layers(const HFModelOptions& o, int64_t layers, const std::string& where);

// The weight file(s) of a folder: model.safetensors, else model.safetensors.index.json with shards,
// else pytorch_model.bin, else pytorch_model.bin.index.json with shards.
// Errors name the folder when neither exists.
SafeTensors read_hf_weights(const std::string& folder);

using HFRename = std::function<std::string(const std::string& file_name)>;          // "" = not a weight
using HFTransform = std::function<Tensor(const std::string& model_name, const Tensor& t)>;  // may be empty

// Copies the file's tensors into `model`. Every parameter and buffer of the model must be given,
// except the attention feature maps' own (names containing ".feature_map.", new in conversion), and
// every file tensor must be used: otherwise one error lists both sets (and any shape mismatch),
// naming `origin`. Two file names renamed to the same model name are an error. Meant for a model
// just built: a parameter whose file tensor already has its dtype, device and a contiguous layout
// is REPLACED by that tensor (a view of the mapped file, no copy), so handles to the old parameter
// tensors taken before the call do not see the loaded values.
// `fresh` names the model tensors the file may lack (a new head): they keep their drawn values.
// I8 tensors are a quantized folder's Linear weights (nn/models/hf_int8.h): each with its scale is
// checked before anything is loaded, the Linear's weight gets the dequantized values (out, in), not
// transformed, and the int8 values and scales are installed in its WeightCache (weight_format int8).
void load_hf_weights(Module& model, const SafeTensors& weights, const std::string& origin, const HFRename& rename,
                     const HFTransform& transform = nullptr,
                     const std::function<bool(const std::string&)>& fresh = nullptr);

}  // namespace hh::nn
