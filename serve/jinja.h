// A Jinja2 subset for chat templates, rendered as transformers renders them: jinja2's
// ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks (the first newline after a block
// tag is dropped; spaces before a block tag that starts a line are dropped), the trailing newline of
// the template dropped (keep_trailing_newline=False), and the globals transformers adds
// (raise_exception, strftime_now) plus jinja2's namespace() and range().
//
// Supported: text, {{ }}, {% %}, {# #} with -/+ whitespace control; if/elif/else, for (one or two
// targets, loop.index/index0/first/last/length/revindex/revindex0, else), set (a name, a namespace
// attribute), transformers' {% generation %} block; literals, names, .attr, [item], [a:b:c] slices,
// calls of the string/dict methods templates use (strip, split, startswith, items, get, ...),
// filters (trim, length, tojson, default, join, upper, lower, ...), tests (defined, none, string,
// mapping, ...), not/and/or, in, comparisons, + - * / // % ~, the inline if-else. Anything else is a
// jinja::Error naming the construct and its line, never a crash.
#pragma once
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace hh::serve::jinja {

using json = nlohmann::ordered_json;

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---- the syntax tree (serve/jinja_parse.cpp builds it, serve/jinja_eval.cpp runs it) ----

enum class Op {
  literal, name, attr, item, slice, call, filter, test, not_, neg, pos,
  add, sub, mul, div, floordiv, mod, pow, concat, eq, ne, lt, le, gt, ge, in, not_in, and_, or_,
  ternary, list, dict
};

struct Expr {
  Op op = Op::literal;
  json value;        // literal
  std::string name;  // name, attr, filter, test (its name), call of a name
  std::vector<std::unique_ptr<Expr>> args;  // operands; call/filter/test: [callee or subject, args...]
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;  // call/filter/test keywords
  bool negated = false;  // test: "is not"
  int line = 0;
};
using ExprPtr = std::unique_ptr<Expr>;

enum class NodeKind { text, output, if_, for_, set, generation };

struct Node {
  NodeKind kind = NodeKind::text;
  int line = 0;
  std::string text;                   // text
  ExprPtr expr;                       // output; for: the iterable; set: the value
  std::vector<std::pair<ExprPtr, std::vector<Node>>> branches;  // if/elif (cond) and else (null cond)
  std::vector<std::string> targets;   // for: the loop variables; set: name (and attribute)
  ExprPtr loop_filter;                // for ... if cond
  std::vector<Node> body, else_body;  // for, generation
};

class Template {
 public:
  // Parses `source` (errors name the line); `origin` names it in messages.
  explicit Template(const std::string& source, std::string origin = "template");
  // Renders with the variables of `context` (a JSON object).
  std::string render(const json& context) const;

 private:
  std::string origin_;
  std::vector<Node> nodes_;
};

// Parsing (jinja_parse.cpp): the source into nodes.
std::vector<Node> parse(const std::string& source);
// The filters and tests the evaluator has: the parser refuses others, as jinja2 does when it compiles.
bool known_filter(const std::string& name);
bool known_test(const std::string& name);
// Python's json.dumps(x, ensure_ascii=False, indent=indent) with its default separators: what
// transformers' tojson filter writes (indent < 0: none).
std::string py_json_dumps(const json& v, int indent = -1);

}  // namespace hh::serve::jinja
