#include "nn/transformer.h"

namespace hh::nn {

Norm::Norm(const std::string& kind, int64_t dim, double eps, Init init) {
  if (kind == "layernorm")
    ln = register_module("ln", std::make_shared<LayerNorm>(dim, eps, true, init));
  else if (kind == "rmsnorm")
    rms = register_module("rms", std::make_shared<RMSNorm>(dim, eps, init));
  else
    fail(str("norm: unknown kind '", kind, "' (expected layernorm or rmsnorm)"));
}

namespace {
AttentionConfig attention_config(const TransformerConfig& c, bool causal) {
  AttentionConfig a = c.attention;
  a.dim = c.dim;
  a.heads = c.heads;
  a.head_dim = c.head_dim;
  a.causal = causal;
  a.rope = c.positions == "rope";
  a.bias = c.bias;
  return a;
}
void check_config(const TransformerConfig& c) {
  HH_CHECK(c.vocab > 0 && c.dim > 0 && c.layers > 0 && c.heads > 0 && c.head_dim > 0 && c.mlp_hidden > 0,
           "transformer: sizes must be positive (vocab ", c.vocab, ", dim ", c.dim, ", layers ", c.layers, ", heads ",
           c.heads, ", head_dim ", c.head_dim, ", mlp ", c.mlp_hidden, ")");
  HH_CHECK(c.positions == "rope" || c.positions == "learned" || c.positions == "none",
           "transformer: positions must be rope, learned or none, got '", c.positions, "'");
  HH_CHECK(c.positions != "rope" || c.head_dim % 2 == 0, "transformer: RoPE needs an even head_dim, got ", c.head_dim);
  HH_CHECK(c.dropout >= 0 && c.dropout < 1, "transformer: dropout must be in [0,1), got ", c.dropout);
}

// h = x + r and norm(h): one fused op (add_layer_norm / add_rms_norm) when x and r agree in
// shape, else add then norm (under autocast the fused op casts a bf16 branch up, as norms do).
AddNormOut add_norm(const Tensor& x, const Tensor& r, const Norm& norm) {
  if (x.shape() != r.shape()) {
    Tensor h = add(x, r);
    return {h, norm.forward(h)};
  }
  if (norm.ln) return add_layer_norm(x, r, norm.ln->weight, norm.ln->bias, norm.ln->eps);
  return add_rms_norm(x, r, norm.rms->weight, norm.rms->eps);
}

// fc2(act(fc1(x))) with fc1's bias and a GELU fused (bias_gelu); other activations, a LoRA
// adapter or no bias take MLP::forward.
Tensor mlp_forward(const MLP& m, const Tensor& x) {
  const Linear& fc = *m.fc1;
  const bool gelu_act = m.act == Activation::gelu_erf || m.act == Activation::gelu_tanh;
  if (!gelu_act || !fc.bias.defined() || fc.lora_A) return m.forward(x);
  Tensor z = linear(x, fc.weight, Tensor(), fc.weight_cache, fc.weight_format);  // prepared when inferring
  return m.fc2->forward(bias_gelu(z, fc.bias, m.act == Activation::gelu_tanh ? "tanh" : "none"));
}
}  // namespace

TransformerBlock::TransformerBlock(const TransformerConfig& c, int64_t index, Init init) : pre_ln(c.pre_ln) {
  norm1 = register_module("norm1", std::make_shared<Norm>(c.norm, c.dim, c.norm_eps, init));
  AttentionConfig ac = attention_config(c, c.attention.causal);
  ac.feature_map.seed = c.seed * 1000003ULL + static_cast<uint64_t>(index);
  attn = register_module("attn", std::make_shared<Attention>(ac, init));
  norm2 = register_module("norm2", std::make_shared<Norm>(c.norm, c.dim, c.norm_eps, init));
  if (c.mlp == "swiglu")
    swiglu = register_module("mlp", std::make_shared<SwiGLU>(c.dim, c.mlp_hidden, init));
  else
    mlp = register_module("mlp", std::make_shared<MLP>(c.dim, c.mlp_hidden, parse_activation(c.mlp), c.bias, init));
  if (c.dropout > 0)
    drop = register_module("dropout", std::make_shared<Dropout>(c.dropout, c.seed * 7919ULL + static_cast<uint64_t>(index)));
}

Tensor TransformerBlock::feed_forward(const Tensor& x) const {
  return mlp ? mlp_forward(*mlp, x) : swiglu->forward(x);
}

Tensor TransformerBlock::forward(const Tensor& x, const Tensor& key_mask, TraceRequest* trace) {
  auto dr = [&](const Tensor& t) { return drop ? drop->forward(t) : t; };
  if (pre_ln) {
    AddNormOut a = add_norm(x, dr(attn->forward(norm1->forward(x), key_mask, trace)), *norm2);
    return add(a.h, dr(feed_forward(a.y)));
  }
  Tensor h = add_norm(x, dr(attn->forward(x, key_mask, trace)), *norm1).y;
  return add_norm(h, dr(feed_forward(h)), *norm2).y;
}

Tensor TransformerBlock::step(const Tensor& x, DecodeCache& state) {
  if (pre_ln) {
    AddNormOut a = add_norm(x, attn->step(norm1->forward(x), state), *norm2);
    return add(a.h, feed_forward(a.y));
  }
  Tensor h = add_norm(x, attn->step(x, state), *norm1).y;
  return add_norm(h, feed_forward(h), *norm2).y;
}

DecoderLM::DecoderLM(const TransformerConfig& c, Init init) : cfg(c) {
  check_config(c);
  cfg.attention.causal = true;
  embed = register_module("embed", std::make_shared<Embedding>(c.vocab, c.dim, init, 0.02));
  if (c.positions == "learned") pos_embed = register_module("pos_embed", std::make_shared<Embedding>(c.max_len, c.dim, init, 0.02));
  blocks = register_module("layers", std::make_shared<ModuleList<TransformerBlock>>());
  for (int64_t i = 0; i < c.layers; ++i) blocks->push_back(std::make_shared<TransformerBlock>(cfg, i, init));
  norm_f = register_module("norm", std::make_shared<Norm>(c.norm, c.dim, c.norm_eps, init));
  if (!c.tie_embeddings) lm_head = register_module("lm_head", std::make_shared<Linear>(c.dim, c.vocab, false, init));
}

Tensor DecoderLM::logits(const Tensor& h) const {
  Tensor n = cfg.pre_ln ? norm_f->forward(h) : h;
  return lm_head ? lm_head->forward(n) : linear(n, embed->weight);
}

Tensor DecoderLM::forward(const Tensor& ids, TraceRequest* trace) {
  HH_CHECK(ids.dim() == 2, "DecoderLM: expected ids (B,L), got ", ids.shape());
  const int64_t L = ids.size(1);
  Tensor h = embed->forward(ids);
  if (pos_embed) {
    HH_CHECK(L <= cfg.max_len, "DecoderLM: sequence length ", L, " exceeds max_len ", cfg.max_len);
    h = add(h, pos_embed->forward(arange(L, {DType::i64, ids.device()})));
  }
  for (const auto& b : *blocks) h = b->forward(h, Tensor(), trace);
  return logits(h);
}

Tensor DecoderLM::step(const Tensor& ids, std::vector<DecodeCache>& states) {
  HH_CHECK(ids.dim() == 2 && ids.size(1) == 1, "DecoderLM::step: expected ids (B,1), got ", ids.shape());
  if (states.empty()) states.resize(blocks->size());
  HH_CHECK(states.size() == blocks->size(), "DecoderLM::step: ", states.size(), " states for ", blocks->size(), " layers");
  Tensor h = embed->forward(ids);
  const int64_t pos = states[0].pos();
  if (pos_embed) {
    HH_CHECK(pos < cfg.max_len, "DecoderLM::step: position ", pos, " exceeds max_len ", cfg.max_len);
    h = add(h, pos_embed->forward(full({1}, static_cast<double>(pos), {DType::i64, ids.device()})));
  }
  for (size_t i = 0; i < blocks->size(); ++i) h = (*blocks)[i]->step(h, states[i]);
  return logits(h);
}

void DecoderLM::on_optimizer_step() {
  for (const auto& b : *blocks) b->attn->on_optimizer_step();
}

EncoderClassifier::EncoderClassifier(const TransformerConfig& c, int64_t classes, const std::string& pool, Init init)
    : cfg(c), pooling(pool) {
  check_config(c);
  HH_CHECK(classes > 1 || classes == 0, "EncoderClassifier: need at least 2 classes (or 0: no classifier), got ", classes);
  HH_CHECK(pool == "cls" || pool == "mean", "EncoderClassifier: pooling must be cls or mean, got '", pool, "'");
  // Bidirectional, except a gated linear mixer: its state is a recurrence, run left to right.
  cfg.attention.causal = cfg.attention.gate != Gate::none;
  if (!cfg.attention.causal && cfg.attention.form == LinearForm::chunked) cfg.attention.form = LinearForm::noncausal;
  embed = register_module("embed", std::make_shared<Embedding>(c.vocab, c.dim, init, 0.02));
  if (c.positions == "learned") pos_embed = register_module("pos_embed", std::make_shared<Embedding>(c.max_len, c.dim, init, 0.02));
  blocks = register_module("layers", std::make_shared<ModuleList<TransformerBlock>>());
  for (int64_t i = 0; i < c.layers; ++i) blocks->push_back(std::make_shared<TransformerBlock>(cfg, i, init));
  norm_f = register_module("norm", std::make_shared<Norm>(c.norm, c.dim, c.norm_eps, init));
  if (classes > 0) classifier = register_module("classifier", std::make_shared<Linear>(c.dim, classes, true, init));
}

Tensor EncoderClassifier::forward(const Tensor& ids, const Tensor& key_mask, TraceRequest* trace) {
  HH_CHECK(ids.dim() == 2, "EncoderClassifier: expected ids (B,L), got ", ids.shape());
  const int64_t L = ids.size(1);
  Tensor h = embed->forward(ids);
  if (pos_embed) {
    HH_CHECK(L <= cfg.max_len, "EncoderClassifier: sequence length ", L, " exceeds max_len ", cfg.max_len);
    h = add(h, pos_embed->forward(arange(L, {DType::i64, ids.device()})));
  }
  for (const auto& b : *blocks) h = b->forward(h, key_mask, trace);
  if (cfg.pre_ln) h = norm_f->forward(h);
  Tensor pooled;
  if (pooling == "cls") {
    pooled = select(h, 1, 0);
  } else if (key_mask.defined()) {
    Tensor m = unsqueeze(key_mask.to(h.dtype()), -1);  // (B,L,1)
    pooled = div(sum(mul(h, m), {1}), maximum(sum(m, {1}), 1.0));
  } else {
    pooled = mean(h, {1});
  }
  return classifier ? classifier->forward(pooled) : pooled;
}

}  // namespace hh::nn
