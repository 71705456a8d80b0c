// The attention mixer of a layer as a type: softmax, linear attention with a named feature map
// (one of feature_map_names()), or LoLCATs' hybrid of a causal sliding window (softmax over the
// last W keys) and linear attention with a named map over the keys before it ("hybrid-<map>";
// the window size is MixerConfig::window, not part of the name).
// Text ("softmax", "hedgehog", ...) becomes a Mixer once, where it
// enters (a flag, a JSON key), through parse_mixer; deeper code compares Mixers, and name() gives
// the same text back for what is written (JSON, CSV, reports, config.json), so files do not change.
#pragma once
#include <string>
#include <utility>

namespace hh::nn {

class Mixer {
 public:
  Mixer() = default;  // softmax
  static Mixer softmax() { return Mixer(); }
  bool is_softmax() const { return feature_map_.empty(); }
  // Has a feature map: plain linear attention or the hybrid (whose feature_map child holds the
  // map and the window factors). Pure linear attention is is_linear() && !is_hybrid().
  bool is_linear() const { return !feature_map_.empty(); }
  bool is_hybrid() const { return hybrid_; }
  // The feature map's name, one of feature_map_names(); empty for softmax. For a hybrid, the map
  // of its linear part ("hedgehog" for "hybrid-hedgehog").
  const std::string& feature_map() const { return feature_map_; }

  friend bool operator==(const Mixer& a, const Mixer& b) {
    return a.feature_map_ == b.feature_map_ && a.hybrid_ == b.hybrid_;
  }
  friend bool operator!=(const Mixer& a, const Mixer& b) { return !(a == b); }
  friend Mixer parse_mixer(const std::string& text, const std::string& what);

 private:
  explicit Mixer(std::string feature_map, bool hybrid = false)
      : feature_map_(std::move(feature_map)), hybrid_(hybrid) {}
  std::string feature_map_;
  bool hybrid_ = false;
};

// "softmax", a feature-map name, or "hybrid-" + a feature-map name -> Mixer. Anything else fails
// naming `what` (the flag or JSON key) and the value: "<what>: unknown attention '<text>'
// (expected softmax, a feature map or hybrid-<feature map>: ...)".
Mixer parse_mixer(const std::string& text, const std::string& what);
// The mixer's text: "softmax", the feature map's name, or "hybrid-<map>" (parse_mixer reads it back).
std::string name(const Mixer& m);

}  // namespace hh::nn
