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
