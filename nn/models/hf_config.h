// config.json of an HF model folder: typed access whose errors name the file and the key.
// A key that is absent and a key set to null are the same ("not given"); a present key of the
// wrong JSON type is an error, never a silent default.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hh::nn {

class HFConfig {
 public:
  static HFConfig load(const std::string& path);  // reads and parses a config.json
  static HFConfig parse(const std::string& text, const std::string& origin);

  bool has(const std::string& key) const;  // present and not null
  // Required: an error names the key and origin when missing or of the wrong type.
  int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;  // accepts integers too
  std::string get_string(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::vector<std::string> get_strings(const std::string& key) const;
  std::vector<int64_t> get_ints(const std::string& key) const;  // a list of integers
  int64_t get_positive_int(const std::string& key) const;  // a size or count: an integer > 0
  // With a default for a key that is not given.
  int64_t get_int(const std::string& key, int64_t def) const;
  double get_double(const std::string& key, double def) const;
  std::string get_string(const std::string& key, const std::string& def) const;
  bool get_bool(const std::string& key, bool def) const;
  // A nested object (e.g. "rope_scaling"); errors when absent or not an object.
  HFConfig child(const std::string& key) const;
  std::vector<std::string> keys() const;
  const std::string& origin() const { return origin_; }  // "path" or "path: key" for children

 private:
  struct Impl;
  HFConfig(std::shared_ptr<const Impl> impl, std::string origin);
  std::shared_ptr<const Impl> impl_;
  std::string origin_;
};

}  // namespace hh::nn
