// The attention mixer of a layer as a type: softmax, or linear attention with a named feature map
// (one of feature_map_names()). Text ("softmax", "hedgehog", ...) becomes a Mixer once, where it
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
  bool is_linear() const { return !feature_map_.empty(); }
  // The feature map's name, one of feature_map_names(); empty for softmax.
  const std::string& feature_map() const { return feature_map_; }

  friend bool operator==(const Mixer& a, const Mixer& b) { return a.feature_map_ == b.feature_map_; }
  friend bool operator!=(const Mixer& a, const Mixer& b) { return !(a == b); }
  friend Mixer parse_mixer(const std::string& text, const std::string& what);

 private:
  explicit Mixer(std::string feature_map) : feature_map_(std::move(feature_map)) {}
  std::string feature_map_;
};

// "softmax" or a feature-map name -> Mixer. Anything else fails naming `what` (the flag or JSON
// key) and the value: "<what>: unknown attention '<text>' (expected softmax or a feature map: ...)".
Mixer parse_mixer(const std::string& text, const std::string& what);
// The mixer's text: "softmax" or the feature map's name (parse_mixer reads it back).
std::string name(const Mixer& m);

}  // namespace hh::nn
