#include "nn/mixer.h"

#include "core/error.h"
#include "nn/feature_maps.h"

namespace hh::nn {

Mixer parse_mixer(const std::string& text, const std::string& what) {
  if (text == "softmax") return Mixer();
  if (is_feature_map_name(text)) return Mixer(text);
  std::string maps;
  for (const std::string& n : feature_map_names()) maps += (maps.empty() ? "" : ", ") + n;
  fail(str(what, ": unknown attention '", text, "' (expected softmax or a feature map: ", maps, ")"));
}

std::string name(const Mixer& m) { return m.is_softmax() ? "softmax" : m.feature_map(); }

}  // namespace hh::nn
