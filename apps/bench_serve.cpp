// bench_serve: hh_serve under concurrent load. For each --model folder it starts hh_serve (the
// binary beside this one) on a free port, then for each --concurrency C sends C streamed
// completions at once, each a --prompt-tokens prompt of token ids and --new-tokens new tokens
// (ignore_eos), and measures the generated tokens per second of the whole batch, each request's
// time to first token, and the memory per request: the server's resident memory at its peak during
// the level minus its idle size, over C (and the engine's own decode-state reservation from
// /health). Writes a markdown table to stdout and --json.
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/app.h"
#include "apps/kit/bench_stats.h"
#include "cli/flags.h"
#include "core/atomic_file.h"

using namespace hh;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The resident memory of a process, bytes (0 when it cannot be read).
int64_t rss_bytes(pid_t pid) {
  std::istringstream in(slurp("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;
  return 0;
}

// hh_serve on a free port over one folder; stopped (SIGTERM) when destroyed.
class Server {
 public:
  Server(const std::string& binary, const std::string& folder, int threads, int64_t max_concurrent)
      : log_("/tmp/bench_serve_" + std::to_string(getpid()) + ".log") {
    std::fflush(stdout);  // the child must not write this process's buffered output again
    pid_ = fork();
    if (pid_ == 0) {
      freopen(log_.c_str(), "w", stdout);
      freopen(log_.c_str(), "a", stderr);
      const std::string t = std::to_string(threads), c = std::to_string(max_concurrent);
      execl(binary.c_str(), binary.c_str(), "--model", folder.c_str(), "--port", "0", "--threads", t.c_str(),
            "--max-concurrent", c.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    const auto t0 = Clock::now();
    while (since(t0) < 300) {
      const std::string text = slurp(log_);
      const size_t at = text.find("on http://127.0.0.1:");
      if (at != std::string::npos) {
        port_ = std::atoi(text.c_str() + at + 20);
        return;
      }
      int status = 0;
      HH_CHECK(waitpid(pid_, &status, WNOHANG) == 0, "bench_serve: hh_serve exited while starting on ", folder, ":\n",
               text);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    fail(str("bench_serve: hh_serve did not start on ", folder, " within 300 s"));
  }
  ~Server() {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    std::remove(log_.c_str());
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }

 private:
  std::string log_;
  pid_t pid_ = -1;
  int port_ = 0;
};

struct Level {
  int64_t concurrency = 0, completed = 0, tokens = 0;
  double seconds = 0, tokens_per_second = 0, ttft_p50 = 0, ttft_p90 = 0, rss_idle_mib = 0, rss_peak_mib = 0,
         mib_per_request = 0, reserved_mib_per_request = 0;
  std::string failure;  // what one failed request got
};

// One streamed completion: its time to first token and the tokens received (one SSE chunk each).
void one_request(int port, const std::string& body, double& ttft, int64_t& tokens, bool& ok, std::string& why) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(3600, 0);
  const auto t0 = Clock::now();
  ttft = -1;
  tokens = 0;
  std::string buffer;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    for (size_t at; (at = buffer.find("\n\n")) != std::string::npos; buffer.erase(0, at + 2)) {
      const std::string event = buffer.substr(0, at);
      if (event.rfind("data: {", 0) != 0) continue;
      const json e = json::parse(event.substr(6), nullptr, false);
      if (!e.is_object() || !e.contains("choices") || e["choices"].empty() ||
          !e["choices"][0]["finish_reason"].is_null())
        continue;
      if (ttft < 0) ttft = since(t0);
      ++tokens;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  ok = c.send(req, res, error) && res.status == 200;
  if (!ok) why = str("HTTP ", res.status, " ", httplib::to_string(error), " ", buffer.substr(0, 200));
}

Level run_level(const Server& s, int64_t concurrency, int64_t prompt_tokens, int64_t new_tokens, int64_t vocab,
                uint64_t seed) {
  Level L;
  L.concurrency = concurrency;
  const int64_t idle = rss_bytes(s.pid());
  std::vector<double> ttft(static_cast<size_t>(concurrency));
  std::vector<int64_t> tokens(static_cast<size_t>(concurrency));
  std::vector<char> ok(static_cast<size_t>(concurrency));
  std::vector<std::string> why(static_cast<size_t>(concurrency));
  std::atomic<bool> running{true};
  std::atomic<int64_t> peak{idle}, reserved{0};
  std::thread watcher([&] {  // the server's resident memory and the engine's reservation, sampled
    httplib::Client c("127.0.0.1", s.port());
    while (running) {
      peak = std::max<int64_t>(peak, rss_bytes(s.pid()));
      if (auto h = c.Get("/health"))
        reserved = std::max<int64_t>(reserved, json::parse(h->body, nullptr, false).value("reserved_bytes", int64_t{0}));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  // Every body made before the clock starts: on a machine the server keeps busy, a client thread
  // must only connect and send.
  std::mt19937_64 g(seed);
  std::vector<json> bodies;
  for (int64_t i = 0; i < concurrency; ++i) {
    std::vector<int64_t> prompt(static_cast<size_t>(prompt_tokens));
    for (int64_t& id : prompt) id = static_cast<int64_t>(g() % static_cast<uint64_t>(vocab));
    bodies.push_back({{"prompt", prompt}, {"max_tokens", new_tokens}, {"temperature", 0}, {"ignore_eos", true},
                      {"stream", true}});
  }
  const auto t0 = Clock::now();
  std::vector<std::thread> clients;
  for (int64_t i = 0; i < concurrency; ++i) {
    clients.emplace_back([&, i, body = bodies[static_cast<size_t>(i)].dump()] {
      bool good = false;
      one_request(s.port(), body, ttft[static_cast<size_t>(i)], tokens[static_cast<size_t>(i)], good,
                  why[static_cast<size_t>(i)]);
      ok[static_cast<size_t>(i)] = good;
    });
  }
  for (std::thread& t : clients) t.join();
  L.seconds = since(t0);
  running = false;
  watcher.join();
  std::vector<double> firsts;
  for (int64_t i = 0; i < concurrency; ++i) {
    if (!ok[static_cast<size_t>(i)]) L.failure = why[static_cast<size_t>(i)];
    if (ok[static_cast<size_t>(i)]) {
      ++L.completed;
      L.tokens += tokens[static_cast<size_t>(i)];
      firsts.push_back(ttft[static_cast<size_t>(i)]);
    }
  }
  L.tokens_per_second = L.tokens / L.seconds;
  if (!firsts.empty()) {
    std::sort(firsts.begin(), firsts.end());
    L.ttft_p50 = apps::median(firsts);
    L.ttft_p90 = firsts[std::min(firsts.size() - 1, static_cast<size_t>(0.9 * static_cast<double>(firsts.size())))];
  }
  L.rss_idle_mib = static_cast<double>(idle) / (1 << 20);
  L.rss_peak_mib = static_cast<double>(peak.load()) / (1 << 20);
  L.mib_per_request = (L.rss_peak_mib - L.rss_idle_mib) / static_cast<double>(concurrency);
  L.reserved_mib_per_request = static_cast<double>(reserved.load()) / (1 << 20) / static_cast<double>(concurrency);
  return L;
}

// The folder's vocabulary size (config.json).
int64_t vocab_of(const std::string& folder) {
  const json c = json::parse(slurp(folder + "/config.json"), nullptr, false);
  HH_CHECK(c.is_object() && c.contains("vocab_size"), "--model ", folder, ": config.json has no vocab_size");
  return c["vocab_size"].get<int64_t>();
}

int run(int argc, char** argv) {
  cli::Flags f("bench_serve",
                "bench_serve: hh_serve under concurrent streamed completions: tokens/s, time to first token and\n"
                "memory per request for each folder and concurrency (the server is started here).");
  f.add("model", "", "HF model folders served in turn, a comma list");
  f.add("concurrency", "1,8,32", "concurrent requests per level, a comma list");
  f.add("prompt-tokens", "4096", "prompt length of every request, tokens (random ids)");
  f.add("new-tokens", "128", "tokens generated per request (ignore_eos)");
  f.add("threads", "2", "hh_serve's --threads");
  f.add("seed", "0", "seed of the prompts");
  f.add("json", "", "also write the results here");
  if (!f.parse(argc, argv)) return 0;
  const std::vector<std::string> folders = cli::Flags::split_list(f.str("model"));
  HH_CHECK(!folders.empty(), "--model is required: one or more folders");
  const std::vector<int64_t> levels = f.integers("concurrency", 1, 1024);
  const int64_t prompt_tokens = f.integer("prompt-tokens", 1, 1 << 20), new_tokens = f.integer("new-tokens", 1, 1 << 20);
  const int threads = static_cast<int>(f.integer("threads", 0, 1024));
  const uint64_t seed = static_cast<uint64_t>(f.integer("seed", 0));
  for (const std::string& folder : folders) vocab_of(folder);  // every folder checked before any run
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  HH_CHECK(n > 0, "bench_serve: cannot find its own path (/proc/self/exe)");
  std::string binary(self, static_cast<size_t>(n));
  binary = binary.substr(0, binary.rfind('/') + 1) + "hh_serve";
  HH_CHECK(access(binary.c_str(), X_OK) == 0, "bench_serve: ", binary, " not found (build the hh_serve target)");

  json out = {{"prompt_tokens", prompt_tokens}, {"new_tokens", new_tokens}, {"threads", threads}, {"runs", json::array()}};
  std::printf("| model | concurrent | tokens/s | TTFT p50 (s) | TTFT p90 (s) | MiB/request (RSS) | MiB/request (reserved) |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const std::string& folder : folders) {
    const int64_t vocab = vocab_of(folder);
    Server s(binary, folder, threads, *std::max_element(levels.begin(), levels.end()));
    // The folder's name, or its parent's for a run's ".../<row>/model".
    std::string name = folder;
    while (name.size() > 1 && name.back() == '/') name.pop_back();
    std::string last = name.substr(name.find_last_of('/') + 1);
    if (last == "model" && name.find('/') != std::string::npos) {
      const std::string parent = name.substr(0, name.find_last_of('/'));
      last = parent.substr(parent.find_last_of('/') + 1);
    }
    name = last;
    for (int64_t c : levels) {
      const Level L = run_level(s, c, prompt_tokens, new_tokens, vocab, seed);
      HH_CHECK(L.completed == c, "bench_serve: ", c - L.completed, " of ", c, " requests failed on ", folder, " (",
               L.failure, ")");
      std::printf("| %s | %lld | %.1f | %.3f | %.3f | %.2f | %.2f |\n", name.c_str(), static_cast<long long>(c),
                  L.tokens_per_second, L.ttft_p50, L.ttft_p90, L.mib_per_request, L.reserved_mib_per_request);
      std::fflush(stdout);
      out["runs"].push_back({{"model", folder}, {"concurrency", c}, {"tokens", L.tokens}, {"seconds", L.seconds},
                             {"tokens_per_second", L.tokens_per_second}, {"ttft_p50", L.ttft_p50},
                             {"ttft_p90", L.ttft_p90}, {"rss_idle_mib", L.rss_idle_mib}, {"rss_peak_mib", L.rss_peak_mib},
                             {"mib_per_request", L.mib_per_request},
                             {"reserved_mib_per_request", L.reserved_mib_per_request}});
    }
  }
  if (!f.str("json").empty()) write_file_atomic(f.str("json"), out.dump(2) + "\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return cli::run_main(argc, argv, run); }
