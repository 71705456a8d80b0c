// A small command-line flag parser for the apps: --name value or --name=value, typed getters with
// range checks, --help text, and a clear error for unknown or malformed flags.
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "autograd/autocast.h"
#include "core/cuda_config.h"
#include "core/device.h"
#include "core/error.h"

namespace hh::apps {

class Flags {
 public:
  Flags(std::string program, std::string about) : program_(std::move(program)), about_(std::move(about)) {}

  // Declares a flag with its default (as text) and help. Booleans are declared with is_bool.
  void add(const std::string& name, const std::string& def, const std::string& help, bool is_bool = false) {
    order_.push_back(name);
    specs_[name] = {def, help, is_bool};
  }

  // Returns false when --help was given (help printed).
  bool parse(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--help" || a == "-h") {
        print_help();
        return false;
      }
      HH_CHECK(a.rfind("--", 0) == 0 && a.size() > 2, "unexpected argument '", a, "' (flags look like --name value)");
      std::string name = a.substr(2), value;
      bool has_value = false;
      size_t eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
      auto it = specs_.find(name);
      HH_CHECK(it != specs_.end(), "unknown flag --", name, " (see --help)");
      HH_CHECK(!given_.count(name), "flag --", name, " given twice");
      if (!has_value) {
        if (it->second.is_bool) {
          value = "true";
        } else {
          HH_CHECK(i + 1 < argc, "flag --", name, " needs a value");
          value = argv[++i];
        }
      }
      values_[name] = value;
      given_.insert(name);
    }
    return true;
  }

  bool given(const std::string& name) const { return given_.count(name) > 0; }
  std::string str(const std::string& name) const {
    auto it = values_.find(name);
    if (it != values_.end()) return it->second;
    auto s = specs_.find(name);
    HH_CHECK(s != specs_.end(), "internal: undeclared flag --", name);
    return s->second.def;
  }
  int64_t integer(const std::string& name, int64_t lo = INT64_MIN, int64_t hi = INT64_MAX) const {
    std::string v = str(name);
    size_t pos = 0;
    int64_t x = 0;
    try {
      x = std::stoll(v, &pos);
    } catch (...) {
      pos = 0;
    }
    HH_CHECK(pos == v.size() && !v.empty(), "flag --", name, ": expected an integer, got '", v, "'");
    HH_CHECK(x >= lo && x <= hi, "flag --", name, ": ", x, " is out of range [", lo, ", ", hi, "]");
    return x;
  }
  double number(const std::string& name, double lo = -1e300, double hi = 1e300) const {
    std::string v = str(name);
    size_t pos = 0;
    double x = 0;
    try {
      x = std::stod(v, &pos);
    } catch (...) {
      pos = 0;
    }
    HH_CHECK(pos == v.size() && !v.empty(), "flag --", name, ": expected a number, got '", v, "'");
    HH_CHECK(x >= lo && x <= hi, "flag --", name, ": ", x, " is out of range [", lo, ", ", hi, "]");
    return x;
  }
  bool boolean(const std::string& name) const {
    std::string v = str(name);
    if (v == "true" || v == "1" || v == "yes") return true;
    if (v == "false" || v == "0" || v == "no") return false;
    fail(hh::str("flag --", name, ": expected true or false, got '", v, "'"));
  }
  static std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ','))
      if (!item.empty()) out.push_back(item);
    return out;
  }

  void print_help() const {
    std::printf("%s\n\nusage: %s [flags]\n\n", about_.c_str(), program_.c_str());
    for (const auto& n : order_) {
      const Spec& s = specs_.at(n);
      std::printf("  --%-18s %s (default: %s)\n", n.c_str(), s.help.c_str(), s.def.empty() ? "\"\"" : s.def.c_str());
    }
  }

 private:
  struct Spec {
    std::string def, help;
    bool is_bool;
  };
  std::string program_, about_;
  std::vector<std::string> order_;
  std::map<std::string, Spec> specs_;
  std::map<std::string, std::string> values_;
  std::set<std::string> given_;
};

// --precision: one flag, the same in every app that runs a model (autograd/autocast.h).
inline void add_precision_flag(Flags& f) {
  f.add("precision", "f32",
        "f32; tf32 (CUDA only: f32 GEMMs on TF32 tensor cores); or bf16 (autocast: bf16 GEMMs and\n"
        "attention with f32 accumulation; f32 weights, optimizer state and softmax/norm/loss statistics;\n"
        "on the CPU a slow reference of the CUDA arithmetic)");
}

// Parses and checks --precision for `device` (before any long work); tf32 turns TF32 on for the
// process.
inline Precision precision_flag(const Flags& f, Device device) {
  try {
    const Precision p = parse_precision(f.str("precision"));
    check_precision(p, device);
    if (p == Precision::tf32) set_allow_tf32(true);
    return p;
  } catch (const Error& e) {
    fail(str("--precision: ", e.what()));
  }
}

}  // namespace hh::apps
