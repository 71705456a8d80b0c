// The HTTP face of the engine, kept thin: cpp-httplib routes to the OpenAI endpoints (serve/api.h
// does the shapes, serve/engine.h the work), server-sent events for "stream": true, OpenAI's
// error object for every refusal, one log line per request, and a clean stop on SIGINT/SIGTERM.
#pragma once
#include <cstdint>
#include <string>

#include "serve/engine.h"

namespace hh::serve {

struct ServeOptions {
  EngineOptions engine;
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (the start line names it)
  int64_t max_body = 1 << 20;       // bytes of a request body (413 beyond)
};

// Binds host:port (an error names the flag when it cannot), loads the model, prints
// "hh_serve: ... on http://HOST:PORT" and serves until SIGINT or SIGTERM, which stop accepting,
// end running generations at their next token and return 0.
int serve(const ServeOptions& o);

}  // namespace hh::serve
