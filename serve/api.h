// The OpenAI API's shapes as plain functions, testable without sockets: the bodies of
// POST /v1/completions and POST /v1/embeddings parsed and checked into structs (every bad field
// an ApiError naming it), and the JSON of responses, stream chunks, usage and errors.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "nn/models/generate.h"

namespace hh::serve {

using json = nlohmann::json;

// A request the server refuses, sent as OpenAI's error object with an HTTP status: 400 bad JSON
// or field, 404 unknown route or model, 413 body too large, 503 full or shutting down.
struct ApiError : std::runtime_error {
  ApiError(int status, const std::string& message, std::string param = "", std::string code = "");
  int status;
  std::string type;   // OpenAI's "type": invalid_request_error (4xx) or server_error (5xx)
  std::string param;  // the request field at fault ("" -> null)
  std::string code;   // a short code ("" -> null): model_not_found, unknown_url, ...
};

// {"error": {"message", "type", "param", "code"}}.
json error_body(const ApiError& e);
// The error of a status that cpp-httplib decided itself (404 no route, 413, 400 unparsable).
ApiError http_status_error(int status, const std::string& method, const std::string& path);

// What the server allows one request (its flags).
struct Limits {
  int64_t max_context = 0;  // prompt + max_tokens, tokens (<= the model's positions)
  int64_t max_tokens = 0;   // max_tokens
};

struct CompletionRequest {
  std::string model;               // "" when not given (any is fine then)
  bool prompt_is_text = true;
  std::string prompt_text;         // prompt_is_text
  std::vector<int64_t> prompt_ids; // !prompt_is_text: the ids as given (checked against the vocabulary later)
  int64_t max_tokens = 16;         // OpenAI's default
  nn::SamplingOptions sampling;    // temperature 1, top_p 1, top_k 0 (all), seed: given or random
  std::vector<std::string> stop;   // up to 4, none empty
  bool echo = false;
  int64_t logprobs = -1;           // -1: none; 0..5: the chosen token's and that many alternatives
  bool stream = false;
  bool include_usage = false;      // stream_options.include_usage: a last chunk with usage
  bool ignore_eos = false;         // vLLM's extension: generate max_tokens even past end of sequence
  bool chat = false;               // a chat completion: `messages` rendered by the folder's chat template
  json messages;                   // chat: [{"role", "content"[, "name"]}], content a string
};

// The body of POST /v1/completions -> the request. Bad JSON, a field of the wrong type or out of
// range (temperature < 0, max_tokens above limits.max_tokens, n > 1, ...) and unknown fields are
// ApiErrors (400) naming the field. The prompt's length is checked once it is tokenized
// (check_context).
CompletionRequest parse_completion_request(const std::string& body, const Limits& limits);
// The body of POST /v1/chat/completions -> the request (chat = true, messages checked: a non-empty
// list of {role, content[, name]} with string content or text parts). max_completion_tokens or
// max_tokens; logprobs, tools and response formats other than text are 400s that say so.
CompletionRequest parse_chat_request(const std::string& body, const Limits& limits);
// A prompt of `prompt_tokens` plus max_tokens must fit in limits.max_context (400 otherwise).
void check_context(const CompletionRequest& r, int64_t prompt_tokens, const Limits& limits);
// A named model must be the one served (404 model_not_found otherwise).
void check_model(const std::string& requested, const std::string& served);

struct EmbeddingRequest {
  std::string model;
  std::vector<std::string> input;  // one text or several, none empty
};
EmbeddingRequest parse_embedding_request(const std::string& body);

// One token's log-probabilities (OpenAI's legacy completions "logprobs" object, per token).
struct TokenLogprob {
  std::string token;                                 // the token's own text
  double logprob = 0.0;                              // log p(token) under the model (temperature 1)
  std::vector<std::pair<std::string, double>> top;  // the most likely tokens, best first
};
// log p of `chosen` and the `top` most likely tokens from a row of logits.
TokenLogprob token_logprob(const std::vector<double>& logits, int64_t chosen, int64_t top,
                           const std::function<std::string(int64_t)>& token_text);
// {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; offsets count from `offset0`.
json logprobs_json(const std::vector<TokenLogprob>& lps, size_t offset0);
// Chat's form: {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob",
// "bytes"}, ...]}, ...]}, bytes the UTF-8 bytes of the token's text.
json chat_logprobs_json(const std::vector<TokenLogprob>& lps);

// The end of a generation, as the response says it.
struct Completion {
  std::string text;           // echo (when asked) + the completion
  std::string finish_reason;  // "stop" (end of sequence or a stop string) or "length"
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::vector<TokenLogprob> logprobs;  // with logprobs >= 0
  bool want_logprobs = false;
  size_t logprob_offset = 0;  // where the completion starts in text (the echo's length)
};

json usage_json(int64_t prompt_tokens, int64_t completion_tokens);
// The "text_completion" object of a whole response.
json completion_response(const std::string& id, int64_t created, const std::string& model, const Completion& c);
// One streamed chunk: its text (and logprobs), finish_reason "" -> null.
json completion_chunk(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                      const std::string& finish_reason, const json& logprobs = nullptr);
// The "chat.completion" object of a whole chat response (the completion as the assistant's message).
json chat_response(const std::string& id, int64_t created, const std::string& model, const Completion& c);
// One "chat.completion.chunk": its delta ({"role": "assistant", "content": ""} first, then
// {"content": text}, {} with the finish_reason last), with its tokens' logprobs (chat's form) or null.
json chat_chunk(const std::string& id, int64_t created, const std::string& model, const json& delta,
                const std::string& finish_reason, const json& logprobs = nullptr);
// A server-sent event carrying `data` ("data: ...\n\n").
std::string sse_event(const std::string& data);
json models_response(const std::string& model, int64_t created);
// vectors (one per input, in order) -> the "list" of "embedding" objects with usage.
json embeddings_response(const std::string& model, const std::vector<std::vector<float>>& vectors,
                         int64_t prompt_tokens);

}  // namespace hh::serve
