// Sentence embeddings (nn/models/embedding.h): sentence-transformers' folder files and poolings.
#include "nn/models/embedding.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "autograd/ops.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/quote.h"
#include "core/safetensors.h"
#include "nn/models/bert.h"
#include "nn/models/hf_config.h"
#include "nn/models/vit.h"

namespace hh::nn {

namespace fs = std::filesystem;

Tensor text_encoder_hidden(const HFModel& m, const Tensor& ids, const Tensor& token_types, const Tensor& mask,
                           TraceRequest* trace) {
  if (auto* b = dynamic_cast<const BertModel*>(&m)) return b->forward(ids, token_types, mask, trace);
  if (auto* c = dynamic_cast<const BertForSequenceClassification*>(&m))
    return c->bert->forward(ids, token_types, mask, trace);
  return Tensor();
}

int64_t text_encoder_max_positions(const HFModel& m) {
  if (auto* b = dynamic_cast<const BertModel*>(&m)) return b->cfg.max_position_embeddings;
  if (auto* c = dynamic_cast<const BertForSequenceClassification*>(&m)) return c->bert->cfg.max_position_embeddings;
  return 0;
}

Tensor image_encoder_hidden(const HFModel& m, const Tensor& pixels) {
  if (auto* v = dynamic_cast<const ViTModel*>(&m)) return v->forward(pixels);
  if (auto* c = dynamic_cast<const ViTForImageClassification*>(&m)) return c->vit->forward(pixels);
  return Tensor();
}

Pooling parse_pooling(const std::string& text, const std::string& what) {
  if (text == "cls") return Pooling::cls;
  if (text == "mean") return Pooling::mean;
  if (text == "max") return Pooling::max;
  if (text == "mean_sqrt_len_tokens" || text == "mean_sqrt_len") return Pooling::mean_sqrt_len;
  if (text == "lasttoken" || text == "last") return Pooling::last;
  fail(str(what, ": unknown pooling ", quote_text(text), " (cls, mean, max, mean_sqrt_len_tokens or lasttoken)"));
}

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::cls: return "cls";
    case Pooling::mean: return "mean";
    case Pooling::max: return "max";
    case Pooling::mean_sqrt_len: return "mean_sqrt_len_tokens";
    case Pooling::last: return "lasttoken";
  }
  return "?";
}

namespace {

// The last dotted component of a module type ("sentence_transformers.models.Pooling" -> "Pooling").
std::string module_kind(const std::string& type) {
  const size_t dot = type.rfind('.');
  return dot == std::string::npos ? type : type.substr(dot + 1);
}

// A pooling config in either format: {"pooling_mode": "mean"} (sentence-transformers 5+) or the
// pooling_mode_*_tokens booleans, exactly one of them true (several concatenate their vectors in
// sentence-transformers, which this does not compute).
Pooling read_pooling(const std::string& path) {
  const HFConfig c = HFConfig::load(path);
  if (c.has("pooling_mode")) return parse_pooling(c.get_string("pooling_mode"), path + ": pooling_mode");
  const std::pair<const char*, Pooling> flags[] = {{"pooling_mode_cls_token", Pooling::cls},
                                                   {"pooling_mode_mean_tokens", Pooling::mean},
                                                   {"pooling_mode_max_tokens", Pooling::max},
                                                   {"pooling_mode_mean_sqrt_len_tokens", Pooling::mean_sqrt_len},
                                                   {"pooling_mode_lasttoken", Pooling::last},
                                                   {"pooling_mode_weightedmean_tokens", Pooling::mean}};
  std::vector<std::string> on;
  Pooling p = Pooling::mean;
  for (const auto& [key, mode] : flags)
    if (c.get_bool(key, false)) {
      on.push_back(key);
      p = mode;
    }
  HH_CHECK(on.size() == 1, path, ": expected exactly one pooling_mode_*_tokens set to true, got ", on.size(),
           on.empty() ? "" : " (" + on.front() + (on.size() > 1 ? ", " + on[1] : "") + ")");
  HH_CHECK(on.front() != "pooling_mode_weightedmean_tokens", path,
           ": pooling_mode_weightedmean_tokens is not supported (cls, mean, max, mean_sqrt_len_tokens, lasttoken)");
  return p;
}

}  // namespace

EmbeddingConfig read_embedding_config(const std::string& folder) {
  EmbeddingConfig e;
  e.source = "default (no modules.json: mean pooling)";
  const std::string modules_path = (fs::path(folder) / "modules.json").string();
  if (fs::exists(modules_path)) {
    e.from_folder = true;
    e.source = modules_path;
    bool too_deep = false;
    auto cb = [&](int d, nlohmann::json::parse_event_t ev, nlohmann::json&) {
      if (ev == nlohmann::json::parse_event_t::object_start || ev == nlohmann::json::parse_event_t::array_start)
        too_deep = too_deep || d >= kSafetensorsMaxJsonDepth;
      return !too_deep;
    };
    const nlohmann::json mods = nlohmann::json::parse(read_file(modules_path), cb, false);
    HH_CHECK(!too_deep && mods.is_array(), modules_path, ": expected a JSON array of modules");
    bool pooled = false;
    for (size_t i = 0; i < mods.size(); ++i) {
      const nlohmann::json& m = mods[i];
      const std::string at = str(modules_path, ": module ", i);
      HH_CHECK(m.is_object() && m.contains("type") && m["type"].is_string(), at, ": expected an object with \"type\"");
      const std::string kind = module_kind(m["type"].get<std::string>());
      const std::string path = m.contains("path") && m["path"].is_string() ? m["path"].get<std::string>() : "";
      HH_CHECK(path.find("..") == std::string::npos && (path.empty() || path[0] != '/'), at, ": path ",
               quote_text(path), " leaves the folder");
      if (kind == "Transformer") {
        HH_CHECK(i == 0, at, ": the Transformer module must come first");
      } else if (kind == "Pooling") {
        HH_CHECK(!pooled, at, ": a second Pooling module");
        e.pooling = read_pooling((fs::path(folder) / path / "config.json").string());
        pooled = true;
      } else if (kind == "Normalize") {
        HH_CHECK(pooled, at, ": Normalize before any Pooling");
        e.normalize = true;
      } else {
        fail(str(at, ": module type ", quote_text(m["type"].get<std::string>()),
                 " is not supported (Transformer, Pooling, Normalize); its vectors would differ"));
      }
    }
    HH_CHECK(pooled, modules_path, ": no Pooling module (sentence embeddings need one)");
  }
  const std::string sbert = (fs::path(folder) / "sentence_bert_config.json").string();
  const std::string tok = (fs::path(folder) / "tokenizer_config.json").string();
  const std::optional<HFConfig> sb = fs::exists(sbert) ? std::optional<HFConfig>(HFConfig::load(sbert)) : std::nullopt;
  if (sb && sb->has("max_seq_length")) {
    e.max_seq_length = sb->get_positive_int("max_seq_length");
  } else if (e.from_folder && fs::exists(tok)) {
    // sentence-transformers 5+ keeps the Transformer's max_seq_length as model_max_length; the
    // transformers "no limit" sentinel (1e30) is not a length.
    const HFConfig t = HFConfig::load(tok);
    const double v = t.has("model_max_length") ? t.get_double("model_max_length") : 0.0;
    if (v >= 1 && v < 1e9) e.max_seq_length = static_cast<int64_t>(v);
  }
  return e;
}

Tensor pool_hidden(const Tensor& hidden, const Tensor& mask_in, Pooling p) {
  HH_CHECK(hidden.dim() == 3, "pool_hidden: expected hidden (B,L,C), got ", hidden.shape());
  const int64_t B = hidden.size(0), L = hidden.size(1);
  const Tensor mask = mask_in.defined() ? mask_in : ones({B, L}, {DType::boolean, hidden.device()});
  HH_CHECK(mask.dim() == 2 && mask.size(0) == B && mask.size(1) == L, "pool_hidden: mask ", mask.shape(),
           " does not match hidden ", hidden.shape());
  const Tensor real = to_dtype(ne(mask, 0.0), hidden.dtype());  // (B,L) 1 on real tokens
  switch (p) {
    case Pooling::cls: return select(hidden, 1, 0);
    case Pooling::mean:
    case Pooling::mean_sqrt_len: {
      const Tensor s = sum(mul(hidden, unsqueeze(real, -1)), {1});   // (B,C)
      const Tensor n = clamp(sum(real, {1}, true), 1e-9, 1e300);     // (B,1), as sentence-transformers
      return div(s, p == Pooling::mean ? n : sqrt(n));
    }
    case Pooling::max:  // pads at -1e9, as sentence-transformers
      return amax(masked_fill(hidden, unsqueeze(eq(mask, 0.0), -1), -1e9), {1});
    case Pooling::last: {  // the last real token of each (right-padded) row
      const Tensor last = clamp(sub(sum(real, {1}, true), 1.0), 0.0, static_cast<double>(L - 1));  // (B,1)
      const Tensor idx = expand(unsqueeze(to_dtype(last, DType::i64), -1), {B, 1, hidden.size(2)});
      return squeeze(gather(hidden, 1, idx), 1);
    }
  }
  fail("pool_hidden: unknown pooling");
}

Tensor l2_normalize(const Tensor& x) {
  HH_CHECK(x.dim() == 2, "l2_normalize: expected (B,C), got ", x.shape());
  return div(x, maximum(sqrt(sum(mul(x, x), {1}, true)), 1e-12));
}

Tensor cosine_similarity(const Tensor& a, const Tensor& b) {
  return matmul(l2_normalize(a), transpose(l2_normalize(b), 0, 1));
}

}  // namespace hh::nn
