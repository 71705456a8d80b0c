#include "nn/models/hf_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "core/regular_file.h"
#include "core/safetensors.h"

namespace hh::nn {

struct HFConfig::Impl {
  nlohmann::json j;
};

HFConfig::HFConfig(std::shared_ptr<const Impl> impl, std::string origin)
    : impl_(std::move(impl)), origin_(std::move(origin)) {}

HFConfig HFConfig::load(const std::string& path) {
  check_regular_file(path, "config");  // a FIFO would block the open below forever
  std::ifstream f(path, std::ios::binary);
  HH_CHECK(f.good(), "config: cannot open ", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  HH_CHECK(!f.bad(), "config: cannot read ", path);
  return parse(ss.str(), path);
}

HFConfig HFConfig::parse(const std::string& text, const std::string& origin) {
  auto impl = std::make_shared<Impl>();
  bool too_deep = false;
  // Depth-limited parse: hostile nesting is rejected while parsing (no deep tree is built).
  auto cb = [&](int d, nlohmann::json::parse_event_t ev, nlohmann::json&) {
    if (ev == nlohmann::json::parse_event_t::object_start || ev == nlohmann::json::parse_event_t::array_start)
      too_deep = too_deep || d >= kSafetensorsMaxJsonDepth;
    return !too_deep;
  };
  try {
    impl->j = nlohmann::json::parse(text, cb);
  } catch (const nlohmann::json::exception& e) {
    fail(str("config: ", origin, ": invalid JSON (", e.what(), ")"));
  }
  HH_CHECK(!too_deep, "config: ", origin, ": JSON nested deeper than ", kSafetensorsMaxJsonDepth);
  HH_CHECK(impl->j.is_object(), "config: ", origin, ": expected a JSON object at the top level");
  return HFConfig(std::move(impl), origin);
}

namespace {
const char* type_name(const nlohmann::json& v) { return v.type_name(); }

// The value of a key that must be given (present and not null).
const nlohmann::json& required(const nlohmann::json& j, const std::string& key, const std::string& origin) {
  auto it = j.find(key);
  HH_CHECK(it != j.end() && !it->is_null(), "config: ", origin, ": missing key \"", key, "\"");
  return *it;
}
}  // namespace

bool HFConfig::has(const std::string& key) const {
  auto it = impl_->j.find(key);
  return it != impl_->j.end() && !it->is_null();
}

int64_t HFConfig::get_int(const std::string& key) const {
  const nlohmann::json& v = required(impl_->j, key, origin_);
  HH_CHECK(v.is_number_integer(), "config: ", origin_, ": \"", key, "\" must be an integer, got ", type_name(v));
  // JSON integers above 2^63 - 1 are parsed unsigned: refuse them rather than wrap to a negative.
  HH_CHECK(!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX), "config: ", origin_, ": \"",
           key, "\" = ", v.get<uint64_t>(), " does not fit a 64-bit integer");
  return v.get<int64_t>();
}
int64_t HFConfig::get_positive_int(const std::string& key) const {
  const int64_t v = get_int(key);
  HH_CHECK(v > 0, "config: ", origin_, ": \"", key, "\" must be positive, got ", v);
  return v;
}
double HFConfig::get_double(const std::string& key) const {
  const nlohmann::json& v = required(impl_->j, key, origin_);
  HH_CHECK(v.is_number(), "config: ", origin_, ": \"", key, "\" must be a number, got ", type_name(v));
  return v.get<double>();
}
std::string HFConfig::get_string(const std::string& key) const {
  const nlohmann::json& v = required(impl_->j, key, origin_);
  HH_CHECK(v.is_string(), "config: ", origin_, ": \"", key, "\" must be a string, got ", type_name(v));
  return v.get<std::string>();
}
bool HFConfig::get_bool(const std::string& key) const {
  const nlohmann::json& v = required(impl_->j, key, origin_);
  HH_CHECK(v.is_boolean(), "config: ", origin_, ": \"", key, "\" must be true or false, got ", type_name(v));
  return v.get<bool>();
}
std::vector<std::string> HFConfig::get_strings(const std::string& key) const {
  const nlohmann::json& v = required(impl_->j, key, origin_);
  HH_CHECK(v.is_array(), "config: ", origin_, ": \"", key, "\" must be a list of strings, got ", type_name(v));
  std::vector<std::string> out;
  for (const auto& e : v) {
    HH_CHECK(e.is_string(), "config: ", origin_, ": \"", key, "\" must be a list of strings, has a ", type_name(e));
    out.push_back(e.get<std::string>());
  }
  return out;
}
std::vector<int64_t> HFConfig::get_ints(const std::string& key) const {
  const nlohmann::json& v = required(impl_->j, key, origin_);
  HH_CHECK(v.is_array(), "config: ", origin_, ": \"", key, "\" must be a list of integers, got ", type_name(v));
  std::vector<int64_t> out;
  for (const auto& e : v) {
    HH_CHECK(e.is_number_integer() && (!e.is_number_unsigned() || e.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)),
             "config: ", origin_, ": \"", key, "\" must be a list of 64-bit integers, has ", e.dump());
    out.push_back(e.get<int64_t>());
  }
  return out;
}
HFConfig HFConfig::child(const std::string& key) const {
  const nlohmann::json& v = required(impl_->j, key, origin_);
  HH_CHECK(v.is_object(), "config: ", origin_, ": \"", key, "\" must be an object, got ", type_name(v));
  auto impl = std::make_shared<Impl>();
  impl->j = v;
  return HFConfig(std::move(impl), origin_ + ": " + key);
}

int64_t HFConfig::get_int(const std::string& key, int64_t def) const { return has(key) ? get_int(key) : def; }
double HFConfig::get_double(const std::string& key, double def) const { return has(key) ? get_double(key) : def; }
std::string HFConfig::get_string(const std::string& key, const std::string& def) const {
  return has(key) ? get_string(key) : def;
}
bool HFConfig::get_bool(const std::string& key, bool def) const { return has(key) ? get_bool(key) : def; }

std::vector<std::string> HFConfig::keys() const {
  std::vector<std::string> out;
  for (auto it = impl_->j.begin(); it != impl_->j.end(); ++it) out.push_back(it.key());
  return out;
}

}  // namespace hh::nn
