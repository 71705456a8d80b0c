#include "serve/api.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <set>

namespace hh::serve {

ApiError::ApiError(int status_, const std::string& message, std::string param_, std::string code_)
    : std::runtime_error(message),
      status(status_),
      type(status_ >= 500 ? "server_error" : "invalid_request_error"),
      param(std::move(param_)),
      code(std::move(code_)) {}

json error_body(const ApiError& e) {
  const auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return {{"error", {{"message", e.what()}, {"type", e.type}, {"param", or_null(e.param)}, {"code", or_null(e.code)}}}};
}

ApiError http_status_error(int status, const std::string& method, const std::string& path) {
  switch (status) {
    case 404: return ApiError(404, "Unknown request URL: " + method + " " + path, "", "unknown_url");
    case 413: return ApiError(413, "the request body is larger than the server's --max-body", "", "body_too_large");
    case 400: return ApiError(400, "malformed or incomplete HTTP request (a request not sent whole within the read timeout is dropped)");
    default: return ApiError(status, "HTTP error " + std::to_string(status) + " on " + method + " " + path);
  }
}

namespace {

ApiError bad(const std::string& param, const std::string& message) { return ApiError(400, message, param); }

// The body as a JSON object (400 naming what is wrong otherwise).
json parse_object(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw bad("", "the request body is not valid JSON");
  if (!j.is_object()) throw bad("", "the request body must be a JSON object");
  return j;
}

// Every key must be one of `known` (OpenAI refuses arguments it does not know, so do we).
void check_known(const json& j, const std::set<std::string>& known) {
  for (const auto& [key, value] : j.items())
    if (!known.count(key)) throw bad(key, "Unrecognized request argument supplied: " + key);
}

bool absent(const json& j, const std::string& key) { return !j.contains(key) || j.at(key).is_null(); }

double number(const json& j, const std::string& key, double def, double lo, double hi, bool lo_open = false) {
  if (absent(j, key)) return def;
  const json& v = j.at(key);
  if (!v.is_number()) throw bad(key, "'" + key + "' must be a number, got " + v.dump());
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || (lo_open && x == lo) || x > hi) {
    char range[96];
    std::snprintf(range, sizeof range, "%s%g, %g]", lo_open ? "(" : "[", lo, hi);
    throw bad(key, "'" + key + "' must be in " + range + ", got " + v.dump());
  }
  return x;
}

int64_t integer(const json& j, const std::string& key, int64_t def, int64_t lo, int64_t hi) {
  if (absent(j, key)) return def;
  const json& v = j.at(key);
  if (!v.is_number_integer()) throw bad(key, "'" + key + "' must be an integer, got " + v.dump());
  const bool huge = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX);
  const int64_t x = huge ? INT64_MAX : v.get<int64_t>();
  if (huge || x < lo || x > hi)
    throw bad(key, "'" + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v.dump());
  return x;
}

bool boolean(const json& j, const std::string& key, bool def) {
  if (absent(j, key)) return def;
  if (!j.at(key).is_boolean()) throw bad(key, "'" + key + "' must be true or false, got " + j.at(key).dump());
  return j.at(key).get<bool>();
}

std::string string(const json& j, const std::string& key) {
  if (absent(j, key)) return "";
  if (!j.at(key).is_string()) throw bad(key, "'" + key + "' must be a string, got " + j.at(key).dump());
  return j.at(key).get<std::string>();
}

// A field accepted only at its neutral value (the OpenAI client may send it; nothing else is done).
void only_neutral(const json& j, const std::string& key, const json& neutral, const std::string& what) {
  if (!absent(j, key) && j.at(key) != neutral) throw bad(key, "'" + key + "' is not supported yet (" + what + ")");
}

bool is_id_list(const json& v) {
  return v.is_array() && !v.empty() && std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_number_integer(); });
}

void read_prompt(const json& j, CompletionRequest& r) {
  if (absent(j, "prompt")) throw bad("prompt", "'prompt' is required (a string or a list of token ids)");
  json p = j.at("prompt");
  // A list of one prompt is that prompt; more are a batch.
  if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = p[0];
  if (p.is_string()) {
    r.prompt_text = p.get<std::string>();
    if (r.prompt_text.empty()) throw bad("prompt", "'prompt' is empty");
    return;
  }
  if (is_id_list(p)) {
    r.prompt_is_text = false;
    for (const json& x : p) {
      if (x.is_number_unsigned() ? x.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) : x.get<int64_t>() < 0)
        throw bad("prompt", "'prompt' token id " + x.dump() + " is not a token id (a non-negative integer)");
      r.prompt_ids.push_back(x.get<int64_t>());
    }
    return;
  }
  if (p.is_array() && p.size() > 1 && std::all_of(p.begin(), p.end(), [](const json& x) { return x.is_string() || is_id_list(x); }))
    throw bad("prompt", "a batch of prompts is not supported yet (send one prompt per request)");
  throw bad("prompt", "'prompt' must be a string or a list of token ids, got " + p.dump().substr(0, 80));
}

void read_stop(const json& j, CompletionRequest& r) {
  if (absent(j, "stop")) return;
  const json& s = j.at("stop");
  if (s.is_string()) {
    r.stop.push_back(s.get<std::string>());
  } else if (s.is_array() && s.size() <= 4 && std::all_of(s.begin(), s.end(), [](const json& x) { return x.is_string(); })) {
    for (const json& x : s) r.stop.push_back(x.get<std::string>());
  } else {
    throw bad("stop", "'stop' must be a string or a list of up to 4 strings, got " + s.dump().substr(0, 80));
  }
  for (const std::string& x : r.stop)
    if (x.empty()) throw bad("stop", "'stop' strings must not be empty");
}

}  // namespace

namespace {

// What completions and chat completions share: max_tokens, sampling, stop, n, streaming, penalties.
void read_generation_fields(const json& j, CompletionRequest& r, const Limits& limits, const std::string& max_key) {
  r.max_tokens = integer(j, max_key, std::min<int64_t>(16, limits.max_tokens), 0, limits.max_tokens);
  r.sampling.temperature = number(j, "temperature", 1.0, 0.0, 2.0);
  r.sampling.top_p = number(j, "top_p", 1.0, 0.0, 1.0, /*lo_open=*/true);
  r.sampling.top_k = integer(j, "top_k", 0, -1, INT64_MAX);
  if (r.sampling.top_k < 0) r.sampling.top_k = 0;  // -1: every token (vLLM's spelling)
  if (absent(j, "seed")) {
    r.sampling.seed = std::random_device{}();  // as OpenAI: unseeded requests differ
  } else {
    r.sampling.seed = static_cast<uint64_t>(integer(j, "seed", 0, INT64_MIN, INT64_MAX));
  }
  read_stop(j, r);
  if (integer(j, "n", 1, 1, INT64_MAX) > 1) throw bad("n", "'n' > 1 is not supported yet (one completion per request)");
  r.ignore_eos = boolean(j, "ignore_eos", false);
  r.stream = boolean(j, "stream", false);
  if (!absent(j, "stream_options")) {
    const json& so = j.at("stream_options");
    if (!r.stream) throw bad("stream_options", "'stream_options' is only allowed with 'stream': true");
    if (!so.is_object()) throw bad("stream_options", "'stream_options' must be an object");
    check_known(so, {"include_usage"});
    r.include_usage = boolean(so, "include_usage", false);
  }
  only_neutral(j, "presence_penalty", 0, "only 0");
  only_neutral(j, "frequency_penalty", 0, "only 0");
  only_neutral(j, "logit_bias", json::object(), "only {}");
  string(j, "user");  // accepted, unused
}

// OpenAI's messages: a non-empty list of {"role": string, "content": string or a list of
// {"type": "text", "text": ...} parts, "name": optional string}. Parts are joined with "\n" into
// one string, as vLLM does for templates that read content as a string.
json read_messages(const json& j) {
  if (absent(j, "messages")) throw bad("messages", "'messages' is required (a list of {role, content})");
  const json& ms = j.at("messages");
  if (!ms.is_array() || ms.empty()) throw bad("messages", "'messages' must be a non-empty list of {role, content}");
  json out = json::array();
  for (size_t i = 0; i < ms.size(); ++i) {
    const json& m = ms[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw bad(at, "'" + at + "' must be an object with 'role' and 'content'");
    for (const auto& [key, value] : m.items())
      if (key != "role" && key != "content" && key != "name")
        throw bad(at + "." + key, "'" + at + "." + key + "' is not supported (role, content and name are)");
    if (absent(m, "role") || !m.at("role").is_string() || m.at("role").get<std::string>().empty())
      throw bad(at + ".role", "'" + at + ".role' must be a non-empty string");
    json msg = {{"role", m.at("role")}};
    if (absent(m, "content")) throw bad(at + ".content", "'" + at + ".content' is required");
    const json& c = m.at("content");
    if (c.is_string()) {
      msg["content"] = c;
    } else if (c.is_array()) {
      std::string text;
      for (size_t k = 0; k < c.size(); ++k) {
        const json& part = c[k];
        const std::string pat = at + ".content[" + std::to_string(k) + "]";
        if (!part.is_object() || string(part, "type") != "text" || absent(part, "text") || !part.at("text").is_string())
          throw bad(pat, "'" + pat + "' must be {\"type\": \"text\", \"text\": string} (only text parts are supported)");
        text += (k ? "\n" : "") + part.at("text").get<std::string>();
      }
      msg["content"] = text;
    } else {
      throw bad(at + ".content", "'" + at + ".content' must be a string or a list of text parts, got " + c.dump().substr(0, 60));
    }
    if (!absent(m, "name")) msg["name"] = string(m, "name");
    out.push_back(msg);
  }
  return out;
}

}  // namespace

CompletionRequest parse_completion_request(const std::string& body, const Limits& limits) {
  const json j = parse_object(body);
  check_known(j, {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "n", "best_of",
                  "echo", "logprobs", "stream", "stream_options", "presence_penalty", "frequency_penalty",
                  "logit_bias", "suffix", "user", "ignore_eos"});
  CompletionRequest r;
  r.model = string(j, "model");
  read_prompt(j, r);
  read_generation_fields(j, r, limits, "max_tokens");
  if (integer(j, "best_of", 1, 1, INT64_MAX) > 1) throw bad("best_of", "'best_of' > 1 is not supported yet");
  r.echo = boolean(j, "echo", false);
  r.logprobs = integer(j, "logprobs", -1, 0, 5);
  if (r.logprobs >= 0 && r.echo)
    throw bad("logprobs", "'logprobs' with 'echo' (the prompt's log-probabilities) is not supported yet");
  only_neutral(j, "suffix", "", "only \"\"");
  return r;
}

CompletionRequest parse_chat_request(const std::string& body, const Limits& limits) {
  const json j = parse_object(body);
  check_known(j, {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed",
                  "stop", "n", "stream", "stream_options", "presence_penalty", "frequency_penalty", "logit_bias",
                  "user", "logprobs", "top_logprobs", "tools", "tool_choice", "response_format", "ignore_eos"});
  CompletionRequest r;
  r.chat = true;
  r.model = string(j, "model");
  r.messages = read_messages(j);
  if (!absent(j, "max_tokens") && !absent(j, "max_completion_tokens"))
    throw bad("max_completion_tokens", "give 'max_completion_tokens' or 'max_tokens', not both");
  read_generation_fields(j, r, limits, absent(j, "max_completion_tokens") ? "max_tokens" : "max_completion_tokens");
  // logprobs: true returns the chosen tokens' log-probabilities, top_logprobs (0-20) the most likely
  // ones beside each; top_logprobs needs logprobs, as OpenAI's API says.
  const bool want = boolean(j, "logprobs", false);
  const int64_t top = integer(j, "top_logprobs", 0, 0, 20);
  if (!want && !absent(j, "top_logprobs")) throw bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  r.logprobs = want ? top : -1;
  only_neutral(j, "tools", nullptr, "tool calls are not supported");
  only_neutral(j, "tool_choice", "none", "tool calls are not supported");
  only_neutral(j, "response_format", json{{"type", "text"}}, "only {\"type\": \"text\"}");
  return r;
}

void check_context(const CompletionRequest& r, int64_t prompt_tokens, const Limits& limits) {
  if (prompt_tokens + r.max_tokens > limits.max_context)
    throw ApiError(400,
                   "This server's maximum context length is " + std::to_string(limits.max_context) +
                       " tokens. However, you requested " + std::to_string(prompt_tokens + r.max_tokens) + " tokens (" +
                       std::to_string(prompt_tokens) + " in the prompt, " + std::to_string(r.max_tokens) +
                       " for the completion).",
                   prompt_tokens > limits.max_context ? "prompt" : "max_tokens", "context_length_exceeded");
}

void check_model(const std::string& requested, const std::string& served) {
  if (!requested.empty() && requested != served)
    throw ApiError(404, "The model '" + requested + "' does not exist (this server serves '" + served + "')", "model",
                   "model_not_found");
}

EmbeddingRequest parse_embedding_request(const std::string& body) {
  const json j = parse_object(body);
  check_known(j, {"model", "input", "encoding_format", "dimensions", "user"});
  EmbeddingRequest r;
  r.model = string(j, "model");
  if (absent(j, "input")) throw bad("input", "'input' is required (a string or a list of strings)");
  const json& in = j.at("input");
  if (in.is_string()) {
    r.input.push_back(in.get<std::string>());
  } else if (in.is_array() && !in.empty() && std::all_of(in.begin(), in.end(), [](const json& x) { return x.is_string(); })) {
    if (in.size() > 2048) throw bad("input", "'input' holds more than 2048 texts");
    for (const json& x : in) r.input.push_back(x.get<std::string>());
  } else if (is_id_list(in) || (in.is_array() && !in.empty() && is_id_list(in[0]))) {
    throw bad("input", "token ids as 'input' are not supported yet (send text)");
  } else {
    throw bad("input", "'input' must be a string or a non-empty list of strings, got " + in.dump().substr(0, 80));
  }
  for (const std::string& t : r.input)
    if (t.empty()) throw bad("input", "'input' texts must not be empty");
  if (!absent(j, "encoding_format") && string(j, "encoding_format") != "float")
    throw bad("encoding_format", "'encoding_format' must be \"float\" (base64 is not supported yet)");
  only_neutral(j, "dimensions", nullptr, "the model's own size only");
  string(j, "user");
  return r;
}

TokenLogprob token_logprob(const std::vector<double>& logits, int64_t chosen, int64_t top,
                           const std::function<std::string(int64_t)>& token_text) {
  const double mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (double x : logits) sum += std::exp(x - mx);
  const double log_z = mx + std::log(sum);  // log-softmax = logit - log_z
  TokenLogprob t;
  t.token = token_text(chosen);
  t.logprob = logits[static_cast<size_t>(chosen)] - log_z;
  std::vector<int64_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const auto k = static_cast<std::ptrdiff_t>(std::min<size_t>(static_cast<size_t>(top), order.size()));
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  for (std::ptrdiff_t i = 0; i < k; ++i) t.top.emplace_back(token_text(order[i]), logits[order[i]] - log_z);
  return t;
}

json logprobs_json(const std::vector<TokenLogprob>& lps, size_t offset0) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  size_t at = offset0;
  for (const TokenLogprob& t : lps) {
    tokens.push_back(t.token);
    token_lps.push_back(t.logprob);
    json top = json::object();
    for (const auto& [text, lp] : t.top) top[text] = lp;
    tops.push_back(top);
    offsets.push_back(at);
    at += t.token.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json chat_logprobs_json(const std::vector<TokenLogprob>& lps) {
  const auto bytes = [](const std::string& text) {
    json b = json::array();
    for (unsigned char ch : text) b.push_back(static_cast<int>(ch));
    return b;
  };
  json content = json::array();
  for (const TokenLogprob& t : lps) {
    json top = json::array();
    for (const auto& [text, lp] : t.top) top.push_back({{"token", text}, {"logprob", lp}, {"bytes", bytes(text)}});
    content.push_back({{"token", t.token}, {"logprob", t.logprob}, {"bytes", bytes(t.token)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

json completion_response(const std::string& id, int64_t created, const std::string& model, const Completion& c) {
  json choice = {{"index", 0},
                 {"text", c.text},
                 {"logprobs", c.want_logprobs ? logprobs_json(c.logprobs, c.logprob_offset) : json(nullptr)},
                 {"finish_reason", c.finish_reason}};
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})},
          {"usage", usage_json(c.prompt_tokens, c.completion_tokens)}};
}

json completion_chunk(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                      const std::string& finish_reason, const json& logprobs) {
  json choice = {{"index", 0},
                 {"text", text},
                 {"logprobs", logprobs},
                 {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}};
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})}};
}

json chat_response(const std::string& id, int64_t created, const std::string& model, const Completion& c) {
  json choice = {{"index", 0},
                 {"message", {{"role", "assistant"}, {"content", c.text}}},
                 {"logprobs", c.want_logprobs ? chat_logprobs_json(c.logprobs) : json(nullptr)},
                 {"finish_reason", c.finish_reason}};
  return {{"id", id},
          {"object", "chat.completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})},
          {"usage", usage_json(c.prompt_tokens, c.completion_tokens)}};
}

json chat_chunk(const std::string& id, int64_t created, const std::string& model, const json& delta,
                const std::string& finish_reason, const json& logprobs) {
  json choice = {{"index", 0},
                 {"delta", delta},
                 {"logprobs", logprobs},
                 {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}};
  return {{"id", id},
          {"object", "chat.completion.chunk"},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})}};
}

std::string sse_event(const std::string& data) { return "data: " + data + "\n\n"; }

json models_response(const std::string& model, int64_t created) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "hedgehog"}}})}};
}

json embeddings_response(const std::string& model, const std::vector<std::vector<float>>& vectors,
                         int64_t prompt_tokens) {
  json data = json::array();
  for (size_t i = 0; i < vectors.size(); ++i)
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", vectors[i]}});
  return {{"object", "list"},
          {"data", data},
          {"model", model},
          {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

}  // namespace hh::serve
