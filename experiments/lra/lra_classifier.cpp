#include "experiments/lra/lra_classifier.h"

#include <algorithm>

namespace hh::nn {

TransformerConfig lra_transformer_config(const LraModelConfig& c) {
  HH_CHECK(c.vocab > 1 && c.classes > 1 && c.max_len > 0, "lra model: bad sizes (vocab ", c.vocab, ", classes ",
           c.classes, ", max_len ", c.max_len, ")");
  TransformerConfig t;
  t.vocab = c.vocab;
  t.dim = c.dim;
  t.layers = c.layers;
  t.heads = c.heads;
  t.head_dim = c.head_dim;
  t.mlp_hidden = c.mlp_hidden;
  t.max_len = c.max_len;
  t.positions = "learned";
  t.pre_ln = true;
  t.mlp = "gelu";
  t.dropout = c.dropout;
  t.attention.mixer = c.attention;
  // Bidirectional, except a gated map: its state is a recurrence, run left to right (chunked form);
  // mean pooling then reads every position's output.
  t.attention.gate = c.gate;
  t.attention.gate_output = c.gate_output;
  t.attention.causal = c.gate != Gate::none;
  t.attention.form = c.gate != Gate::none ? LinearForm::chunked : LinearForm::noncausal;
  t.attention.feature_map = c.feature_map;
  t.seed = c.seed;
  return t;
}

LraClassifier::LraClassifier(const LraModelConfig& c, Init init) : cfg(c) {
  const TransformerConfig t = lra_transformer_config(c);
  encoder = register_module("encoder", std::make_shared<EncoderClassifier>(t, c.two_documents ? 0 : c.classes, "mean", init));
  if (c.two_documents) {
    head1 = register_module("head1", std::make_shared<Linear>(4 * c.dim, c.mlp_hidden, true, init));
    head2 = register_module("head2", std::make_shared<Linear>(c.mlp_hidden, c.classes, true, init));
  }
}

Tensor LraClassifier::forward(const Tensor& ids, const Tensor& key_mask, const Tensor& ids2, const Tensor& mask2) {
  if (!cfg.two_documents) {
    HH_CHECK(!ids2.defined(), "lra model: a single-document model takes one document per row");
    return encoder->forward(ids, key_mask);
  }
  HH_CHECK(ids2.defined() && ids2.size(0) == ids.size(0), "lra model: the two-tower model needs a second document per row");
  Tensor x1 = encoder->forward(ids, key_mask), x2 = encoder->forward(ids2, mask2);  // (B,dim) each
  Tensor features = cat({x1, x2, mul(x1, x2), sub(x1, x2)}, -1);                     // (B,4·dim)
  return head2->forward(relu(head1->forward(features)));
}

void LraClassifier::on_optimizer_step() {
  for (const auto& b : *encoder->blocks) b->attn->on_optimizer_step();
}

std::vector<Dropout*> LraClassifier::dropouts() {
  std::vector<Dropout*> out;
  for (const auto& b : *encoder->blocks)
    if (b->drop) out.push_back(b->drop.get());
  return out;
}

void pad_batch(const std::vector<const std::vector<int32_t>*>& rows, Tensor& ids, Tensor& key_mask) {
  const int64_t B = static_cast<int64_t>(rows.size());
  HH_CHECK(B > 0, "pad_batch: no rows");
  size_t L = 1;
  for (const auto* r : rows) L = std::max(L, r->size());
  std::vector<int64_t> id(static_cast<size_t>(B) * L, 0);
  std::vector<double> keep(static_cast<size_t>(B) * L, 0.0);
  for (size_t b = 0; b < rows.size(); ++b) {
    const std::vector<int32_t>& r = *rows[b];
    for (size_t i = 0; i < r.size(); ++i) {
      id[b * L + i] = r[i];
      keep[b * L + i] = 1.0;
    }
    if (r.empty()) keep[b * L] = 1.0;  // an empty document is one padding token that counts
  }
  const int64_t Li = static_cast<int64_t>(L);
  ids = from_vector(id, {B, Li}, {DType::i64});
  key_mask = from_vector(keep, {B, Li}, {DType::boolean});
}

}  // namespace hh::nn
