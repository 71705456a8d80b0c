// Feature maps φ: R^D -> R^F for linear attention, one class per row of REFERENCE.md §2, selected
// by name ("elu", "relu", "t2r", "t2r-hh", "performer", "cosformer", "exp", "taylor",
// "hedgehog", "hedgehog-exp", "hedgehog-untrained"). Trainable maps hold per-head weights.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/layers.h"

namespace hh::nn {

struct FeatureMapConfig {
  std::string name = "hedgehog";
  int64_t heads = 1;
  int64_t head_dim = 64;
  int64_t feature_dim = 0;       // F for t2r / hedgehog (0 = head_dim); m for performer (0 = 256)
  double temperature = 1.0;      // exp: φ(x) = exp(t·x)
  int64_t redraw_interval = 1000;  // performer: redraw Ω every N training steps (0 = never)
  bool joint_softmax = false;    // hedgehog: one softmax over [2z, -2z] instead of one per half
  bool untied = false;           // hedgehog / t2r: separate maps for queries and keys
  bool taylor_packed = false;    // taylor: 1 + D + D(D+1)/2 features
  int64_t cosformer_length = 0;  // cosformer M; 0 = the length of the sequence being processed
  uint64_t seed = 0;             // performer's Generator
  // Hybrid mixers: the linear part weighted 1 − sigmoid(window factor) instead of 1 (LoLCATs'
  // affine_attention_factors).
  bool hybrid_affine = false;
};

// Where the tokens sit in the sequence (cosformer needs absolute positions, the exp maps a
// per-sequence key shift).
struct FeatureContext {
  FeatureContext(int64_t pos_offset_ = 0, int64_t total_len_ = 0, Tensor key_mask_ = Tensor())
      : pos_offset(pos_offset_), total_len(total_len_), key_mask(std::move(key_mask_)) {}
  int64_t pos_offset = 0;  // position of the first token (decoding)
  int64_t total_len = 0;   // full sequence length M (0 = the L of this call)
  // (B,L) bool, true = real token, or undefined: padded keys take no part in the key-side shift
  // of exp / hedgehog-exp / performer, and cosformer's M is each row's real length, so that a
  // padded row gives the same features as the row alone.
  Tensor key_mask;
  // Keys shifted each by its own max, as decoding (one key per call) shifts them, instead of by one
  // max over the sequence: a prefill (AttentionMixer::prefill) then leaves the state the steps would.
  bool keys_one_by_one = false;
};

class FeatureMap : public Module {
 public:
  explicit FeatureMap(std::string name) : name_(std::move(name)) {}
  // x (B,H,L,D) -> φ(x) (B,H,L,F). Queries and keys may be treated differently (stabilizers,
  // untied weights).
  virtual Tensor forward(const Tensor& x, bool is_query, const FeatureContext& ctx) = 0;
  virtual int64_t feature_dim() const = 0;
  // Called once per optimizer step in training (performer redraws its projection here).
  virtual void on_step() {}
  // True when φ of a token depends on its position (FeatureContext::pos_offset: cosformer), so
  // tokens at different positions cannot share one call.
  virtual bool reads_position() const { return false; }
  const std::string& name() const { return name_; }
  bool trainable() const { return num_parameters() > 0; }

 private:
  std::string name_;
};

std::shared_ptr<FeatureMap> make_feature_map(const FeatureMapConfig& cfg, Init init);

// The feature map of a hybrid mixer (LoLCATs' sliding window + linear attention): the linear
// part's map as child "map" and the per-head window factor p ("window_factor", (H), init 0),
// whose sigmoid weighs the window's softmax terms (wf = sigmoid(p), lf = 1). Both sit under the
// attention's "feature_map" child, so they are the new weights of a converted model. forward is
// the inner map's.
class HybridFeatureMap : public FeatureMap {
 public:
  // affine: lf = 1 − wf (LoLCATs' affine_attention_factors) instead of lf = 1.
  HybridFeatureMap(std::shared_ptr<FeatureMap> map, int64_t heads, Init init, bool affine = false);
  Tensor forward(const Tensor& x, bool is_query, const FeatureContext& ctx) override {
    return map->forward(x, is_query, ctx);
  }
  int64_t feature_dim() const override { return map->feature_dim(); }
  void on_step() override { map->on_step(); }
  bool reads_position() const override { return map->reads_position(); }
  // wf = sigmoid(window_factor) (init 0: wf = 0.5, as LoLCATs) and lf = 1 (or 1 − wf when
  // affine), (H) each, as `dtype`.
  Tensor window_weight(DType dtype) const;
  Tensor linear_weight(DType dtype) const;

  std::shared_ptr<FeatureMap> map;
  Tensor window_factor;  // (H)
  bool affine = false;
};
// Every accepted name, in the order of REFERENCE.md §2 (softmax excluded).
const std::vector<std::string>& feature_map_names();
bool is_feature_map_name(const std::string& name);

}  // namespace hh::nn
