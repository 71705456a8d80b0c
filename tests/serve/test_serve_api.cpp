// serve/: request validation, the OpenAI JSON shapes, the streamed text (TextStream) and the
// engine's generation against nn::generate, all without sockets (the end-to-end test with
// hh_serve is tests/serve/e2e).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "data/tokenizer.h"
#include "nn/models/generate.h"
#include "serve/api.h"
#include "serve/engine.h"
#include "serve/text_stream.h"

namespace hh::test {

namespace {

using serve::ApiError;
using serve::json;

const std::string kLlamaTok = std::string(HH_SOURCE_DIR) + "/tests/fixtures/hf/llama-tiny-tok";
const std::string kStMean = std::string(HH_SOURCE_DIR) + "/tests/fixtures/hf/st-tiny-mean";

serve::Limits limits() { return {64, 32}; }

// The ApiError a completion body gives: its status, param and a piece of its message.
void check_refused(const std::string& body, int status, const std::string& param, const std::string& says) {
  CAPTURE(body);
  try {
    serve::parse_completion_request(body, limits());
    FAIL("accepted");
  } catch (const ApiError& e) {
    CHECK(e.status == status);
    CHECK(e.param == param);
    CHECK(std::string(e.what()).find(says) != std::string::npos);
    CHECK(e.type == "invalid_request_error");
  }
}

}  // namespace

TEST_CASE("serve api: a completion request's fields are read with OpenAI's defaults") {
  const auto r = serve::parse_completion_request(
      R"({"model":"m","prompt":"Hi","max_tokens":8,"temperature":0,"top_p":0.5,"top_k":-1,"seed":7,"stop":"\n",
          "echo":true,"stream":true,"stream_options":{"include_usage":true},"n":1,"user":"u","presence_penalty":0})",
      limits());
  CHECK(r.model == "m");
  CHECK(r.prompt_is_text);
  CHECK(r.prompt_text == "Hi");
  CHECK(r.max_tokens == 8);
  CHECK(r.sampling.temperature == 0.0);
  CHECK(r.sampling.top_p == 0.5);
  CHECK(r.sampling.top_k == 0);
  CHECK(r.sampling.seed == 7);
  CHECK(r.stop == std::vector<std::string>{"\n"});
  CHECK(r.echo);
  CHECK(r.stream);
  CHECK(r.include_usage);
  const auto d = serve::parse_completion_request(R"({"prompt":[1,5,9]})", limits());
  CHECK(!d.prompt_is_text);
  CHECK(d.prompt_ids == std::vector<int64_t>{1, 5, 9});
  CHECK(d.max_tokens == 16);
  CHECK(d.sampling.temperature == 1.0);
  CHECK(d.logprobs == -1);
  CHECK(!d.stream);
  // A list of one prompt is that prompt.
  CHECK(serve::parse_completion_request(R"({"prompt":["x"]})", limits()).prompt_text == "x");
  CHECK(serve::parse_completion_request(R"({"prompt":[[3,4]]})", limits()).prompt_ids == std::vector<int64_t>{3, 4});
  CHECK(serve::parse_completion_request(R"({"prompt":"a","stop":["x","yz"]})", limits()).stop.size() == 2);
}

TEST_CASE("serve api: bad completion requests are 400s naming the field") {
  check_refused("{\"prompt\": \"a\"", 400, "", "not valid JSON");
  check_refused("[1,2]", 400, "", "must be a JSON object");
  check_refused("{}", 400, "prompt", "'prompt' is required");
  check_refused(R"({"prompt":""})", 400, "prompt", "empty");
  check_refused(R"({"prompt":5})", 400, "prompt", "must be a string or a list of token ids");
  check_refused(R"({"prompt":[1,-2]})", 400, "prompt", "not a token id");
  check_refused(R"({"prompt":["a","b"]})", 400, "prompt", "a batch of prompts is not supported yet");
  check_refused(R"({"prompt":"a","temperature":-0.5})", 400, "temperature", "must be in [0, 2]");
  check_refused(R"({"prompt":"a","temperature":"hot"})", 400, "temperature", "must be a number");
  check_refused(R"({"prompt":"a","max_tokens":33})", 400, "max_tokens", "must be in [0, 32]");
  check_refused(R"({"prompt":"a","max_tokens":1.5})", 400, "max_tokens", "must be an integer");
  check_refused(R"({"prompt":"a","max_tokens":"8"})", 400, "max_tokens", "must be an integer");
  check_refused(R"({"prompt":"a","max_tokens":18446744073709551615})", 400, "max_tokens", "must be in");
  check_refused(R"({"prompt":"a","top_p":0})", 400, "top_p", "must be in (0, 1]");
  check_refused(R"({"prompt":"a","n":2})", 400, "n", "'n' > 1 is not supported yet");
  check_refused(R"({"prompt":"a","stop":["a","b","c","d","e"]})", 400, "stop", "up to 4 strings");
  check_refused(R"({"prompt":"a","stop":[""]})", 400, "stop", "must not be empty");
  check_refused(R"({"prompt":"a","stream":"yes"})", 400, "stream", "must be true or false");
  check_refused(R"({"prompt":"a","stream_options":{"include_usage":true}})", 400, "stream_options", "only allowed");
  check_refused(R"({"prompt":"a","logprobs":9})", 400, "logprobs", "must be in [0, 5]");
  check_refused(R"({"prompt":"a","logprobs":1,"echo":true})", 400, "logprobs", "not supported yet");
  check_refused(R"({"prompt":"a","frequency_penalty":1})", 400, "frequency_penalty", "not supported yet");
  check_refused(R"({"prompt":"a","bogus":1})", 400, "bogus", "Unrecognized request argument supplied: bogus");
  check_refused(R"({"prompt":"a","model":7})", 400, "model", "must be a string");
}

TEST_CASE("serve api: the context, the model name and embedding requests") {
  auto r = serve::parse_completion_request(R"({"prompt":"a","max_tokens":20})", limits());
  serve::check_context(r, 44, limits());  // 44 + 20 = 64 fits
  try {
    serve::check_context(r, 50, limits());
    FAIL("accepted");
  } catch (const ApiError& e) {
    CHECK(e.status == 400);
    CHECK(e.code == "context_length_exceeded");
    CHECK(std::string(e.what()).find("70 tokens (50 in the prompt, 20 for the completion)") != std::string::npos);
  }
  serve::check_model("", "llama");
  serve::check_model("llama", "llama");
  try {
    serve::check_model("gpt-4", "llama");
    FAIL("accepted");
  } catch (const ApiError& e) {
    CHECK(e.status == 404);
    CHECK(e.code == "model_not_found");
  }
  CHECK(serve::parse_embedding_request(R"({"input":"a b"})").input == std::vector<std::string>{"a b"});
  CHECK(serve::parse_embedding_request(R"({"input":["a","b"],"encoding_format":"float"})").input.size() == 2);
  for (const char* body : {R"({})", R"({"input":[]})", R"({"input":[1,2]})", R"({"input":[""]})", R"({"input":3})",
                           R"({"input":"a","encoding_format":"base64"})", R"({"input":"a","x":1})"}) {
    CAPTURE(body);
    CHECK_THROWS_AS(serve::parse_embedding_request(body), ApiError);
  }
}

TEST_CASE("serve api: response, chunk, error and embedding JSON have OpenAI's shapes") {
  serve::Completion c;
  c.text = "Hello";
  c.finish_reason = "length";
  c.prompt_tokens = 3;
  c.completion_tokens = 2;
  const json j = serve::completion_response("cmpl-1", 100, "m", c);
  CHECK(j["object"] == "text_completion");
  CHECK(j["choices"][0]["text"] == "Hello");
  CHECK(j["choices"][0]["index"] == 0);
  CHECK(j["choices"][0]["finish_reason"] == "length");
  CHECK(j["choices"][0]["logprobs"].is_null());
  CHECK(j["usage"] == json{{"prompt_tokens", 3}, {"completion_tokens", 2}, {"total_tokens", 5}});
  const json chunk = serve::completion_chunk("cmpl-1", 100, "m", "lo", "");
  CHECK(chunk["choices"][0]["finish_reason"].is_null());
  CHECK(serve::sse_event(chunk.dump()) == "data: " + chunk.dump() + "\n\n");
  const json e = serve::error_body(ApiError(400, "bad", "temperature"));
  CHECK(e == json::parse(R"({"error":{"message":"bad","type":"invalid_request_error","param":"temperature","code":null}})"));
  CHECK(serve::error_body(ApiError(503, "busy", "", "server_busy"))["error"]["type"] == "server_error");
  CHECK(serve::http_status_error(404, "GET", "/nope").code == "unknown_url");
  CHECK(serve::http_status_error(413, "POST", "/v1/completions").status == 413);
  const json m = serve::models_response("m", 5);
  CHECK(m["data"][0]["id"] == "m");
  const json emb = serve::embeddings_response("m", {{1.f, 2.f}, {3.f, 4.f}}, 7);
  CHECK(emb["data"][1]["index"] == 1);
  CHECK(emb["data"][1]["embedding"] == json{3.0, 4.0});
  CHECK(emb["usage"]["prompt_tokens"] == 7);
  // log p from logits: softmax of [0, log 3] is [1/4, 3/4].
  const auto lp = serve::token_logprob({0.0, std::log(3.0)}, 0, 2, [](int64_t id) { return "t" + std::to_string(id); });
  CHECK(lp.logprob == doctest::Approx(std::log(0.25)));
  REQUIRE(lp.top.size() == 2);
  CHECK(lp.top[0].first == "t1");
  CHECK(lp.top[0].second == doctest::Approx(std::log(0.75)));
  const json lj = serve::logprobs_json({lp, lp}, 4);
  CHECK(lj["text_offset"] == json{4, 6});
  CHECK(lj["tokens"] == json{"t0", "t0"});
  // Chat's form: a content list, each token with its bytes and its top list.
  const json cj = serve::chat_logprobs_json({lp});
  REQUIRE(cj["content"].size() == 1);
  CHECK(cj["content"][0]["token"] == "t0");
  CHECK(cj["content"][0]["bytes"] == json{116, 48});
  CHECK(cj["content"][0]["logprob"].get<double>() == doctest::Approx(std::log(0.25)));
  CHECK(cj["content"][0]["top_logprobs"][0]["token"] == "t1");
  CHECK(cj["content"][0]["top_logprobs"][1]["logprob"].get<double>() == doctest::Approx(std::log(0.25)));
  serve::Completion cc;
  cc.want_logprobs = true;
  cc.logprobs = {lp, lp};
  CHECK(serve::chat_response("id", 1, "m", cc)["choices"][0]["logprobs"]["content"].size() == 2);
  CHECK(serve::chat_chunk("id", 1, "m", {{"content", "x"}}, "", cj)["choices"][0]["logprobs"] == cj);
}

TEST_CASE("serve text stream: a run of byte-fallback tokens is released only once it ends") {
  // llama-tiny-tok's ids of a seeded sample (found by the openai-client test): "ident", <0x0E>,
  // <0xED>, "If ": <0x0E> alone decodes to "\x0e", but with <0xED> after it the run is not UTF-8
  // and both bytes become U+FFFD, so "\x0e" must not be released before the run ends.
  const auto tok = data::load_tokenizer(kLlamaTok);
  const std::vector<int32_t> ids = {1206, 17, 237, 830, 92};
  CHECK(tok->id_to_token(17) == "<0x0E>");
  serve::TextStream s(*tok, {}, {1, 705, 330});
  std::string joined;
  for (int32_t id : ids) joined += s.push(id);
  joined += s.finish();
  const std::string whole = s.text();
  CHECK(joined == whole);
  CHECK(whole.find("\xEF\xBF\xBD\xEF\xBF\xBD") != std::string::npos);  // two U+FFFD, as the whole decode has
  CHECK(whole.find('\x0e') == std::string::npos);
}

TEST_CASE("serve text stream: released pieces concatenate to the full decode; stop strings end it") {
  const auto tok = data::load_tokenizer(kLlamaTok);
  const std::vector<int32_t> ids32 = tok->encode("The hedgehog is a small animal, isn't it? Yes.", false);
  const std::vector<int64_t> ids(ids32.begin(), ids32.end());
  const std::string full = tok->decode(ids32, true);
  {
    serve::TextStream s(*tok, {});
    std::string joined;
    for (int64_t id : ids) joined += s.push(id);
    joined += s.finish();
    CHECK(joined == full);
    CHECK(s.text() == full);
    CHECK(!s.stopped());
  }
  {
    // Characters of several bytes (byte-fallback tokens: U+FFFD until the last byte comes), after
    // a prompt: the pieces are the continuation of the prompt's text, every one valid UTF-8.
    const std::vector<int32_t> p32 = tok->encode("Les", true), c32 = tok->encode(" hérissons dorment l'hiver, ô été", false);
    std::vector<int32_t> all = p32;
    all.insert(all.end(), c32.begin(), c32.end());
    const std::string whole = tok->decode(all, true), prompt = tok->decode(p32, true);
    REQUIRE(whole.compare(0, prompt.size(), prompt) == 0);
    serve::TextStream s(*tok, {}, std::vector<int64_t>(p32.begin(), p32.end()));
    std::string joined;
    for (int32_t id : c32) {
      const std::string piece = s.push(id);
      CHECK(piece.find("\xEF\xBF\xBD") == std::string::npos);
      joined += piece;
    }
    joined += s.finish();
    CHECK(joined == whole.substr(prompt.size()));
  }
  {
    serve::TextStream s(*tok, {"animal", "never there"});
    std::string joined;
    for (int64_t id : ids) {
      joined += s.push(id);
      if (s.stopped()) break;
    }
    joined += s.finish();
    CHECK(s.stopped());
    CHECK(joined == full.substr(0, full.find("animal")));
    CHECK(s.text() == joined);
  }
}

TEST_CASE("serve engine: temperature 0 gives nn::generate's greedy tokens; streamed text equals the whole") {
  serve::EngineOptions o;
  o.folder = kLlamaTok;
  serve::Engine engine(o);
  CHECK(engine.is_decoder());
  CHECK(engine.model_id() == "llama-tiny-tok");
  CHECK(engine.limits().max_context == 64);
  auto r = serve::parse_completion_request(R"({"prompt":"The hedgehog is","max_tokens":8,"temperature":0})",
                                           engine.limits());
  const auto p = engine.prepare(r);
  // hf_run's ids for this prompt (tests/fixtures/hf/llama-tiny-tok/expected.json, transformers').
  CHECK(p.prompt == std::vector<int64_t>{1, 705, 330, 500, 329, 327, 1005, 329, 399, 513});
  std::string streamed;
  int64_t calls = 0;
  serve::CompletionStats st;
  const auto slot = engine.admit();
  CHECK(engine.active() == 1);
  const serve::Completion c = engine.complete(
      p, *slot,
      [&](const std::string& t, const json&) {
        streamed += t;
        ++calls;
        return true;
      },
      st);
  CHECK(c.text == " The  The  The  The  The  The  The  The ");
  CHECK(streamed == c.text);
  CHECK(calls >= 8);
  CHECK(c.completion_tokens == 8);
  CHECK(c.prompt_tokens == 10);
  CHECK(c.finish_reason == "length");
  CHECK(st.ended == "length");
  // A stop string ends it early, finish_reason stop; logprobs come per token.
  r = serve::parse_completion_request(
      R"({"prompt":"The hedgehog is","max_tokens":8,"temperature":0,"stop":"The  The","logprobs":2})", engine.limits());
  const serve::Completion s = engine.complete(engine.prepare(r), *slot, [](const std::string&, const json&) { return true; }, st);
  CHECK(s.text == " ");
  CHECK(s.finish_reason == "stop");
  CHECK(s.logprobs.size() == static_cast<size_t>(s.completion_tokens));
  CHECK(s.logprobs[0].top.size() == 2);
  CHECK(s.logprobs[0].logprob == doctest::Approx(s.logprobs[0].top[0].second));  // greedy: the best token
  // A client gone (on_text false) cancels the generation: the pieces reach the client's thread
  // while the batch goes on, so the run ends at its first draw after the failed write (or at its
  // end, if it got there first); no piece is written after the failure.
  r = serve::parse_completion_request(R"({"prompt":"The hedgehog is","max_tokens":20,"temperature":0})", engine.limits());
  int64_t writes = 0;
  const serve::Completion g = engine.complete(engine.prepare(r), *slot, [&](const std::string&, const json&) {
    ++writes;
    return false;
  }, st);
  CHECK(writes == 1);
  CHECK(g.completion_tokens >= 1);
  CHECK(st.ended == "client gone");
  // Sampled with a seed: the same tokens as nn::generate with that seed.
  r = serve::parse_completion_request(R"({"prompt":[1,705,330],"max_tokens":6,"temperature":0.9,"top_k":20,"seed":3})",
                                      engine.limits());
  const serve::Completion a = engine.complete(engine.prepare(r), *slot, [](const std::string&, const json&) { return true; }, st);
  const serve::Completion b = engine.complete(engine.prepare(r), *slot, [](const std::string&, const json&) { return true; }, st);
  CHECK(a.text == b.text);
  // Requests the model cannot take are 400s before anything runs.
  r = serve::parse_completion_request(R"({"prompt":[1,99999]})", engine.limits());
  CHECK_THROWS_AS(engine.prepare(r), ApiError);
  r = serve::parse_completion_request(R"({"prompt":"x","max_tokens":64})", engine.limits());
  CHECK_THROWS_AS(engine.prepare(r), ApiError);
  r = serve::parse_completion_request(R"({"prompt":"x","model":"other"})", engine.limits());
  CHECK_THROWS_AS(engine.prepare(r), ApiError);
  CHECK_THROWS_AS(engine.embed({"a"}, calls), ApiError);
}

TEST_CASE("serve engine: admission stops at max_concurrent with 503 and frees slots") {
  serve::EngineOptions o;
  o.folder = kLlamaTok;
  o.max_concurrent = 2;
  serve::Engine engine(o);
  auto a = engine.admit();
  auto b = engine.admit();
  try {
    engine.admit();
    FAIL("admitted a third");
  } catch (const ApiError& e) {
    CHECK(e.status == 503);
  }
  a.reset();
  CHECK(engine.active() == 1);
  auto c = engine.admit();
  CHECK(engine.active() == 2);
  b.reset();
  c.reset();
  CHECK(engine.active() == 0);
  engine.stop_all();
  CHECK_THROWS_AS(engine.admit(), ApiError);
}

TEST_CASE("serve engine: embeddings equal sentence-transformers' (st-tiny-mean)") {
  serve::EngineOptions o;
  o.folder = kStMean;
  serve::Engine engine(o);
  CHECK(!engine.is_decoder());
  const json expected = json::parse(read_file(kStMean + "/expected.json"));
  std::vector<std::string> texts = expected["texts"].get<std::vector<std::string>>();
  int64_t tokens = 0;
  const auto v = engine.embed(texts, tokens);
  REQUIRE(v.size() == texts.size());
  CHECK(tokens > static_cast<int64_t>(texts.size()));
  double worst = 0;
  for (size_t i = 0; i < v.size(); ++i)
    for (size_t k = 0; k < v[i].size(); ++k)
      worst = std::max(worst, std::abs(v[i][k] - expected["embeddings"][i][k].get<double>()));
  CHECK(worst < 2e-6);
  auto r = serve::parse_completion_request(R"({"prompt":"a"})", engine.limits());
  CHECK_THROWS_AS(engine.prepare(r), ApiError);
}

}  // namespace hh::test
