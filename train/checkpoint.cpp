#include "train/checkpoint.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/atomic_file.h"
#include "core/safetensors.h"

namespace hh::train {

namespace {

// Index of the first NaN or infinity of a CPU tensor, or -1 (also for non-float dtypes).
int64_t first_non_finite(const Tensor& t) {
  const Tensor c = t.is_contiguous() ? t : t.contiguous();
  const int64_t n = c.numel();
  const void* p = c.raw_data();
  switch (c.dtype()) {
    case DType::f32: {
      const float* f = static_cast<const float*>(p);
      for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(f[i])) return i;
      return -1;
    }
    case DType::f64: {
      const double* f = static_cast<const double*>(p);
      for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(f[i])) return i;
      return -1;
    }
    case DType::f16:
    case DType::bf16: {  // all exponent bits set: infinity or NaN
      const uint16_t mask = c.dtype() == DType::f16 ? 0x7C00 : 0x7F80;
      const uint16_t* h = static_cast<const uint16_t*>(p);
      for (int64_t i = 0; i < n; ++i)
        if ((h[i] & mask) == mask) return i;
      return -1;
    }
    default: return -1;
  }
}

// "nan" / "inf" / "-inf" for element i of a tensor first_non_finite found.
std::string non_finite_text(const Tensor& t, int64_t i) {
  const Tensor c = t.is_contiguous() ? t : t.contiguous();
  double v = 0;
  if (c.dtype() == DType::f32) v = static_cast<const float*>(c.raw_data())[i];
  else if (c.dtype() == DType::f64) v = static_cast<const double*>(c.raw_data())[i];
  else {
    const uint16_t h = static_cast<const uint16_t*>(c.raw_data())[i];
    const uint16_t frac = c.dtype() == DType::f16 ? 0x03FF : 0x007F;
    return (h & frac) ? "nan" : (h & 0x8000) ? "-inf" : "inf";
  }
  return std::isnan(v) ? "nan" : v < 0 ? "-inf" : "inf";
}

}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model, const Optimizer* opt, const CheckpointMeta& meta) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, t] : model.state_dict()) tensors.emplace_back("model." + name, t);
  if (opt)
    for (auto& [name, t] : opt->state()) tensors.emplace_back("optim." + name, t);
  for (auto& [name, t] : meta.tensors) tensors.emplace_back("extra." + name, t);
  std::map<std::string, std::string> md = meta.extra;
  md["hedgehog.format"] = kCheckpointFormat;
  md["hedgehog.step"] = std::to_string(meta.step);
  if (opt) md["hedgehog.optimizer_steps"] = std::to_string(opt->steps());
  for (auto& [name, g] : meta.generators)
    md["rng." + name] = std::to_string(g->seed()) + " " + std::to_string(g->offset());
  remove_stale_temps(path);
  save_safetensors(path, tensors, md, Checksums::xxh3);
}

void load_checkpoint(const std::string& path, nn::Module& model, Optimizer* opt, CheckpointMeta& meta) {
  SafeTensors st = load_safetensors(path);  // verifies the per-tensor checksums when present
  auto get = [&](const std::string& key) -> const std::string& {
    auto it = st.metadata.find(key);
    HH_CHECK(it != st.metadata.end(), "checkpoint ", path, ": metadata lacks '", key, "'");
    return it->second;
  };
  // A non-negative integer (std::stoll threw std::invalid_argument on hostile files, and took "12abc" as 12).
  auto get_count = [&](const std::string& key) -> int64_t {
    const std::string& s = get(key);
    int64_t v = -1;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    HH_CHECK(ec == std::errc() && end == s.data() + s.size() && v >= 0, "checkpoint ", path, ": metadata '", key,
             "' must be a non-negative integer, got '", s.substr(0, 40), s.size() > 40 ? "...'" : "'");
    return v;
  };
  HH_CHECK(get("hedgehog.format") == kCheckpointFormat, "checkpoint ", path, ": format '", get("hedgehog.format"),
           "', expected ", kCheckpointFormat);
  if (!st.checksummed) {
    std::cerr << "warning: checkpoint " << path
              << " has no checksums (written before hedgehog checksummed checkpoints): its tensors are not verified\n";
  }
  std::map<std::string, Tensor> model_state, optim_state;
  for (auto& [name, t] : st.tensors) {
    if (name.rfind("model.", 0) == 0)
      model_state[name.substr(6)] = t;
    else if (name.rfind("optim.", 0) == 0)
      optim_state[name.substr(6)] = t;
    else if (name.rfind("extra.", 0) == 0)
      meta.tensors[name.substr(6)] = t;
    else
      fail(str("checkpoint ", path, ": unexpected tensor '", name, "'"));
    // The weights and the optimizer state must be finite: a diverged run's checkpoint (or one
    // overwritten with NaN under a valid checksum) must not resume into an "ok" run.
    if (name.rfind("extra.", 0) != 0) {
      const int64_t bad_at = first_non_finite(t);
      HH_CHECK(bad_at < 0, "checkpoint ", path, ": tensor '", name, "' holds a non-finite value (",
               non_finite_text(t, bad_at), " at element ", bad_at,
               "): the run diverged or the file was altered; refusing to resume from it");
    }
  }
  model.load_state_dict(model_state, true);
  if (opt) opt->load_state(optim_state, get_count("hedgehog.optimizer_steps"));
  meta.step = get_count("hedgehog.step");
  for (auto& [name, g] : meta.generators) {
    std::istringstream is(get("rng." + name));
    uint64_t seed = 0, offset = 0;
    HH_CHECK(static_cast<bool>(is >> seed >> offset), "checkpoint ", path, ": bad generator state for '", name, "'");
    g->set_state(seed, offset);
  }
  for (auto& [k, v] : st.metadata)
    if (k.rfind("hedgehog.", 0) != 0 && k.rfind("rng.", 0) != 0 && k != "format") meta.extra[k] = v;
}

std::string fingerprint_diff(const std::string& saved, const std::string& now) {
  const nlohmann::json a = nlohmann::json::parse(saved, nullptr, false);
  const nlohmann::json b = nlohmann::json::parse(now, nullptr, false);
  if (a.is_discarded()) return "its unreadable fingerprint";
  if (a == b) return "";
  std::string diff;
  for (const auto& op : nlohmann::json::diff(a, b)) diff += (diff.empty() ? "" : ", ") + op["path"].get<std::string>();
  return diff;
}

}  // namespace hh::train
