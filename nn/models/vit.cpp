#include "nn/models/vit.h"

#include <cmath>
#include <vector>

#include "core/checked.h"
#include "core/error.h"
#include "core/generator.h"
#include "nn/models/param_count.h"

namespace hh::nn {

namespace {
// ViTModel's parameters without the optional pooler and classifier (a lower bound of what the
// folder must hold), every product and sum checked (the patch count (image_size / patch_size)^2 too).
ParamCount vit_params(const ViTConfig& v, const std::string& where) {
  ParamCount p("vit: " + where);
  const int64_t C = v.hidden_size, I = v.intermediate_size, side = v.image_size / v.patch_size;
  const std::string one = "vit: " + where + ": the parameters of one layer";
  // query, key, value, output dense: 4C^2 + C (+ 3C biases); two LayerNorms: 4C; intermediate and output: 2CI + I + C.
  int64_t layer = p.mul(p.mul(4, C, "4 x hidden_size"), C, "4 x hidden_size x hidden_size");
  for (int64_t part : {p.mul(v.qkv_bias ? 9 : 6, C, "9 x hidden_size"),
                       p.mul(2, p.mul(C, I, "hidden_size x intermediate_size"), "2 x hidden_size x intermediate_size"), I})
    layer = checked_add(layer, part, one);
  const int64_t patches = p.mul(side, side, "(image_size / patch_size)^2");
  p.add("image_size", v.image_size,
        p.mul(checked_add(patches, 2, "vit: " + where + ": (image_size / patch_size)^2 + 2"), C,
              "((image_size / patch_size)^2 + 2) x hidden_size"));  // positions, cls
  const int64_t kernel = p.mul(p.mul(v.num_channels, v.patch_size, "num_channels x patch_size"), v.patch_size,
                               "num_channels x patch_size^2");
  p.add("patch_size", v.patch_size, p.mul(checked_add(kernel, 1, "vit: " + where + ": the patch kernel"), C,
                                          "(num_channels x patch_size^2 + 1) x hidden_size"));
  p.add("num_hidden_layers", v.num_hidden_layers, p.mul(v.num_hidden_layers, layer, "num_hidden_layers x the parameters of one layer"));
  p.add("hidden_size", C, p.mul(2, C, "2 x hidden_size"));  // the final layernorm
  return p;
}
}  // namespace

ViTConfig ViTConfig::from_hf(const HFConfig& c) {
  ViTConfig v;
  v.hidden_size = c.get_positive_int("hidden_size");
  v.num_hidden_layers = c.get_positive_int("num_hidden_layers");
  v.num_attention_heads = c.get_positive_int("num_attention_heads");
  v.intermediate_size = c.get_positive_int("intermediate_size");
  v.image_size = c.get_positive_int("image_size");
  v.patch_size = c.get_positive_int("patch_size");
  v.num_channels = c.get_positive_int("num_channels");
  v.qkv_bias = c.get_bool("qkv_bias", true);
  v.layer_norm_eps = c.get_double("layer_norm_eps", 1e-12);
  v.hidden_act = hf_activation(c, "hidden_act", "gelu");
  v.pooler_output_size = c.get_int("pooler_output_size", v.hidden_size);
  HH_CHECK(v.image_size % v.patch_size == 0, c.origin(), ": \"patch_size\" (", v.patch_size,
           ") does not divide \"image_size\" (", v.image_size, ")");
  HH_CHECK(v.hidden_size % v.num_attention_heads == 0, c.origin(), ": \"hidden_size\" (", v.hidden_size,
           ") is not a multiple of \"num_attention_heads\" (", v.num_attention_heads, ")");
  v.num_labels = c.has("id2label") ? static_cast<int64_t>(c.child("id2label").keys().size()) : c.get_int("num_labels", 2);
  HH_CHECK(v.num_labels > 0, c.origin(), ": the number of labels (\"id2label\" / \"num_labels\") must be positive, got ",
           v.num_labels);
  vit_params(v, c.origin()).check_memory();  // before any layer is built
  return v;
}

PatchProjection::PatchProjection(int64_t channels, int64_t hidden, int64_t p, Init init) : patch(p) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(channels * p * p));  // torch's Conv2d default
  auto draw = [&](const Shape& shape) {
    return init.draw ? uniform(shape, -bound, bound, init.gen, {init.dtype, init.device})
                     : zeros(shape, {init.dtype, init.device});
  };
  register_parameter("weight", &weight, draw({hidden, channels, p, p}));
  register_parameter("bias", &bias, draw({hidden}));
}

Tensor PatchProjection::forward(const Tensor& pixels) const {
  const int64_t B = pixels.size(0), C = pixels.size(1), h = pixels.size(2) / patch, w = pixels.size(3) / patch;
  // (B,C,h,P,w,P) -> (B,h,w,C,P,P): one row per patch, in the order of the kernel's (C,P,P).
  Tensor x = permute(reshape(pixels, {B, C, h, patch, w, patch}), {0, 2, 4, 1, 3, 5});
  x = reshape(x, {B, h * w, C * patch * patch});
  return linear(x, reshape(weight, {weight.size(0), C * patch * patch}), bias);  // (B,N,hidden)
}

PatchEmbeddings::PatchEmbeddings(int64_t channels, int64_t hidden, int64_t patch, Init init) {
  projection = register_module("projection", std::make_shared<PatchProjection>(channels, hidden, patch, init));
}

ViTEmbeddings::ViTEmbeddings(const ViTConfig& cfg, Init init) {
  const int64_t C = cfg.hidden_size;
  register_parameter("cls_token", &cls_token, zeros({1, 1, C}, {init.dtype, init.device}));
  const Shape pos_shape{1, 1 + cfg.num_patches(), C};
  register_parameter("position_embeddings", &position_embeddings,
                     init.draw ? mul(randn(pos_shape, init.gen, {init.dtype, init.device}), 0.02)
                               : zeros(pos_shape, {init.dtype, init.device}));
  patch_embeddings =
      register_module("patch_embeddings", std::make_shared<PatchEmbeddings>(cfg.num_channels, C, cfg.patch_size, init));
}

Tensor ViTEmbeddings::forward(const Tensor& pixels) const {
  Tensor patches = patch_embeddings->projection->forward(pixels);  // (B,N,C)
  Tensor cls = expand(cls_token, {pixels.size(0), 1, cls_token.size(2)});
  return add(cat({cls, patches}, 1), position_embeddings);
}

ViTLayer::ViTLayer(const ViTConfig& cfg, const HFModelOptions& opts, Init init) : act(cfg.hidden_act) {
  const int64_t C = cfg.hidden_size, I = cfg.intermediate_size;
  const double eps = cfg.layer_norm_eps;
  attention = register_module("attention", std::make_shared<EncoderAttention>("attention", C, cfg.num_attention_heads,
                                                                              cfg.qkv_bias, false, eps, opts, init));
  intermediate = register_module("intermediate", std::make_shared<DenseBlock>(C, I, false, 0.0, init));
  output = register_module("output", std::make_shared<DenseBlock>(I, C, false, 0.0, init));
  layernorm_before = register_module("layernorm_before", std::make_shared<LayerNorm>(C, eps, true, init));
  layernorm_after = register_module("layernorm_after", std::make_shared<LayerNorm>(C, eps, true, init));
}

Tensor ViTLayer::forward(const Tensor& x, TraceRequest* trace) const {
  Tensor h = add(attention->forward(layernorm_before->forward(x), Tensor(), trace), x);
  return add(output->forward(activate(intermediate->forward(layernorm_after->forward(h)), act)), h);
}

ViTModel::ViTModel(const ViTConfig& c, const HFConfig& config, bool with_pooler, const HFModelOptions& opts, Init init)
    : HFModel("vit", "ViTModel", config, opts), cfg(c) {
  embeddings = register_module("embeddings", std::make_shared<ViTEmbeddings>(cfg, init));
  encoder = register_module("encoder", std::make_shared<LayerStack<ViTLayer>>());
  check_softmax_layers(opts, cfg.num_hidden_layers, "vit");
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i)
    encoder->layer->push_back(std::make_shared<ViTLayer>(cfg, layer_options(opts, i), init));
  layernorm = register_module("layernorm", std::make_shared<LayerNorm>(cfg.hidden_size, cfg.layer_norm_eps, true, init));
  if (with_pooler) {
    const std::string act = config.get_string("pooler_act", "tanh");
    HH_CHECK(act == "tanh", config.origin(), ": \"pooler_act\" = \"", act, "\" is not supported (only \"tanh\")");
    pooler = register_module("pooler", std::make_shared<DenseBlock>(cfg.hidden_size, cfg.pooler_output_size, false, 0.0, init));
  }
}

Tensor ViTModel::pool(const Tensor& last_hidden_state) const {
  HH_CHECK(pooler != nullptr, "vit: this ViTModel has no pooler (its file has no pooler weights)");
  return tanh(pooler->forward(select(last_hidden_state, 1, 0)));
}

Tensor ViTModel::forward(const Tensor& pixel_values, TraceRequest* trace, Tensor* before_norm) const {
  const Tensor& p = pixel_values;
  HH_CHECK(p.defined() && p.dim() == 4, "vit: pixel_values must be (B,C,H,W), got shape ",
           p.defined() ? p.shape() : Shape{});
  HH_CHECK(is_floating(p.dtype()), "vit: pixel_values must be floating, got ", p.dtype());
  HH_CHECK(p.size(1) == cfg.num_channels, "vit: pixel_values have ", p.size(1), " channels, the model num_channels = ",
           cfg.num_channels);
  HH_CHECK(p.size(2) == cfg.image_size && p.size(3) == cfg.image_size, "vit: image of ", p.size(2), "x", p.size(3),
           " pixels, the model takes image_size = ", cfg.image_size, " (", cfg.image_size, "x", cfg.image_size,
           "; resize the image first)");
  Tensor x = embeddings->forward(p.to(embeddings->cls_token.dtype()).to(embeddings->cls_token.device()));
  for (const auto& l : *encoder->layer) x = l->forward(x, trace);
  if (before_norm) *before_norm = x;
  return layernorm->forward(x);
}

ViTForImageClassification::ViTForImageClassification(const ViTConfig& cfg, const HFConfig& config,
                                                     const HFModelOptions& opts, Init init)
    : HFModel("vit", "ViTForImageClassification", config, opts) {
  vit = register_module("vit", std::make_shared<ViTModel>(cfg, config, false, opts, init));
  classifier = register_module("classifier", std::make_shared<Linear>(cfg.hidden_size, cfg.num_labels, true, init));
}

Tensor ViTForImageClassification::forward(const Tensor& pixel_values, TraceRequest* trace,
                                          Tensor* last_hidden_state) const {
  Tensor h = vit->forward(pixel_values, trace, last_hidden_state);
  return classifier->forward(select(h, 1, 0));  // the CLS token
}

std::shared_ptr<HFModel> make_vit(const HFConfig& c, const HFModelOptions& opts, const std::string& folder) {
  const std::string type = c.get_string("model_type", "vit");
  // "hedgehog_vit": a converted folder's (save_hf_model: for transformers' auto_map).
  HH_CHECK(type == "vit" || type == "hedgehog_vit", c.origin(), ": \"model_type\" = \"", type, "\" is not a ViT model");
  const ViTConfig cfg = ViTConfig::from_hf(c);
  const std::vector<std::string> archs = c.has("architectures") ? c.get_strings("architectures") : std::vector<std::string>{};
  const std::string arch = archs.empty() ? "ViTModel" : archs[0];
  const bool bare = arch == "ViTModel";
  HH_CHECK(bare || arch == "ViTForImageClassification", c.origin(), ": \"architectures\" = \"", arch,
           "\" is not supported (expected ViTForImageClassification or ViTModel)");
  const SafeTensors weights = read_hf_weights(folder);
  vit_params(cfg, c.origin()).check_stored(weights, folder, "num_hidden_layers", cfg.num_hidden_layers, "layer");  // before any layer is built
  Generator gen(opts.seed);
  Init init{gen, opts.device, opts.dtype, /*draw=*/false};  // the HF weights are all loaded next
  std::shared_ptr<HFModel> model;
  if (bare) {
    const bool pooler = weights.tensors.count("pooler.dense.weight") || weights.tensors.count("vit.pooler.dense.weight");
    model = std::make_shared<ViTModel>(cfg, c, pooler, opts, init);
  } else {
    model = std::make_shared<ViTForImageClassification>(cfg, c, opts, init);
  }
  auto rename = [bare](const std::string& n) { return bare && n.rfind("vit.", 0) == 0 ? n.substr(4) : n; };
  load_hf_weights(*model, weights, folder, rename);
  model->eval();
  return model;
}

}  // namespace hh::nn
