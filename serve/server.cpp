#include "serve/server.h"

#include <httplib.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <memory>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/prepacked.h"
#include "serve/page.h"

namespace hh::serve {

namespace {

using Clock = std::chrono::steady_clock;

void log_line(const std::string& line) {
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

// JSON text; bytes of a decode that are not UTF-8 become U+FFFD rather than an exception.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

// One line per request: what it was, its status, and for a completion its tokens and speed.
void log_request(const std::string& id, const httplib::Request& req, int status, const std::string& what) {
  log_line(str("req ", id, " ", req.method, " ", req.path, " ", status, ": ", what));
}

std::string completion_log(const CompletionStats& s, Clock::time_point t0) {
  const double total = std::chrono::duration<double>(Clock::now() - t0).count();
  const double tps = s.completion_tokens > 1 && s.generate_s > 0 ? (s.completion_tokens - 1) / s.generate_s : 0.0;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "prompt %lld tokens, completion %lld tokens, first token %.3f s, %.1f tok/s, ended %s, %.3f s",
                static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.completion_tokens), s.first_token_s,
                tps, s.ended.c_str(), total);
  return buf;
}

// Debian's cpp-httplib (a compiled library) listens with a backlog of 5: 32 clients connecting at
// once overflow the accept queue and some connections are dropped before any request is read
// (bench_serve saw it). listen() again on the bound socket raises the backlog; the socket is found
// among this process's descriptors as the listening one on `port`.
void widen_backlog(int port) {
  for (int fd = 0; fd < 1024; ++fd) {
    int accepting = 0;
    socklen_t len = sizeof accepting;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 || !accepting) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    const int bound = addr.ss_family == AF_INET    ? ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port)
                      : addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                                   : -1;
    if (bound == port) ::listen(fd, SOMAXCONN);
  }
}

// SIGINT and SIGTERM, taken by one thread (sigwait) instead of a handler: every other thread has
// them blocked (the mask is set before any thread starts), so the stop runs as ordinary code.
class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    std::signal(SIGPIPE, SIG_IGN);  // a client gone is a failed write, not a dead server
    thread_ = std::thread([this] {
      int sig = 0;
      sigwait(&set_, &sig);
      if (done_) return;  // woken by the destructor
      signalled_ = sig;
      if (on_signal_) on_signal_();
    });
  }
  ~SignalWatcher() {
    done_ = true;
    if (!signalled_) pthread_kill(thread_.native_handle(), SIGTERM);
    thread_.join();
  }
  // What a signal does (set before serving; runs on the watcher's thread).
  void on_signal(std::function<void()> f) {
    std::lock_guard<std::mutex> lock(m_);
    on_signal_ = std::move(f);
  }
  int signalled() const { return signalled_; }

 private:
  sigset_t set_;
  std::mutex m_;
  std::function<void()> on_signal_;
  std::atomic<bool> done_{false};
  std::atomic<int> signalled_{0};
  std::thread thread_;
};

json prefix_cache_json(const PrefixCacheStats& s) {
  return {{"lookups", s.lookups}, {"hits", s.hits},   {"reused_tokens", s.reused_tokens},
          {"bytes", s.bytes},     {"entries", s.entries}, {"evictions", s.evictions}};
}

class HttpServer {
 public:
  // Routes to `engine` (loaded after bind(), before listen(): nothing is served before it exists).
  HttpServer(const std::unique_ptr<Engine>& loaded, const ServeOptions& o) : engine_ptr_(loaded), created_(std::time(nullptr)) {
    const size_t threads = static_cast<size_t>(std::min<int64_t>(o.engine.max_concurrent + 8, 1024));
    http_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    http_.set_payload_max_length(static_cast<size_t>(o.max_body));
    // A client that stalls while sending its request is dropped after this long.
    http_.set_read_timeout(static_cast<time_t>(std::clamp(o.engine.timeout_s, 1.0, 30.0)));
    // How long a connection may wait for its next request (its first one too: a client on a busy
    // machine may be slow to send it); an idle keep-alive connection holds a worker thread meanwhile.
    http_.set_keep_alive_timeout(5);
    http_.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // ours, already filled
      const ApiError e = http_status_error(res.status, req.method, req.path);
      send_json(res, res.status, error_body(e));
      log_request("-", req, res.status, e.what());
      return httplib::Server::HandlerResponse::Handled;
    }));
    http_.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown exception";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_json(res, 500, error_body(ApiError(500, "internal error: " + what)));
      log_request("-", req, 500, what);
    });
    http_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200,
                {{"status", engine().stopping() ? "stopping" : "ok"},
                 {"active", engine().active()},
                 {"max_concurrent", engine().max_concurrent()},
                 {"model", engine().model_id()},
                 {"chat_template", engine().has_chat_template()},
                 {"reserved_bytes", engine().reserved_bytes()},
                 {"max_memory", engine().max_memory()},
                 {"largest_batch", engine().largest_batch()},
                 {"prefix_cache", prefix_cache_json(engine().prefix_cache_stats())}});
    });
    http_.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(chat_page_html(), "text/html; charset=utf-8");
    });
    http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, models_response(engine().model_id(), created_));
    });
    http_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, false); });
    http_.Post("/v1/chat/completions",
               [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, true); });
    http_.Post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res) { embeddings(req, res); });
  }

  // Binds host:port (0: any free port) and returns the port, or fails naming the flag.
  int bind(const std::string& host, int port) {
    if (port == 0) {
      port = http_.bind_to_any_port(host);
      HH_CHECK(port > 0, "--host ", host, ": cannot listen there");
    } else {
      HH_CHECK(http_.bind_to_port(host, port), "--port ", port, ": cannot listen on ", host, ":", port,
               " (in use, or --host is not an address of this machine)");
    }
    widen_backlog(port);
    return port;
  }
  void listen() { http_.listen_after_bind(); }
  void stop() { http_.stop(); }
  bool running() const { return http_.is_running(); }

 private:
  std::string next_id(const std::string& prefix) { return prefix + "-" + std::to_string(++requests_); }

  // POST /v1/completions (chat = false) and /v1/chat/completions (chat = true): one generation,
  // whole or streamed, in the shapes of the endpoint.
  void generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    const auto t0 = Clock::now();
    const std::string id = next_id(chat ? "chatcmpl" : "cmpl");
    try {
      const CompletionRequest r =
          chat ? parse_chat_request(req.body, engine().limits()) : parse_completion_request(req.body, engine().limits());
      auto p = std::make_shared<Engine::Prepared>(engine().prepare(r));
      std::shared_ptr<Engine::Slot> slot = engine().admit(*p);
      if (!r.stream) {
        CompletionStats st;
        const Completion c = engine().complete(*p, *slot, [](const std::string&, const json&) { return true; }, st);
        const std::string& model = engine().model_id();
        send_json(res, 200, chat ? chat_response(id, created_, model, c) : completion_response(id, created_, model, c));
        log_request(id, req, 200, completion_log(st, t0));
        return;
      }
      // Streamed: the generation runs inside the content provider, one event per token; a failed
      // write (the client gone) stops it. The slot lives as long as the provider.
      res.set_header("Cache-Control", "no-cache");
      const httplib::Request* request = &req;
      res.set_chunked_content_provider(
          "text/event-stream", [this, id, p, slot, t0, request, chat](size_t, httplib::DataSink& sink) {
            const std::string& model = engine().model_id();
            bool ok = true;
            const auto send = [&](const json& j) {
              const std::string event = sse_event(dump(j));
              ok = ok && sink.write(event.data(), event.size());
              return ok;
            };
            // A piece of the completion (and its logprobs) as the endpoint's chunk.
            const auto piece = [&](const std::string& text, const json& lp) {
              return send(chat ? chat_chunk(id, created_, model, {{"content", text}}, "", lp)
                               : completion_chunk(id, created_, model, text, "", lp));
            };
            CompletionStats st;
            Completion c;
            try {
              if (chat) send(chat_chunk(id, created_, model, {{"role", "assistant"}, {"content", ""}}, ""));
              if (!p->echo.empty()) piece(p->echo, nullptr);
              c = engine().complete(*p, *slot, piece, st);
              send(chat ? chat_chunk(id, created_, model, json::object(), c.finish_reason)
                        : completion_chunk(id, created_, model, "", c.finish_reason));
              if (p->request.include_usage)
                send({{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
                      {"model", model}, {"choices", json::array()}, {"usage", usage_json(c.prompt_tokens, c.completion_tokens)}});
            } catch (const std::exception& e) {  // after the 200 went out: the error as the last event
              send(error_body(ApiError(500, std::string("internal error: ") + e.what())));
              st.ended = std::string("error: ") + e.what();
            }
            const std::string done = "data: [DONE]\n\n";
            ok = ok && sink.write(done.data(), done.size());
            sink.done();
            log_request(id, *request, 200, completion_log(st, t0) + " (streamed)");
            return ok;
          });
    } catch (const ApiError& e) {
      send_json(res, e.status, error_body(e));
      log_request(id, req, e.status, e.what());
    }
  }

  void embeddings(const httplib::Request& req, httplib::Response& res) {
    const auto t0 = Clock::now();
    const std::string id = next_id("embd");
    try {
      const EmbeddingRequest r = parse_embedding_request(req.body);
      check_model(r.model, engine().model_id());
      const auto slot = engine().admit();
      int64_t tokens = 0;
      const std::vector<std::vector<float>> v = engine().embed(r.input, tokens);
      send_json(res, 200, embeddings_response(engine().model_id(), v, tokens));
      char buf[128];
      std::snprintf(buf, sizeof buf, "%zu texts, %lld tokens, %.3f s", v.size(), static_cast<long long>(tokens),
                    std::chrono::duration<double>(Clock::now() - t0).count());
      log_request(id, req, 200, buf);
    } catch (const ApiError& e) {
      send_json(res, e.status, error_body(e));
      log_request(id, req, e.status, e.what());
    }
  }

  const std::unique_ptr<Engine>& engine_ptr_;
  Engine& engine() { return *engine_ptr_; }
  httplib::Server http_;
  const int64_t created_;
  std::atomic<int64_t> requests_{0};
};

}  // namespace

int serve(const ServeOptions& o) {
  // Declared before the watcher, so they outlive its thread; created after it, so every thread
  // (OpenMP's, httplib's) inherits the blocked signals.
  std::atomic<bool> stop{false}, listening_done{false};
  std::unique_ptr<Engine> engine;
  std::unique_ptr<HttpServer> http;
  std::atomic<HttpServer*> http_ptr{nullptr};
  std::atomic<Engine*> engine_ptr{nullptr};
  SignalWatcher signals;
  signals.on_signal([&] {
    stop = true;
    if (Engine* e = engine_ptr.load()) e->stop_all();
    // stop() only takes once listening has begun: repeat until the listen loop has ended.
    while (!listening_done) {
      if (HttpServer* h = http_ptr.load()) h->stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  try {
    // The port first (its error comes before the model is read), then the model.
    http = std::make_unique<HttpServer>(engine, o);
    const int port = http->bind(o.host, o.port);
    http_ptr = http.get();
    engine = std::make_unique<Engine>(o.engine);
    engine_ptr = engine.get();
    log_line(str("hh_serve: ", engine->model_id(), " (", engine->is_decoder() ? "completions" : "embeddings",
                 ", context ", engine->limits().max_context, " tokens, max_tokens ", engine->limits().max_tokens,
                 ", max concurrent ", engine->max_concurrent(), ", ", weight_format_name(o.engine.weights),
                 " weights) on http://", o.host, ":", port));
    if (!stop) http->listen();
  } catch (...) {
    listening_done = true;
    throw;
  }
  listening_done = true;
  const int sig = signals.signalled();
  log_line(str("hh_serve: stopped", sig == SIGINT ? " (SIGINT)" : sig == SIGTERM ? " (SIGTERM)" : ""));
  return 0;
}

}  // namespace hh::serve
