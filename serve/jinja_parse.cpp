// The Jinja subset's lexer and parser (serve/jinja.h): template text -> tags with jinja2's
// whitespace rules -> nodes, and each tag's expression by jinja2's precedence (lowest first):
// x if c else y; or; and; not; comparisons, in, is; + -; ~; * / // %; **; unary - +; filters |;
// postfix . [] (); primaries.
#include <cctype>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "serve/jinja.h"

namespace hh::serve::jinja {

namespace {

[[noreturn]] void fail_at(int line, const std::string& what) {
  throw Error("line " + std::to_string(line) + ": " + what);
}

int line_of(const std::string& s, size_t pos) {
  int line = 1;
  for (size_t i = 0; i < pos && i < s.size(); ++i) line += s[i] == '\n';
  return line;
}

// ---- tags: the source split into text and tags, whitespace rules applied ----

enum class TagKind { text, output, block };
struct Tag {
  TagKind kind;
  std::string body;  // the text, or the tag's inside (trimmed)
  int line;
};

// End of a tag opened at `from` (just after "{{" or "{%"): the offset of its closing "}}"/"%}"
// outside string literals and brackets (a dict literal's "}}" does not close it, as jinja2's lexer
// balances them), or npos.
size_t tag_end(const std::string& s, size_t from, char close) {
  char quote = 0;
  int depth = 0;
  for (size_t i = from; i + 1 < s.size(); ++i) {
    const char c = s[i];
    if (quote) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (depth == 0 && c == close && s[i + 1] == '}') {
      return i;
    } else if (c == '(' || c == '[' || c == '{') {
      ++depth;
    } else if ((c == ')' || c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string::npos;
}

std::vector<Tag> split_tags(std::string src) {
  if (!src.empty() && src.back() == '\n') src.pop_back();  // keep_trailing_newline=False
  if (!src.empty() && src.back() == '\r') src.pop_back();
  std::vector<Tag> tags;
  size_t pos = 0;
  bool strip_next = false;  // the previous tag ended with "-": the text after it is lstripped
  bool line_start = true;   // the text about to be read starts a line
  while (pos <= src.size()) {
    size_t open = pos;
    while ((open = src.find('{', open)) != std::string::npos &&
           (open + 1 >= src.size() || (src[open + 1] != '{' && src[open + 1] != '%' && src[open + 1] != '#')))
      ++open;
    std::string text = src.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    if (strip_next) {
      size_t b = 0;
      while (b < text.size() && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
      text.erase(0, b);
      strip_next = false;
    }
    if (open == std::string::npos) {
      if (!text.empty()) tags.push_back({TagKind::text, text, line_of(src, pos)});
      break;
    }
    const char type = src[open + 1];
    const char mod = open + 2 < src.size() ? src[open + 2] : 0;
    if (mod == '-') {
      while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    } else if (mod != '+' && (type == '%' || type == '#')) {
      // lstrip_blocks: spaces and tabs between the line's start and a block tag go.
      const size_t nl = text.rfind('\n');
      const size_t from = nl == std::string::npos ? 0 : nl + 1;
      if (nl != std::string::npos || line_start) {
        bool blank = true;
        for (size_t i = from; i < text.size(); ++i) blank = blank && (text[i] == ' ' || text[i] == '\t');
        if (blank) text.erase(from);
      }
    }
    if (!text.empty()) tags.push_back({TagKind::text, text, line_of(src, pos)});
    const int line = line_of(src, open);
    const size_t inner = open + 2 + (mod == '-' || mod == '+' ? 1 : 0);
    size_t close = type == '#' ? src.find("#}", inner) : tag_end(src, inner, type == '{' ? '}' : '%');
    if (close == std::string::npos)
      fail_at(line, std::string("unclosed ") + (type == '{' ? "{{" : type == '%' ? "{%" : "{#") + " tag");
    size_t body_end = close;
    const char rmod = close > inner ? src[close - 1] : 0;
    if (rmod == '-' || rmod == '+') --body_end;
    if (type != '#') {
      std::string body = src.substr(inner, body_end - inner);
      size_t a = body.find_first_not_of(" \t\r\n"), b = body.find_last_not_of(" \t\r\n");
      body = a == std::string::npos ? "" : body.substr(a, b - a + 1);
      tags.push_back({type == '{' ? TagKind::output : TagKind::block, body, line});
    }
    pos = close + 2;
    line_start = false;
    if (rmod == '-') {
      strip_next = true;
    } else if (rmod != '+' && type != '{' && pos < src.size() && src[pos] == '\n') {
      ++pos;  // trim_blocks: the first newline after a block tag or comment
      line_start = true;
    }
    if (pos >= src.size()) break;
  }
  return tags;
}

// ---- expression tokens ----

enum class Tok { name, number, string, op, end };
struct Token {
  Tok kind;
  std::string text;
  json value;
};

std::vector<Token> tokenize(const std::string& s, int line) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Tok::name, s.substr(i, j - i), nullptr});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool is_float = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_' ||
                              (s[j] == '.' && j + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[j + 1]))))) {
        is_float = is_float || s[j] == '.';
        ++j;
      }
      std::string digits;
      for (size_t k = i; k < j; ++k)
        if (s[k] != '_') digits += s[k];
      out.push_back({Tok::number, digits, is_float ? json(std::strtod(digits.c_str(), nullptr))
                                                   : json(std::strtoll(digits.c_str(), nullptr, 10))});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          v += s[j];
          continue;
        }
        const char e = s[++j];  // Python's string escapes
        switch (e) {
          case 'n': v += '\n'; break;
          case 't': v += '\t'; break;
          case 'r': v += '\r'; break;
          case '\\': v += '\\'; break;
          case '\'': v += '\''; break;
          case '"': v += '"'; break;
          case '\n': break;
          default: v += '\\'; v += e;
        }
      }
      if (j >= s.size()) fail_at(line, "unterminated string literal");
      out.push_back({Tok::string, v, json(v)});
      i = j + 1;
    } else {
      static const char* const ops[] = {"==", "!=", "<=", ">=", "//", "**", "(", ")", "[", "]", "{", "}", ",", ".",
                                        ":", "|", "~", "+", "-", "*", "/", "%", "<", ">", "="};
      bool found = false;
      for (const char* op : ops) {
        const std::string o(op);
        if (s.compare(i, o.size(), o) == 0) {
          out.push_back({Tok::op, o, nullptr});
          i += o.size();
          found = true;
          break;
        }
      }
      if (!found) fail_at(line, std::string("unexpected character '") + c + "'");
    }
  }
  out.push_back({Tok::end, "", nullptr});
  return out;
}

// ---- the expression parser ----

class ExprParser {
 public:
  ExprParser(const std::string& src, int line) : toks_(tokenize(src, line)), line_(line) {}

  ExprPtr expression() {
    ExprPtr e = or_expr();
    if (is_name("if")) {  // a if cond else b
      ++at_;
      ExprPtr cond = or_expr();
      ExprPtr other;
      if (is_name("else")) {
        ++at_;
        other = expression();
      } else {
        other = make(Op::literal);
        other->value = json(json::value_t::discarded);  // undefined
      }
      ExprPtr t = make(Op::ternary);
      t->args.push_back(std::move(cond));
      t->args.push_back(std::move(e));
      t->args.push_back(std::move(other));
      return t;
    }
    return e;
  }
  bool done() const { return toks_[at_].kind == Tok::end; }
  bool is_name(const std::string& n) const { return toks_[at_].kind == Tok::name && toks_[at_].text == n; }
  bool is_op(const std::string& o) const { return toks_[at_].kind == Tok::op && toks_[at_].text == o; }
  std::string take_name(const std::string& what) {
    if (toks_[at_].kind != Tok::name) fail_at(line_, "expected " + what + ", got '" + toks_[at_].text + "'");
    return toks_[at_++].text;
  }
  void expect_op(const std::string& o) {
    if (!is_op(o)) fail_at(line_, "expected '" + o + "', got '" + toks_[at_].text + "'");
    ++at_;
  }
  void expect_end() {
    if (!done()) fail_at(line_, "unexpected '" + toks_[at_].text + "'");
  }
  ExprPtr or_expr() {  // public for the for-loop's "if" filter
    ExprPtr e = and_expr();
    while (is_name("or")) {
      ++at_;
      e = binary(Op::or_, std::move(e), and_expr());
    }
    return e;
  }

 private:
  ExprPtr make(Op op) {
    auto e = std::make_unique<Expr>();
    e->op = op;
    e->line = line_;
    return e;
  }
  ExprPtr binary(Op op, ExprPtr a, ExprPtr b) {
    ExprPtr e = make(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (is_name("and")) {
      ++at_;
      e = binary(Op::and_, std::move(e), not_expr());
    }
    return e;
  }
  ExprPtr not_expr() {
    if (is_name("not")) {
      ++at_;
      ExprPtr e = make(Op::not_);
      e->args.push_back(not_expr());
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr e = math1();
    for (;;) {
      Op op;
      if (is_op("==")) op = Op::eq;
      else if (is_op("!=")) op = Op::ne;
      else if (is_op("<")) op = Op::lt;
      else if (is_op("<=")) op = Op::le;
      else if (is_op(">")) op = Op::gt;
      else if (is_op(">=")) op = Op::ge;
      else if (is_name("in")) op = Op::in;
      else if (is_name("not") && toks_[at_ + 1].kind == Tok::name && toks_[at_ + 1].text == "in") {
        ++at_;
        op = Op::not_in;
      } else {
        return e;
      }
      ++at_;
      e = binary(op, std::move(e), math1());
    }
  }
  ExprPtr math1() {
    ExprPtr e = concat();
    while (is_op("+") || is_op("-")) {
      const Op op = is_op("+") ? Op::add : Op::sub;
      ++at_;
      e = binary(op, std::move(e), concat());
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = math2();
    while (is_op("~")) {
      ++at_;
      e = binary(Op::concat, std::move(e), math2());
    }
    return e;
  }
  ExprPtr math2() {
    ExprPtr e = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Op op = is_op("*") ? Op::mul : is_op("/") ? Op::div : is_op("//") ? Op::floordiv : Op::mod;
      ++at_;
      e = binary(op, std::move(e), power());
    }
    return e;
  }
  ExprPtr power() {
    ExprPtr e = unary();
    while (is_op("**")) {
      ++at_;
      e = binary(Op::pow, std::move(e), unary());
    }
    return e;
  }
  ExprPtr unary() {
    if (is_op("-") || is_op("+")) {
      const Op op = is_op("-") ? Op::neg : Op::pos;
      ++at_;
      ExprPtr e = make(op);
      e->args.push_back(unary());
      return filters(std::move(e));
    }
    return filters(postfix(primary()));
  }
  // Call arguments after "(": positional and name=value, up to ")".
  void call_args(Expr& e) {
    while (!is_op(")")) {
      if (toks_[at_].kind == Tok::name && toks_[at_ + 1].kind == Tok::op && toks_[at_ + 1].text == "=") {
        std::string key = toks_[at_].text;
        at_ += 2;
        e.kwargs.emplace_back(key, expression());
      } else {
        if (!e.kwargs.empty()) fail_at(line_, "a positional argument after a keyword argument");
        e.args.push_back(expression());
      }
      if (!is_op(",")) break;
      ++at_;
    }
    expect_op(")");
  }
  ExprPtr filters(ExprPtr e) {
    for (;;) {
      if (is_op("|")) {
        ++at_;
        ExprPtr f = make(Op::filter);
        f->name = take_name("a filter name");
        if (!known_filter(f->name)) fail_at(line_, "unknown filter '" + f->name + "' (not in this Jinja subset)");
        f->args.push_back(std::move(e));
        if (is_op("(")) {
          ++at_;
          call_args(*f);
        }
        e = std::move(f);
      } else if (is_name("is")) {
        ++at_;
        ExprPtr t = make(Op::test);
        if (is_name("not")) {
          ++at_;
          t->negated = true;
        }
        t->name = take_name("a test name");
        if (!known_test(t->name)) fail_at(line_, "unknown test '" + t->name + "' (not in this Jinja subset)");
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          ++at_;
          call_args(*t);
        } else if (toks_[at_].kind == Tok::number || toks_[at_].kind == Tok::string) {
          t->args.push_back(primary());  // "is divisibleby 3", "is eq 'x'"
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }
  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (is_op(".")) {
        ++at_;
        ExprPtr a = make(Op::attr);
        a->name = toks_[at_].kind == Tok::number ? toks_[at_++].text : take_name("an attribute name");
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (is_op("[")) {
        ++at_;
        ExprPtr parts[3];
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!is_op(":") && !is_op("]")) parts[k] = expression();
          if (k < 2 && is_op(":")) {
            ++at_;
            slice = true;
          } else {
            break;
          }
        }
        expect_op("]");
        ExprPtr s = make(slice ? Op::slice : Op::item);
        s->args.push_back(std::move(e));
        if (!slice && !parts[0]) fail_at(line_, "empty subscript []");
        for (int k = 0; k < (slice ? 3 : 1); ++k) s->args.push_back(std::move(parts[k]));  // null = omitted
        e = std::move(s);
      } else if (is_op("(")) {
        ++at_;
        ExprPtr c = make(Op::call);
        c->args.push_back(std::move(e));
        call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  ExprPtr primary() {
    const Token& t = toks_[at_];
    if (t.kind == Tok::number || t.kind == Tok::string) {
      ++at_;
      ExprPtr e = make(Op::literal);
      e->value = t.value;
      while (t.kind == Tok::string && toks_[at_].kind == Tok::string) e->value = e->value.get<std::string>() + toks_[at_++].text;
      return e;
    }
    if (t.kind == Tok::name) {
      ++at_;
      ExprPtr e = make(Op::literal);
      if (t.text == "true" || t.text == "True") e->value = true;
      else if (t.text == "false" || t.text == "False") e->value = false;
      else if (t.text == "none" || t.text == "None") e->value = nullptr;
      else {
        e->op = Op::name;
        e->name = t.text;
      }
      return e;
    }
    if (is_op("(")) {
      ++at_;
      ExprPtr e = expression();
      if (is_op(",")) {  // a tuple: a list here
        ExprPtr l = make(Op::list);
        l->args.push_back(std::move(e));
        while (is_op(",")) {
          ++at_;
          if (is_op(")")) break;
          l->args.push_back(expression());
        }
        e = std::move(l);
      }
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      ++at_;
      ExprPtr l = make(Op::list);
      while (!is_op("]")) {
        l->args.push_back(expression());
        if (!is_op(",")) break;
        ++at_;
      }
      expect_op("]");
      return l;
    }
    if (is_op("{")) {
      ++at_;
      ExprPtr d = make(Op::dict);
      while (!is_op("}")) {
        d->args.push_back(expression());
        expect_op(":");
        d->args.push_back(expression());
        if (!is_op(",")) break;
        ++at_;
      }
      expect_op("}");
      return d;
    }
    fail_at(line_, t.kind == Tok::end ? "unexpected end of expression" : "unexpected '" + t.text + "'");
  }

  std::vector<Token> toks_;
  size_t at_ = 0;
  int line_;
};

// ---- statements ----

class Parser {
 public:
  explicit Parser(std::vector<Tag> tags) : tags_(std::move(tags)) {}

  // Nodes up to one of `stops` (a block tag's first word), which is left unconsumed; the whole
  // template when `stops` is empty.
  std::vector<Node> nodes(const std::vector<std::string>& stops) {
    std::vector<Node> out;
    while (at_ < tags_.size()) {
      const Tag& t = tags_[at_];
      if (t.kind == TagKind::text) {
        Node n;
        n.kind = NodeKind::text;
        n.text = t.body;
        n.line = t.line;
        out.push_back(std::move(n));
        ++at_;
        continue;
      }
      if (t.kind == TagKind::output) {
        ExprParser p(t.body, t.line);
        Node n;
        n.kind = NodeKind::output;
        n.line = t.line;
        n.expr = p.expression();
        p.expect_end();
        out.push_back(std::move(n));
        ++at_;
        continue;
      }
      const std::string word = first_word(t.body);
      for (const std::string& s : stops)
        if (word == s) return out;
      out.push_back(block(t));
    }
    if (!stops.empty()) fail_at(tags_.empty() ? 1 : tags_.back().line, "missing {% " + stops.back() + " %}");
    return out;
  }

 private:
  static std::string first_word(const std::string& body) {
    size_t i = 0;
    while (i < body.size() && (std::isalnum(static_cast<unsigned char>(body[i])) || body[i] == '_')) ++i;
    return body.substr(0, i);
  }

  Node block(const Tag& t) {
    const std::string word = first_word(t.body);
    ExprParser p(t.body.substr(word.size()), t.line);
    Node n;
    n.line = t.line;
    ++at_;
    if (word == "if") {
      n.kind = NodeKind::if_;
      ExprPtr cond = p.expression();
      p.expect_end();
      for (;;) {
        std::vector<Node> body = nodes({"elif", "else", "endif"});
        n.branches.emplace_back(std::move(cond), std::move(body));
        const Tag& end = tags_[at_];
        const std::string w = first_word(end.body);
        ++at_;
        if (w == "endif") break;
        ExprParser q(end.body.substr(w.size()), end.line);
        if (w == "elif") {
          cond = q.expression();
          q.expect_end();
        } else {
          q.expect_end();
          n.branches.emplace_back(nullptr, nodes({"endif"}));
          ++at_;
          break;
        }
      }
    } else if (word == "for") {
      n.kind = NodeKind::for_;
      n.targets.push_back(p.take_name("a loop variable"));
      while (p.is_op(",")) {
        p.expect_op(",");
        n.targets.push_back(p.take_name("a loop variable"));
      }
      if (!p.is_name("in")) fail_at(t.line, "expected 'in' in the for tag");
      p.take_name("in");
      n.expr = p.or_expr();
      if (p.is_name("if")) {
        p.take_name("if");
        n.loop_filter = p.or_expr();
      }
      if (p.is_name("recursive")) fail_at(t.line, "recursive loops are not supported");
      p.expect_end();
      n.body = nodes({"else", "endfor"});
      if (first_word(tags_[at_].body) == "else") {
        ++at_;
        n.else_body = nodes({"endfor"});
      }
      ++at_;
    } else if (word == "set") {
      n.kind = NodeKind::set;
      n.targets.push_back(p.take_name("a variable name"));
      if (p.is_op(".")) {
        p.expect_op(".");
        n.targets.push_back(p.take_name("an attribute name"));
      }
      if (!p.is_op("=")) fail_at(t.line, "block {% set %} ... {% endset %} is not supported");
      p.expect_op("=");
      n.expr = p.expression();
      p.expect_end();
    } else if (word == "generation") {  // transformers' assistant-mask marker: renders its body
      n.kind = NodeKind::generation;
      p.expect_end();
      n.body = nodes({"endgeneration"});
      ++at_;
    } else if (word == "elif" || word == "else" || word == "endif" || word == "endfor" || word == "endgeneration") {
      fail_at(t.line, "{% " + word + " %} without its opening tag");
    } else {
      fail_at(t.line, "unsupported tag {% " + word + " %}" +
                          (word == "macro" || word == "call" || word == "include" || word == "import" ||
                                   word == "extends" || word == "block" || word == "raw" || word == "filter" ||
                                   word == "with"
                               ? " (not in this Jinja subset)"
                               : ""));
    }
    return n;
  }

  std::vector<Tag> tags_;
  size_t at_ = 0;
};

}  // namespace

std::vector<Node> parse(const std::string& source) { return Parser(split_tags(source)).nodes({}); }

}  // namespace hh::serve::jinja
