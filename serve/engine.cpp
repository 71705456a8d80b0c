#include "serve/engine.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <stdexcept>
#include <filesystem>
#include <thread>

#include <unistd.h>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "core/parallel.h"
#include "nn/models/generate.h"
#include "serve/text_stream.h"

namespace hh::serve {

namespace {

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The tokenizer files load_tokenizer reads, in the folder.
// The default --max-memory: a quarter of the machine's physical memory.
int64_t default_max_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page / 4 : int64_t{1} << 32;
}

bool has_tokenizer(const std::string& folder) {
  namespace fs = std::filesystem;
  return fs::exists(folder + "/tokenizer.json") || fs::exists(folder + "/vocab.txt") ||
         (fs::exists(folder + "/vocab.json") && fs::exists(folder + "/merges.txt"));
}

}  // namespace

Engine::Engine(const EngineOptions& o) : options_(o) {
  HH_CHECK(!o.folder.empty(), "--model is required: no model folder given (see --help)");
  HH_CHECK(std::filesystem::is_directory(o.folder), "--model ", o.folder, ": not a folder");
  model_id_ = std::filesystem::path(o.folder).lexically_normal().filename().string();
  if (model_id_.empty()) model_id_ = std::filesystem::path(o.folder).lexically_normal().parent_path().filename().string();
  HH_CHECK(has_tokenizer(o.folder), "--model ", o.folder,
           ": no tokenizer in the folder (tokenizer.json, vocab.json + merges.txt, or vocab.txt); hh_serve needs one");
  nn::HFModelOptions mo;
  mo.device = o.device;
  mo.weights = o.weights;
  mo.prepare_weights = true;  // packed (or quantized) at load, not by the first request
  model_ = nn::load_hf_model(o.folder, mo);
  lm_ = dynamic_cast<nn::CausalLM*>(model_.get());
  int64_t positions = 0;
  if (lm_) {
    positions = lm_->max_positions();
  } else {
    positions = nn::text_encoder_max_positions(*model_);
    HH_CHECK(positions > 0, "--model ", o.folder, ": ", model_->architecture(),
             " is neither a decoder (completions) nor a BERT-family text encoder (embeddings)");
    embedding_ = nn::read_embedding_config(o.folder);
  }
  tok_ = data::load_tokenizer(o.folder);
  if (lm_) {
    chat_ = ChatTemplate::load(o.folder);
    // Decode memory per request, read off a two-token prefill (nn::decode_state_bytes).
    NoGradGuard ng;
    state_probe_ = lm_->start_decoding();
    lm_->prefill(from_vector(std::vector<int64_t>{0, 0}, {1, 2}, {DType::i64}).to(o.device), state_probe_);
    max_memory_ = o.max_memory > 0 ? o.max_memory : default_max_memory();
    HH_CHECK(o.prefix_cache_bytes >= 0, "--prefix-cache: expected a byte count >= 0, got ", o.prefix_cache_bytes);
    HH_CHECK(o.prefix_chunk > 0, "--prefix-chunk: expected a positive token count, got ", o.prefix_chunk);
    if (o.prefix_cache_bytes > 0) prefix_cache_ = std::make_unique<PrefixCache>(o.prefix_cache_bytes, o.prefix_chunk);
    scheduler_ = std::make_unique<DecodeScheduler>(*lm_, o.threads, model_mutex_, o.token_delay_ms);
  }
  if (lm_) eos_ = nn::stop_ids(nn::read_generation_config(o.folder), tok_->eos_id(), lm_->config());
  const int64_t model_limit = positions >= 0 ? positions : 4096;
  HH_CHECK(o.max_context <= model_limit || positions < 0, "--max-context ", o.max_context, " exceeds the model's ",
           positions, " positions");
  limits_.max_context = o.max_context > 0 ? o.max_context : model_limit;
  HH_CHECK(o.max_tokens <= limits_.max_context, "--max-tokens ", o.max_tokens, " exceeds the context of ",
           limits_.max_context, " tokens");
  limits_.max_tokens = o.max_tokens > 0 ? o.max_tokens : limits_.max_context;
}

int64_t Engine::state_bytes(int64_t tokens) const {
  return lm_ ? static_cast<int64_t>(nn::decode_state_bytes(state_probe_, tokens)) : 0;
}

std::unique_ptr<Engine::Slot> Engine::admit(const Prepared& p) {
  const int64_t bytes = state_bytes(static_cast<int64_t>(p.prompt.size()) + p.request.max_tokens);
  const auto mib = [](int64_t b) { return std::to_string((b + (1 << 20) - 1) >> 20) + " MiB"; };
  if (bytes > max_memory_)
    throw ApiError(400,
                   "this request needs " + mib(bytes) + " of decode state (prompt + max_tokens), more than the " +
                       "server's --max-memory of " + mib(max_memory_),
                   "max_tokens", "request_too_large");
  if (reserved_.fetch_add(bytes) + bytes > max_memory_) {
    reserved_ -= bytes;
    throw ApiError(503,
                   "the server is busy: its decode memory (--max-memory " + mib(max_memory_) +
                       ") is held by running requests; retry later",
                   "", "server_busy");
  }
  try {
    std::unique_ptr<Slot> slot = admit();
    slot->bytes_ = bytes;
    return slot;
  } catch (...) {
    reserved_ -= bytes;
    throw;
  }
}

std::unique_ptr<Engine::Slot> Engine::admit() {
  if (stopping_) throw ApiError(503, "the server is shutting down", "", "shutting_down");
  if (++active_ > options_.max_concurrent) {
    --active_;
    throw ApiError(503,
                   "the server is busy: " + std::to_string(options_.max_concurrent) +
                       " requests are running (--max-concurrent); retry later",
                   "", "server_busy");
  }
  return std::make_unique<Slot>(*this);
}

Engine::Prepared Engine::prepare(const CompletionRequest& r) const {
  check_model(r.model, model_id_);
  if (!lm_)
    throw ApiError(400, "'" + model_id_ + "' is a text encoder: it serves /v1/embeddings, not completions", "model",
                   "wrong_endpoint");
  Prepared p;
  p.request = r;
  if (r.chat) {
    // The conversation through the folder's chat template; its text holds the template's special
    // tokens, so none are added (as apply_chat_template(tokenize=True)).
    try {
      p.request.prompt_text = chat_.render(jinja::json::parse(r.messages.dump()), true);
    } catch (const jinja::Error& e) {
      throw ApiError(400, std::string(chat_.available() ? "the model's chat_template cannot be rendered: " : "") +
                              e.what() + (chat_.available() ? "" : "; use /v1/completions with a prompt"),
                     "messages", "chat_template_error");
    }
    for (int32_t id : tok_->encode(p.request.prompt_text, false)) p.prompt.push_back(id);
    if (p.prompt.empty()) throw ApiError(400, "the chat template rendered no tokens", "messages");
  } else if (r.prompt_is_text) {
    for (int32_t id : tok_->encode(r.prompt_text, true)) p.prompt.push_back(id);
    if (p.prompt.empty()) throw ApiError(400, "the tokenizer produced no tokens for 'prompt'", "prompt");
    if (r.echo) p.echo = r.prompt_text;
  } else {
    p.prompt = r.prompt_ids;
    for (int64_t id : p.prompt)
      if (id >= lm_->vocab_size())
        throw ApiError(400, "'prompt' token id " + std::to_string(id) + " is outside the model's vocabulary of " +
                                std::to_string(lm_->vocab_size()), "prompt");
    if (r.echo) p.echo = tok_->decode(std::vector<int32_t>(p.prompt.begin(), p.prompt.end()), true);
  }
  check_context(r, static_cast<int64_t>(p.prompt.size()), limits_);
  return p;
}

namespace {

// One completion between its HTTP thread (which waits here and writes to the client) and the model
// thread (which draws its tokens in the shared batch and queues each token's text).
struct Job {
  Job(const data::Tokenizer& tok, const CompletionRequest& r, const std::vector<int64_t>& prompt)
      : text(tok, r.stop, prompt), sampler(r.sampling) {}
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::pair<std::string, json>> events;  // text pieces (and logprobs) not yet delivered
  bool done = false;
  std::string error;
  std::atomic<bool> cancelled{false};  // the client is gone: the run ends at its next draw
  // Touched by the model thread while the run lives, read by the HTTP thread once done.
  TextStream text;
  nn::Sampler sampler;
  std::vector<TokenLogprob> logprobs;
  std::vector<double> last_logits;
  int64_t tokens = 0, last_id = -1;
  bool timed_out = false;
  std::chrono::steady_clock::time_point first;
};

}  // namespace

Completion Engine::complete(const Prepared& p, const Slot& slot, const OnText& on_text, CompletionStats& stats) {
  const CompletionRequest& r = p.request;
  Completion c;
  c.prompt_tokens = stats.prompt_tokens = static_cast<int64_t>(p.prompt.size());
  c.want_logprobs = r.logprobs >= 0;
  c.logprob_offset = p.echo.size();
  auto job = std::make_shared<Job>(*tok_, r, p.prompt);
  const auto deadline = slot.start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                         std::chrono::duration<double>(options_.timeout_s));
  const auto token_text = [this](int64_t id) { return tok_->decode({static_cast<int32_t>(id)}, false); };
  // The run's callbacks run on the model thread; they only touch the job.
  nn::GenerateOptions go;
  go.max_new_tokens = r.max_tokens;
  if (prefix_cache_)
    go.prefill = [cache = prefix_cache_.get()](nn::CausalLM& lm, const std::vector<int64_t>& prompt,
                                               nn::DecodeState& state) {
      return prefill_with_cache(lm, prompt, state, cache, cache->chunk());
    };
  // As hf_run: generation_config.json's ids, else the tokenizer's, else config.json's.
  if (!r.ignore_eos) go.eos = eos_;
  Job* j = job.get();
  if (c.want_logprobs) go.on_logits = [j](const std::vector<double>& logits) { j->last_logits = logits; };
  go.on_token = [j, &r, token_text, offset = c.logprob_offset, want = c.want_logprobs](int64_t n, int64_t id) {
    if (n == 1) j->first = std::chrono::steady_clock::now();
    j->last_id = id;
    j->tokens = n;
    json lp = nullptr;
    if (want) {
      j->logprobs.push_back(token_logprob(j->last_logits, id, r.logprobs, token_text));
      lp = r.chat ? chat_logprobs_json({j->logprobs.back()})
                  : logprobs_json({j->logprobs.back()}, offset + j->text.text().size());
    }
    std::string piece = j->text.push(id);
    {
      std::lock_guard<std::mutex> lock(j->m);
      j->events.emplace_back(std::move(piece), std::move(lp));
    }
    j->cv.notify_all();
  };
  go.should_stop = [j, deadline, this] {
    j->timed_out = j->timed_out || std::chrono::steady_clock::now() > deadline;
    return j->text.stopped() || j->cancelled || stopping_ || j->timed_out;
  };
  bool client_gone = false;
  if (r.max_tokens > 0 && !stopping_) {
    auto run = std::make_shared<nn::DecodeRun>(*lm_, p.prompt, job->sampler, go);
    scheduler_->submit(run, [job, run](const std::string& error) {  // run: kept alive until it ends
      {
        std::lock_guard<std::mutex> lock(job->m);
        job->done = true;
        job->error = error;
      }
      job->cv.notify_all();
    });
    // Deliver the pieces as they come; a failed write cancels the run (it ends at its next draw).
    std::unique_lock<std::mutex> lock(job->m);
    for (;;) {
      job->cv.wait(lock, [&] { return job->done || !job->events.empty(); });
      while (!job->events.empty()) {
        auto [piece, lp] = std::move(job->events.front());
        job->events.pop_front();
        lock.unlock();
        if (!client_gone && !on_text(piece, lp)) {
          client_gone = true;
          job->cancelled = true;
        }
        lock.lock();
      }
      if (job->done) break;
    }
    if (!job->error.empty()) throw std::runtime_error("generation failed: " + job->error);
  }
  const std::string rest = job->text.finish();
  if (!rest.empty() && !client_gone) client_gone = !on_text(rest, nullptr);
  const auto end = std::chrono::steady_clock::now();
  c.text = p.echo + job->text.text();
  c.completion_tokens = job->tokens;
  c.logprobs = std::move(job->logprobs);
  const bool eos = !r.ignore_eos && std::find(eos_.begin(), eos_.end(), job->last_id) != eos_.end();
  c.finish_reason = job->text.stopped() || eos ? "stop" : "length";
  stats.completion_tokens = c.completion_tokens;
  stats.ended = job->text.stopped() ? "stop"
                : eos               ? "eos"
                : client_gone       ? "client gone"
                : stopping_         ? "shutdown"
                : job->timed_out    ? "timeout"
                                    : "length";
  if (c.completion_tokens > 0) {
    stats.first_token_s = seconds_between(slot.start, job->first);
    stats.generate_s = seconds_between(job->first, end);
  }
  return c;
}

std::vector<std::vector<float>> Engine::embed(const std::vector<std::string>& texts, int64_t& tokens) {
  if (lm_) throw ApiError(400, "'" + model_id_ + "' is a decoder: /v1/embeddings needs a text-encoder folder", "model",
                          "wrong_endpoint");
  data::BatchOptions bo;
  bo.truncation = true;
  const int64_t positions = nn::text_encoder_max_positions(*model_);
  bo.max_length = embedding_.max_seq_length > 0 ? std::min(embedding_.max_seq_length, positions) : positions;
  constexpr size_t kBatch = 32;  // texts per forward, as hf_run's default --batch
  std::vector<std::vector<float>> out;
  tokens = 0;
  std::lock_guard<std::mutex> lock(model_mutex_);
  set_num_threads(options_.threads);
  NoGradGuard ng;
  for (size_t at = 0; at < texts.size(); at += kBatch) {
    const std::vector<std::string> part(texts.begin() + static_cast<std::ptrdiff_t>(at),
                                        texts.begin() + static_cast<std::ptrdiff_t>(std::min(texts.size(), at + kBatch)));
    const data::BatchEncoding enc = data::encode_batch(*tok_, part, bo);
    for (int64_t m : to_vector<int64_t>(enc.attention_mask)) tokens += m != 0;
    const Tensor mask = enc.attention_mask.to(options_.device);
    const Tensor h = nn::text_encoder_hidden(*model_, enc.input_ids.to(options_.device),
                                             enc.token_type_ids.to(options_.device), mask);
    Tensor emb = nn::pool_hidden(h, mask, embedding_.pooling);
    if (embedding_.normalize) emb = nn::l2_normalize(emb);
    emb = emb.to(DType::f32).to(Device::cpu());
    for (int64_t i = 0; i < emb.size(0); ++i) out.push_back(to_vector<float>(select(emb, 0, i)));
  }
  return out;
}

}  // namespace hh::serve
