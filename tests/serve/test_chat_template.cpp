// serve/jinja* and serve/chat_template.*: the families' chat templates render byte for byte as
// transformers renders them (tests/fixtures/chat_templates/cases.json, written by
// tools/make_chat_template_fixtures.py with transformers' render_jinja_template), and what the
// subset cannot render is an error that says what and where.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "serve/api.h"
#include "serve/chat_template.h"
#include "serve/engine.h"
#include "serve/jinja.h"
#include "tests/temp_dir.h"

namespace {

using hh::serve::ChatTemplate;
using hh::serve::jinja::json;

json fixture() {
  std::ifstream f(std::string(HH_SOURCE_DIR) + "/tests/fixtures/chat_templates/cases.json");
  REQUIRE(f.good());
  return json::parse(f);
}

std::string render(const std::string& source, const json& context) {
  return hh::serve::jinja::Template(source).render(context);
}

}  // namespace

TEST_CASE("chat template: every fixture renders as transformers renders it") {
  const json doc = fixture();
  const json extra = {{"date_string", doc["date_string"]}};
  int checked = 0;
  for (const json& c : doc["cases"]) {
    const json& t = doc["templates"][c["template"].get<std::string>()];
    json special = json::object();
    for (const char* k : {"bos_token", "eos_token"})
      if (t[k].is_string()) special[k] = t[k];
    const ChatTemplate tmpl(t["chat_template"].get<std::string>(), special, c["template"].get<std::string>());
    REQUIRE_MESSAGE(tmpl.available(), tmpl.problem());
    const json& messages = doc["conversations"][c["conversation"].get<std::string>()];
    const bool agp = c["add_generation_prompt"].get<bool>();
    INFO(c["template"].get<std::string>(), " / ", c["conversation"].get<std::string>(), " / agp ", agp);
    if (c.contains("error")) {
      const std::string error = c["error"].get<std::string>();
      CHECK_THROWS_WITH_AS(tmpl.render(messages, agp, extra), doctest::Contains(error.c_str()), hh::serve::jinja::Error);
    } else {
      CHECK(tmpl.render(messages, agp, extra) == c["text"].get<std::string>());
    }
    ++checked;
  }
  CHECK(checked == 60);
}

TEST_CASE("jinja: whitespace control, trim_blocks and lstrip_blocks as transformers sets them") {
  const json ctx = {{"xs", {1, 2}}};
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before one.
  CHECK(render("{% for x in xs %}\n  {% if x %}\n{{ x }}\n  {% endif %}\n{% endfor %}\n", ctx) == "1\n2\n");
  CHECK(render("a  {{- ' b ' -}}  c", ctx) == "a b c");
  CHECK(render("a\n  {%+ if true %}x{% endif %}", ctx) == "a\n  x");       // + keeps the indentation
  CHECK(render("{% if true +%}\nx{% endif %}", ctx) == "\nx");             // + keeps the newline
  CHECK(render("x {# a comment #}\ny", ctx) == "x y");                     // trim_blocks after a comment
  CHECK(render("{{ {'a': {'b': 1}} | tojson }}", ctx) == "{\"a\": {\"b\": 1}}");  // "}}" inside a dict
  CHECK(render("text\n", ctx) == "text");                                  // keep_trailing_newline=False
}

TEST_CASE("jinja: scoping, namespaces and loop variables") {
  const json ctx = {{"xs", {"a", "b", "c"}}};
  CHECK(render("{% set n = 0 %}{% for x in xs %}{% set n = n + 1 %}{% endfor %}{{ n }}", ctx) == "0");
  CHECK(render("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}", ctx) ==
        "3");
  CHECK(render("{% for x in xs %}{{ loop.index0 }}{{ x }}{{ '|' if not loop.last }}{% endfor %}", ctx) == "0a|1b|2c");
  CHECK(render("{% for x in [] %}x{% else %}empty{% endfor %}", ctx) == "empty");
  CHECK(render("{% for x in xs if x != 'b' %}{{ loop.length }}{{ x }}{% endfor %}", ctx) == "2a2c");
}

TEST_CASE("jinja: what the subset cannot render is an error naming the construct and the line") {
  const json ctx = json::object();
  CHECK_THROWS_WITH_AS(render("a\n{{ x | frobnicate }}", ctx), doctest::Contains("line 2: unknown filter 'frobnicate'"),
                       hh::serve::jinja::Error);
  CHECK_THROWS_WITH_AS(render("{% if true %}x", ctx), doctest::Contains("missing {% endif %}"), hh::serve::jinja::Error);
  CHECK_THROWS_WITH_AS(render("{% macro m() %}{% endmacro %}", ctx), doctest::Contains("unsupported tag {% macro %}"),
                       hh::serve::jinja::Error);
  CHECK_THROWS_WITH_AS(render("{{ 1 +", ctx), doctest::Contains("unclosed {{"), hh::serve::jinja::Error);
  CHECK_THROWS_WITH_AS(render("{{ 1 + }}", ctx), doctest::Contains("unexpected end of expression"),
                       hh::serve::jinja::Error);
  CHECK_THROWS_WITH_AS(render("{{ raise_exception('no system role') }}", ctx), doctest::Contains("no system role"),
                       hh::serve::jinja::Error);
  CHECK_THROWS_WITH_AS(render("{{ 'a' + 1 }}", ctx), doctest::Contains("unsupported operand types for +"),
                       hh::serve::jinja::Error);
  CHECK_THROWS_WITH_AS(render("{{ x.y }}", ctx), doctest::Contains("undefined"), hh::serve::jinja::Error);
  CHECK_THROWS_WITH_AS(render("{% set x.y = 1 %}", ctx), doctest::Contains("not a namespace"), hh::serve::jinja::Error);
  CHECK_THROWS_WITH_AS(render("{% endfor %}", ctx), doctest::Contains("without its opening tag"), hh::serve::jinja::Error);
}

TEST_CASE("chat template: read from a folder as transformers reads it") {
  hh::test::TempDir d("chat_template");
  const json messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  CHECK_FALSE(ChatTemplate::load(d.path.string()).available());
  CHECK_THROWS_WITH_AS(ChatTemplate::load(d.path.string()).render(messages, true), doctest::Contains("no chat template"),
                       hh::serve::jinja::Error);
  // A string, with AddedToken-style special tokens.
  d.write("tokenizer_config.json",
          R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
              "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}{% endfor %}"})");
  CHECK(ChatTemplate::load(d.path.string()).render(messages, true) == "<s>[user]hi</s>");
  // The list of named templates: "default".
  d.write("tokenizer_config.json",
          R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D{{ messages|length }}"}]})");
  CHECK(ChatTemplate::load(d.path.string()).render(messages, true) == "D1");
  // chat_template.jinja wins, as newer transformers saves it there.
  d.write("chat_template.jinja", "J{{ add_generation_prompt }}\n");
  CHECK(ChatTemplate::load(d.path.string()).render(messages, false) == "JFalse");
  // A template that does not parse: the folder loads, rendering says why.
  d.write("chat_template.jinja", "{% for %}");
  const ChatTemplate broken = ChatTemplate::load(d.path.string());
  CHECK_FALSE(broken.available());
  CHECK(broken.problem().find("chat_template.jinja: line 1") != std::string::npos);
}


TEST_CASE("serve engine: a chat request is the template's text tokenized as apply_chat_template(tokenize=True)") {
  const json doc = fixture();
  const json& t = doc["tokenized"];
  // The tiny tokenizer folder with the case's template in its tokenizer_config.json.
  hh::test::TempDir d("chat_engine");
  const std::string src = std::string(HH_SOURCE_DIR) + "/tests/fixtures/hf/" + t["folder"].get<std::string>();
  for (const auto& f : std::filesystem::directory_iterator(src))
    std::filesystem::copy_file(f.path(), d.path / f.path().filename());
  d.write("tokenizer_config.json", json{{"bos_token", t["bos_token"]}, {"eos_token", t["eos_token"]},
                                        {"chat_template", t["chat_template"]}}.dump());
  hh::serve::EngineOptions o;
  o.folder = d.path.string();
  hh::serve::Engine engine(o);
  CHECK(engine.has_chat_template());
  const std::string body = json{{"messages", t["messages"]}, {"max_tokens", 6}, {"temperature", 0}}.dump();
  const hh::serve::CompletionRequest r = hh::serve::parse_chat_request(body, engine.limits());
  const hh::serve::Engine::Prepared p = engine.prepare(r);
  CHECK(p.request.prompt_text == t["text"].get<std::string>());
  CHECK(p.prompt == t["ids"].get<std::vector<int64_t>>());
  // The generation is the completion of those ids.
  const auto slot = engine.admit();
  hh::serve::CompletionStats st;
  const auto quiet = [](const std::string&, const hh::serve::json&) { return true; };
  const hh::serve::Completion chat = engine.complete(p, *slot, quiet, st);
  hh::serve::json ids_body = {{"prompt", t["ids"]}, {"max_tokens", 6}, {"temperature", 0}};
  const hh::serve::Completion plain =
      engine.complete(engine.prepare(hh::serve::parse_completion_request(ids_body.dump(), engine.limits())), *slot, quiet, st);
  CHECK(chat.text == plain.text);
  CHECK(chat.prompt_tokens == static_cast<int64_t>(t["ids"].size()));
  const json resp = hh::serve::chat_response("chatcmpl-1", 0, "m", chat);
  CHECK(resp["object"] == "chat.completion");
  CHECK(resp["choices"][0]["message"]["role"] == "assistant");
  CHECK(resp["choices"][0]["message"]["content"] == chat.text);
  // A folder without a template: chat is a 400 that says so.
  hh::serve::EngineOptions bare;
  bare.folder = src;
  hh::serve::Engine plain_engine(bare);
  CHECK_FALSE(plain_engine.has_chat_template());
  try {
    plain_engine.prepare(hh::serve::parse_chat_request(body, plain_engine.limits()));
    FAIL("accepted");
  } catch (const hh::serve::ApiError& e) {
    CHECK(e.status == 400);
    CHECK(std::string(e.what()).find("no chat template") != std::string::npos);
    CHECK(std::string(e.what()).find("/v1/completions") != std::string::npos);
  }
}

TEST_CASE("serve api: bad chat requests are 400s naming the field") {
  const hh::serve::Limits limits{64, 32};
  const auto refused = [&](const std::string& body, const std::string& param, const std::string& says) {
    CAPTURE(body);
    try {
      hh::serve::parse_chat_request(body, limits);
      FAIL("accepted");
    } catch (const hh::serve::ApiError& e) {
      CHECK(e.status == 400);
      CHECK(e.param == param);
      CHECK(std::string(e.what()).find(says) != std::string::npos);
    }
  };
  refused(R"({})", "messages", "'messages' is required");
  refused(R"({"messages":[]})", "messages", "non-empty list");
  refused(R"({"messages":["hi"]})", "messages[0]", "must be an object");
  refused(R"({"messages":[{"content":"hi"}]})", "messages[0].role", "non-empty string");
  refused(R"({"messages":[{"role":"user"}]})", "messages[0].content", "is required");
  refused(R"({"messages":[{"role":"user","content":5}]})", "messages[0].content", "string or a list of text parts");
  refused(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})",
          "messages[0].content[0]", "only text parts");
  refused(R"({"messages":[{"role":"user","content":"hi","tool_calls":[]}]})", "messages[0].tool_calls", "not supported");
  refused(R"({"messages":[{"role":"user","content":"hi"}],"top_logprobs":2})", "top_logprobs", "needs 'logprobs'");
  refused(R"({"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":21})", "top_logprobs",
          "must be in [0, 20]");
  refused(R"({"messages":[{"role":"user","content":"hi"}],"logprobs":1})", "logprobs", "must be true or false");
  refused(R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}]})", "tools", "not supported");
  refused(R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"max_completion_tokens":1})",
          "max_completion_tokens", "not both");
  refused(R"({"messages":[{"role":"user","content":"hi"}],"prompt":"x"})", "prompt", "Unrecognized");
  // Text parts are joined; max_completion_tokens is read.
  const hh::serve::CompletionRequest r = hh::serve::parse_chat_request(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"max_completion_tokens":3})",
      limits);
  CHECK(r.chat);
  CHECK(r.messages[0]["content"] == "a\nb");
  CHECK(r.max_tokens == 3);
}
