// TEMPORARY: stand-ins for the encoder factories (nn/models/bert.cpp, vit.cpp are written on
// another branch). Delete this file when those are merged.
#include "core/error.h"
#include "nn/models/hf_model.h"

namespace hh::nn {

std::shared_ptr<HFModel> make_bert(const HFConfig& config, const HFModelOptions&, const std::string&) {
  fail(str("hf: ", config.origin(), ": BERT is not built yet (nn/models/bert.cpp pending)"));
}
std::shared_ptr<HFModel> make_vit(const HFConfig& config, const HFModelOptions&, const std::string&) {
  fail(str("hf: ", config.origin(), ": ViT is not built yet (nn/models/vit.cpp pending)"));
}

}  // namespace hh::nn
