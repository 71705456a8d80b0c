#include "nn/mixer.h"

#include "core/error.h"
#include "nn/feature_maps.h"

namespace hh::nn {

Mixer parse_mixer(const std::string& text, const std::string& what) {
  if (text == "softmax") return Mixer();
  if (is_feature_map_name(text)) return Mixer(text);
  const std::string hybrid = "hybrid-";
  if (text.compare(0, hybrid.size(), hybrid) == 0 && is_feature_map_name(text.substr(hybrid.size())))
    return Mixer(text.substr(hybrid.size()), true);
  std::string maps;
  for (const std::string& n : feature_map_names()) maps += (maps.empty() ? "" : ", ") + n;
  fail(str(what, ": unknown attention '", text, "' (expected softmax, a feature map or hybrid-<feature map>: ", maps,
           ")"));
}

std::string name(const Mixer& m) {
  if (m.is_softmax()) return "softmax";
  return m.is_hybrid() ? "hybrid-" + m.feature_map() : m.feature_map();
}

}  // namespace hh::nn
