#include "nn/models/bert.h"

#include <utility>
#include <vector>

#include "core/checked.h"
#include "core/error.h"
#include "core/generator.h"
#include "nn/models/param_count.h"

namespace hh::nn {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// ids (B,L) integer: every value in [0, n), else an error naming `what`.
void check_ids(const Tensor& ids, int64_t n, const char* what, const char* limit) {
  HH_CHECK(ids.dim() == 2, "bert: ", what, " must be (B,L), got shape ", ids.shape());
  HH_CHECK(ids.dtype() == DType::i64 || ids.dtype() == DType::i32, "bert: ", what, " must be i64 or i32, got ",
           ids.dtype());
  if (ids.numel() == 0) return;
  const int64_t lo = amin(ids).item<int64_t>(), hi = amax(ids).item<int64_t>();
  HH_CHECK(lo >= 0 && hi < n, "bert: ", what, " must lie in [0, ", n, ") (", limit, "), got values in [", lo, ", ", hi,
           "]");
}

}  // namespace

namespace {
// BertModel's parameters without the optional pooler and classifier (a lower bound of what the
// folder must hold), every product and sum checked.
ParamCount bert_params(const BertConfig& b, const std::string& where) {
  ParamCount p("bert: " + where);
  const int64_t C = b.hidden_size, I = b.intermediate_size;
  const std::string one = "bert: " + where + ": the parameters of one layer";
  // query, key, value, output dense: 4C^2 + 4C; two LayerNorms: 4C; intermediate and output: 2CI + I + C.
  int64_t layer = p.mul(p.mul(4, C, "4 x hidden_size"), C, "4 x hidden_size x hidden_size");
  for (int64_t part : {p.mul(9, C, "9 x hidden_size"), p.mul(2, p.mul(C, I, "hidden_size x intermediate_size"),
                                                           "2 x hidden_size x intermediate_size"), I})
    layer = checked_add(layer, part, one);
  p.add("vocab_size", b.vocab_size, p.mul(b.vocab_size, C, "vocab_size x hidden_size"));
  p.add("max_position_embeddings", b.max_position_embeddings,
        p.mul(b.max_position_embeddings, C, "max_position_embeddings x hidden_size"));
  p.add("type_vocab_size", b.type_vocab_size, p.mul(b.type_vocab_size, C, "type_vocab_size x hidden_size"));
  p.add("num_hidden_layers", b.num_hidden_layers, p.mul(b.num_hidden_layers, layer, "num_hidden_layers x the parameters of one layer"));
  p.add("hidden_size", C, p.mul(2, C, "2 x hidden_size"));  // the embeddings' LayerNorm
  return p;
}
}  // namespace

BertConfig BertConfig::from_hf(const HFConfig& c) {
  BertConfig b;
  b.vocab_size = c.get_positive_int("vocab_size");
  b.hidden_size = c.get_positive_int("hidden_size");
  b.num_hidden_layers = c.get_positive_int("num_hidden_layers");
  b.num_attention_heads = c.get_positive_int("num_attention_heads");
  b.intermediate_size = c.get_positive_int("intermediate_size");
  b.max_position_embeddings = c.get_positive_int("max_position_embeddings");
  b.type_vocab_size = c.get_positive_int("type_vocab_size");
  b.layer_norm_eps = c.get_double("layer_norm_eps", 1e-12);
  b.hidden_act = hf_activation(c, "hidden_act", "gelu");
  HH_CHECK(b.hidden_size % b.num_attention_heads == 0, c.origin(), ": \"hidden_size\" (", b.hidden_size,
           ") is not a multiple of \"num_attention_heads\" (", b.num_attention_heads, ")");
  const std::string pos = c.get_string("position_embedding_type", "absolute");
  HH_CHECK(pos == "absolute", c.origin(), ": \"position_embedding_type\" = \"", pos,
           "\" is not supported (only \"absolute\")");
  HH_CHECK(!c.get_bool("is_decoder", false), c.origin(), ": \"is_decoder\" = true is not supported (BERT as an encoder only)");
  HH_CHECK(!c.get_bool("add_cross_attention", false), c.origin(), ": \"add_cross_attention\" = true is not supported");
  b.num_labels = c.has("id2label") ? static_cast<int64_t>(c.child("id2label").keys().size()) : c.get_int("num_labels", 2);
  HH_CHECK(b.num_labels > 0, c.origin(), ": the number of labels (\"id2label\" / \"num_labels\") must be positive, got ",
           b.num_labels);
  bert_params(b, c.origin()).check_memory();  // before any layer is built
  return b;
}

EncoderSelfAttention::EncoderSelfAttention(int64_t hidden, int64_t h, bool bias, const HFModelOptions& opts, Init init)
    : heads(h), head_dim(hidden / h) {
  HH_CHECK(h > 0 && hidden % h == 0, "encoder attention: width ", hidden, " is not a multiple of ", h, " heads");
  query = register_module("query", std::make_shared<Linear>(hidden, hidden, bias, init));
  key = register_module("key", std::make_shared<Linear>(hidden, hidden, bias, init));
  value = register_module("value", std::make_shared<Linear>(hidden, hidden, bias, init));
  if (opts.mixer.is_linear())
    feature_map = register_module("feature_map", make_mixer_feature_map(opts.mixer, opts.feature_map, heads, head_dim,
                                                                         Init{init.gen, init.device, init.dtype}));
  // (The feature map's new weights are always drawn, also when the HF ones are not.)
  // Bidirectional: a linear mixer runs its non-causal form (or the quadratic one when asked).
  HH_CHECK(opts.gate == Gate::none, "bert: gate '", name(opts.gate), "' needs a causal model (a gated recurrent state)");
  mixer = AttentionMixer(MixerConfig{opts.mixer, false, opts.form, opts.chunk, opts.eps, opts.window}, feature_map);
}

Tensor EncoderSelfAttention::forward(const Tensor& x, const Tensor& key_mask, TraceRequest* trace) const {
  const int64_t B = x.size(0), L = x.size(1);
  auto split = [&](const Tensor& t) { return transpose(reshape(t, {B, L, heads, head_dim}), 1, 2); };  // (B,H,L,D)
  Tensor y = mixer.forward(split(query->forward(x)), split(key->forward(x)), split(value->forward(x)), key_mask, trace);
  return reshape(transpose(y, 1, 2), {B, L, heads * head_dim});
}

DenseBlock::DenseBlock(int64_t in, int64_t out, bool with_norm, double eps, Init init) {
  dense = register_module("dense", std::make_shared<Linear>(in, out, true, init));
  if (with_norm) norm = register_module("LayerNorm", std::make_shared<LayerNorm>(out, eps, true, init));
}

Tensor DenseBlock::forward(const Tensor& x, const Tensor& residual) const {
  Tensor y = dense->forward(x);
  if (!norm) return y;
  return norm->forward(add(y, residual));
}

EncoderAttention::EncoderAttention(const std::string& self_name, int64_t hidden, int64_t heads, bool qkv_bias,
                                   bool post_norm, double eps, const HFModelOptions& opts, Init init) {
  self = register_module(self_name, std::make_shared<EncoderSelfAttention>(hidden, heads, qkv_bias, opts, init));
  output = register_module("output", std::make_shared<DenseBlock>(hidden, hidden, post_norm, eps, init));
}

BertLayer::BertLayer(const BertConfig& cfg, const HFModelOptions& opts, Init init) : act(cfg.hidden_act) {
  const int64_t C = cfg.hidden_size, I = cfg.intermediate_size;
  attention = register_module("attention", std::make_shared<EncoderAttention>("self", C, cfg.num_attention_heads, true,
                                                                              true, cfg.layer_norm_eps, opts, init));
  intermediate = register_module("intermediate", std::make_shared<DenseBlock>(C, I, false, 0.0, init));
  output = register_module("output", std::make_shared<DenseBlock>(I, C, true, cfg.layer_norm_eps, init));
}

Tensor BertLayer::forward(const Tensor& x, const Tensor& key_mask, TraceRequest* trace) const {
  Tensor a = attention->forward(x, key_mask, trace);                 // LN(attn(x) + x)
  return output->forward(activate(intermediate->forward(a), act), a);  // LN(ffn(a) + a)
}

BertEmbeddings::BertEmbeddings(const BertConfig& cfg, Init init) {
  const int64_t C = cfg.hidden_size;
  word_embeddings = register_module("word_embeddings", std::make_shared<Embedding>(cfg.vocab_size, C, init, 0.02));
  position_embeddings =
      register_module("position_embeddings", std::make_shared<Embedding>(cfg.max_position_embeddings, C, init, 0.02));
  token_type_embeddings =
      register_module("token_type_embeddings", std::make_shared<Embedding>(cfg.type_vocab_size, C, init, 0.02));
  norm = register_module("LayerNorm", std::make_shared<LayerNorm>(C, cfg.layer_norm_eps, true, init));
}

Tensor BertEmbeddings::forward(const Tensor& input_ids, const Tensor& token_type_ids) const {
  const int64_t L = input_ids.size(1);
  Tensor types = token_type_ids.defined() ? token_type_ids : zeros_like(input_ids);
  Tensor positions = arange(L, {DType::i64, input_ids.device()});  // absolute positions 0..L-1
  // transformers' order: (words + token types) + positions.
  Tensor x = add(add(word_embeddings->forward(input_ids), token_type_embeddings->forward(types)),
                 position_embeddings->forward(positions));
  return norm->forward(x);
}

BertModel::BertModel(const BertConfig& c, const HFConfig& config, bool with_pooler, const HFModelOptions& opts, Init init)
    : HFModel("bert", "BertModel", config, opts), cfg(c) {
  embeddings = register_module("embeddings", std::make_shared<BertEmbeddings>(cfg, init));
  encoder = register_module("encoder", std::make_shared<LayerStack<BertLayer>>());
  check_softmax_layers(opts, cfg.num_hidden_layers, "bert");
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i)
    encoder->layer->push_back(std::make_shared<BertLayer>(cfg, layer_options(opts, i), init));
  if (with_pooler)
    pooler = register_module("pooler", std::make_shared<DenseBlock>(cfg.hidden_size, cfg.hidden_size, false, 0.0, init));
}

Tensor BertModel::forward(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask,
                          TraceRequest* trace) const {
  check_token_ids(input_ids, 0, cfg.max_position_embeddings, "bert");
  check_ids(input_ids, cfg.vocab_size, "input_ids", "vocab_size");
  const int64_t B = input_ids.size(0), L = input_ids.size(1);
  if (token_type_ids.defined()) {
    HH_CHECK(token_type_ids.shape() == input_ids.shape(), "bert: token_type_ids ", token_type_ids.shape(),
             " does not match input_ids ", input_ids.shape());
    check_ids(token_type_ids, cfg.type_vocab_size, "token_type_ids", "type_vocab_size");
  }
  Tensor key_mask;  // (B,L) bool, undefined when every token is real (the fused softmax path)
  if (attention_mask.defined()) {
    HH_CHECK(attention_mask.shape() == Shape({B, L}), "bert: attention_mask ", attention_mask.shape(),
             " does not match input_ids ", input_ids.shape());
    key_mask = ne(attention_mask, 0.0);
    if (B * L == 0 || amin(key_mask.to(DType::f32)).item<double>() > 0.5) key_mask = Tensor();
  }
  Tensor x = embeddings->forward(input_ids, token_type_ids);
  for (const auto& l : *encoder->layer) x = l->forward(x, key_mask, trace);
  return x;
}

Tensor BertModel::pool(const Tensor& last_hidden_state) const {
  HH_CHECK(pooler != nullptr, "bert: this BertModel has no pooler (its file has no pooler weights)");
  return tanh(pooler->forward(select(last_hidden_state, 1, 0)));
}

BertForSequenceClassification::BertForSequenceClassification(const BertConfig& cfg, const HFConfig& config,
                                                             const HFModelOptions& opts, Init init)
    : HFModel("bert", "BertForSequenceClassification", config, opts) {
  bert = register_module("bert", std::make_shared<BertModel>(cfg, config, true, opts, init));
  classifier = register_module("classifier", std::make_shared<Linear>(cfg.hidden_size, cfg.num_labels, true, init));
}

Tensor BertForSequenceClassification::forward(const Tensor& input_ids, const Tensor& token_type_ids,
                                              const Tensor& attention_mask, TraceRequest* trace,
                                              Tensor* last_hidden_state) const {
  Tensor h = bert->forward(input_ids, token_type_ids, attention_mask, trace);
  if (last_hidden_state) *last_hidden_state = h;
  return classifier->forward(bert->pool(h));
}

std::string bert_rename(const std::string& file_name, bool bare_model) {
  std::string n = file_name;
  if (ends_with(n, "embeddings.position_ids") || ends_with(n, "embeddings.token_type_ids")) return "";
  if (ends_with(n, "LayerNorm.gamma")) n = n.substr(0, n.size() - 5) + "weight";
  if (ends_with(n, "LayerNorm.beta")) n = n.substr(0, n.size() - 4) + "bias";
  if (bare_model) {
    if (n.rfind("cls.", 0) == 0) return "";
    if (n.rfind("bert.", 0) == 0) n = n.substr(5);
  }
  return n;
}

std::shared_ptr<HFModel> make_bert(const HFConfig& c, const HFModelOptions& opts, const std::string& folder) {
  const std::string type = c.get_string("model_type", "bert");
  // "hedgehog_bert": a converted folder's (save_hf_model: for transformers' auto_map).
  HH_CHECK(type == "bert" || type == "hedgehog_bert", c.origin(), ": \"model_type\" = \"", type, "\" is not a BERT model");
  const BertConfig cfg = BertConfig::from_hf(c);
  const std::vector<std::string> archs = c.has("architectures") ? c.get_strings("architectures") : std::vector<std::string>{};
  const std::string arch = archs.empty() ? "BertModel" : archs[0];
  const bool bare = arch == "BertModel" || arch == "BertForMaskedLM" || arch == "BertForPreTraining";
  HH_CHECK(bare || arch == "BertForSequenceClassification", c.origin(), ": \"architectures\" = \"", arch,
           "\" is not supported (expected BertModel, BertForSequenceClassification, BertForMaskedLM or BertForPreTraining)");
  const SafeTensors weights = read_hf_weights(folder);
  bert_params(cfg, c.origin()).check_stored(weights, folder, "num_hidden_layers", cfg.num_hidden_layers, "layer");  // before any layer is built
  Generator gen(opts.seed);
  Init init{gen, opts.device, opts.dtype, /*draw=*/false};  // the HF weights are all loaded next
  std::shared_ptr<HFModel> model;
  HH_CHECK(opts.new_head_labels == 0 || bare, c.origin(), ": a fresh classification head was asked for, but the ",
           "folder already holds a ", arch, " with its own");
  if (bare && opts.new_head_labels > 0) {
    // transformers' BertForSequenceClassification.from_pretrained(base, num_labels=N): the head and
    // a missing pooler are new (drawn from opts.seed), the encoder's weights load under "bert.".
    BertConfig hc = cfg;
    hc.num_labels = opts.new_head_labels;
    Init drawn{gen, opts.device, opts.dtype, /*draw=*/true};
    model = std::make_shared<BertForSequenceClassification>(hc, c, opts, drawn);
    load_hf_weights(
        *model, weights, folder,
        [](const std::string& n) {
          const std::string r = bert_rename(n, true);
          return r.empty() ? r : "bert." + r;
        },
        nullptr,
        [](const std::string& name) { return name.rfind("classifier.", 0) == 0 || name.rfind("bert.pooler.", 0) == 0; });
    model->eval();
    return model;
  }
  if (bare) {
    const bool pooler = weights.tensors.count("pooler.dense.weight") || weights.tensors.count("bert.pooler.dense.weight");
    model = std::make_shared<BertModel>(cfg, c, pooler, opts, init);
  } else {
    model = std::make_shared<BertForSequenceClassification>(cfg, c, opts, init);
  }
  load_hf_weights(*model, weights, folder, [bare](const std::string& n) { return bert_rename(n, bare); });
  model->eval();
  return model;
}

}  // namespace hh::nn
