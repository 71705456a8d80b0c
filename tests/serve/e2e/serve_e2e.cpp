// hh_serve end to end (CTest hh_serve_e2e): starts the server on a free port over the tiny
// fixtures, compares its completions (whole and streamed) with hf_run's for the same prompt and
// seed, sends hostile requests and checks their statuses, holds a request running (the test hook
// HH_SERVE_TEST_TOKEN_DELAY_MS) to see 503, a disconnect mid-stream and SIGTERM, serves embeddings,
// and stops every server itself (exit 0). Environment: HH_SERVE and HH_HF_RUN (the binaries),
// HH_FIXTURES (tests/fixtures/hf).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  REQUIRE_MESSAGE(v != nullptr, "set ", name, " (CTest does)");
  return v;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A scratch folder, removed at exit.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/hh_serve_e2e_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
};

TempDir& scratch() {
  static TempDir d;
  return d;
}

// One hh_serve process: started on port 0 (its start line names the port), output to a log file,
// killed if a test leaves it running.
class ServerProcess {
 public:
  ServerProcess(const std::string& name, const std::vector<std::string>& flags, const std::string& token_delay_ms = "")
      : log_(scratch().path + "/" + name + ".log") {
    std::vector<std::string> args{env("HH_SERVE")};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--port", "0", "--threads", "1"});
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      if (!token_delay_ms.empty()) setenv("HH_SERVE_TEST_TOKEN_DELAY_MS", token_delay_ms.c_str(), 1);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    const auto t0 = Clock::now();
    const std::string mark = "on http://127.0.0.1:";
    while (seconds_since(t0) < 60) {
      const std::string text = slurp(log_);
      const size_t at = text.find(mark);
      if (at != std::string::npos && text.find('\n', at) != std::string::npos) {
        port_ = std::stoi(text.substr(at + mark.size()));
        return;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        FAIL("hh_serve exited before serving:\n", text);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    FAIL("hh_serve did not start in 60 s:\n", slurp(log_));
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string log() const { return slurp(log_); }
  // Sends `sig` and waits (up to 20 s) for the exit; returns the exit status (-1: killed by a
  // signal or still running).
  int stop(int sig) {
    kill(pid_, sig);
    const auto t0 = Clock::now();
    int status = 0;
    while (seconds_since(t0) < 20) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30, 0);
    return c;
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// ---- a raw socket client: for streams, half requests and disconnects ----
int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

void send_all(int fd, const std::string& s) {
  size_t at = 0;
  while (at < s.size()) {
    const ssize_t n = send(fd, s.data() + at, s.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return;
    at += static_cast<size_t>(n);
  }
}

// Reads until `until` appears in what was read, the peer closes, or timeout_s passes.
std::string read_some(int fd, double timeout_s, const std::string& until = "", bool* closed = nullptr) {
  std::string got;
  const auto t0 = Clock::now();
  if (closed) *closed = false;
  while (seconds_since(t0) < timeout_s) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      if (closed) *closed = true;
      break;
    }
    got.append(buf, static_cast<size_t>(n));
    if (!until.empty() && got.find(until) != std::string::npos) break;
  }
  return got;
}

std::string post_request(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// The body of a chunked HTTP response.
std::string dechunk(const std::string& response) {
  size_t at = response.find("\r\n\r\n");
  REQUIRE(at != std::string::npos);
  at += 4;
  std::string body;
  while (at < response.size()) {
    const size_t eol = response.find("\r\n", at);
    if (eol == std::string::npos) break;
    const size_t n = std::stoul(response.substr(at, eol - at), nullptr, 16);
    if (n == 0) break;
    body += response.substr(eol + 2, n);
    at = eol + 2 + n + 2;
  }
  return body;
}

// The "data: ..." payloads of a server-sent event stream.
std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    out.push_back(body.substr(at + 6, end - at - 6));
    at = end;
  }
  return out;
}

// hf_run's results.json for a prompt on a folder.
json hf_run(const std::string& flags) {
  static int n = 0;
  const std::string out = scratch().path + "/hf_run_" + std::to_string(++n);
  const std::string cmd = "'" + env("HH_HF_RUN") + "' " + flags + " --out '" + out + "' > '" + out + ".log' 2>&1";
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, slurp(out + ".log"));
  return json::parse(slurp(out + "/results.json"));
}

// hf_run's completion as a continuation of its prompt: its whole text (decode of prompt + new ids)
// after the prompt (its "completion", the new ids decoded alone, loses SentencePiece's leading space).
std::string continuation(const json& hf) {
  const std::string text = hf["text"], prompt = hf["prompt"];
  REQUIRE(text.compare(0, prompt.size(), prompt) == 0);
  return text.substr(prompt.size());
}

std::string fixture(const std::string& name) { return env("HH_FIXTURES") + "/" + name; }

// The main server: llama-tiny-tok with tight limits, started once.
ServerProcess& llama_server() {
  static ServerProcess s("llama", {"--model", fixture("llama-tiny-tok"), "--max-tokens", "40", "--max-context", "60",
                                   "--max-body", "100000", "--timeout", "2", "--max-concurrent", "4"});
  return s;
}

json post_json(ServerProcess& s, const std::string& path, const json& body, int expect_status) {
  auto c = s.client();
  auto res = c.Post(path.c_str(), body.dump(), "application/json");
  REQUIRE(res);
  CHECK_MESSAGE(res->status == expect_status, res->body);
  return json::parse(res->body);
}

}  // namespace

TEST_CASE("hh_serve: completions equal hf_run's, greedy and seeded, text or token prompt") {
  ServerProcess& s = llama_server();
  const std::string model = "--model '" + fixture("llama-tiny-tok") + "' --prompt 'The hedgehog is'";
  const json greedy = hf_run(model + " --temperature 0 --max-new-tokens 12");
  json r = post_json(s, "/v1/completions", {{"prompt", "The hedgehog is"}, {"max_tokens", 12}, {"temperature", 0}}, 200);
  CHECK(r["object"] == "text_completion");
  CHECK(r["model"] == "llama-tiny-tok");
  CHECK(r["choices"][0]["text"] == continuation(greedy));
  CHECK(r["choices"][0]["finish_reason"] == "length");
  CHECK(r["usage"]["prompt_tokens"] == greedy["prompt_ids"].size());
  CHECK(r["usage"]["completion_tokens"] == greedy["generated_ids"].size());
  // The same prompt as token ids; echo puts the prompt in front.
  r = post_json(s, "/v1/completions", {{"prompt", greedy["prompt_ids"]}, {"max_tokens", 12}, {"temperature", 0}}, 200);
  CHECK(r["choices"][0]["text"] == continuation(greedy));
  r = post_json(s, "/v1/completions",
                {{"prompt", "The hedgehog is"}, {"max_tokens", 12}, {"temperature", 0}, {"echo", true}}, 200);
  CHECK(r["choices"][0]["text"] == greedy["text"]);
  // Sampled: the same seed, temperature, top-k and top-p draw the same tokens.
  const json sampled = hf_run(model + " --temperature 0.8 --top-k 20 --top-p 0.9 --seed 11 --max-new-tokens 12");
  r = post_json(s, "/v1/completions",
                {{"prompt", "The hedgehog is"}, {"max_tokens", 12}, {"temperature", 0.8}, {"top_k", 20}, {"top_p", 0.9},
                 {"seed", 11}},
                200);
  CHECK(r["choices"][0]["text"] == continuation(sampled));
  CHECK(r["usage"]["completion_tokens"] == sampled["generated_ids"].size());
  // A stop string ends the text before it.
  r = post_json(s, "/v1/completions",
                {{"prompt", "The hedgehog is"}, {"max_tokens", 12}, {"temperature", 0}, {"stop", {"The  The"}}}, 200);
  CHECK(r["choices"][0]["text"] == " ");
  CHECK(r["choices"][0]["finish_reason"] == "stop");
  // logprobs: one per token, the greedy token the likeliest.
  r = post_json(s, "/v1/completions",
                {{"prompt", "The hedgehog is"}, {"max_tokens", 3}, {"temperature", 0}, {"logprobs", 2}}, 200);
  CHECK(r["choices"][0]["logprobs"]["token_logprobs"].size() == 3);
  CHECK(r["choices"][0]["logprobs"]["top_logprobs"][0].size() <= 2);
  // The server's other routes.
  auto c = s.client();
  auto health = c.Get("/health");
  REQUIRE(health);
  CHECK(json::parse(health->body)["status"] == "ok");
  auto models = c.Get("/v1/models");
  REQUIRE(models);
  CHECK(json::parse(models->body)["data"][0]["id"] == "llama-tiny-tok");
}

TEST_CASE("hh_serve: streamed chunks concatenate to hf_run's text, one per token, then [DONE]") {
  ServerProcess& s = llama_server();
  const json greedy =
      hf_run("--model '" + fixture("llama-tiny-tok") + "' --prompt 'The hedgehog is' --temperature 0 --max-new-tokens 12");
  const int fd = connect_to(s.port());
  send_all(fd, post_request("/v1/completions", json{{"prompt", "The hedgehog is"},
                                                    {"max_tokens", 12},
                                                    {"temperature", 0},
                                                    {"stream", true},
                                                    {"stream_options", {{"include_usage", true}}}}
                                                   .dump()));
  const std::string response = read_some(fd, 30);
  close(fd);
  CHECK(response.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(response.find("Content-Type: text/event-stream") != std::string::npos);
  const std::vector<std::string> events = sse_data(dechunk(response));
  REQUIRE(events.size() >= 3);
  CHECK(events.back() == "[DONE]");
  std::string text;
  int token_chunks = 0;
  std::string finish;
  json usage;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json e = json::parse(events[i]);
    if (e.contains("usage")) {
      usage = e["usage"];
      continue;
    }
    text += e["choices"][0]["text"].get<std::string>();
    if (e["choices"][0]["finish_reason"].is_null()) {
      ++token_chunks;
    } else {
      finish = e["choices"][0]["finish_reason"];
    }
  }
  CHECK(text == continuation(greedy));
  CHECK(token_chunks >= 12);
  CHECK(finish == "length");
  CHECK(usage["completion_tokens"] == 12);
}

TEST_CASE("hh_serve: 16 concurrent requests share the decode batch and each equals its request alone") {
  ServerProcess s("batch", {"--model", fixture("llama-tiny-tok"), "--max-concurrent", "16"});
  std::vector<json> bodies;
  for (int i = 0; i < 16; ++i)
    bodies.push_back({{"prompt", std::string("The hedgehog is ") + std::string(static_cast<size_t>(i % 4), 'a')},
                      {"max_tokens", 6 + i % 5}, {"temperature", i % 2 ? 0.0 : 0.7}, {"seed", i}});
  std::vector<std::string> alone, together(bodies.size());
  for (const json& b : bodies) alone.push_back(post_json(s, "/v1/completions", b, 200)["choices"][0]["text"]);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < bodies.size(); ++i)
    clients.emplace_back([&, i] {
      auto c = s.client();
      auto res = c.Post("/v1/completions", bodies[i].dump(), "application/json");
      if (res && res->status == 200) together[i] = json::parse(res->body)["choices"][0]["text"];
    });
  for (std::thread& t : clients) t.join();
  for (size_t i = 0; i < bodies.size(); ++i) CHECK(together[i] == alone[i]);
  auto health = s.client().Get("/health");
  REQUIRE(health);
  const json h = json::parse(health->body);
  CHECK(h["active"] == 0);
  CHECK(h["reserved_bytes"] == 0);
  std::printf("  16 concurrent requests: largest decode batch %d\n", h["largest_batch"].get<int>());
  CHECK(s.stop(SIGTERM) == 0);
}

// The resident memory of a process, bytes.
int64_t rss_bytes(pid_t pid) {
  std::istringstream in(slurp("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;
  return 0;
}

TEST_CASE("hh_serve: 64 concurrent streaming clients all complete, each as it does alone, and nothing leaks") {
  ServerProcess s("load", {"--model", fixture("llama-tiny-tok"), "--max-concurrent", "64", "--max-tokens", "24"});
  const char* const words[] = {"The", "hedgehog", "is", "a", "small", "animal", "with", "spines", "and", "a", "snout"};
  std::vector<json> bodies;
  for (int i = 0; i < 64; ++i) {
    std::string prompt;
    for (int w = 0; w <= i % 6; ++w) prompt += std::string(w ? " " : "") + words[(i * 3 + w) % 11];
    bodies.push_back({{"prompt", prompt}, {"max_tokens", 8 + i % 16}, {"temperature", 0}});
  }
  std::vector<std::string> alone;
  for (const json& b : bodies) alone.push_back(post_json(s, "/v1/completions", b, 200)["choices"][0]["text"]);
  const int64_t rss_before = rss_bytes(s.pid());
  std::vector<std::string> streamed(bodies.size());
  std::vector<int> done_events(bodies.size(), 0);
  const auto t0 = Clock::now();
  std::vector<std::thread> clients;
  for (size_t i = 0; i < bodies.size(); ++i)
    clients.emplace_back([&, i] {
      json b = bodies[i];
      b["stream"] = true;
      const int fd = connect_to(s.port());
      send_all(fd, post_request("/v1/completions", b.dump()));
      const std::string response = read_some(fd, 120);
      close(fd);
      for (const std::string& e : sse_data(dechunk(response))) {
        if (e == "[DONE]") {
          ++done_events[i];
          continue;
        }
        const json j = json::parse(e, nullptr, false);
        if (j.is_object() && j.contains("choices") && !j["choices"].empty())
          streamed[i] += j["choices"][0]["text"].get<std::string>();
      }
    });
  for (std::thread& t : clients) t.join();
  const double seconds = seconds_since(t0);
  int equal = 0;
  for (size_t i = 0; i < bodies.size(); ++i) {
    CAPTURE(bodies[i].dump());
    CHECK(done_events[i] == 1);
    CHECK(streamed[i] == alone[i]);
    equal += streamed[i] == alone[i];
  }
  auto health = s.client().Get("/health");
  REQUIRE(health);
  const json h = json::parse(health->body);
  CHECK(h["active"] == 0);
  CHECK(h["reserved_bytes"] == 0);
  const int64_t rss_after = rss_bytes(s.pid());
  // Bounded: the 64 decode states of this model are a few hundred KiB; the rest is allocator and
  // thread pools (httplib's 72 workers) reused across requests.
  CHECK(rss_after - rss_before < (int64_t{64} << 20));
  std::printf("  64 streaming clients: %d/64 equal to alone, %.2f s, largest batch %d, RSS %.1f -> %.1f MiB\n", equal,
              seconds, h["largest_batch"].get<int>(), static_cast<double>(rss_before) / (1 << 20),
              static_cast<double>(rss_after) / (1 << 20));
  CHECK(s.stop(SIGTERM) == 0);
}

TEST_CASE("hh_serve: chat completions through the folder's chat template, whole and streamed") {
  // llama-tiny-tok with a chat template in its tokenizer_config.json.
  const std::string folder = scratch().path + "/llama-chat";
  std::system(("cp -r '" + fixture("llama-tiny-tok") + "' '" + folder + "'").c_str());
  std::ofstream(folder + "/tokenizer_config.json")
      << json{{"bos_token", "<s>"},
              {"eos_token", "</s>"},
              {"chat_template", "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n"
                                "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"}}
             .dump();
  ServerProcess s("chat", {"--model", folder});
  const json messages = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "The hedgehog is"}}};
  const json whole = post_json(s, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}}, 200);
  CHECK(whole["object"] == "chat.completion");
  CHECK(whole["choices"][0]["message"]["role"] == "assistant");
  CHECK(whole["usage"]["prompt_tokens"] == 31);  // transformers' apply_chat_template ids (test_chat_template.cpp)
  CHECK(whole["usage"]["completion_tokens"] == 8);
  const int fd = connect_to(s.port());
  send_all(fd, post_request("/v1/chat/completions",
                            json{{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}, {"stream", true}}.dump()));
  const std::vector<std::string> events = sse_data(dechunk(read_some(fd, 30)));
  close(fd);
  REQUIRE(events.size() >= 3);
  CHECK(events.back() == "[DONE]");
  const json first = json::parse(events[0]);
  CHECK(first["object"] == "chat.completion.chunk");
  CHECK(first["choices"][0]["delta"]["role"] == "assistant");
  std::string text, finish;
  for (size_t i = 1; i + 1 < events.size(); ++i) {
    const json e = json::parse(events[i]);
    const json& delta = e["choices"][0]["delta"];
    if (delta.contains("content")) text += delta["content"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  CHECK(text == whole["choices"][0]["message"]["content"].get<std::string>());
  CHECK(finish == "length");
  auto health = s.client().Get("/health");
  REQUIRE(health);
  CHECK(json::parse(health->body)["chat_template"] == true);
  CHECK(s.stop(SIGTERM) == 0);
}

TEST_CASE("hh_serve: hostile requests get OpenAI errors with the right status and never stop the server") {
  ServerProcess& s = llama_server();
  struct Case {
    std::string name, method, path, body;
    int status;
    std::string says;
  };
  const std::string long_prompt = [] {
    std::string p;
    for (int i = 0; i < 40; ++i) p += "hedgehog ";
    return p;
  }();
  const std::vector<Case> cases = {
      {"bad JSON", "POST", "/v1/completions", "{\"prompt\": \"a\",", 400, "not valid JSON"},
      {"wrong type", "POST", "/v1/completions", R"({"prompt":"a","max_tokens":"many"})", 400, "must be an integer"},
      {"prompt of wrong type", "POST", "/v1/completions", R"({"prompt":{"a":1}})", 400, "'prompt' must be"},
      {"negative temperature", "POST", "/v1/completions", R"({"prompt":"a","temperature":-1})", 400, "temperature"},
      {"max_tokens above --max-tokens", "POST", "/v1/completions", R"({"prompt":"a","max_tokens":1000000})", 400,
       "must be in [0, 40]"},
      {"prompt beyond --max-context", "POST", "/v1/completions", json{{"prompt", long_prompt}}.dump(), 400,
       "maximum context length is 60"},
      {"token id outside the vocabulary", "POST", "/v1/completions", R"({"prompt":[1,99999]})", 400, "vocabulary"},
      {"n = 2", "POST", "/v1/completions", R"({"prompt":"a","n":2})", 400, "not supported yet"},
      {"unknown field", "POST", "/v1/completions", R"({"prompt":"a","frobnicate":true})", 400, "Unrecognized"},
      {"unknown model", "POST", "/v1/completions", R"({"prompt":"a","model":"gpt-4"})", 404, "does not exist"},
      {"unknown route", "GET", "/v1/nope", "", 404, "Unknown request URL"},
      {"chat without a template", "POST", "/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}]})",
       400, "no chat template"},
      {"chat message of wrong type", "POST", "/v1/chat/completions", R"({"messages":[{"role":"user","content":7}]})",
       400, "messages[0].content"},
      {"embeddings on a decoder", "POST", "/v1/embeddings", R"({"input":"a"})", 400, "is a decoder"},
      {"body beyond --max-body", "POST", "/v1/completions", std::string(200000, ' '), 413, "--max-body"},
      {"10 MB body", "POST", "/v1/completions", "{\"prompt\":\"" + std::string(10 << 20, 'a') + "\"}", 413, "--max-body"},
  };
  auto c = s.client();
  for (const Case& k : cases) {
    CAPTURE(k.name);
    auto res = k.method == "GET" ? c.Get(k.path.c_str()) : c.Post(k.path.c_str(), k.body, "application/json");
    REQUIRE(res);
    CHECK(res->status == k.status);
    const json e = json::parse(res->body, nullptr, false);
    REQUIRE(e.is_object());
    REQUIRE(e.contains("error"));
    CHECK(e["error"]["message"].get<std::string>().find(k.says) != std::string::npos);
    CHECK(e["error"].contains("type"));
    CHECK(e["error"].contains("param"));
    CHECK(e["error"].contains("code"));
    std::printf("  %-34s -> %d %s\n", k.name.c_str(), res->status, e["error"]["message"].get<std::string>().substr(0, 70).c_str());
  }
  // Half a request, then silence: the server answers others meanwhile and drops it after its read
  // timeout (--timeout 2).
  const int fd = connect_to(s.port());
  send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\":");
  json r = post_json(s, "/v1/completions", {{"prompt", "a"}, {"max_tokens", 2}}, 200);
  CHECK(r["usage"]["completion_tokens"].get<int>() >= 1);
  bool closed = false;
  const auto t0 = Clock::now();
  const std::string answer = read_some(fd, 6, "\r\n\r\n");
  const double answered_s = seconds_since(t0);
  CHECK(answer.rfind("HTTP/1.1 400", 0) == 0);  // after the read timeout: the request is incomplete
  CHECK(answered_s < 4);
  read_some(fd, 10, "", &closed);  // then the connection goes
  close(fd);
  CHECK(closed);
  std::printf("  %-34s -> 400 after %.1f s, closed after %.1f s\n", "half a request, then stall", answered_s,
              seconds_since(t0));
  // Still serving.
  r = post_json(s, "/v1/completions", {{"prompt", "The hedgehog is"}, {"max_tokens", 3}, {"temperature", 0}}, 200);
  CHECK(r["usage"]["completion_tokens"] == 3);
  auto health = c.Get("/health");
  REQUIRE(health);
  CHECK(json::parse(health->body)["active"] == 0);
}

TEST_CASE("hh_serve: 503 when full, a disconnect frees its slot, a deadline ends a generation, SIGTERM mid-stream") {
  // 100 ms per token: a request runs long enough to be seen running.
  ServerProcess s("slow", {"--model", fixture("llama-tiny-tok"), "--max-concurrent", "1", "--timeout", "1.5"}, "100");
  const std::string stream_body =
      json{{"prompt", "The hedgehog is"}, {"max_tokens", 40}, {"temperature", 0}, {"stream", true}}.dump();
  int fd = connect_to(s.port());
  send_all(fd, post_request("/v1/completions", stream_body));
  CHECK(read_some(fd, 10, "data: ").find("data: ") != std::string::npos);  // running
  post_json(s, "/v1/completions", {{"prompt", "a"}, {"max_tokens", 1}}, 503);
  auto c = s.client();
  CHECK(json::parse(c.Get("/health")->body)["active"] == 1);
  close(fd);  // the client goes away mid-stream
  auto t0 = Clock::now();
  while (json::parse(c.Get("/health")->body)["active"] != 0 && seconds_since(t0) < 5)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(json::parse(c.Get("/health")->body)["active"] == 0);
  CHECK(seconds_since(t0) < 2);
  t0 = Clock::now();
  while (s.log().find("ended client gone") == std::string::npos && seconds_since(t0) < 5)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(s.log().find("ended client gone") != std::string::npos);
  // --timeout 1.5: a 40-token request at 100 ms a token stops after about 15 tokens.
  json r = post_json(s, "/v1/completions", {{"prompt", "The hedgehog is"}, {"max_tokens", 40}, {"temperature", 0}}, 200);
  CHECK(r["choices"][0]["finish_reason"] == "length");
  CHECK(r["usage"]["completion_tokens"].get<int>() < 30);
  CHECK(s.log().find("ended timeout") != std::string::npos);
  // SIGTERM while a stream runs: the stream ends, the server exits 0.
  fd = connect_to(s.port());
  send_all(fd, post_request("/v1/completions", stream_body));
  CHECK(read_some(fd, 10, "data: ").find("data: ") != std::string::npos);
  t0 = Clock::now();
  CHECK(s.stop(SIGTERM) == 0);
  CHECK(seconds_since(t0) < 5);
  close(fd);
  CHECK(s.log().find("hh_serve: stopped (SIGTERM)") != std::string::npos);
  CHECK(s.log().find("ended shutdown") != std::string::npos);
}

TEST_CASE("hh_serve: embeddings equal sentence-transformers' (st-tiny-mean); SIGINT stops it") {
  ServerProcess s("embed", {"--model", fixture("st-tiny-mean")});
  const json expected = json::parse(slurp(fixture("st-tiny-mean") + "/expected.json"));
  const json r = post_json(s, "/v1/embeddings", {{"input", expected["texts"]}, {"model", "st-tiny-mean"}}, 200);
  REQUIRE(r["data"].size() == expected["texts"].size());
  double worst = 0;
  for (size_t i = 0; i < r["data"].size(); ++i) {
    CHECK(r["data"][i]["index"] == i);
    for (size_t k = 0; k < r["data"][i]["embedding"].size(); ++k)
      worst = std::max(worst, std::abs(r["data"][i]["embedding"][k].get<double>() - expected["embeddings"][i][k].get<double>()));
  }
  CHECK(worst < 2e-6);
  const json one = post_json(s, "/v1/embeddings", {{"input", expected["texts"][0]}}, 200);
  CHECK(one["data"].size() == 1);
  post_json(s, "/v1/completions", {{"prompt", "a"}}, 400);
  CHECK(s.stop(SIGINT) == 0);
  CHECK(s.log().find("hh_serve: stopped (SIGINT)") != std::string::npos);
}

TEST_CASE("hh_serve --weights int8: completions equal hf_run --weights int8's, alone and batched") {
  ServerProcess s("int8", {"--model", fixture("llama-tiny-tok"), "--weights", "int8"});
  const std::string model = "--model '" + fixture("llama-tiny-tok") + "' --weights int8 --temperature 0";
  const json greedy = hf_run(model + " --prompt 'The hedgehog is' --max-new-tokens 12");
  CHECK(greedy["generated_ids"].size() == 12);
  const json r = post_json(s, "/v1/completions", {{"prompt", "The hedgehog is"}, {"max_tokens", 12}, {"temperature", 0}}, 200);
  CHECK(r["choices"][0]["text"] == continuation(greedy));
  // Four at once share the decode batch: int8 rows are exact int32 sums, so each equals its request alone.
  std::vector<std::thread> clients;
  std::vector<json> got(4);
  for (size_t i = 0; i < got.size(); ++i)
    clients.emplace_back([&, i] {
      got[i] = post_json(s, "/v1/completions", {{"prompt", "The hedgehog is"}, {"max_tokens", 12}, {"temperature", 0}},
                         200);
    });
  for (auto& t : clients) t.join();
  for (const json& g : got) CHECK(g["choices"][0]["text"] == continuation(greedy));
  CHECK(s.stop(SIGINT) == 0);
  CHECK(s.log().find(", int8 weights) on http://") != std::string::npos);  // it did load int8
}

TEST_CASE("hh_serve: the main server stops on SIGTERM with exit 0 and logged every request") {
  ServerProcess& s = llama_server();
  CHECK(s.stop(SIGTERM) == 0);
  const std::string log = s.log();
  CHECK(log.find("req cmpl-1 POST /v1/completions 200: prompt 10 tokens, completion 12 tokens, first token") !=
        std::string::npos);
  CHECK(log.find(" 413: ") != std::string::npos);
  CHECK(log.find("hh_serve: stopped (SIGTERM)") != std::string::npos);
}
