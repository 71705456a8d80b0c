#include "nn/models/gpt2.h"

#include <utility>

#include "autograd/ops/attention.h"
#include "core/checked.h"
#include "core/error.h"
#include "nn/models/param_count.h"

namespace hh::nn {

namespace {
// GPT2LMHeadModel's parameters (lm_head is the tied wte), every product and sum checked.
ParamCount gpt2_params(const GPT2Config& c, const std::string& where) {
  ParamCount p("gpt2: " + where);
  const int64_t C = c.n_embd, I = c.n_inner;
  const std::string one = "gpt2: " + where + ": the parameters of one layer";
  // c_attn and c_proj: 4C^2 + 4C; c_fc and c_proj: 2CI + I + C; ln_1, ln_2: 4C.
  int64_t layer = p.mul(p.mul(4, C, "4 x n_embd"), C, "4 x n_embd x n_embd");
  for (int64_t part : {p.mul(8, C, "8 x n_embd"), p.mul(2, p.mul(C, I, "n_embd x n_inner"), "2 x n_embd x n_inner"), I, C})
    layer = checked_add(layer, part, one);
  p.add("vocab_size", c.vocab_size, p.mul(c.vocab_size, C, "vocab_size x n_embd"));
  p.add("n_positions", c.n_positions, p.mul(c.n_positions, C, "n_positions x n_embd"));
  p.add("n_layer", c.n_layer, p.mul(c.n_layer, layer, "n_layer x the parameters of one layer"));
  p.add("n_embd", C, p.mul(2, C, "2 x n_embd"));  // ln_f
  return p;
}
}  // namespace

GPT2Config GPT2Config::from_hf(const HFConfig& config) {
  GPT2Config c;
  c.vocab_size = config.get_int("vocab_size");
  c.n_positions = config.get_int("n_positions");
  c.n_embd = config.get_int("n_embd");
  c.n_layer = config.get_int("n_layer");
  c.n_head = config.get_int("n_head");
  c.n_inner = config.has("n_inner") ? config.get_int("n_inner")
                                     : checked_mul(4, c.n_embd, "gpt2: " + config.origin() + ": n_inner's default 4 x n_embd");
  c.layer_norm_epsilon = config.get_double("layer_norm_epsilon", 1e-5);
  c.activation = hf_activation(config, "activation_function", "gelu_new");
  const auto where = config.origin();
  HH_CHECK(c.vocab_size > 0 && c.n_positions > 0 && c.n_embd > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_inner > 0,
           "gpt2: ", where, ": vocab_size, n_positions, n_embd, n_layer, n_head and n_inner must be positive");
  HH_CHECK(c.n_embd % c.n_head == 0, "gpt2: ", where, ": n_embd ", c.n_embd, " is not a multiple of n_head ", c.n_head);
  // Variants this implementation does not compute: refuse them rather than run something else.
  HH_CHECK(config.get_bool("scale_attn_weights", true), "gpt2: ", where,
           ": scale_attn_weights = false is not supported (scores are always scaled by 1/sqrt(head_dim))");
  HH_CHECK(!config.get_bool("scale_attn_by_inverse_layer_idx", false), "gpt2: ", where,
           ": scale_attn_by_inverse_layer_idx = true is not supported");
  HH_CHECK(!config.get_bool("reorder_and_upcast_attn", false), "gpt2: ", where,
           ": reorder_and_upcast_attn = true is not supported");
  HH_CHECK(!config.get_bool("add_cross_attention", false), "gpt2: ", where,
           ": add_cross_attention = true is not supported");
  HH_CHECK(config.get_bool("tie_word_embeddings", true), "gpt2: ", where,
           ": tie_word_embeddings = false is not supported (GPT2LMHeadModel ties lm_head to wte)");
  gpt2_params(c, where).check_memory();  // before any layer is built
  return c;
}

namespace {
MixerConfig mixer_config(const HFModelOptions& o) {
  return MixerConfig{o.mixer, true, o.form, o.chunk, o.eps, o.window, o.gate, o.gate_output};
}
}  // namespace

GPT2Attention::GPT2Attention(const GPT2Config& c, const HFModelOptions& o, Init init)
    : heads_(c.n_head), head_dim_(c.n_embd / c.n_head) {
  c_attn = register_module("c_attn", std::make_shared<Linear>(c.n_embd, 3 * c.n_embd, true, init));
  c_proj = register_module("c_proj", std::make_shared<Linear>(c.n_embd, c.n_embd, true, init));
  if (o.mixer.is_linear())
    feature_map =
        register_module("feature_map", make_mixer_feature_map(o.mixer, o.feature_map, heads_, head_dim_, init, o.gate,
                                                              c.n_embd, o.gate_output));
  mixer = AttentionMixer(mixer_config(o), feature_map);
}

void GPT2Attention::split_heads(const Tensor& x, Tensor& q, Tensor& k, Tensor& v) const {
  const int64_t B = x.size(0), L = x.size(1);
  // (B,L,3C) -> (B,L,3,H,D) -> (3,B,H,L,D): one view of one product, split by one node (unbind),
  // whose backward writes q's, k's and v's gradients into one buffer in c_attn's output layout.
  std::vector<Tensor> qkv = unbind(permute(reshape(c_attn->forward(x), {B, L, 3, heads_, head_dim_}), {2, 0, 3, 1, 4}));
  q = qkv[0];
  k = qkv[1];
  v = qkv[2];
}

Tensor GPT2Attention::merge_heads(const Tensor& y) const {
  const int64_t B = y.size(0), L = y.size(2);
  return c_proj->forward(reshape(transpose(y, 1, 2), {B, L, heads_ * head_dim_}));
}

Tensor GPT2Attention::forward(const Tensor& x, TraceRequest* trace) const {
  Tensor q, k, v;
  split_heads(x, q, k, v);
  return merge_heads(mixer.forward(q, k, v, Tensor(), trace, GateInput{x, k}));  // GPT-2 has no RoPE
}

Tensor GPT2Attention::step(const Tensor& x, DecodeCache& cache) const {
  Tensor q, k, v;
  split_heads(x, q, k, v);
  return merge_heads(mixer.step(q, k, v, cache, GateInput{x, k}));
}

Tensor GPT2Attention::step_rows(const Tensor& x, const std::vector<DecodeCache*>& caches) const {
  Tensor q, k, v;
  split_heads(x, q, k, v);  // (N,H,1,D) each: the projection for every row at once
  return merge_heads(mixer.step_rows(q, k, v, caches, GateInput{x, k}));
}

Tensor GPT2Attention::prefill(const Tensor& x, DecodeCache& cache) const {
  Tensor q, k, v;
  split_heads(x, q, k, v);
  return merge_heads(mixer.prefill(q, k, v, cache, GateInput{x, k}));
}

GPT2MLP::GPT2MLP(const GPT2Config& c, Init init) : act(c.activation) {
  c_fc = register_module("c_fc", std::make_shared<Linear>(c.n_embd, c.n_inner, true, init));
  c_proj = register_module("c_proj", std::make_shared<Linear>(c.n_inner, c.n_embd, true, init));
}

namespace {
// fc's bias and a GELU in one fused op (bias_gelu) after the bias-free product; other
// activations, a LoRA adapter or no bias take the plain path. Under autocast the bf16 product and
// the f32 bias are promoted by bias_gelu itself.
Tensor linear_act(const Linear& fc, const Tensor& x, Activation act) {
  const bool gelu_act = act == Activation::gelu_erf || act == Activation::gelu_tanh;
  if (!gelu_act || !fc.bias.defined() || fc.lora_A) return activate(fc.forward(x), act);
  Tensor z = linear(x, fc.weight, Tensor(), fc.weight_cache, fc.weight_format);  // prepared when inferring
  return bias_gelu(z, fc.bias, act == Activation::gelu_tanh ? "tanh" : "none");
}
// h = x + r and ln(h): one fused op (add_layer_norm) when x and r agree in shape, else add then
// ln. Under autocast a bf16 branch output is cast up by add_layer_norm (the norms' f32 list).
AddNormOut add_ln(const Tensor& x, const Tensor& r, const LayerNorm& ln) {
  if (x.shape() != r.shape()) {
    Tensor h = add(x, r);
    return {h, ln.forward(h)};
  }
  return add_layer_norm(x, r, ln.weight, ln.bias, ln.eps);
}
}  // namespace

Tensor GPT2MLP::forward(const Tensor& x) const { return c_proj->forward(linear_act(*c_fc, x, act)); }

GPT2Block::GPT2Block(const GPT2Config& c, const HFModelOptions& o, Init init) {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_epsilon, true, init));
  attn = register_module("attn", std::make_shared<GPT2Attention>(c, o, init));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_epsilon, true, init));
  mlp = register_module("mlp", std::make_shared<GPT2MLP>(c, init));
}

// The residual add after attention and ln_2 are one fused op (add_ln).
Tensor GPT2Block::forward(const Tensor& x, TraceRequest* trace) const {
  AddNormOut a = add_ln(x, attn->forward(ln_1->forward(x), trace), *ln_2);
  return add(a.h, mlp->forward(a.y));
}

Tensor GPT2Block::step(const Tensor& x, DecodeCache& cache) const {
  AddNormOut a = add_ln(x, attn->step(ln_1->forward(x), cache), *ln_2);
  return add(a.h, mlp->forward(a.y));
}

Tensor GPT2Block::step_rows(const Tensor& x, const std::vector<DecodeCache*>& caches) const {
  AddNormOut a = add_ln(x, attn->step_rows(ln_1->forward(x), caches), *ln_2);
  return add(a.h, mlp->forward(a.y));
}

Tensor GPT2Block::prefill(const Tensor& x, DecodeCache& cache) const {
  AddNormOut a = add_ln(x, attn->prefill(ln_1->forward(x), cache), *ln_2);
  return add(a.h, mlp->forward(a.y));
}

GPT2Model::GPT2Model(const GPT2Config& c, const HFModelOptions& o, Init init) {
  wte = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd, init, 0.02));
  wpe = register_module("wpe", std::make_shared<Embedding>(c.n_positions, c.n_embd, init, 0.01));
  h = register_module("h", std::make_shared<ModuleList<GPT2Block>>());
  check_softmax_layers(o, c.n_layer, "gpt2");
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<GPT2Block>(c, layer_options(o, i), init));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_epsilon, true, init));
}

Tensor GPT2Model::embed(const Tensor& ids, int64_t pos) const {
  const int64_t L = ids.size(1);
  Tensor positions = arange(static_cast<double>(pos), static_cast<double>(pos + L), 1.0,
                            Options(DType::i64, ids.device()));
  return add(wte->forward(ids), wpe->forward(positions));  // (B,L,C) + (L,C)
}

GPT2LMHeadModel::GPT2LMHeadModel(const HFConfig& config, const HFModelOptions& options)
    : CausalLM("gpt2", "GPT2LMHeadModel", config, options), cfg(GPT2Config::from_hf(config)) {
  Generator gen(options.seed);
  transformer = register_module("transformer", std::make_shared<GPT2Model>(cfg, options, Init{gen, Device::cpu(), DType::f32, options.draw_weights}));
  lm_head = register_module("lm_head", std::make_shared<TiedHead>(transformer->wte));
}

Tensor GPT2LMHeadModel::hidden(const Tensor& ids, TraceRequest* trace) {
  check_token_ids(ids, 0, cfg.n_positions, "gpt2");
  Tensor x = transformer->embed(ids, 0);
  for (const auto& block : *transformer->h) x = block->forward(x, trace);
  return transformer->ln_f->forward(x);
}

Tensor GPT2LMHeadModel::embed(const Tensor& ids) const {
  check_token_ids(ids, 0, cfg.n_positions, "gpt2");
  return transformer->embed(ids, 0);
}

Tensor GPT2LMHeadModel::layer_forward(int64_t layer, const Tensor& x, TraceRequest* trace) const {
  HH_CHECK(layer >= 0 && layer < num_layers(), "gpt2: layer ", layer, " of ", num_layers());
  return (*transformer->h)[static_cast<size_t>(layer)]->forward(x, trace);
}

std::vector<AttentionSite> GPT2LMHeadModel::attention_sites() {
  std::vector<AttentionSite> out;
  for (const auto& block : *transformer->h) {
    GPT2Attention& a = *block->attn;
    out.push_back({&a, &a.mixer, &a.feature_map});
  }
  return out;
}


Tensor GPT2LMHeadModel::forward(const Tensor& ids, TraceRequest* trace) { return head(hidden(ids, trace)); }

DecodeState GPT2LMHeadModel::start_decoding() const {
  DecodeState s;
  s.layers.resize(static_cast<size_t>(cfg.n_layer));
  return s;
}

Tensor GPT2LMHeadModel::step(const Tensor& ids, DecodeState& state) {
  HH_CHECK(ids.defined() && ids.dim() == 2 && ids.size(1) == 1, "gpt2 step: expected ids (B,1), got ",
           ids.defined() ? str(ids.shape()) : std::string("an undefined tensor"));
  check_token_ids(ids, state.pos, cfg.n_positions, "gpt2 step");
  HH_CHECK(state.layers.size() == transformer->h->size(), "gpt2 step: the DecodeState has ", state.layers.size(),
           " layers, the model ", transformer->h->size(), " (use start_decoding())");
  Tensor x = transformer->embed(ids, state.pos);
  for (size_t i = 0; i < transformer->h->size(); ++i) x = (*transformer->h)[i]->step(x, state.layers[i]);
  state.pos += 1;
  return head(transformer->ln_f->forward(x));
}

Tensor GPT2LMHeadModel::step_many(const Tensor& ids, const std::vector<DecodeState*>& states) {
  check_step_rows(ids, states, cfg.n_positions, "gpt2 step_many");
  const size_t layers = transformer->h->size();
  std::vector<Tensor> rows;  // each row's token and position embedding
  for (size_t i = 0; i < states.size(); ++i) {
    HH_CHECK(states[i]->layers.size() == layers, "gpt2 step_many: decode state ", i, " has ",
             states[i]->layers.size(), " layers, the model ", layers, " (use start_decoding())");
    const int64_t r = static_cast<int64_t>(i);
    rows.push_back(transformer->embed(slice(ids, 0, r, r + 1), states[i]->pos));
  }
  Tensor x = cat(rows, 0);
  std::vector<DecodeCache*> caches(states.size());
  for (size_t l = 0; l < layers; ++l) {
    for (size_t i = 0; i < states.size(); ++i) caches[i] = &states[i]->layers[l];
    x = (*transformer->h)[l]->step_rows(x, caches);
  }
  for (DecodeState* s : states) s->pos += 1;
  return head(transformer->ln_f->forward(x));
}

// Every layer's full forward over the prompt (from a fresh state, or continuing a started one at
// positions state.pos..), each filling its cache; the head reads the last position only.
Tensor GPT2LMHeadModel::prefill(const Tensor& ids, DecodeState& state) {
  check_token_ids(ids, state.pos, cfg.n_positions, "gpt2 prefill");
  HH_CHECK(state.layers.size() == transformer->h->size(), "gpt2 prefill: the DecodeState has ", state.layers.size(),
           " layers, the model ", transformer->h->size(), " (use start_decoding())");
  const int64_t L = ids.size(1);
  Tensor x = transformer->embed(ids, state.pos);
  for (size_t i = 0; i < transformer->h->size(); ++i) x = (*transformer->h)[i]->prefill(x, state.layers[i]);
  state.pos += L;
  return head(transformer->ln_f->forward(slice(x, 1, L - 1, L)));
}

namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
// Conv1D stores (in, out); Linear wants (out, in).
bool is_conv1d_weight(const std::string& name) {
  return ends_with(name, ".c_attn.weight") || ends_with(name, ".c_proj.weight") || ends_with(name, ".c_fc.weight");
}
}  // namespace

NamedTensors GPT2LMHeadModel::hf_state_dict() const {
  NamedTensors out = state_dict();
  for (auto& [name, t] : out)
    if (is_conv1d_weight(name) && t.dim() == 2) t = contiguous(transpose(t, 0, 1));
  return out;
}

std::shared_ptr<HFModel> make_gpt2(const HFConfig& config, const HFModelOptions& options, const std::string& folder) {
  // The config must describe weights the folder can hold before any layer is built.
  const SafeTensors weights = read_hf_weights(folder);
  const GPT2Config c = GPT2Config::from_hf(config);
  gpt2_params(c, config.origin()).check_stored(weights, folder, "n_layer", c.n_layer, "h");
  auto model = std::make_shared<GPT2LMHeadModel>(config, options);
  // Files name the body with or without "transformer."; the attention masks are not weights, and
  // lm_head (when a file stores it) is the tied wte.
  auto rename = [](const std::string& name) -> std::string {
    if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") || name == "lm_head.weight") return "";
    return name.rfind("transformer.", 0) == 0 ? name : "transformer." + name;
  };
  // A tensor of another rank is left for the shape check.
  auto transform = [](const std::string& name, const Tensor& t) -> Tensor {
    return is_conv1d_weight(name) && t.dim() == 2 ? contiguous(transpose(t, 0, 1)) : t;
  };
  load_hf_weights(*model, weights, folder, rename, transform);
  return model;
}

}  // namespace hh::nn
