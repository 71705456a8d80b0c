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

namespace hh::cli {

class Flags {
 public:
  Flags(std::string program, std::string about) : program_(std::move(program)), about_(std::move(about)) {}

  // Declares a flag with its default (as text) and help. Booleans are declared with is_bool, or by a
  // default of "true" or "false"; they take every spelling users type: --name, --name=true|false,
  // --name true|false (the next argument, when it is one of the words boolean() reads) and --no-name.
  void add(const std::string& name, const std::string& def, const std::string& help, bool is_bool = false) {
    HH_CHECK(!specs_.count(name), "internal: flag --", name, " declared twice");
    order_.push_back(name);
    specs_[name] = {def, help, is_bool || def == "true" || def == "false"};
  }

  // Leaves --name (declared before or after) out of --help: a shared flag this app only refuses.
  void hide(const std::string& name) { hidden_.insert(name); }

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
      if (it == specs_.end() && name.rfind("no-", 0) == 0) {  // --no-NAME: a boolean's false
        auto b = specs_.find(name.substr(3));
        if (b != specs_.end() && b->second.is_bool) {
          HH_CHECK(!has_value, "flag --", name, " takes no value (it means --", b->first, "=false)");
          name = b->first;
          it = b;
          value = "false";
          has_value = true;
        }
      }
      HH_CHECK(it != specs_.end(), "unknown flag --", name, " (see --help)");
      HH_CHECK(!given_.count(name), "flag --", name, " given twice");
      if (!has_value) {
        if (it->second.is_bool) {
          value = "true";
          if (i + 1 < argc && is_bool_word(argv[i + 1])) value = argv[++i];
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
    auto s = specs_.find(name);
    HH_CHECK(s != specs_.end() && s->second.is_bool, "internal: --", name, " is not declared as a boolean flag");
    std::string v = str(name);
    if (v == "true" || v == "1" || v == "yes") return true;
    if (v == "false" || v == "0" || v == "no") return false;
    fail(hh::str("flag --", name, ": expected true or false, got '", v, "'"));
  }
  // A comma list of integers, each in [lo, hi], at least one; errors name the flag and the item.
  std::vector<int64_t> integers(const std::string& name, int64_t lo, int64_t hi) const {
    std::vector<int64_t> out;
    for (const std::string& item : split_list(str(name))) {
      size_t pos = 0;
      int64_t x = 0;
      try {
        x = std::stoll(item, &pos);
      } catch (...) {
        pos = 0;
      }
      HH_CHECK(pos == item.size() && x >= lo && x <= hi, "flag --", name, ": expected integers in [", lo, ", ", hi,
               "], got '", item, "'");
      out.push_back(x);
    }
    HH_CHECK(!out.empty(), "flag --", name, ": expected a comma list of integers, got '", str(name), "'");
    return out;
  }
  static std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ','))
      if (!item.empty()) out.push_back(item);
    return out;
  }

  // One flag per entry: its help's lines indented under the first, then its default, once (a help
  // that already states its default, or a flag without one, shows none).
  void print_help() const {
    std::printf("%s\n\nusage: %s [flags]\n\n", about_.c_str(), program_.c_str());
    for (const auto& n : order_)
      if (specs_.at(n).is_bool && !hidden_.count(n)) {
        std::printf("  booleans: --name, --name=true|false, --name true|false, --no-name\n\n");
        break;
      }
    for (const auto& n : order_)
      if (!hidden_.count(n)) std::printf("%s", help_entry(n).c_str());
  }
  std::string help_entry(const std::string& name) const {
    const Spec& s = specs_.at(name);
    std::string help = s.help;
    if (!s.def.empty() && help.find("default") == std::string::npos) help += " (default: " + s.def + ")";
    const std::string indent(2 + 2 + kNameWidth + 1, ' ');
    std::string out = "  --" + name;
    out += name.size() < kNameWidth ? std::string(kNameWidth - name.size() + 1, ' ') : "\n" + indent;
    std::stringstream lines(help);
    std::string line;
    bool first = true;
    while (std::getline(lines, line)) {
      const size_t start = first ? 0 : line.find_first_not_of(' ');
      if (!first) out += indent;
      out += start == std::string::npos ? "" : line.substr(start);
      out += "\n";
      first = false;
    }
    return out;
  }

 private:
  static constexpr size_t kNameWidth = 18;
  static bool is_bool_word(const std::string& v) {
    return v == "true" || v == "false" || v == "1" || v == "0" || v == "yes" || v == "no";
  }
  struct Spec {
    std::string def, help;
    bool is_bool;
  };
  std::string program_, about_;
  std::vector<std::string> order_;
  std::map<std::string, Spec> specs_;
  std::map<std::string, std::string> values_;
  std::set<std::string> given_;
  std::set<std::string> hidden_;
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

}  // namespace hh::cli
