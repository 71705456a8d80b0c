// hh_serve: an OpenAI-compatible HTTP server for an HF model folder (serve/): /v1/completions
// (streamed or not) for decoders, /v1/embeddings for sentence-transformers encoders, /v1/models,
// /health. Flags here, the server in serve::serve.
#include <cstdlib>
#include <filesystem>
#include <string>

#include "cli/app.h"
#include "cli/flags.h"
#include "nn/models/hf_int8.h"
#include "serve/server.h"

using namespace hh;

namespace {

// "1048576", "512MiB", "2GiB", "1.5G" -> bytes; an error names the flag.
int64_t parse_bytes(const cli::Flags& f, const std::string& flag) {
  const std::string text = f.str(flag);
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(text, &used);
  } catch (...) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "K" || unit == "KiB") scale = 1024.0;
  else if (unit == "M" || unit == "MiB") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB") scale = 1024.0 * 1024 * 1024;
  HH_CHECK(used > 0 && scale > 0 && x >= 0 && x * scale < 9e18, "flag --", flag, ": expected bytes or a size such ",
           "as 512MiB or 2GiB, got '", text, "'");
  return static_cast<int64_t>(x * scale);
}

int run(int argc, char** argv) {
  cli::Flags f("hh_serve",
                "hh_serve: serves an HF model folder over HTTP with OpenAI's API: POST /v1/completions (decoders;\n"
                "\"stream\": true for server-sent events), POST /v1/embeddings (sentence-transformers encoders),\n"
                "GET /v1/models, GET /health. SIGINT or SIGTERM stop it (exit 0).");
  f.add("model", "", "HF model folder with its tokenizer (what hf_run reads)");
  f.add("host", "127.0.0.1", "address to listen on (0.0.0.0: every interface)");
  f.add("port", "8080", "TCP port (0: any free port, named on the start line)");
  f.add("max-concurrent", "4", "requests admitted at once, running or waiting for the model (503 beyond)");
  f.add("max-context", "0", "most tokens a request may hold, prompt + max_tokens (0: the model's positions)");
  f.add("max-tokens", "0", "largest max_tokens a request may ask for (0: --max-context)");
  f.add("max-body", "1048576", "largest request body in bytes (413 beyond)");
  f.add("max-memory", "0", "decode-state memory the running requests may hold together (KV caches, linear\n"
        "states), in bytes or with a unit (512MiB, 2GiB); a request reserves what prompt + max_tokens\n"
        "can reach: 400 when it can never fit, 503 while others hold it (0: a quarter of the RAM)");
  f.add("prefix-cache", "0", "bytes of the prefix state cache (a shared system prompt is prefilled once and its\n"
        "state reused; 0: off); with it on, prompts are prefilled in --prefix-chunk segments");
  f.add("prefix-chunk", "256", "tokens between the prefix cache's saved states");
  f.add("timeout", "600", "seconds a request may generate (then it ends, finish_reason length); a client that\n"
        "                       stalls while sending a request is dropped after min(this, 30) s");
  f.add("weights", "f32", "every Linear's weights: f32, int8 (per-channel symmetric) or bf16, prepared at load\n"
        "                       (CPU); a quantized folder (hf_run --save-quantized) runs in int8");
  cli::CommonFlagSpec common;
  common.precision = false;
  common.seed = false;
  common.threads_help = "CPU threads of each forward (0 = all cores)";
  cli::add_common_flags(f, common);
  if (!f.parse(argc, argv)) return 0;

  serve::ServeOptions o;
  o.host = f.str("host");
  HH_CHECK(!o.host.empty(), "--host: empty");
  o.port = static_cast<int>(f.integer("port", 0, 65535));
  o.max_body = f.integer("max-body", 1, int64_t{1} << 40);
  serve::EngineOptions& e = o.engine;
  e.folder = f.str("model");
  HH_CHECK(!e.folder.empty(), "--model is required: no model folder given (see --help)");
  e.max_concurrent = f.integer("max-concurrent", 1, 4096);
  e.max_context = f.integer("max-context", 0, int64_t{1} << 30);
  e.max_tokens = f.integer("max-tokens", 0, int64_t{1} << 30);
  HH_CHECK(e.max_context == 0 || e.max_tokens <= e.max_context, "--max-tokens ", e.max_tokens,
           " exceeds --max-context ", e.max_context);
  e.timeout_s = f.number("timeout", 0.001, 1e9);
  e.max_memory = parse_bytes(f, "max-memory");
  e.prefix_cache_bytes = parse_bytes(f, "prefix-cache");
  e.prefix_chunk = f.integer("prefix-chunk", 1, 1 << 20);
  const cli::CommonFlags c = cli::read_common_flags(f, common);
  e.device = c.device;
  HH_CHECK(std::filesystem::is_directory(e.folder), "--model ", e.folder, ": not a folder");  // before reading it
  e.weights = nn::folder_weights(e.folder, cli::parse_weights_flag(f.str("weights")), f.given("weights"), "--weights");
  e.threads = cli::apply_threads(c.threads);
  if (const char* d = std::getenv("HH_SERVE_TEST_TOKEN_DELAY_MS")) e.token_delay_ms = std::atoll(d);
  return serve::serve(o);
}

}  // namespace

int main(int argc, char** argv) { return hh::cli::run_main(argc, argv, run); }
