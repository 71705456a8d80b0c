// The Jinja subset's evaluator (serve/jinja.h): values are JSON (ordered objects, as Python dicts
// keep insertion order), undefined is a discarded JSON value, and what Python would print is what
// an output tag writes (str() of the value: True, None, 1.0, ['a', 'b']).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "serve/jinja.h"
#include "serve/jinja_value.h"

namespace hh::serve::jinja {

namespace {

[[noreturn]] void fail(const Expr& e, const std::string& what) {
  throw Error("line " + std::to_string(e.line) + ": " + what);
}

int64_t length(const Expr& e, const json& v) {
  if (v.is_string()) return static_cast<int64_t>(code_points(v.get<std::string>()).size());
  if (v.is_array() || v.is_object()) return static_cast<int64_t>(v.size()) - (is_namespace(v) ? 1 : 0);
  fail(e, "object of type '" + type_name(v) + "' has no len()");
}

// The items a for loop visits: a list's elements, a dict's keys, a string's characters.
std::vector<json> iterate(const Expr& e, const json& v) {
  std::vector<json> out;
  if (v.is_array()) {
    for (const auto& x : v) out.push_back(x);
  } else if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it)
      if (it.key() != kNamespaceKey) out.push_back(it.key());
  } else if (v.is_string()) {
    for (const std::string& c : code_points(v.get<std::string>())) out.push_back(c);
  } else if (!is_undefined(v)) {
    fail(e, "'" + type_name(v) + "' object is not iterable");
  }
  return out;
}

// Python's slice indices for a sequence of n.
std::vector<int64_t> slice_indices(const Expr& e, int64_t n, const json& start, const json& stop, const json& step_v) {
  const int64_t step = step_v.is_null() ? 1 : step_v.get<int64_t>();
  if (step == 0) fail(e, "slice step cannot be zero");
  const auto clamp = [&](const json& x, int64_t def) {
    if (x.is_null()) return def;
    int64_t i = x.get<int64_t>();
    if (i < 0) i += n;
    if (step > 0) return std::min(std::max<int64_t>(i, 0), n);
    return std::min(std::max<int64_t>(i, -1), n - 1);
  };
  const int64_t a = clamp(start, step > 0 ? 0 : n - 1), b = clamp(stop, step > 0 ? n : -1);
  std::vector<int64_t> out;
  for (int64_t i = a; step > 0 ? i < b : i > b; i += step) out.push_back(i);
  return out;
}

class Renderer {
 public:
  explicit Renderer(const json& context) { frames_.push_back(context.is_object() ? context : json::object()); }

  void run(const std::vector<Node>& nodes, std::string& out) {
    for (const Node& n : nodes) node(n, out);
  }

 private:
  void node(const Node& n, std::string& out) {
    switch (n.kind) {
      case NodeKind::text: out += n.text; break;
      case NodeKind::output: out += py_str(eval(*n.expr)); break;
      case NodeKind::generation: run(n.body, out); break;
      case NodeKind::if_:
        for (const auto& [cond, body] : n.branches)
          if (!cond || truthy(eval(*cond))) {
            run(body, out);
            break;
          }
        break;
      case NodeKind::set: {
        json value = eval(*n.expr);
        if (n.targets.size() == 1) {
          frames_.back()[n.targets[0]] = value;
        } else {
          json* target = find(n.targets[0]);
          if (!target || !is_namespace(*target))
            fail(*n.expr, "cannot assign attribute '" + n.targets[1] + "' on '" + n.targets[0] + "' (not a namespace)");
          (*target)[n.targets[1]] = value;
        }
        break;
      }
      case NodeKind::for_: loop(n, out); break;
    }
  }

  void loop(const Node& n, std::string& out) {
    std::vector<json> items;
    for (json& x : iterate(*n.expr, eval(*n.expr))) {
      if (n.loop_filter) {
        frames_.push_back(json::object());
        bind(n, x);
        const bool keep = truthy(eval(*n.loop_filter));
        frames_.pop_back();
        if (!keep) continue;
      }
      items.push_back(std::move(x));
    }
    if (items.empty()) {
      run(n.else_body, out);
      return;
    }
    frames_.push_back(json::object());  // the loop's scope: its sets end with it
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      bind(n, items[static_cast<size_t>(i)]);
      json loop = json::object();
      loop["index"] = i + 1;
      loop["index0"] = i;
      loop["revindex"] = len - i;
      loop["revindex0"] = len - i - 1;
      loop["first"] = i == 0;
      loop["last"] = i + 1 == len;
      loop["length"] = len;
      loop["previtem"] = i > 0 ? items[static_cast<size_t>(i - 1)] : undefined();
      loop["nextitem"] = i + 1 < len ? items[static_cast<size_t>(i + 1)] : undefined();
      frames_.back()["loop"] = loop;
      run(n.body, out);
    }
    frames_.pop_back();
  }

  void bind(const Node& n, const json& item) {
    if (n.targets.size() == 1) {
      frames_.back()[n.targets[0]] = item;
      return;
    }
    if (!item.is_array() || item.size() != n.targets.size())
      fail(*n.expr, "cannot unpack " + py_repr(item) + " into " + std::to_string(n.targets.size()) + " loop variables");
    for (size_t k = 0; k < n.targets.size(); ++k) frames_.back()[n.targets[k]] = item[k];
  }

  json* find(const std::string& name) {
    for (auto f = frames_.rbegin(); f != frames_.rend(); ++f) {
      auto it = f->find(name);
      if (it != f->end()) return &*it;
    }
    return nullptr;
  }

  json lookup(const std::string& name) {
    if (json* v = find(name)) return *v;
    static const char* const globals[] = {"raise_exception", "strftime_now", "namespace", "range"};
    for (const char* g : globals)
      if (name == g) return json{{kCallableKey, name}};
    return undefined();
  }

  json eval(const Expr& e);
  json binary(const Expr& e);
  json call(const Expr& e);
  json method(const Expr& e, const json& self, const std::string& name, const std::vector<json>& args);
  json filter(const Expr& e);
  bool test(const Expr& e);
  std::vector<json> args_of(const Expr& e, size_t from) {
    std::vector<json> out;
    for (size_t i = from; i < e.args.size(); ++i) out.push_back(eval(*e.args[i]));
    return out;
  }
  json kwarg(const Expr& e, const std::string& key, const json& def) {
    for (const auto& [k, v] : e.kwargs)
      if (k == key) return eval(*v);
    return def;
  }

  std::vector<json> frames_;
};

json Renderer::eval(const Expr& e) {
  switch (e.op) {
    case Op::literal: return e.value;
    case Op::name: return lookup(e.name);
    case Op::list: {
      json l = json::array();
      for (const auto& a : e.args) l.push_back(eval(*a));
      return l;
    }
    case Op::dict: {
      json d = json::object();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        const json k = eval(*e.args[i]);
        if (!k.is_string()) fail(e, "dict keys must be strings here, got " + type_name(k));
        d[k.get<std::string>()] = eval(*e.args[i + 1]);
      }
      return d;
    }
    case Op::attr: {
      const json v = eval(*e.args[0]);
      if (is_undefined(v)) fail(e, "'" + e.name + "' of an undefined value");
      if (v.is_object() && v.contains(e.name)) return v[e.name];
      return undefined();
    }
    case Op::item: {
      const json v = eval(*e.args[0]);
      const json k = eval(*e.args[1]);
      if (is_undefined(v)) fail(e, "subscript of an undefined value");
      if (v.is_object()) return k.is_string() && v.contains(k.get<std::string>()) ? v[k.get<std::string>()] : undefined();
      if ((v.is_array() || v.is_string()) && is_int(k)) {
        const std::vector<std::string> cps = v.is_string() ? code_points(v.get<std::string>()) : std::vector<std::string>{};
        const int64_t n = v.is_array() ? static_cast<int64_t>(v.size()) : static_cast<int64_t>(cps.size());
        int64_t i = k.get<int64_t>();
        if (i < 0) i += n;
        if (i < 0 || i >= n) return undefined();
        return v.is_array() ? v[static_cast<size_t>(i)] : json(cps[static_cast<size_t>(i)]);
      }
      return undefined();
    }
    case Op::slice: {
      const json v = eval(*e.args[0]);
      json part[3];
      for (int k = 0; k < 3; ++k) {
        part[k] = e.args[static_cast<size_t>(k) + 1] ? eval(*e.args[static_cast<size_t>(k) + 1]) : json(nullptr);
        if (!part[k].is_null() && !is_int(part[k])) fail(e, "slice indices must be integers");
      }
      if (v.is_array()) {
        json out = json::array();
        for (int64_t i : slice_indices(e, static_cast<int64_t>(v.size()), part[0], part[1], part[2]))
          out.push_back(v[static_cast<size_t>(i)]);
        return out;
      }
      if (v.is_string()) {
        const std::vector<std::string> cps = code_points(v.get<std::string>());
        std::string out;
        for (int64_t i : slice_indices(e, static_cast<int64_t>(cps.size()), part[0], part[1], part[2]))
          out += cps[static_cast<size_t>(i)];
        return out;
      }
      fail(e, "cannot slice a " + type_name(v));
    }
    case Op::call: return call(e);
    case Op::filter: return filter(e);
    case Op::test: return test(e);
    case Op::not_: return !truthy(eval(*e.args[0]));
    case Op::neg:
    case Op::pos: {
      const json v = eval(*e.args[0]);
      if (!v.is_number()) fail(e, "bad operand type for unary " + std::string(e.op == Op::neg ? "-" : "+") + ": " + type_name(v));
      if (e.op == Op::pos) return v;
      return is_int(v) ? json(-v.get<int64_t>()) : json(-v.get<double>());
    }
    case Op::and_: {
      json a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    case Op::or_: {
      json a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    case Op::ternary: return truthy(eval(*e.args[0])) ? eval(*e.args[1]) : eval(*e.args[2]);
    default: return binary(e);
  }
}

json Renderer::binary(const Expr& e) {
  const json a = eval(*e.args[0]), b = eval(*e.args[1]);
  const auto numbers = [&] { return a.is_number() && b.is_number() && !a.is_boolean() && !b.is_boolean(); };
  const auto bad = [&](const char* op) -> json {
    fail(e, std::string("unsupported operand types for ") + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
  };
  switch (e.op) {
    case Op::concat: return py_str(a) + py_str(b);
    case Op::eq: return a == b;
    case Op::ne: return a != b;
    case Op::lt:
    case Op::le:
    case Op::gt:
    case Op::ge: {
      if (!(numbers() || (a.is_string() && b.is_string()))) return bad("comparison");
      const bool lt = a < b, eq = a == b;
      return e.op == Op::lt ? lt : e.op == Op::le ? lt || eq : e.op == Op::gt ? !lt && !eq : !lt;
    }
    case Op::in:
    case Op::not_in: {
      bool found = false;
      if (b.is_string()) {
        if (!a.is_string()) fail(e, "'in <string>' requires a string on the left, got " + type_name(a));
        found = b.get<std::string>().find(a.get<std::string>()) != std::string::npos;
      } else if (b.is_array()) {
        for (const auto& x : b) found = found || x == a;
      } else if (b.is_object()) {
        found = a.is_string() && b.contains(a.get<std::string>());
      } else {
        fail(e, "argument of type '" + type_name(b) + "' is not iterable");
      }
      return e.op == Op::in ? found : !found;
    }
    case Op::add:
      if (a.is_string() && b.is_string()) return a.get<std::string>() + b.get<std::string>();
      if (a.is_array() && b.is_array()) {
        json l = a;
        for (const auto& x : b) l.push_back(x);
        return l;
      }
      if (!numbers()) return bad("+");
      return is_int(a) && is_int(b) ? json(a.get<int64_t>() + b.get<int64_t>()) : json(a.get<double>() + b.get<double>());
    case Op::sub:
      if (!numbers()) return bad("-");
      return is_int(a) && is_int(b) ? json(a.get<int64_t>() - b.get<int64_t>()) : json(a.get<double>() - b.get<double>());
    case Op::mul:
      if (a.is_string() && is_int(b)) {
        std::string s;
        for (int64_t i = 0; i < b.get<int64_t>(); ++i) s += a.get<std::string>();
        return s;
      }
      if (!numbers()) return bad("*");
      return is_int(a) && is_int(b) ? json(a.get<int64_t>() * b.get<int64_t>()) : json(a.get<double>() * b.get<double>());
    case Op::div:
      if (!numbers()) return bad("/");
      if (b.get<double>() == 0) fail(e, "division by zero");
      return a.get<double>() / b.get<double>();
    case Op::floordiv:
    case Op::mod: {
      if (!numbers()) return bad(e.op == Op::mod ? "%" : "//");
      if (b.get<double>() == 0) fail(e, "integer division or modulo by zero");
      if (is_int(a) && is_int(b)) {  // Python's floor semantics
        const int64_t x = a.get<int64_t>(), y = b.get<int64_t>();
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
        return e.op == Op::floordiv ? json(q) : json(x - q * y);
      }
      const double q = std::floor(a.get<double>() / b.get<double>());
      return e.op == Op::floordiv ? json(q) : json(a.get<double>() - q * b.get<double>());
    }
    case Op::pow:
      if (!numbers()) return bad("**");
      if (is_int(a) && is_int(b) && b.get<int64_t>() >= 0) {
        int64_t r = 1;
        for (int64_t i = 0; i < b.get<int64_t>(); ++i) r *= a.get<int64_t>();
        return r;
      }
      return std::pow(a.get<double>(), b.get<double>());
    default: fail(e, "internal: unknown operator");
  }
}

json Renderer::call(const Expr& e) {
  const Expr& callee = *e.args[0];
  const std::vector<json> args = args_of(e, 1);
  if (callee.op == Op::attr) return method(e, eval(*callee.args[0]), callee.name, args);
  const json f = eval(callee);
  if (!f.is_object() || !f.contains(kCallableKey))
    fail(e, (callee.op == Op::name ? "'" + callee.name + "'" : std::string("the value")) + " is not callable");
  const std::string name = f[kCallableKey].get<std::string>();
  if (name == "raise_exception") throw Error(args.empty() ? "raise_exception()" : py_str(args[0]));
  if (name == "strftime_now") {
    if (args.size() != 1 || !args[0].is_string()) fail(e, "strftime_now takes one format string");
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof buf, args[0].get<std::string>().c_str(), &tm);
    return std::string(buf, n);
  }
  if (name == "namespace") {
    json ns = json::object();
    ns[kNamespaceKey] = true;
    if (!args.empty()) {
      if (!args[0].is_object()) fail(e, "namespace() takes a dict or keyword arguments");
      for (auto it = args[0].begin(); it != args[0].end(); ++it) ns[it.key()] = it.value();
    }
    for (const auto& [k, v] : e.kwargs) ns[k] = eval(*v);
    return ns;
  }
  // range(stop) / range(start, stop[, step])
  for (const json& a : args)
    if (!is_int(a)) fail(e, "range() takes integers");
  int64_t start = 0, stop = 0, step = 1;
  if (args.size() == 1) stop = args[0].get<int64_t>();
  else if (args.size() == 2 || args.size() == 3) {
    start = args[0].get<int64_t>();
    stop = args[1].get<int64_t>();
    if (args.size() == 3) step = args[2].get<int64_t>();
  } else {
    fail(e, "range() takes 1 to 3 arguments");
  }
  if (step == 0) fail(e, "range() step must not be zero");
  json l = json::array();
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    l.push_back(i);
    if (l.size() > 1000000) fail(e, "range() of more than a million items");
  }
  return l;
}

json Renderer::method(const Expr& e, const json& self, const std::string& name, const std::vector<json>& args) {
  const auto arg_str = [&](size_t i, const std::string& def) {
    if (i >= args.size() || args[i].is_null()) return def;
    if (!args[i].is_string()) fail(e, name + "() argument must be a string");
    return args[i].get<std::string>();
  };
  if (self.is_string()) {
    const std::string s = self.get<std::string>();
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return strip(s, arg_str(0, ""), name != "rstrip", name != "lstrip");
    if (name == "upper" || name == "lower") {
      std::string r = s;
      for (char& c : r) c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                                               : std::tolower(static_cast<unsigned char>(c)));
      return r;
    }
    if (name == "startswith" || name == "endswith") {
      std::vector<std::string> options;
      if (!args.empty() && args[0].is_array()) {
        for (const auto& x : args[0]) options.push_back(x.is_string() ? x.get<std::string>() : "");
      } else {
        options.push_back(arg_str(0, ""));
      }
      for (const std::string& o : options) {
        if (name == "startswith" && s.compare(0, o.size(), o) == 0) return true;
        if (name == "endswith" && s.size() >= o.size() && s.compare(s.size() - o.size(), o.size(), o) == 0) return true;
      }
      return false;
    }
    if (name == "split") {
      const std::string sep = arg_str(0, "");
      const int64_t maxsplit = args.size() > 1 && is_int(args[1]) ? args[1].get<int64_t>() : -1;
      json out = json::array();
      if (sep.empty()) {  // runs of whitespace
        size_t i = 0;
        int64_t splits = 0;
        while (i < s.size()) {
          while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
          if (i >= s.size()) break;
          if (maxsplit >= 0 && splits == maxsplit) {
            out.push_back(strip(s.substr(i), "", false, true));
            break;
          }
          size_t j = i;
          while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
          out.push_back(s.substr(i, j - i));
          ++splits;
          i = j;
        }
        return out;
      }
      size_t from = 0;
      int64_t splits = 0;
      for (size_t at; (maxsplit < 0 || splits < maxsplit) && (at = s.find(sep, from)) != std::string::npos; ++splits) {
        out.push_back(s.substr(from, at - from));
        from = at + sep.size();
      }
      out.push_back(s.substr(from));
      return out;
    }
    if (name == "replace") {
      const std::string from = arg_str(0, ""), to = arg_str(1, "");
      if (from.empty()) fail(e, "replace() with an empty pattern is not supported");
      std::string r;
      size_t at = 0;
      for (size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size()) r += s.substr(at, hit - at) + to;
      return r + s.substr(at);
    }
    if (name == "join") {
      if (args.size() != 1 || !args[0].is_array()) fail(e, "join() takes a list");
      std::string r;
      for (size_t i = 0; i < args[0].size(); ++i) {
        if (!args[0][i].is_string()) fail(e, "join(): item " + std::to_string(i) + " is not a string");
        r += (i ? s : "") + args[0][i].get<std::string>();
      }
      return r;
    }
    if (name == "find") {
      const size_t at = s.find(arg_str(0, ""));
      return at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(code_points(s.substr(0, at)).size());
    }
  } else if (self.is_object()) {
    if (name == "items") {
      json l = json::array();
      for (auto it = self.begin(); it != self.end(); ++it)
        if (it.key() != kNamespaceKey) l.push_back(json::array({it.key(), it.value()}));
      return l;
    }
    if (name == "keys" || name == "values") {
      json l = json::array();
      for (auto it = self.begin(); it != self.end(); ++it)
        if (it.key() != kNamespaceKey) l.push_back(name == "keys" ? json(it.key()) : it.value());
      return l;
    }
    if (name == "get") {
      const std::string k = arg_str(0, "");
      return self.contains(k) ? self[k] : args.size() > 1 ? args[1] : json(nullptr);
    }
  }
  fail(e, "'" + type_name(self) + "' has no method '" + name + "' (not in this Jinja subset)");
}

json Renderer::filter(const Expr& e) {
  const std::string& f = e.name;
  const json v = eval(*e.args[0]);
  const std::vector<json> args = args_of(e, 1);
  if (f == "default" || f == "d") {
    const bool boolean = truthy(kwarg(e, "boolean", args.size() > 1 ? args[1] : json(false)));
    if (is_undefined(v) || (boolean && !truthy(v))) return args.empty() ? json("") : args[0];
    return v;
  }
  if (f == "tojson") {
    const json indent = kwarg(e, "indent", args.empty() ? json(nullptr) : args[0]);
    if (!indent.is_null() && !is_int(indent)) fail(e, "tojson(indent=...) takes an integer");
    return py_json_dumps(v, indent.is_null() ? -1 : static_cast<int>(indent.get<int64_t>()));
  }
  if (is_undefined(v)) fail(e, "filter '" + f + "' on an undefined value");
  if (f == "trim") return strip(py_str(v), args.empty() ? "" : py_str(args[0]), true, true);
  if (f == "length" || f == "count") return length(e, v);
  if (f == "string") return py_str(v);
  if (f == "safe") return v;
  if (f == "upper" || f == "lower" || f == "capitalize" || f == "title") {
    std::string s = py_str(v);
    bool start = true;
    for (char& c : s) {
      const unsigned char u = static_cast<unsigned char>(c);
      if (f == "upper") c = static_cast<char>(std::toupper(u));
      else if (f == "lower") c = static_cast<char>(std::tolower(u));
      else if (f == "capitalize") c = static_cast<char>(start ? std::toupper(u) : std::tolower(u)), start = false;
      else {
        c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
        start = !std::isalnum(u);
      }
    }
    return s;
  }
  if (f == "join") {
    const std::string sep = args.empty() ? "" : py_str(args[0]);
    std::string r;
    bool first = true;
    for (const json& x : iterate(e, v)) {
      r += (first ? "" : sep) + py_str(x);
      first = false;
    }
    return r;
  }
  if (f == "first" || f == "last") {
    const std::vector<json> items = iterate(e, v);
    if (items.empty()) return undefined();
    return f == "first" ? items.front() : items.back();
  }
  if (f == "list") return json(iterate(e, v));
  if (f == "reverse") {
    if (v.is_string()) {
      std::vector<std::string> cps = code_points(v.get<std::string>());
      std::string r;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) r += *it;
      return r;
    }
    std::vector<json> items = iterate(e, v);
    return json(std::vector<json>(items.rbegin(), items.rend()));
  }
  if (f == "map") {  // map(attribute='name') or map('filter')
    const json attribute = kwarg(e, "attribute", json(nullptr));
    json out = json::array();
    for (const json& x : iterate(e, v)) {
      if (attribute.is_string()) {
        const std::string k = attribute.get<std::string>();
        out.push_back(x.is_object() && x.contains(k) ? x[k] : kwarg(e, "default", undefined()));
      } else if (!args.empty() && args[0].is_string()) {
        Expr inner;
        inner.op = Op::filter;
        inner.name = args[0].get<std::string>();
        inner.line = e.line;
        auto lit = std::make_unique<Expr>();
        lit->value = x;
        inner.args.push_back(std::move(lit));
        out.push_back(filter(inner));
      } else {
        fail(e, "map() takes attribute='name' or a filter name");
      }
    }
    return out;
  }
  if (f == "items") return method(e, v, "items", {});
  if (f == "replace") return method(e, json(py_str(v)), "replace", args);
  if (f == "int") {
    if (is_int(v)) return v;
    if (v.is_number()) return static_cast<int64_t>(v.get<double>());
    try {
      return std::stoll(py_str(v));
    } catch (...) {
      return args.empty() ? json(0) : args[0];
    }
  }
  if (f == "abs") {
    if (!v.is_number()) fail(e, "abs of a " + type_name(v));
    return is_int(v) ? json(std::llabs(v.get<int64_t>())) : json(std::fabs(v.get<double>()));
  }
  fail(e, "unknown filter '" + f + "' (not in this Jinja subset)");
}

bool Renderer::test(const Expr& e) {
  const std::string& t = e.name;
  const json v = eval(*e.args[0]);
  const std::vector<json> args = args_of(e, 1);
  bool r;
  if (t == "defined") r = !is_undefined(v);
  else if (t == "undefined") r = is_undefined(v);
  else if (t == "none") r = v.is_null();
  else if (t == "string") r = v.is_string();
  else if (t == "number") r = v.is_number() && !v.is_boolean();
  else if (t == "integer") r = is_int(v);
  else if (t == "float") r = v.is_number_float();
  else if (t == "boolean") r = v.is_boolean();
  else if (t == "true") r = v.is_boolean() && v.get<bool>();
  else if (t == "false") r = v.is_boolean() && !v.get<bool>();
  else if (t == "mapping") r = v.is_object();
  else if (t == "iterable") r = v.is_array() || v.is_object() || v.is_string();
  else if (t == "sequence") r = v.is_array() || v.is_string() || v.is_object();
  else if (t == "callable") r = v.is_object() && v.contains(kCallableKey);
  else if (t == "odd" || t == "even") {
    if (!is_int(v)) fail(e, "test '" + t + "' needs an integer");
    r = (v.get<int64_t>() % 2 != 0) == (t == "odd");
  } else if (t == "divisibleby") {
    if (!is_int(v) || args.size() != 1 || !is_int(args[0]) || args[0].get<int64_t>() == 0)
      fail(e, "test 'divisibleby' needs integers");
    r = v.get<int64_t>() % args[0].get<int64_t>() == 0;
  } else if (t == "eq" || t == "equalto" || t == "sameas") {
    if (args.size() != 1) fail(e, "test '" + t + "' takes one argument");
    r = v == args[0];
  } else if (t == "ne") {
    if (args.size() != 1) fail(e, "test 'ne' takes one argument");
    r = v != args[0];
  } else if (t == "in") {
    if (args.size() != 1) fail(e, "test 'in' takes one argument");
    r = false;
    for (const json& x : iterate(e, args[0])) r = r || x == v;
  } else {
    fail(e, "unknown test '" + t + "' (not in this Jinja subset)");
  }
  return e.negated ? !r : r;
}

}  // namespace

bool known_filter(const std::string& name) {
  static const char* const names[] = {"default", "d", "tojson", "trim", "length", "count", "string", "safe", "upper",
                                      "lower", "capitalize", "title", "join", "first", "last", "list", "reverse",
                                      "map", "items", "replace", "int", "abs"};
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

bool known_test(const std::string& name) {
  static const char* const names[] = {"defined", "undefined", "none", "string", "number", "integer", "float",
                                      "boolean", "true", "false", "mapping", "iterable", "sequence", "callable",
                                      "odd", "even", "divisibleby", "eq", "equalto", "sameas", "ne", "in"};
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

Template::Template(const std::string& source, std::string origin) : origin_(std::move(origin)) {
  try {
    nodes_ = parse(source);
  } catch (const Error& e) {
    throw Error(origin_ + ": " + e.what());
  }
}

std::string Template::render(const json& context) const {
  std::string out;
  Renderer r(context);
  r.run(nodes_, out);
  return out;
}

}  // namespace hh::serve::jinja
