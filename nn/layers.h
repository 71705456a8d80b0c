// Basic layers: Linear (weight stored (out, in) like torch), Embedding, LayerNorm, RMSNorm,
// Dropout, activations, MLP and SwiGLU MLP, learned positions.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "core/prepacked.h"
#include "nn/module.h"

namespace hh::nn {

// Initialization draws from an explicit Generator (reproducible on every backend).
struct Init {
  Generator& gen;
  Device device = Device::cpu();
  DType dtype = DType::f32;
  // false: weights are allocated but not drawn (they are about to be overwritten, e.g. by an HF
  // import); layer-norm ones/zeros are still set. Feature maps always draw (their weights are new).
  bool draw = true;
};

class Dropout;

class Linear : public Module {
 public:
  // torch default init: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias.
  Linear(int64_t in, int64_t out, bool bias, Init init);
  // x (..., in) -> (..., out): linear(x, weight, bias), plus lora_scaling·lora_B(lora_A(dropout(x)))
  // when a LoRA adapter is attached.
  Tensor forward(const Tensor& x) const;
  int64_t in_features, out_features;
  Tensor weight;  // (out, in)
  Tensor bias;    // (out) or undefined
  // How forward multiplies by the weight when no gradient is recorded on the CPU (core/prepacked.h):
  // f32 packed once, int8 quantized once per output channel, or bf16; the prepared form is kept in
  // weight_cache and made again whenever the weight changes (any in-place write bumps its version).
  WeightFormat weight_format = WeightFormat::f32;
  mutable WeightCache weight_cache;

  // LoRA adapter, attached by apply_lora and removed by merge_lora (nn/lora.h). The parts are
  // registered as the children lora_A (weight (r, in)), lora_B (weight (out, r)) and, when given,
  // lora_dropout (no parameters), so their names are PEFT's: "<linear>.lora_A.weight".
  void attach_lora(std::shared_ptr<Linear> a, std::shared_ptr<Linear> b, std::shared_ptr<Dropout> dropout,
                   double scaling);
  void detach_lora();
  std::shared_ptr<Linear> lora_A, lora_B;  // null without an adapter
  std::shared_ptr<Dropout> lora_dropout;   // null when the adapter has no dropout
  double lora_scaling = 0;                 // alpha / r
};

class Embedding : public Module {
 public:
  // Init N(0, std) (torch uses std 1; GPT-style models pass 0.02).
  Embedding(int64_t num, int64_t dim, Init init, double std = 1.0);
  Tensor forward(const Tensor& ids) const { return embedding(weight, ids); }  // ids (...) -> (..., dim)
  Tensor weight;  // (num, dim)
};

// The LM head tied to a token embedding (GPT-2; Llama-family folders with tie_word_embeddings):
// h (..., C) -> logits (..., V) = h · embedding.weightᵀ, the weight multiplied as a Linear's is
// (weight_format and its prepared form), so a decoding step does not stream the largest matrix of
// a small model through the unprepared GEMV. No parameter of its own: the embedding's is read (the
// lookup itself always stays f32).
class TiedHead : public Module {
 public:
  explicit TiedHead(std::shared_ptr<Embedding> embedding);
  Tensor forward(const Tensor& h) const;
  const Tensor& embedding_weight() const { return embedding_->weight; }
  WeightFormat weight_format = WeightFormat::f32;
  mutable WeightCache weight_cache;

 private:
  std::shared_ptr<Embedding> embedding_;
};

// Sets weight_format on every Linear and TiedHead in m (itself included) and prepares each CPU f32
// weight now, so an int8 model is quantized once, at load time (a NaN or infinite weight is an
// error here), and an f32 one packed; an int8 weight installed from a quantized folder is kept as
// it is (int8) or dropped (f32). Returns how many it set.
int64_t set_weight_format(Module& m, WeightFormat format);

class LayerNorm : public Module {
 public:
  LayerNorm(int64_t dim, double eps, bool affine, Init init);
  Tensor forward(const Tensor& x) const { return layer_norm(x, weight, bias, eps); }
  double eps;
  Tensor weight, bias;  // (dim) each, undefined when !affine
};

class RMSNorm : public Module {
 public:
  RMSNorm(int64_t dim, double eps, Init init);
  Tensor forward(const Tensor& x) const { return rms_norm(x, weight, eps); }
  double eps;
  Tensor weight;  // (dim)
};

class Dropout : public Module {
 public:
  // The mask stream comes from this module's own Generator (saved in checkpoints by its state).
  Dropout(double p, uint64_t seed);
  Tensor forward(const Tensor& x) { return dropout(x, p, is_training(), gen); }
  double p;
  Generator gen;
};

enum class Activation { gelu_erf, gelu_tanh, relu, silu };
Activation parse_activation(const std::string& name);
Tensor activate(const Tensor& x, Activation a);

// fc2(act(fc1(x))), names fc1/fc2.
class MLP : public Module {
 public:
  MLP(int64_t dim, int64_t hidden, Activation act, bool bias, Init init);
  Tensor forward(const Tensor& x) const { return fc2->forward(activate(fc1->forward(x), act)); }
  Activation act;
  std::shared_ptr<Linear> fc1, fc2;
};

// down(silu(gate(x)) * up(x)), Llama names gate_proj/up_proj/down_proj.
class SwiGLU : public Module {
 public:
  SwiGLU(int64_t dim, int64_t hidden, Init init);
  Tensor forward(const Tensor& x) const {
    return down_proj->forward(mul(silu(gate_proj->forward(x)), up_proj->forward(x)));
  }
  std::shared_ptr<Linear> gate_proj, up_proj, down_proj;
};

}  // namespace hh::nn
