#include "nn/models/llama.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

#include "core/checked.h"
#include "core/error.h"
#include "nn/models/param_count.h"
#include "nn/rope.h"

namespace hh::nn {

const char* family_name(DecoderFamily f) {
  switch (f) {
    case DecoderFamily::llama: return "llama";
    case DecoderFamily::mistral: return "mistral";
    case DecoderFamily::qwen2: return "qwen2";
    case DecoderFamily::qwen3: return "qwen3";
  }
  return "llama";
}

const char* family_architecture(DecoderFamily f) {
  switch (f) {
    case DecoderFamily::llama: return "LlamaForCausalLM";
    case DecoderFamily::mistral: return "MistralForCausalLM";
    case DecoderFamily::qwen2: return "Qwen2ForCausalLM";
    case DecoderFamily::qwen3: return "Qwen3ForCausalLM";
  }
  return "LlamaForCausalLM";
}

namespace {
// The decoder's parameters, every product and sum checked (the heads x head_dim products too).
ParamCount llama_params(const LlamaConfig& c, const std::string& where) {
  const std::string who = std::string(family_name(c.family)) + ": " + where;
  ParamCount p(who);
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  const int64_t q = p.mul(c.num_attention_heads, c.head_dim, "num_attention_heads x head_dim");
  const int64_t kv = p.mul(c.num_key_value_heads, c.head_dim, "num_key_value_heads x head_dim");
  const std::string one = who + ": the parameters of one layer";
  // q_proj and o_proj: 2 C q; k_proj, v_proj: 2 C kv; the MLP: 3 C I; two norms: 2C; biases.
  int64_t layer = p.mul(p.mul(2, C, "2 x hidden_size"), q, "2 x hidden_size x num_attention_heads x head_dim");
  layer = checked_add(layer, p.mul(p.mul(2, C, "2 x hidden_size"), kv, "2 x hidden_size x num_key_value_heads x head_dim"), one);
  layer = checked_add(layer, p.mul(p.mul(3, C, "3 x hidden_size"), I, "3 x hidden_size x intermediate_size"), one);
  layer = checked_add(layer, p.mul(2, C, "2 x hidden_size"), one);
  if (c.qkv_bias) layer = checked_add(layer, checked_add(q, p.mul(2, kv, "2 x kv"), one), one);
  if (c.o_bias) layer = checked_add(layer, C, one);
  if (c.qk_norm) layer = checked_add(layer, p.mul(2, c.head_dim, "2 x head_dim"), one);
  if (c.mlp_bias) layer = checked_add(layer, checked_add(p.mul(2, I, "2 x intermediate_size"), C, one), one);
  const int64_t embed = p.mul(c.vocab_size, C, "vocab_size x hidden_size");
  p.add("vocab_size", c.vocab_size, c.tie_word_embeddings ? embed : p.mul(2, embed, "2 x vocab_size x hidden_size"));
  p.add("num_hidden_layers", c.num_hidden_layers, p.mul(c.num_hidden_layers, layer, "num_hidden_layers x the parameters of one layer"));
  p.add("hidden_size", C, C);  // the final norm
  return p;
}

// RoPE as transformers 5.24 reads it (RotaryEmbeddingConfigMixin.convert_rope_params_to_dict,
// standardize_rope_params): rope_scaling (transformers 4), when given, replaces rope_parameters;
// its rope_type (or the older "type") picks the variant (default when absent); that dict's
// rope_theta wins over the top-level key, which wins over the default 10000. Each variant reads the
// keys its _compute_*_parameters function reads, with the same defaults. Parameters nested per
// layer type and a partial rotation are refused.
RopeScaling read_rope(const HFConfig& config, int64_t max_positions, const char* who) {
  // A top-level partial_rotary_factor is moved into the dict by transformers: refused here too.
  HH_CHECK(config.get_double("partial_rotary_factor", 1.0) == 1.0, who, ": ", config.origin(),
           ": partial_rotary_factor other than 1 is not supported");
  RopeScaling r;
  r.theta = config.get_double("rope_theta", 10000.0);
  const char* key = config.has("rope_scaling") ? "rope_scaling" : config.has("rope_parameters") ? "rope_parameters" : "";
  if (!*key) return r;
  const HFConfig rope = config.child(key);
  const std::string& where = rope.origin();
  for (const char* layer_type : {"full_attention", "sliding_attention"})
    HH_CHECK(!rope.has(layer_type), who, ": ", where, ": RoPE parameters per layer type (\"", layer_type,
             "\") are not supported");
  HH_CHECK(rope.get_double("partial_rotary_factor", 1.0) == 1.0, who, ": ", where,
           ": partial_rotary_factor other than 1 is not supported");
  if (rope.has("rope_theta")) r.theta = rope.get_double("rope_theta");
  const char* type_key = rope.has("rope_type") ? "rope_type" : "type";
  const std::string type = rope.get_string(type_key, "default");
  const RopeType types[] = {RopeType::plain, RopeType::linear, RopeType::dynamic, RopeType::yarn, RopeType::llama3};
  const auto* it = std::find_if(std::begin(types), std::end(types), [&](RopeType t) { return type == rope_type_name(t); });
  HH_CHECK(it != std::end(types), who, ": ", where, ": ", type_key, " '", type,
           "' is not supported (default, linear, dynamic, yarn, llama3)");
  r.type = *it;
  if (r.type == RopeType::plain) return r;
  // llama3 and yarn: the pretraining context, where a top-level key wins (as Phi-3 writes it).
  if (r.type == RopeType::llama3 || r.type == RopeType::yarn) {
    r.original_max_positions = config.has("original_max_position_embeddings")
                                   ? config.get_int("original_max_position_embeddings")
                                   : rope.get_int("original_max_position_embeddings", max_positions);
    HH_CHECK(r.original_max_positions > 0, who, ": ", where, ": original_max_position_embeddings must be positive, got ",
             r.original_max_positions);
  }
  // yarn alone may leave factor out (or null): max_position_embeddings / original_max_position_embeddings.
  r.factor = r.type == RopeType::yarn && !rope.has("factor")
                 ? static_cast<double>(max_positions) / static_cast<double>(r.original_max_positions)
                 : rope.get_double("factor");
  HH_CHECK(r.factor > 0, who, ": ", where, ": factor must be positive, got ", r.factor);
  switch (r.type) {
    case RopeType::plain:
    case RopeType::linear: break;
    case RopeType::dynamic: r.max_positions = max_positions; break;
    case RopeType::llama3:
      r.low_freq_factor = rope.get_double("low_freq_factor");
      r.high_freq_factor = rope.get_double("high_freq_factor");
      HH_CHECK(r.high_freq_factor != r.low_freq_factor, who, ": ", where,
               ": high_freq_factor must differ from low_freq_factor, both are ", r.low_freq_factor);
      break;
    case RopeType::yarn: {
      // `get("beta_fast") or 32`: a 0 is the default too.
      r.beta_fast = rope.get_double("beta_fast", 0.0) != 0.0 ? rope.get_double("beta_fast") : 32.0;
      r.beta_slow = rope.get_double("beta_slow", 0.0) != 0.0 ? rope.get_double("beta_slow") : 1.0;
      r.truncate = rope.get_bool("truncate", true);
      // The cos/sin scale: attention_factor, else the paper's 0.1 ln(factor) + 1, or the ratio of two
      // such terms when mscale and mscale_all_dim are both given (and non-zero).
      const auto mscale = [&](double m) { return r.factor <= 1 ? 1.0 : 0.1 * m * std::log(r.factor) + 1.0; };
      const double m = rope.get_double("mscale", 0.0), m_all = rope.get_double("mscale_all_dim", 0.0);
      r.attention_factor = rope.has("attention_factor") ? rope.get_double("attention_factor")
                           : m != 0.0 && m_all != 0.0  ? mscale(m) / mscale(m_all)
                                                       : mscale(1.0);
      break;
    }
  }
  return r;
}

// An optional window: the key set to a number (which must be positive), set to null (no window: 0),
// or absent (the family's default, as the transformers config class fills it).
int64_t read_window(const HFConfig& config, const std::string& key, int64_t absent, const char* who) {
  if (!config.has(key)) {
    const auto keys = config.keys();
    return std::find(keys.begin(), keys.end(), key) == keys.end() ? absent : 0;
  }
  const int64_t w = config.get_int(key);
  HH_CHECK(w > 0, who, ": ", config.origin(), ": ", key, " must be positive (null = no window), got ", w);
  return w;
}

// Each layer's sliding window (0 = none). Llama: none. Mistral: sliding_window (default 4096) on
// every layer. Qwen2/Qwen3 (their configs' __post_init__): sliding_window counts only with
// use_sliding_window; layer_types, when given, names each layer's attention, else the layers from
// max_window_layers on slide.
std::vector<int64_t> read_layer_windows(const HFConfig& config, DecoderFamily family, int64_t layers, const char* who) {
  const auto n = static_cast<size_t>(layers);
  if (family == DecoderFamily::llama) return std::vector<int64_t>(n, 0);
  if (family == DecoderFamily::mistral) return std::vector<int64_t>(n, read_window(config, "sliding_window", 4096, who));
  const int64_t w = config.get_bool("use_sliding_window", false) ? read_window(config, "sliding_window", 4096, who) : 0;
  std::vector<int64_t> out(n, 0);
  if (config.has("layer_types")) {
    const auto types = config.get_strings("layer_types");
    HH_CHECK(types.size() == n, who, ": ", config.origin(), ": layer_types has ", types.size(),
             " entries for num_hidden_layers ", layers);
    for (size_t i = 0; i < n; ++i) {
      HH_CHECK(types[i] == "full_attention" || types[i] == "sliding_attention", who, ": ", config.origin(),
               ": layer_types[", i, "] '", types[i], "' is not supported (full_attention, sliding_attention)");
      HH_CHECK(types[i] == "full_attention" || w > 0, who, ": ", config.origin(), ": layer_types[", i,
               "] is sliding_attention but there is no window (use_sliding_window is false or sliding_window null)");
      if (types[i] == "sliding_attention") out[i] = w;
    }
    return out;
  }
  const int64_t first = config.get_int("max_window_layers", 28);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<int64_t>(i) >= first ? w : 0;
  return out;
}
}  // namespace

LlamaConfig LlamaConfig::from_hf(const HFConfig& config, DecoderFamily family) {
  LlamaConfig c;
  c.family = family;
  const char* who = family_name(family);
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
           who, ": ", where, ": sizes, layer and head counts must be positive");
  HH_CHECK(c.num_attention_heads % c.num_key_value_heads == 0, who, ": ", where, ": num_attention_heads ",
           c.num_attention_heads, " is not a multiple of num_key_value_heads ", c.num_key_value_heads);
  if (config.has("head_dim")) {
    c.head_dim = config.get_int("head_dim");
  } else if (family == DecoderFamily::qwen3) {
    c.head_dim = 128;  // Qwen3Config's default, whatever hidden_size / num_attention_heads is
  } else {
    HH_CHECK(c.hidden_size % c.num_attention_heads == 0, who, ": ", where, ": hidden_size ", c.hidden_size,
             " is not a multiple of num_attention_heads ", c.num_attention_heads, " (and no head_dim is given)");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  HH_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0, who, ": ", where, ": head_dim must be positive and even, got ",
           c.head_dim);
  c.rms_norm_eps = config.get_double("rms_norm_eps", 1e-6);
  c.hidden_act = hf_activation(config, "hidden_act", "silu");
  switch (family) {  // what each HF class builds: the keys it reads, the layout it fixes
    case DecoderFamily::llama:
      c.qkv_bias = c.o_bias = config.get_bool("attention_bias", false);
      c.mlp_bias = config.get_bool("mlp_bias", false);
      break;
    case DecoderFamily::mistral: break;  // no biases, whatever the file says
    case DecoderFamily::qwen2: c.qkv_bias = true; break;  // q/k/v biases, none on o_proj
    case DecoderFamily::qwen3:
      c.qkv_bias = c.o_bias = config.get_bool("attention_bias", false);
      c.qk_norm = true;
      break;
  }
  c.tie_word_embeddings = config.get_bool("tie_word_embeddings", false);
  c.rope = read_rope(config, c.max_position_embeddings, who);
  HH_CHECK(c.rope.theta > 0, who, ": ", where, ": rope_theta must be positive, got ", c.rope.theta);
  // dynamic's exponent D / (D - 2) needs D > 2 (transformers divides by zero).
  HH_CHECK(c.rope.type != RopeType::dynamic || c.head_dim > 2, who, ": ", where,
           ": dynamic RoPE needs head_dim > 2, got ", c.head_dim);
  llama_params(c, where).check_memory();  // before any layer is built (or a per-layer list sized)
  c.layer_window = read_layer_windows(config, family, c.num_hidden_layers, who);
  return c;
}

int64_t LlamaConfig::position_limit() const {
  if (rope.type != RopeType::dynamic) return max_position_embeddings;
  return std::max(max_position_embeddings,
                  static_cast<int64_t>(rope.factor * static_cast<double>(max_position_embeddings)));
}

LlamaAttention::LlamaAttention(const LlamaConfig& c, const HFModelOptions& o, Init init, size_t layer)
    : heads_(c.num_attention_heads), kv_heads_(c.num_key_value_heads), head_dim_(c.head_dim), rope_(c.rope) {
  const int64_t C = c.hidden_size;
  q_proj = register_module("q_proj", std::make_shared<Linear>(C, heads_ * head_dim_, c.qkv_bias, init));
  k_proj = register_module("k_proj", std::make_shared<Linear>(C, kv_heads_ * head_dim_, c.qkv_bias, init));
  v_proj = register_module("v_proj", std::make_shared<Linear>(C, kv_heads_ * head_dim_, c.qkv_bias, init));
  o_proj = register_module("o_proj", std::make_shared<Linear>(heads_ * head_dim_, C, c.o_bias, init));
  if (c.qk_norm) {
    q_norm = register_module("q_norm", std::make_shared<RMSNorm>(head_dim_, c.rms_norm_eps, init));
    k_norm = register_module("k_norm", std::make_shared<RMSNorm>(head_dim_, c.rms_norm_eps, init));
  }
  if (o.mixer.is_linear())
    feature_map = register_module(
        "feature_map",
        make_mixer_feature_map(o.mixer, o.feature_map, heads_, head_dim_, init, o.gate, C, o.gate_output));
  MixerConfig mc{o.mixer, true, o.form, o.chunk, o.eps, o.window, o.gate, o.gate_output};
  mc.sliding_window = layer < c.layer_window.size() ? c.layer_window[layer] : 0;
  mixer = AttentionMixer(mc, feature_map);
}

void LlamaAttention::project(const Tensor& x, int64_t pos, Tensor& q, Tensor& k, Tensor& v, Tensor* k_raw) const {
  rotate(q_proj->forward(x), k_proj->forward(x), v_proj->forward(x), pos, q, k, v, k_raw);
}

void LlamaAttention::rotate(const Tensor& qp, const Tensor& kp, const Tensor& vp, int64_t pos, Tensor& q, Tensor& k,
                            Tensor& v, Tensor* k_raw) const {
  const int64_t B = qp.size(0), L = qp.size(1), rep = heads_ / kv_heads_;
  // (B,L,h·D) -> (B,h,L,D), through the per-head RMSNorm when there is one (Qwen3, before RoPE).
  auto heads = [&](const Tensor& t, int64_t h, const std::shared_ptr<RMSNorm>& norm = nullptr) {
    Tensor split = reshape(t, {B, L, h, head_dim_});
    return transpose(norm ? norm->forward(split) : split, 1, 2);
  };
  // (B,Hkv,L,D) -> (B,H,L,D): query head i reads kv head i / rep, as HF's repeat_kv.
  auto repeat = [&](const Tensor& t) {
    if (rep == 1) return t;
    return reshape(expand(unsqueeze(t, 2), {B, kv_heads_, rep, L, head_dim_}), {B, heads_, L, head_dim_});
  };
  q = apply_rope(heads(qp, heads_, q_norm), pos, rope_);
  Tensor kh = heads(kp, kv_heads_, k_norm);
  if (k_raw) *k_raw = repeat(kh);
  k = repeat(apply_rope(kh, pos, rope_));
  v = repeat(heads(vp, kv_heads_));
}

Tensor LlamaAttention::merge(const Tensor& y) const {
  const int64_t B = y.size(0), L = y.size(2);
  return o_proj->forward(reshape(transpose(y, 1, 2), {B, L, heads_ * head_dim_}));
}

// A gated mixer's gate reads x (gla) and the key before RoPE (liger: Liger pools the key
// projection, so the gate does not rotate with the position).
Tensor LlamaAttention::forward(const Tensor& x, TraceRequest* trace) const {
  Tensor q, k, v, k_raw;
  project(x, 0, q, k, v, gated() ? &k_raw : nullptr);
  return merge(mixer.forward(q, k, v, Tensor(), trace, GateInput{x, k_raw}));
}

Tensor LlamaAttention::step(const Tensor& x, DecodeCache& cache) const {
  Tensor q, k, v, k_raw;
  project(x, cache.pos(), q, k, v, gated() ? &k_raw : nullptr);
  return merge(mixer.step(q, k, v, cache, GateInput{x, k_raw}));
}

Tensor LlamaAttention::step_rows(const Tensor& x, const std::vector<DecodeCache*>& caches) const {
  // The projections for every row at once, then each row rotated at its own position, then every
  // row stepped on its own cache.
  const Tensor qp = q_proj->forward(x), kp = k_proj->forward(x), vp = v_proj->forward(x);
  const int64_t N = static_cast<int64_t>(caches.size());
  std::vector<Tensor> qs(caches.size()), ks(caches.size()), vs(caches.size()), raws(caches.size());
  for (int64_t r = 0; r < N; ++r) {
    const auto row = [&](const Tensor& t) { return slice(t, 0, r, r + 1); };
    const size_t i = static_cast<size_t>(r);
    rotate(row(qp), row(kp), row(vp), caches[i]->pos(), qs[i], ks[i], vs[i], gated() ? &raws[i] : nullptr);
  }
  return merge(mixer.step_rows(cat(qs, 0), cat(ks, 0), cat(vs, 0), caches,
                               GateInput{x, gated() ? cat(raws, 0) : Tensor()}));
}

Tensor LlamaAttention::prefill(const Tensor& x, DecodeCache& cache) const {
  Tensor q, k, v, k_raw;
  project(x, cache.pos(), q, k, v, gated() ? &k_raw : nullptr);
  return merge(mixer.prefill(q, k, v, cache, GateInput{x, k_raw}));
}

LlamaMLP::LlamaMLP(const LlamaConfig& c, Init init) : act(c.hidden_act) {
  gate_proj = register_module("gate_proj", std::make_shared<Linear>(c.hidden_size, c.intermediate_size, c.mlp_bias, init));
  up_proj = register_module("up_proj", std::make_shared<Linear>(c.hidden_size, c.intermediate_size, c.mlp_bias, init));
  down_proj = register_module("down_proj", std::make_shared<Linear>(c.intermediate_size, c.hidden_size, c.mlp_bias, init));
}

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& c, const HFModelOptions& o, Init init, size_t layer) {
  input_layernorm = register_module("input_layernorm", std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps, init));
  self_attn = register_module("self_attn", std::make_shared<LlamaAttention>(c, o, init, layer));
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

Tensor LlamaDecoderLayer::step_rows(const Tensor& x, const std::vector<DecodeCache*>& caches) const {
  AddNormOut a = add_rms(x, self_attn->step_rows(input_layernorm->forward(x), caches), *post_attention_layernorm);
  return add(a.h, mlp->forward(a.y));
}

Tensor LlamaDecoderLayer::prefill(const Tensor& x, DecodeCache& cache) const {
  AddNormOut a = add_rms(x, self_attn->prefill(input_layernorm->forward(x), cache), *post_attention_layernorm);
  return add(a.h, mlp->forward(a.y));
}

LlamaModel::LlamaModel(const LlamaConfig& c, const HFModelOptions& o, Init init) {
  embed_tokens = register_module("embed_tokens", std::make_shared<Embedding>(c.vocab_size, c.hidden_size, init, 0.02));
  layers = register_module("layers", std::make_shared<ModuleList<LlamaDecoderLayer>>());
  check_softmax_layers(o, c.num_hidden_layers, family_name(c.family));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers->push_back(std::make_shared<LlamaDecoderLayer>(c, layer_options(o, i), init, static_cast<size_t>(i)));
  norm = register_module("norm", std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps, init));
}

LlamaForCausalLM::LlamaForCausalLM(const HFConfig& config, const HFModelOptions& options, DecoderFamily family)
    : CausalLM("llama", family_architecture(family), config, options), cfg(LlamaConfig::from_hf(config, family)) {
  Generator gen(options.seed);
  Init init{gen, Device::cpu(), DType::f32, options.draw_weights};
  model = register_module("model", std::make_shared<LlamaModel>(cfg, options, init));
  if (cfg.tie_word_embeddings)
    tied_head = register_module("lm_head", std::make_shared<TiedHead>(model->embed_tokens));
  else
    lm_head = register_module("lm_head", std::make_shared<Linear>(cfg.hidden_size, cfg.vocab_size, false, init));
}

Tensor LlamaForCausalLM::head(const Tensor& h) const { return lm_head ? lm_head->forward(h) : tied_head->forward(h); }

Tensor LlamaForCausalLM::embed(const Tensor& ids) const {
  check_token_ids(ids, 0, cfg.position_limit(), family_name(cfg.family));
  return model->embed_tokens->forward(ids);
}

Tensor LlamaForCausalLM::hidden(const Tensor& ids, TraceRequest* trace) {
  Tensor x = embed(ids);
  for (const auto& layer : *model->layers) x = layer->forward(x, trace);
  return model->norm->forward(x);
}

Tensor LlamaForCausalLM::layer_forward(int64_t layer, const Tensor& x, TraceRequest* trace) const {
  HH_CHECK(layer >= 0 && layer < num_layers(), family_name(cfg.family), ": layer ", layer, " of ", num_layers());
  return (*model->layers)[static_cast<size_t>(layer)]->forward(x, trace);
}

std::vector<AttentionSite> LlamaForCausalLM::attention_sites() {
  std::vector<AttentionSite> out;
  for (const auto& layer : *model->layers) {
    LlamaAttention& a = *layer->self_attn;
    out.push_back({&a, &a.mixer, &a.feature_map});
  }
  return out;
}

Tensor LlamaForCausalLM::forward(const Tensor& ids, TraceRequest* trace) { return head(hidden(ids, trace)); }

DecodeState LlamaForCausalLM::start_decoding() const {
  DecodeState s;
  s.layers.resize(static_cast<size_t>(cfg.num_hidden_layers));
  return s;
}

Tensor LlamaForCausalLM::step(const Tensor& ids, DecodeState& state) {
  const std::string who = std::string(family_name(cfg.family)) + " step";
  HH_CHECK(ids.defined() && ids.dim() == 2 && ids.size(1) == 1, who, ": expected ids (B,1), got ",
           ids.defined() ? str(ids.shape()) : std::string("an undefined tensor"));
  check_token_ids(ids, state.pos, cfg.position_limit(), who);
  HH_CHECK(state.layers.size() == model->layers->size(), who, ": the DecodeState has ", state.layers.size(),
           " layers, the model ", model->layers->size(), " (use start_decoding())");
  Tensor x = model->embed_tokens->forward(ids);
  for (size_t i = 0; i < model->layers->size(); ++i) x = (*model->layers)[i]->step(x, state.layers[i]);
  state.pos += 1;
  return head(model->norm->forward(x));
}

Tensor LlamaForCausalLM::step_many(const Tensor& ids, const std::vector<DecodeState*>& states) {
  const std::string who = std::string(family_name(cfg.family)) + " step_many";
  check_step_rows(ids, states, cfg.position_limit(), who);
  const size_t layers = model->layers->size();
  for (size_t i = 0; i < states.size(); ++i)
    HH_CHECK(states[i]->layers.size() == layers, who, ": decode state ", i, " has ", states[i]->layers.size(),
             " layers, the model ", layers, " (use start_decoding())");
  Tensor x = model->embed_tokens->forward(ids);
  std::vector<DecodeCache*> caches(states.size());
  for (size_t l = 0; l < layers; ++l) {
    for (size_t i = 0; i < states.size(); ++i) caches[i] = &states[i]->layers[l];
    x = (*model->layers)[l]->step_rows(x, caches);
  }
  for (DecodeState* s : states) s->pos += 1;
  return head(model->norm->forward(x));
}

// Every layer's full forward over the prompt (from a fresh state, or continuing a started one at
// positions state.pos..), each filling its cache; the head reads the last position only. Dynamic
// RoPE rotates a forward over positions p..p+n-1 with the frequencies of length p+n and a step at
// position p with those of length p + 1: they agree up to max_position_embeddings (the plain
// rotation), so the tokens beyond it are stepped one by one, as the steps would rotate them.
Tensor LlamaForCausalLM::prefill(const Tensor& ids, DecodeState& state) {
  const std::string who = std::string(family_name(cfg.family)) + " prefill";
  check_token_ids(ids, state.pos, max_positions(), who);
  HH_CHECK(state.layers.size() == model->layers->size(), who, ": the DecodeState has ", state.layers.size(),
           " layers, the model ", model->layers->size(), " (use start_decoding())");
  const int64_t L = ids.size(1);
  const int64_t n = cfg.rope.type == RopeType::dynamic
                        ? std::clamp<int64_t>(cfg.rope.max_positions - state.pos, 0, L)
                        : L;
  if (n == 0) return CausalLM::prefill(ids, state);  // every token beyond the plain rotation
  Tensor x = model->embed_tokens->forward(slice(ids, 1, 0, n));
  for (size_t i = 0; i < model->layers->size(); ++i) x = (*model->layers)[i]->prefill(x, state.layers[i]);
  state.pos += n;
  if (n < L) return CausalLM::prefill(slice(ids, 1, n, L), state);
  return head(model->norm->forward(slice(x, 1, n - 1, n)));
}

namespace {
std::shared_ptr<HFModel> make_decoder(const HFConfig& config, const HFModelOptions& options, const std::string& folder,
                                      DecoderFamily family) {
  // The config must describe weights the folder can hold before any layer is built.
  const SafeTensors weights = read_hf_weights(folder);
  const LlamaConfig c = LlamaConfig::from_hf(config, family);
  llama_params(c, config.origin()).check_stored(weights, folder, "num_hidden_layers", c.num_hidden_layers, "layers");
  auto m = std::make_shared<LlamaForCausalLM>(config, options, family);
  const bool tied = m->cfg.tie_word_embeddings;
  // A tied folder may still store lm_head (a copy of embed_tokens): it is not a separate weight.
  auto rename = [tied](const std::string& name) -> std::string {
    return tied && name == "lm_head.weight" ? "" : name;
  };
  load_hf_weights(*m, weights, folder, rename);
  return m;
}
}  // namespace

std::shared_ptr<HFModel> make_llama(const HFConfig& config, const HFModelOptions& options, const std::string& folder) {
  return make_decoder(config, options, folder, DecoderFamily::llama);
}
std::shared_ptr<HFModel> make_mistral(const HFConfig& config, const HFModelOptions& options, const std::string& folder) {
  return make_decoder(config, options, folder, DecoderFamily::mistral);
}
std::shared_ptr<HFModel> make_qwen2(const HFConfig& config, const HFModelOptions& options, const std::string& folder) {
  return make_decoder(config, options, folder, DecoderFamily::qwen2);
}
std::shared_ptr<HFModel> make_qwen3(const HFConfig& config, const HFModelOptions& options, const std::string& folder) {
  return make_decoder(config, options, folder, DecoderFamily::qwen3);
}

}  // namespace hh::nn
