#include "serve/jinja_value.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace hh::serve::jinja {

const char* const kNamespaceKey = "\x01" "namespace";
const char* const kCallableKey = "\x01" "callable";

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

void dumps(const json& v, int indent, int depth, std::string& out) {
  const auto newline = [&](int d) {
    if (indent >= 0) out += "\n" + std::string(static_cast<size_t>(indent * d), ' ');
  };
  const std::string item_sep = indent >= 0 ? "," : ", ";
  if (v.is_object()) {
    size_t n = 0;
    for (auto it = v.begin(); it != v.end(); ++it) n += it.key() != kNamespaceKey;
    if (n == 0) {
      out += "{}";
      return;
    }
    out += "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (it.key() == kNamespaceKey) continue;
      if (!first) out += item_sep;
      first = false;
      newline(depth + 1);
      out += json_string(it.key()) + ": ";
      dumps(it.value(), indent, depth + 1, out);
    }
    newline(depth);
    out += "}";
  } else if (v.is_array()) {
    if (v.empty()) {
      out += "[]";
      return;
    }
    out += "[";
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += item_sep;
      newline(depth + 1);
      dumps(v[i], indent, depth + 1, out);
    }
    newline(depth);
    out += "]";
  } else if (v.is_string()) {
    out += json_string(v.get<std::string>());
  } else if (v.is_boolean()) {
    out += v.get<bool>() ? "true" : "false";
  } else if (v.is_number_float()) {
    const double x = v.get<double>();
    out += std::isnan(x) ? "NaN" : std::isinf(x) ? (x > 0 ? "Infinity" : "-Infinity") : py_float(x);
  } else if (v.is_number()) {
    out += v.dump();
  } else {
    out += "null";
  }
}

}  // namespace

std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string py_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  for (int p = 1; p <= 17; ++p) {  // the shortest digits that read back
    std::snprintf(buf, sizeof buf, "%.*g", p, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  std::string s = buf;
  const size_t e = s.find('e');
  if (e != std::string::npos) {
    const int exp = std::atoi(s.c_str() + e + 1);
    if (exp >= -4 && exp < 16) {  // Python writes these positionally
      std::snprintf(buf, sizeof buf, "%.*f", std::max(0, 17 - exp), x);
      s = buf;
      while (s.back() == '0') s.pop_back();
      if (s.back() == '.') s += '0';
    }
    return s;
  }
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}

std::string py_str(const json& v) {
  if (is_undefined(v)) return "";
  if (v.is_string()) return v.get<std::string>();
  return py_repr(v);
}

std::string py_repr(const json& v) {
  if (is_undefined(v)) return "";
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_float()) return py_float(v.get<double>());
  if (v.is_number()) return v.dump();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
    std::string out(1, q);
    for (char c : s) {
      if (c == q || c == '\\') out += '\\';
      if (c == '\n') out += "\\n";
      else if (c == '\t') out += "\\t";
      else if (c == '\r') out += "\\r";
      else out += c;
    }
    return out + q;
  }
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + py_repr(v[i]);
    return out + "]";
  }
  std::string out = "{";
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it.key() == kNamespaceKey) continue;
    out += (first ? "" : ", ") + py_repr(json(it.key())) + ": " + py_repr(it.value());
    first = false;
  }
  return out + "}";
}

bool truthy(const json& v) {
  if (is_undefined(v) || v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (is_int(v)) return v.get<int64_t>() != 0;
  if (v.is_number_float()) return v.get<double>() != 0;
  if (v.is_string()) return !v.get<std::string>().empty();
  return !v.empty();
}

std::string type_name(const json& v) {
  if (is_undefined(v)) return "undefined";
  if (v.is_null()) return "none";
  if (v.is_boolean()) return "bool";
  if (is_int(v)) return "int";
  if (v.is_number()) return "float";
  if (v.is_string()) return "str";
  if (v.is_array()) return "list";
  return "dict";
}

std::string strip(const std::string& s, const std::string& chars, bool left, bool right) {
  size_t a = 0, b = s.size();
  const auto strip_char = [&](char c) {
    return chars.empty() ? std::isspace(static_cast<unsigned char>(c)) != 0 : chars.find(c) != std::string::npos;
  };
  if (left)
    while (a < b && strip_char(s[a])) ++a;
  if (right)
    while (b > a && strip_char(s[b - 1])) --b;
  return s.substr(a, b - a);
}

std::string py_json_dumps(const json& v, int indent) {
  std::string out;
  dumps(v, indent, 0, out);
  return out;
}

}  // namespace hh::serve::jinja
