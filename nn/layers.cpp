#include "nn/layers.h"

#include <cmath>
#include <utility>

namespace hh::nn {

Linear::Linear(int64_t in, int64_t out, bool use_bias, Init init) : in_features(in), out_features(out) {
  HH_CHECK(in > 0 && out > 0, "Linear: sizes must be positive, got in=", in, " out=", out);
  double bound = 1.0 / std::sqrt(static_cast<double>(in));
  auto draw = [&](const Shape& s) {
    return init.draw ? uniform(s, -bound, bound, init.gen, {init.dtype, init.device}) : empty(s, {init.dtype, init.device});
  };
  register_parameter("weight", &weight, draw({out, in}));
  if (use_bias) register_parameter("bias", &bias, draw({out}));
}

Tensor Linear::forward(const Tensor& x) const {
  Tensor y = linear(x, weight, bias, weight_cache, weight_format);
  if (!lora_A) return y;
  return add(y, mul(lora_B->forward(lora_A->forward(lora_dropout ? lora_dropout->forward(x) : x)), lora_scaling));
}

void Linear::attach_lora(std::shared_ptr<Linear> a, std::shared_ptr<Linear> b, std::shared_ptr<Dropout> dropout,
                         double scaling) {
  HH_CHECK(!lora_A, "Linear: a LoRA adapter is already attached");
  HH_CHECK(a && b && a->in_features == in_features && b->out_features == out_features &&
               a->out_features == b->in_features,
           "Linear::attach_lora: adapter shapes do not fit a Linear ", in_features, " -> ", out_features);
  lora_A = register_module("lora_A", std::move(a));
  lora_B = register_module("lora_B", std::move(b));
  if (dropout) lora_dropout = register_module("lora_dropout", std::move(dropout));
  lora_scaling = scaling;
}

void Linear::detach_lora() {
  HH_CHECK(lora_A, "Linear::detach_lora: no LoRA adapter attached");
  unregister_module("lora_A");
  unregister_module("lora_B");
  if (lora_dropout) unregister_module("lora_dropout");
  lora_A.reset();
  lora_B.reset();
  lora_dropout.reset();
  lora_scaling = 0;
}

TiedHead::TiedHead(std::shared_ptr<Embedding> embedding) : embedding_(std::move(embedding)) {
  HH_CHECK(embedding_ != nullptr, "TiedHead: no embedding");
}

Tensor TiedHead::forward(const Tensor& h) const {
  return linear(h, embedding_->weight, Tensor(), weight_cache, weight_format);
}

int64_t set_weight_format(Module& m, WeightFormat format) {
  int64_t n = 0;
  for (auto& [name, mod] : m.named_modules()) {
    Module* one = mod ? mod.get() : &m;
    WeightFormat* f = nullptr;
    WeightCache* cache = nullptr;
    const Tensor* weight = nullptr;
    if (auto* lin = dynamic_cast<Linear*>(one)) {
      f = &lin->weight_format, cache = &lin->weight_cache, weight = &lin->weight;
    } else if (auto* head = dynamic_cast<TiedHead*>(one)) {
      f = &head->weight_format, cache = &head->weight_cache, weight = &head->embedding_weight();
    } else {
      continue;
    }
    *f = format;
    // An int8 weight installed from a quantized folder (nn/models/hf_int8.h) is kept: quantizing
    // its dequantized f32 values again is not guaranteed to give back the file's values.
    if (!(format == WeightFormat::int8 && cache->installed_for(*weight))) cache->clear();
    if (weight->device().is_cpu() && weight->dtype() == DType::f32) {  // f32 on CUDA: nothing to prepare
      try {
        cache->get(*weight, format);
      } catch (const Error& e) {
        fail(str(name.empty() ? "Linear" : name, ": ", e.what()));
      }
    }
    ++n;
  }
  return n;
}

Embedding::Embedding(int64_t num, int64_t dim, Init init, double std) {
  HH_CHECK(num > 0 && dim > 0, "Embedding: sizes must be positive, got ", num, "x", dim);
  register_parameter("weight", &weight,
                     init.draw ? mul(randn({num, dim}, init.gen, {init.dtype, init.device}), std)
                               : empty({num, dim}, {init.dtype, init.device}));
}

LayerNorm::LayerNorm(int64_t dim, double e, bool affine, Init init) : eps(e) {
  if (affine) {
    register_parameter("weight", &weight, ones({dim}, {init.dtype, init.device}));
    register_parameter("bias", &bias, zeros({dim}, {init.dtype, init.device}));
  }
}

RMSNorm::RMSNorm(int64_t dim, double e, Init init) : eps(e) {
  register_parameter("weight", &weight, ones({dim}, {init.dtype, init.device}));
}

Dropout::Dropout(double prob, uint64_t seed) : p(prob), gen(seed) {
  HH_CHECK(p >= 0.0 && p < 1.0, "Dropout: p must be in [0, 1), got ", p);
}

Activation parse_activation(const std::string& name) {
  if (name == "gelu") return Activation::gelu_erf;
  if (name == "gelu_new" || name == "gelu_tanh" || name == "gelu_pytorch_tanh") return Activation::gelu_tanh;
  if (name == "relu") return Activation::relu;
  if (name == "silu" || name == "swish") return Activation::silu;
  fail(str("activation: unknown name '", name, "' (expected gelu, gelu_new, gelu_tanh, gelu_pytorch_tanh, relu, silu, swish)"));
}

Tensor activate(const Tensor& x, Activation a) {
  switch (a) {
    case Activation::gelu_erf: return gelu(x, "none");
    case Activation::gelu_tanh: return gelu(x, "tanh");
    case Activation::relu: return relu(x);
    case Activation::silu: return silu(x);
  }
  return x;
}

MLP::MLP(int64_t dim, int64_t hidden, Activation a, bool bias, Init init) : act(a) {
  fc1 = register_module("fc1", std::make_shared<Linear>(dim, hidden, bias, init));
  fc2 = register_module("fc2", std::make_shared<Linear>(hidden, dim, bias, init));
}

SwiGLU::SwiGLU(int64_t dim, int64_t hidden, Init init) {
  gate_proj = register_module("gate_proj", std::make_shared<Linear>(dim, hidden, false, init));
  up_proj = register_module("up_proj", std::make_shared<Linear>(dim, hidden, false, init));
  down_proj = register_module("down_proj", std::make_shared<Linear>(hidden, dim, false, init));
}

}  // namespace hh::nn
