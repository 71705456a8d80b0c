#include "nn/models/llama.h"

#include <utility>

#include "core/checked.h"
#include "core/error.h"
#include "nn/models/param_count.h"
#include "nn/rope.h"

namespace hh::nn {

namespace {
// LlamaForCausalLM's parameters, every product and sum checked (the heads x head_dim products too).
ParamCount llama_params(const LlamaConfig& c, const std::string& where) {
  ParamCount p("llama: " + where);
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  const int64_t q = p.mul(c.num_attention_heads, c.head_dim, "num_attention_heads x head_dim");
  const int64_t kv = p.mul(c.num_key_value_heads, c.head_dim, "num_key_value_heads x head_dim");
  const std::string one = "llama: " + where + ": the parameters of one layer";
  // q_proj and o_proj: 2 C q; k_proj, v_proj: 2 C kv; the MLP: 3 C I; two norms: 2C; biases.
  int64_t layer = p.mul(p.mul(2, C, "2 x hidden_size"), q, "2 x hidden_size x num_attention_heads x head_dim");
  layer = checked_add(layer, p.mul(p.mul(2, C, "2 x hidden_size"), kv, "2 x hidden_size x num_key_value_heads x head_dim"), one);
  layer = checked_add(layer, p.mul(p.mul(3, C, "3 x hidden_size"), I, "3 x hidden_size x intermediate_size"), one);
  layer = checked_add(layer, p.mul(2, C, "2 x hidden_size"), one);
  if (c.attention_bias) layer = checked_add(layer, checked_add(checked_add(q, p.mul(2, kv, "2 x kv"), one), C, one), one);
  if (c.mlp_bias) layer = checked_add(layer, checked_add(p.mul(2, I, "2 x intermediate_size"), C, one), one);
  const int64_t embed = p.mul(c.vocab_size, C, "vocab_size x hidden_size");
  p.add("vocab_size", c.vocab_size, c.tie_word_embeddings ? embed : p.mul(2, embed, "2 x vocab_size x hidden_size"));
  p.add("num_hidden_layers", c.num_hidden_layers, p.mul(c.num_hidden_layers, layer, "num_hidden_layers x the parameters of one layer"));
  p.add("hidden_size", C, C);  // the final norm
  return p;
}

// rope_scaling (transformers 4) or rope_parameters (transformers 5): only the plain rotation is
// implemented, so any other type (linear, dynamic, yarn, llama3, ...) is refused by name.
void check_rope_kind(const HFConfig& config, const std::string& key) {
  if (!config.has(key)) return;
  const HFConfig rope = config.child(key);
  for (const char* type_key : {"rope_type", "type"}) {
    if (!rope.has(type_key)) continue;
    const std::string type = rope.get_string(type_key);
    HH_CHECK(type == "default", "llama: ", rope.origin(), ": ", type_key, " '", type,
             "' is not supported (only \"default\" RoPE)");
  }
  HH_CHECK(rope.get_double("partial_rotary_factor", 1.0) == 1.0, "llama: ", rope.origin(),
           ": partial_rotary_factor other than 1 is not supported");
}
}  // namespace

LlamaConfig LlamaConfig::from_hf(const HFConfig& config) {
  LlamaConfig c;
  const auto where = config.origin();
  c.vocab_size = config.get_int("vocab_size");
  c.hidden_size = config.get_int("hidden_size");
  c.intermediate_size = config.get_int("intermediate_size");
  c.num_hidden_layers = config.get_int("num_hidden_layers");
  c.num_attention_heads = config.get_int("num_attention_heads");
  c.num_key_value_heads = config.get_int("num_key_value_heads", c.num_attention_heads);
  c.max_position_embeddings = config.get_int("max_position_embeddings");
  HH_CHECK(c.vocab_size > 0 && c.hidden_size > 0 && c.intermediate_size > 0 && c.num_hidden_layers > 0 &&
               c.num_attention_heads > 0 && c.num_key_value_heads > 0 && c.max_position_embeddings > 0,
           "llama: ", where, ": sizes, layer and head counts must be positive");
  HH_CHECK(c.num_attention_heads % c.num_key_value_heads == 0, "llama: ", where, ": num_attention_heads ",
           c.num_attention_heads, " is not a multiple of num_key_value_heads ", c.num_key_value_heads);
  if (config.has("head_dim")) {
    c.head_dim = config.get_int("head_dim");
  } else {
    HH_CHECK(c.hidden_size % c.num_attention_heads == 0, "llama: ", where, ": hidden_size ", c.hidden_size,
             " is not a multiple of num_attention_heads ", c.num_attention_heads, " (and no head_dim is given)");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  HH_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0, "llama: ", where, ": head_dim must be positive and even, got ",
           c.head_dim);
  c.rms_norm_eps = config.get_double("rms_norm_eps", 1e-6);
  c.hidden_act = hf_activation(config, "hidden_act", "silu");
  c.attention_bias = config.get_bool("attention_bias", false);
  c.mlp_bias = config.get_bool("mlp_bias", false);
  c.tie_word_embeddings = config.get_bool("tie_word_embeddings", false);
  check_rope_kind(config, "rope_scaling");
  check_rope_kind(config, "rope_parameters");
  if (config.has("rope_theta"))
    c.rope_theta = config.get_double("rope_theta");
  else if (config.has("rope_parameters"))
    c.rope_theta = config.child("rope_parameters").get_double("rope_theta", 10000.0);
  HH_CHECK(c.rope_theta > 0, "llama: ", where, ": rope_theta must be positive, got ", c.rope_theta);
  llama_params(c, where).check_memory();  // before any layer is built
  return c;
}

LlamaAttention::LlamaAttention(const LlamaConfig& c, const HFModelOptions& o, Init init)
    : heads_(c.num_attention_heads), kv_heads_(c.num_key_value_heads), head_dim_(c.head_dim), theta_(c.rope_theta) {
  const int64_t C = c.hidden_size;
  const bool bias = c.attention_bias;
  q_proj = register_module("q_proj", std::make_shared<Linear>(C, heads_ * head_dim_, bias, init));
  k_proj = register_module("k_proj", std::make_shared<Linear>(C, kv_heads_ * head_dim_, bias, init));
  v_proj = register_module("v_proj", std::make_shared<Linear>(C, kv_heads_ * head_dim_, bias, init));
  o_proj = register_module("o_proj", std::make_shared<Linear>(heads_ * head_dim_, C, bias, init));
  if (o.mixer.is_linear())
    feature_map =
        register_module("feature_map", make_mixer_feature_map(o.mixer, o.feature_map, heads_, head_dim_, init));
  HH_CHECK(o.gate == Gate::none, "llama: gate '", name(o.gate), "' is not wired into this family yet (gpt2 has it)");
  mixer = AttentionMixer(MixerConfig{o.mixer, true, o.form, o.chunk, o.eps, o.window}, feature_map);
}

void LlamaAttention::project(const Tensor& x, int64_t pos, Tensor& q, Tensor& k, Tensor& v) const {
  const int64_t B = x.size(0), L = x.size(1), rep = heads_ / kv_heads_;
  auto heads = [&](const Tensor& t, int64_t h) { return transpose(reshape(t, {B, L, h, head_dim_}), 1, 2); };
  // (B,Hkv,L,D) -> (B,H,L,D): query head i reads kv head i / rep, as HF's repeat_kv.
  auto repeat = [&](const Tensor& t) {
    if (rep == 1) return t;
    return reshape(expand(unsqueeze(t, 2), {B, kv_heads_, rep, L, head_dim_}), {B, heads_, L, head_dim_});
  };
  q = apply_rope(heads(q_proj->forward(x), heads_), pos, theta_);
  k = repeat(apply_rope(heads(k_proj->forward(x), kv_heads_), pos, theta_));
  v = repeat(heads(v_proj->forward(x), kv_heads_));
}

Tensor LlamaAttention::merge(const Tensor& y) const {
  const int64_t B = y.size(0), L = y.size(2);
  return o_proj->forward(reshape(transpose(y, 1, 2), {B, L, heads_ * head_dim_}));
}

Tensor LlamaAttention::forward(const Tensor& x, TraceRequest* trace) const {
  Tensor q, k, v;
  project(x, 0, q, k, v);
  return merge(mixer.forward(q, k, v, Tensor(), trace));
}

Tensor LlamaAttention::step(const Tensor& x, DecodeCache& cache) const {
  Tensor q, k, v;
  project(x, cache.pos(), q, k, v);
  return merge(mixer.step(q, k, v, cache));
}

LlamaMLP::LlamaMLP(const LlamaConfig& c, Init init) : act(c.hidden_act) {
  gate_proj = register_module("gate_proj", std::make_shared<Linear>(c.hidden_size, c.intermediate_size, c.mlp_bias, init));
  up_proj = register_module("up_proj", std::make_shared<Linear>(c.hidden_size, c.intermediate_size, c.mlp_bias, init));
  down_proj = register_module("down_proj", std::make_shared<Linear>(c.intermediate_size, c.hidden_size, c.mlp_bias, init));
}

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& c, const HFModelOptions& o, Init init) {
  input_layernorm = register_module("input_layernorm", std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps, init));
  self_attn = register_module("self_attn", std::make_shared<LlamaAttention>(c, o, init));
  post_attention_layernorm =
      register_module("post_attention_layernorm", std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps, init));
  mlp = register_module("mlp", std::make_shared<LlamaMLP>(c, init));
}

namespace {
// h = x + r and norm(h): one fused op (add_rms_norm) when x and r agree in shape, else add then
// norm (under autocast the fused op casts a bf16 branch up, as norms do).
AddNormOut add_rms(const Tensor& x, const Tensor& r, const RMSNorm& norm) {
  if (x.shape() != r.shape()) {
    Tensor h = add(x, r);
    return {h, norm.forward(h)};
  }
  return add_rms_norm(x, r, norm.weight, norm.eps);
}
}  // namespace

// The residual add after attention and post_attention_layernorm are one fused op (add_rms).
Tensor LlamaDecoderLayer::forward(const Tensor& x, TraceRequest* trace) const {
  AddNormOut a = add_rms(x, self_attn->forward(input_layernorm->forward(x), trace), *post_attention_layernorm);
  return add(a.h, mlp->forward(a.y));
}

Tensor LlamaDecoderLayer::step(const Tensor& x, DecodeCache& cache) const {
  AddNormOut a = add_rms(x, self_attn->step(input_layernorm->forward(x), cache), *post_attention_layernorm);
  return add(a.h, mlp->forward(a.y));
}

LlamaModel::LlamaModel(const LlamaConfig& c, const HFModelOptions& o, Init init) {
  embed_tokens = register_module("embed_tokens", std::make_shared<Embedding>(c.vocab_size, c.hidden_size, init, 0.02));
  layers = register_module("layers", std::make_shared<ModuleList<LlamaDecoderLayer>>());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(std::make_shared<LlamaDecoderLayer>(c, o, init));
  norm = register_module("norm", std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps, init));
}

LlamaForCausalLM::LlamaForCausalLM(const HFConfig& config, const HFModelOptions& options)
    : CausalLM("llama", "LlamaForCausalLM", config, options), cfg(LlamaConfig::from_hf(config)) {
  Generator gen(options.seed);
  Init init{gen, Device::cpu(), DType::f32, options.draw_weights};
  model = register_module("model", std::make_shared<LlamaModel>(cfg, options, init));
  if (!cfg.tie_word_embeddings)
    lm_head = register_module("lm_head", std::make_shared<Linear>(cfg.hidden_size, cfg.vocab_size, false, init));
}

Tensor LlamaForCausalLM::head(const Tensor& h) const {
  return lm_head ? lm_head->forward(h) : linear(h, model->embed_tokens->weight);
}

Tensor LlamaForCausalLM::embed(const Tensor& ids) const {
  check_token_ids(ids, 0, cfg.max_position_embeddings, "llama");
  return model->embed_tokens->forward(ids);
}

Tensor LlamaForCausalLM::hidden(const Tensor& ids, TraceRequest* trace) {
  Tensor x = embed(ids);
  for (const auto& layer : *model->layers) x = layer->forward(x, trace);
  return model->norm->forward(x);
}

Tensor LlamaForCausalLM::forward(const Tensor& ids, TraceRequest* trace) { return head(hidden(ids, trace)); }

DecodeState LlamaForCausalLM::start_decoding() const {
  DecodeState s;
  s.layers.resize(static_cast<size_t>(cfg.num_hidden_layers));
  return s;
}

Tensor LlamaForCausalLM::step(const Tensor& ids, DecodeState& state) {
  HH_CHECK(ids.defined() && ids.dim() == 2 && ids.size(1) == 1, "llama step: expected ids (B,1), got ",
           ids.defined() ? str(ids.shape()) : std::string("an undefined tensor"));
  check_token_ids(ids, state.pos, cfg.max_position_embeddings, "llama step");
  HH_CHECK(state.layers.size() == model->layers->size(), "llama step: the DecodeState has ", state.layers.size(),
           " layers, the model ", model->layers->size(), " (use start_decoding())");
  Tensor x = model->embed_tokens->forward(ids);
  for (size_t i = 0; i < model->layers->size(); ++i) x = (*model->layers)[i]->step(x, state.layers[i]);
  state.pos += 1;
  return head(model->norm->forward(x));
}

std::shared_ptr<HFModel> make_llama(const HFConfig& config, const HFModelOptions& options, const std::string& folder) {
  // The config must describe weights the folder can hold before any layer is built.
  const SafeTensors weights = read_hf_weights(folder);
  const LlamaConfig c = LlamaConfig::from_hf(config);
  llama_params(c, config.origin()).check_stored(weights, folder, "num_hidden_layers", c.num_hidden_layers, "layers");
  auto m = std::make_shared<LlamaForCausalLM>(config, options);
  const bool tied = m->cfg.tie_word_embeddings;
  // A tied folder may still store lm_head (a copy of embed_tokens): it is not a separate weight.
  auto rename = [tied](const std::string& name) -> std::string {
    return tied && name == "lm_head.weight" ? "" : name;
  };
  load_hf_weights(*m, weights, folder, rename);
  return m;
}

}  // namespace hh::nn
