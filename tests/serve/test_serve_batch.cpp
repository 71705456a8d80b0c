// hh_serve's continuous batching (serve/scheduler.h) through the engine, without sockets: 64
// requests completed at once share decode steps and each gets exactly the text it gets alone
// (temperature 0 and seeded sampling); decode memory is reserved at admission (400 when a request
// can never fit --max-memory, 503 while others hold it) and freed with the slot.
#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

#include "serve/api.h"
#include "serve/engine.h"

namespace hh::test {

namespace {

const std::string kLlamaTok = std::string(HH_SOURCE_DIR) + "/tests/fixtures/hf/llama-tiny-tok";

serve::Completion run(serve::Engine& engine, const std::string& body) {
  const serve::Engine::Prepared p = engine.prepare(serve::parse_completion_request(body, engine.limits()));
  const auto slot = engine.admit(p);
  serve::CompletionStats st;
  return engine.complete(p, *slot, [](const std::string&, const serve::json&) { return true; }, st);
}

}  // namespace

TEST_CASE("serve batching: 64 concurrent requests each get the completion they get alone") {
  serve::EngineOptions o;
  o.folder = kLlamaTok;
  o.max_concurrent = 64;
  serve::Engine engine(o);
  const char* const words[] = {"The", "hedgehog", "is", "a", "small", "animal", "with", "spines"};
  std::vector<std::string> bodies;
  for (int i = 0; i < 64; ++i) {
    std::string prompt;
    for (int w = 0; w <= i % 7; ++w) prompt += std::string(w ? " " : "") + words[(i + w) % 8];
    serve::json b = {{"prompt", prompt}, {"max_tokens", 4 + i % 9}, {"temperature", i % 3 == 0 ? 0.8 : 0.0},
                     {"seed", i}};
    if (i % 5 == 0) b["stop"] = "The";
    bodies.push_back(b.dump());
  }
  std::vector<serve::Completion> alone;
  for (const std::string& b : bodies) alone.push_back(run(engine, b));
  CHECK(engine.largest_batch() == 1);
  std::vector<serve::Completion> together(bodies.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < bodies.size(); ++i) threads.emplace_back([&, i] { together[i] = run(engine, bodies[i]); });
  for (std::thread& t : threads) t.join();
  CHECK(engine.largest_batch() > 8);  // the requests shared decode steps
  for (size_t i = 0; i < bodies.size(); ++i) {
    CAPTURE(bodies[i]);
    CHECK(together[i].text == alone[i].text);
    CHECK(together[i].completion_tokens == alone[i].completion_tokens);
    CHECK(together[i].finish_reason == alone[i].finish_reason);
  }
  CHECK(engine.active() == 0);
  CHECK(engine.reserved_bytes() == 0);
}

TEST_CASE("serve batching: decode memory is reserved at admission and freed with the slot") {
  serve::EngineOptions o;
  o.folder = kLlamaTok;
  serve::Engine probe(o);
  // A softmax model's KV cache grows with the tokens: 40 tokens need more than 20.
  const int64_t b20 = probe.state_bytes(20), b40 = probe.state_bytes(40);
  CHECK(b20 > 0);
  CHECK(b40 == 2 * b20);
  o.max_memory = b40 + b20 / 2;  // one 40-token request, or two of 20
  serve::Engine engine(o);
  const auto prepared = [&](int64_t max_tokens) {
    std::vector<int64_t> ids(static_cast<size_t>(40 - max_tokens), 5);
    return engine.prepare(serve::parse_completion_request(
        serve::json{{"prompt", ids}, {"max_tokens", max_tokens}}.dump(), engine.limits()));
  };
  {
    auto a = engine.admit(prepared(10));  // 40 tokens
    CHECK(engine.reserved_bytes() == b40);
    try {
      engine.admit(prepared(10));
      FAIL("admitted");
    } catch (const serve::ApiError& e) {
      CHECK(e.status == 503);
      CHECK(std::string(e.what()).find("--max-memory") != std::string::npos);
    }
    CHECK(engine.active() == 1);
  }
  CHECK(engine.reserved_bytes() == 0);
  o.max_memory = b20;
  serve::Engine small(o);
  const serve::Engine::Prepared big = small.prepare(serve::parse_completion_request(
      serve::json{{"prompt", std::vector<int64_t>(30, 5)}, {"max_tokens", 10}}.dump(), small.limits()));
  try {
    small.admit(big);
    FAIL("admitted");
  } catch (const serve::ApiError& e) {
    CHECK(e.status == 400);
    CHECK(std::string(e.what()).find("more than the server's --max-memory") != std::string::npos);
  }
  CHECK(small.active() == 0);
  CHECK(small.reserved_bytes() == 0);
}

}  // namespace hh::test

namespace hh::test {

TEST_CASE("serve prefix cache: a request sharing a cached system prompt resumes from it, with the tokens of a miss") {
  serve::EngineOptions o;
  o.folder = kLlamaTok;
  o.prefix_cache_bytes = 1 << 20;
  o.prefix_chunk = 8;
  std::vector<int64_t> system;  // a 20-token shared prefix (2.5 chunks)
  for (int64_t i = 0; i < 20; ++i) system.push_back(3 + (i * 7) % 50);
  const auto body = [&](std::vector<int64_t> tail) {
    std::vector<int64_t> ids = system;
    ids.insert(ids.end(), tail.begin(), tail.end());
    return serve::json{{"prompt", ids}, {"max_tokens", 12}, {"temperature", 0}}.dump();
  };
  serve::Engine warm(o);
  run(warm, body({5, 6, 7}));  // fills the cache at 8 and 16
  const serve::Completion hit = run(warm, body({9, 10}));
  const serve::PrefixCacheStats s = warm.prefix_cache_stats();
  CHECK(s.hits == 1);
  CHECK(s.reused_tokens == 16);
  serve::Engine cold(o);  // the same request, nothing cached
  const serve::Completion miss = run(cold, body({9, 10}));
  CHECK(cold.prefix_cache_stats().hits == 0);
  CHECK(hit.text == miss.text);
  CHECK(hit.completion_tokens == miss.completion_tokens);
  // Without the cache the prompt is prefilled in one pass, as hf_run does; the cache is not asked.
  o.prefix_cache_bytes = 0;
  serve::Engine plain(o);
  run(plain, body({9, 10}));
  CHECK(plain.prefix_cache_stats().lookups == 0);
}

}  // namespace hh::test
