// hf_run: runs an imported HF model folder from the command line.
//   GPT-2 / Llama: next-token generation (greedy or sampled: temperature, top-k, top-p) from a text
//     prompt (the folder's tokenizer) or token ids: the prompt prefilled in one pass, then one step
//     per token with a KV cache for softmax attention and the O(1) recurrent state for a linear
//     feature map (--mixer).
//   BERT: class logits for a text (and optional pair) or ids; ViT: class logits for an image file.
//   --task embed (the default for a bare BertModel / ViTModel): sentence embeddings as
//     sentence-transformers computes them (the folder's modules.json pooling and normalization),
//     for one text, two (and their cosine similarity) or a file of one text per line.
//   --hidden-states: the last hidden state of any family for the one input (decoders: and the
//     logits of every position, logits.npy with --out).
//   --save-quantized OUT (with --weights int8): writes the model as a quantized folder
//     (nn/models/hf_int8.h) and runs nothing; the folder loads with the same int8 weights.
// Results go to stdout and, with --out, to results.json, report.html and the .npy arrays (written
// atomically).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "apps/hf_run_report.h"
#include "cli/app.h"
#include "train/run_dir.h"
#include "core/atomic_file.h"
#include "core/backend.h"
#include "core/memory.h"
#include "core/npy.h"
#include "core/parallel.h"
#include "core/progress.h"
#include "core/regular_file.h"
#include "data/image.h"
#include "data/tokenizer.h"
#include "nn/feature_maps.h"
#include "nn/models/bert.h"
#include "nn/models/embedding.h"
#include "nn/models/generate.h"
#include "nn/models/hf_int8.h"
#include "nn/models/hf_model.h"
#include "nn/models/hf_save.h"
#include "nn/models/vit.h"

using namespace hh;
using json = nlohmann::json;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<int64_t> parse_ids(const std::string& s, const std::string& flag) {
  std::vector<int64_t> ids;
  for (const std::string& item : cli::Flags::split_list(s)) {
    size_t pos = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &pos);
    } catch (...) {
      pos = 0;
    }
    HH_CHECK(pos == item.size() && v >= 0, "--", flag, ": '", item, "' is not a token id (a non-negative integer)");
    ids.push_back(v);
  }
  HH_CHECK(!ids.empty(), "--", flag, ": no token ids given");
  return ids;
}

struct Inputs {
  std::string model_dir, out_dir, prompt, ids, text, text_pair, image, tokenizer_dir, input_file;
};

enum class Task { automatic, generate, classify, embed };

Task parse_task(const std::string& s) {
  if (s == "auto") return Task::automatic;
  if (s == "generate") return Task::generate;
  if (s == "classify") return Task::classify;
  if (s == "embed") return Task::embed;
  fail(str("--task: unknown '", s, "' (auto, generate, classify or embed)"));
}

// Arrays go next to results.json as .npy; the JSON names the file and the shape.
json save_array(const Inputs& in, const std::string& name, const Tensor& t) {
  json j = {{"shape", t.shape()}};
  if (!in.out_dir.empty()) {
    write_file_atomic(in.out_dir + "/" + name, npy_bytes(t));
    j["file"] = name;
  }
  return j;
}

// The texts of --input FILE (one per line, none empty: an error names the line), else --text and
// an optional --text-pair as a second text.
std::vector<std::string> embed_texts(const Inputs& in) {
  if (in.input_file.empty()) {
    std::vector<std::string> t{in.text};
    if (!in.text_pair.empty()) t.push_back(in.text_pair);
    return t;
  }
  std::vector<std::string> texts;
  std::istringstream lines(read_file(in.input_file));
  std::string line;
  for (int64_t n = 1; std::getline(lines, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    HH_CHECK(!line.empty(), "--input: ", in.input_file, ":", n, ": empty line (one text per line)");
    texts.push_back(line);
  }
  HH_CHECK(!texts.empty(), "--input: ", in.input_file, ": no texts");
  return texts;
}

// The --image file as the model folder's preprocessor reads it: (1,3,size,size).
Tensor read_pixels(const Inputs& in, int64_t size) {
  const std::string pre = in.model_dir + "/preprocessor_config.json";
  ImagePreprocess p = std::filesystem::exists(pre) ? ImagePreprocess::load(pre, size) : ImagePreprocess::defaults(size);
  return unsqueeze(image_to_pixels(read_image(in.image), p), 0);  // (1,3,H,W)
}

int64_t vit_image_size(const nn::HFModel& m) {
  if (auto* v = dynamic_cast<const nn::ViTModel*>(&m)) return v->cfg.image_size;
  if (auto* c = dynamic_cast<const nn::ViTForImageClassification*>(&m)) return c->vit->cfg.image_size;
  return 0;
}

// --normalize: "folder" (the folder's modules.json decides: nullopt), or true / false.
std::optional<bool> normalize_flag(const cli::Flags& f) {
  const std::string v = f.str("normalize");
  if (v == "folder") return std::nullopt;
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  fail(str("--normalize: expected folder, true or false, got '", v, "'"));
}

// Sentence (or image) embeddings: the folder's sentence-transformers configuration unless
// --pooling / --normalize say otherwise.
json run_embed(const nn::HFModel& m, const cli::Flags& f, const Inputs& in, Device device) {
  nn::EmbeddingConfig ec = nn::read_embedding_config(in.model_dir);
  const bool image = vit_image_size(m) > 0;
  if (image && !ec.from_folder) ec.pooling = nn::Pooling::cls;  // ViT: the class token, as ViTModel's pooler reads
  if (f.str("pooling") != "folder") ec.pooling = nn::parse_pooling(f.str("pooling"), "--pooling");
  if (const std::optional<bool> n = normalize_flag(f)) ec.normalize = *n;
  const int64_t batch = f.integer("batch", 1, 1 << 16);
  std::vector<Tensor> rows;  // (b,C) per batch, on the CPU
  std::vector<std::string> texts;
  auto t0 = std::chrono::steady_clock::now();
  NoGradGuard ng;
  if (image) {
    HH_CHECK(!in.image.empty(), m.architecture(), " embeds images: give --image");
    rows.push_back(nn::pool_hidden(nn::image_encoder_hidden(m, read_pixels(in, vit_image_size(m)).to(device)), Tensor(),
                                   ec.pooling));
  } else {
    const int64_t positions = nn::text_encoder_max_positions(m);  // 0: not a BERT-family model
    HH_CHECK(positions > 0, m.architecture(), ": hf_run embeds with BERT- and ViT-family models");
    HH_CHECK(in.ids.empty(), "--task embed takes text (--text, --text-pair, --input), not --ids");
    texts = embed_texts(in);
    auto tok = data::load_tokenizer(in.tokenizer_dir);
    data::BatchOptions bo;
    bo.truncation = true;
    bo.max_length = ec.max_seq_length > 0 ? std::min(ec.max_seq_length, positions) : positions;
    ProgressOptions po;
    po.label = "embed";
    po.total = static_cast<int64_t>(texts.size());
    Progress bar(po);
    for (size_t at = 0; at < texts.size(); at += static_cast<size_t>(batch)) {
      const std::vector<std::string> part(texts.begin() + static_cast<std::ptrdiff_t>(at),
                                          texts.begin() + static_cast<std::ptrdiff_t>(
                                                              std::min(texts.size(), at + static_cast<size_t>(batch))));
      data::BatchEncoding enc = data::encode_batch(*tok, part, bo);
      const Tensor mask = enc.attention_mask.to(device);
      Tensor h = nn::text_encoder_hidden(m, enc.input_ids.to(device), enc.token_type_ids.to(device), mask);
      rows.push_back(nn::pool_hidden(h, mask, ec.pooling).to(DType::f32).to(Device::cpu()));
      bar.update(static_cast<int64_t>(at + part.size()));
    }
    bar.finish();
  }
  Tensor emb = cat(rows, 0);  // (N,C)
  if (ec.normalize) emb = nn::l2_normalize(emb);
  emb = emb.to(DType::f32).to(Device::cpu());
  const double s = seconds_since(t0);
  const int64_t n = emb.size(0), dim = emb.size(1);
  std::printf("%lld embedding%s of %lld values (pooling %s%s; %s) in %.3f s\n", static_cast<long long>(n),
              n == 1 ? "" : "s", static_cast<long long>(dim), nn::pooling_name(ec.pooling),
              ec.normalize ? ", normalized" : "", ec.source.c_str(), s);
  json r = {{"pooling", nn::pooling_name(ec.pooling)}, {"normalize", ec.normalize},
            {"config_source", ec.source}, {"count", n}, {"dim", dim}, {"embed_seconds", s}};
  if (!image) r["max_seq_length"] = ec.max_seq_length;
  r["embeddings_file"] = save_array(in, "embeddings.npy", emb);
  constexpr int64_t kInlineRows = 64;  // more go to embeddings.npy only
  if (n <= kInlineRows) {
    json list = json::array();
    for (int64_t i = 0; i < n; ++i) list.push_back(to_vector<double>(select(emb, 0, i)));
    r["embeddings"] = list;
    for (int64_t i = 0; i < std::min<int64_t>(n, 4); ++i) {
      std::vector<double> v = to_vector<double>(select(emb, 0, i));
      std::printf("  [%lld] %s%+.6f %+.6f %+.6f %+.6f ...\n", static_cast<long long>(i),
                  texts.empty() ? "" : ("\"" + texts[static_cast<size_t>(i)].substr(0, 40) + "\" ").c_str(),
                  v[0], dim > 1 ? v[1] : 0.0, dim > 2 ? v[2] : 0.0, dim > 3 ? v[3] : 0.0);
    }
  }
  if (!texts.empty()) r["texts"] = n <= kInlineRows ? json(texts) : json(n);
  if (n == 2) {
    const double cos = nn::cosine_similarity(select(emb, 0, 0).reshape({1, dim}), select(emb, 0, 1).reshape({1, dim}))
                           .item<double>();
    r["cosine_similarity"] = cos;
    std::printf("cosine similarity: %.6f\n", cos);
  }
  return r;
}

// A decoder's prompt: --ids, or --prompt through the tokenizer (loaded into `tok`), checked against
// the vocabulary.
std::vector<int64_t> decoder_prompt(const nn::CausalLM& lm, const Inputs& in, std::unique_ptr<data::Tokenizer>& tok) {
  std::vector<int64_t> prompt;
  if (!in.ids.empty()) {
    prompt = parse_ids(in.ids, "ids");
  } else {
    tok = data::load_tokenizer(in.tokenizer_dir);
    for (int32_t id : tok->encode(in.prompt, true)) prompt.push_back(id);
    HH_CHECK(!prompt.empty(), "--prompt: the tokenizer produced no tokens for '", in.prompt, "'");
  }
  for (int64_t id : prompt)
    HH_CHECK(id < lm.vocab_size(), "prompt token id ", id, " is outside the model's vocabulary of ", lm.vocab_size());
  return prompt;
}

json run_decoder(nn::CausalLM& lm, const cli::Flags& f, const Inputs& in) {
  std::unique_ptr<data::Tokenizer> tok;
  std::vector<int64_t> prompt = decoder_prompt(lm, in, tok);
  if (!tok && f.given("tokenizer")) tok = data::load_tokenizer(in.tokenizer_dir);
  const int64_t new_tokens = f.integer("max-new-tokens", 0, 1 << 20);
  const int64_t limit = lm.max_positions();
  HH_CHECK(limit < 0 || static_cast<int64_t>(prompt.size()) + new_tokens <= limit, "prompt (", prompt.size(),
           " tokens) + --max-new-tokens ", new_tokens, " exceeds the model's ", limit, " positions");
  // transformers' defaults for this folder, then the flags given over them.
  const nn::GenerationDefaults gd = nn::read_generation_config(in.model_dir);
  nn::SamplingOptions so = gd.sampling;
  if (f.given("temperature")) so.temperature = f.number("temperature", 0.0, 100.0);
  if (f.given("top-k")) so.top_k = f.integer("top-k", 0);
  if (f.given("top-p")) so.top_p = f.number("top-p", 1e-6, 1.0);
  // --top-k or --top-p asks for sampling: over greedy defaults it samples at temperature 1.
  if (!f.given("temperature") && so.temperature == 0 && (f.given("top-k") || f.given("top-p"))) so.temperature = 1.0;
  so.seed = static_cast<uint64_t>(f.integer("seed", 0));
  nn::Sampler sampler(so);
  nn::GenerateOptions go;
  go.max_new_tokens = new_tokens;
  if (f.boolean("stop-at-eos")) go.eos = nn::stop_ids(gd, tok ? tok->eos_id() : -1, lm.config());
  std::printf("decoding: %s (%s)\n",
              so.temperature == 0 ? "greedy"
                                  : str("temperature ", so.temperature, ", top-k ", so.top_k, ", top-p ", so.top_p).c_str(),
              f.given("temperature") || f.given("top-k") || f.given("top-p") ? "flags"
              : gd.found                                                       ? "generation_config.json"
                                                                               : "no generation_config.json: greedy");
  ProgressOptions po;
  po.label = "generate";
  po.total = new_tokens;
  Progress bar(po);
  const auto t1 = std::chrono::steady_clock::now();
  go.on_token = [&](int64_t n, int64_t) { bar.update(n, {{"tok/s", n / std::max(seconds_since(t1), 1e-9)}}); };
  // Decoding memory: the allocator's peak while the new tokens are drawn above what was live
  // before generate (the weights): the decode state (KV cache or recurrent state) at its largest
  // plus one step's temporaries. The prefill's peak (the one-pass forward's activations) is its own.
  const Device dev = lm.parameters().empty() ? Device::cpu() : lm.parameters().front().device();
  const size_t live_before = memory_stats(dev).current;
  const auto above_weights = [&] { return memory_stats(dev).peak - std::min(live_before, memory_stats(dev).peak); };
  reset_peak_memory(dev);
  size_t prefill_bytes = 0;
  go.on_prefilled = [&] {
    prefill_bytes = above_weights();
    reset_peak_memory(dev);
  };
  nn::Generation g = nn::generate(lm, prompt, sampler, go);
  const size_t decode_bytes = above_weights();
  bar.finish();
  const std::vector<int64_t>& generated = g.ids;
  const double prefill_s = g.prefill_seconds, gen_s = g.generate_seconds;

  json r = {{"prompt_ids", prompt},
            {"generated_ids", generated},
            {"prefill_seconds", prefill_s},
            {"generate_seconds", gen_s},
            {"tokens_per_second", generated.empty() ? 0.0 : generated.size() / std::max(gen_s, 1e-9)},
            {"decode_peak_bytes", decode_bytes},
            {"prefill_peak_bytes", prefill_bytes},
            {"decoding", {{"temperature", so.temperature}, {"top_k", so.top_k}, {"top_p", so.top_p}, {"eos", go.eos}}}};
  std::vector<int32_t> all32(prompt.begin(), prompt.end()), gen32(generated.begin(), generated.end());
  all32.insert(all32.end(), gen32.begin(), gen32.end());
  std::cout << "prompt ids:    " << json(prompt).dump() << "\ngenerated ids: " << json(generated).dump() << "\n";
  if (tok) {
    r["prompt"] = in.prompt;
    r["completion"] = tok->decode(gen32, true);
    r["text"] = tok->decode(all32, true);
    std::cout << "text: " << r["text"].get<std::string>() << "\n";
  }
  std::printf("%zu tokens in %.3f s (%.1f tokens/s; prompt of %zu tokens in %.3f s; decoding memory %.3f MiB above the weights)\n",
              generated.size(), gen_s, r["tokens_per_second"].get<double>(), prompt.size(), prefill_s,
              static_cast<double>(decode_bytes) / (1 << 20));
  return r;
}

// Class logits (1,K) -> JSON with the labels of config "id2label" when present, top 5 printed.
json report_logits(const Tensor& logits, const nn::HFModel& m) {
  std::vector<double> v = to_vector<double>(logits);
  std::vector<std::string> labels;
  for (size_t i = 0; i < v.size(); ++i) {
    std::string key = std::to_string(i), label = "LABEL_" + key;
    if (m.config().has("id2label")) label = m.config().child("id2label").get_string(key, label);
    labels.push_back(label);
  }
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] > v[b]; });
  for (size_t i = 0; i < std::min<size_t>(5, order.size()); ++i)
    std::printf("  %-24s %+.6f\n", labels[order[i]].c_str(), v[order[i]]);
  return {{"logits", v}, {"labels", labels}, {"predicted", labels[order[0]]}, {"predicted_index", order[0]}};
}

// BERT's inputs for one text (and pair) or --ids (and --token-types): (1,L) each.
struct BertInputs {
  Tensor ids, types, mask;
};
BertInputs bert_inputs(const cli::Flags& f, const Inputs& in) {
  BertInputs b;
  if (!in.ids.empty()) {
    std::vector<int64_t> v = parse_ids(in.ids, "ids");
    const int64_t L = static_cast<int64_t>(v.size());
    b.ids = from_vector(v, {1, L}, {DType::i64});
    b.types = zeros({1, L}, {DType::i64});
    if (f.given("token-types")) {
      std::vector<int64_t> tt = parse_ids(f.str("token-types"), "token-types");
      HH_CHECK(static_cast<int64_t>(tt.size()) == L, "--token-types: ", tt.size(), " values for ", L, " ids");
      b.types = from_vector(tt, {1, L}, {DType::i64});
    }
    b.mask = ones({1, L}, {DType::i64});
  } else {
    auto tok = data::load_tokenizer(in.tokenizer_dir);
    data::BatchEncoding enc = f.given("text-pair") ? data::encode_batch_pairs(*tok, {{in.text, in.text_pair}})
                                                   : data::encode_batch(*tok, {in.text});
    b.ids = enc.input_ids;
    b.types = enc.token_type_ids;
    b.mask = enc.attention_mask;
  }
  return b;
}

json run_bert(nn::BertForSequenceClassification& bert, const cli::Flags& f, const Inputs& in, Device device) {
  const BertInputs b = bert_inputs(f, in);
  NoGradGuard ng;
  auto t0 = std::chrono::steady_clock::now();
  Tensor logits = bert.forward(b.ids.to(device), b.types.to(device), b.mask.to(device));
  const double s = seconds_since(t0);
  json r = report_logits(logits, bert);
  r["input_ids"] = to_vector<int64_t>(b.ids);
  r["forward_seconds"] = s;
  return r;
}

// --hidden-states: the last hidden state (1,L,C) of the one input (a decoder's prompt, BERT's
// text or ids, ViT's image), as transformers' hidden_states[-1] (decoders: after the final norm),
// and a decoder's logits (1,L,V) of every prompt position.
json run_hidden(nn::HFModel& m, const cli::Flags& f, const Inputs& in, Device device) {
  NoGradGuard ng;
  Tensor h, logits;
  if (auto* lm = dynamic_cast<nn::CausalLM*>(&m)) {
    std::unique_ptr<data::Tokenizer> tok;
    const std::vector<int64_t> prompt = decoder_prompt(*lm, in, tok);
    const Tensor ids = from_vector(prompt, {1, static_cast<int64_t>(prompt.size())}, {DType::i64}).to(device);
    h = lm->hidden(ids);
    logits = lm->forward(ids);  // every position's logits (what tools/check_hf_export.py compares)
  } else if (nn::text_encoder_max_positions(m) > 0) {
    const BertInputs b = bert_inputs(f, in);
    h = nn::text_encoder_hidden(m, b.ids.to(device), b.types.to(device), b.mask.to(device));
  } else if (vit_image_size(m) > 0) {
    h = nn::image_encoder_hidden(m, read_pixels(in, vit_image_size(m)).to(device));
  }
  HH_CHECK(h.defined(), m.architecture(), ": no hidden states for this architecture");
  h = h.to(DType::f32).to(Device::cpu());
  const std::vector<double> first = to_vector<double>(slice(select(select(h, 0, 0), 0, 0), 0, 0, 4));
  std::printf("last hidden state %s; token 0 starts", shape_str(h.shape()).c_str());
  for (double v : first) std::printf(" %+.6f", v);
  std::printf("\n");
  json r = save_array(in, "hidden_states.npy", h);
  r["token0_head"] = first;
  if (logits.defined()) r["logits"] = save_array(in, "logits.npy", logits.to(DType::f32).to(Device::cpu()));
  return r;
}

json run_vit(nn::ViTForImageClassification& vit, const Inputs& in, Device device) {
  Tensor pixels = read_pixels(in, vit.vit->cfg.image_size);  // (1,3,H,W)
  NoGradGuard ng;
  auto t0 = std::chrono::steady_clock::now();
  Tensor logits = vit.forward(pixels.to(device));
  const double s = seconds_since(t0);
  json r = report_logits(logits, vit);
  r["image"] = in.image;
  r["forward_seconds"] = s;
  return r;
}

// --save-quantized OUT: the model loaded with int8 weights, written as a quantized folder (all or
// nothing: save_hf_model stages it and swaps it in). A mode of its own: it runs no input, so the
// folder is not mixed with results (--out).
int save_quantized_folder(const Inputs& in, const nn::HFModelOptions& opt, const std::string& out, int inputs_given,
                          bool hidden_states) {
  namespace fs = std::filesystem;
  HH_CHECK(opt.weights == WeightFormat::int8, "--save-quantized writes int8 weights: give --weights int8");
  HH_CHECK(inputs_given == 0 && !hidden_states && in.out_dir.empty(), "--save-quantized writes a folder and runs "
           "nothing: leave out --prompt, --ids, --text, --image, --input, --hidden-states and --out");
  std::error_code ec;
  HH_CHECK(!fs::equivalent(fs::path(out), fs::path(in.model_dir), ec), "--save-quantized ", out,
           ": this is the --model folder; write the quantized copy elsewhere (the f32 folder is its source)");
  train::refuse_system_folder(out, "--save-quantized");
  const bool existed = fs::exists(out, ec);
  ensure_writable_dir(out);  // created now: a folder that cannot take files fails before the load
  auto t0 = std::chrono::steady_clock::now();
  double load_s = 0, save_s = 0;
  std::shared_ptr<nn::HFModel> model;
  try {
    model = nn::load_hf_model(in.model_dir, opt);
    load_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    nn::save_hf_model(*model, out, in.model_dir, WeightFormat::int8);
    save_s = seconds_since(t0);
  } catch (...) {
    if (!existed && fs::is_empty(out, ec)) fs::remove(out, ec);  // no empty folder left by a failed run
    throw;
  }
  std::printf("loaded %s (%s) in %.2f s; wrote the int8 folder %s in %.2f s (model.safetensors %.1f MiB)\n",
              in.model_dir.c_str(), model->architecture().c_str(), load_s, out.c_str(), save_s,
              static_cast<double>(fs::file_size(fs::path(out) / "model.safetensors")) / (1024.0 * 1024.0));
  return 0;
}

int run(int argc, char** argv) {
  cli::Flags f("hf_run",
                "hf_run: runs an HF model folder (config.json + safetensors or pytorch_model.bin).\n"
                "Families: GPT-2, Llama, Mistral, Qwen2, Qwen3 (decoders), BERT-family encoders, ViT.\n"
                "Tasks (--task): generate (decoders: text from --prompt or --ids), classify (BERT: class logits\n"
                "of --text; ViT: of --image), embed (encoders: sentence-transformers pooling of --text or --input).\n"
                "Every attention layer can be swapped for a linear feature map with --mixer (untrained maps give\n"
                "the converted-but-not-distilled model).");
  f.add("model", "", "HF model folder (config.json; model.safetensors, model.safetensors.index.json, pytorch_model.bin\n"
        "                       or pytorch_model.bin.index.json)");
  f.add("prompt", "", "decoders: the prompt text (needs a tokenizer in the folder or --tokenizer)");
  f.add("ids", "", "token ids instead of text, comma-separated (decoders: the prompt; BERT: the input)");
  f.add("tokenizer", "", "folder with the tokenizer files (default: the model folder)");
  f.add("max-new-tokens", "32", "decoders: tokens to generate");
  f.add("temperature", "", "decoders: sampling temperature; 0 = greedy (default: as transformers' generate():\n"
        "the folder's generation_config.json, greedy when it is absent or has no do_sample)");
  f.add("top-k", "", "decoders: sample among the k most likely tokens, 0 = all (default: generation_config.json's)");
  f.add("top-p", "", "decoders: nucleus sampling mass, 1 = all (default: generation_config.json's)");
  f.add("stop-at-eos", "true", "decoders: stop when the end-of-sequence token is generated", true);
  f.add("text", "", "BERT: the input text");
  f.add("text-pair", "", "BERT: a second text ([CLS] text [SEP] pair [SEP])");
  f.add("token-types", "", "BERT with --ids: the token type of each id (default all 0)");
  f.add("image", "", "ViT: an image file (PNG or binary PPM)");
  f.add("task", "auto", "auto (by the folder's architecture), generate, classify or embed");
  f.add("input", "", "embed: a text file, one text per line (embeddings.npy with --out)");
  f.add("pooling", "folder", "embed: folder (its sentence-transformers files, else mean; ViT: cls), cls, mean, max,\n"
        "                       mean_sqrt_len_tokens or lasttoken");
  f.add("normalize", "folder", "embed: folder (a Normalize module in modules.json), true or false");
  f.add("batch", "32", "embed: texts per forward");
  f.add("hidden-states", "false", "also the last hidden state of the one input (hidden_states.npy with --out;\n"
        "                       decoders: and the logits of every position, logits.npy)", true);
  f.add("mixer", "softmax", "attention of every layer: softmax, a feature map (hedgehog, taylor, ...), or\n"
        "                       hybrid-<map> (sliding softmax window + linear attention, causal models)");
  f.add("form", "chunked", "linear mixers: chunked, quadratic, noncausal or recurrent");
  f.add("window", "64", "hybrid-<map> mixers: the sliding window size");
  f.add("weights", "f32", "every Linear's weights: f32, int8 (per-channel symmetric) or bf16 (rounded; f32\n"
        "                       arithmetic), prepared at load; CPU, f32 precision only; a quantized folder\n"
        "                       (--save-quantized) runs in int8");
  f.add("save-quantized", "", "with --weights int8: write the model as a quantized HF folder here (int8 Linear\n"
        "                       weights and scales, config.json's quantization_config) and run nothing");
  cli::CommonFlagSpec common;
  common.seed_help = "decoders: sampling seed";
  common.out = true;
  common.out_help = "folder for results.json and report.html (optional)";
  cli::add_common_flags(f, common);
  if (!f.parse(argc, argv)) return 0;

  // Everything checkable is checked before the model is read.
  Inputs in{f.str("model"), f.str("out"), f.str("prompt"), f.str("ids"), f.str("text"), f.str("text-pair"),
            f.str("image"), f.str("tokenizer"), f.str("input")};
  const Task task = parse_task(f.str("task"));
  const bool hidden_states = f.boolean("hidden-states");
  if (f.str("pooling") != "folder") nn::parse_pooling(f.str("pooling"), "--pooling");
  normalize_flag(f);
  f.integer("batch", 1, 1 << 16);
  HH_CHECK(!in.model_dir.empty(), "--model is required: no model folder given (see --help)");
  if (in.tokenizer_dir.empty()) in.tokenizer_dir = in.model_dir;
  nn::HFModelOptions opt;
  opt.mixer = nn::parse_mixer(f.str("mixer"), "--mixer");
  opt.form = nn::parse_linear_form(f.str("form"));
  opt.window = f.integer("window", 1, 1 << 30);
  opt.weights = nn::folder_weights(in.model_dir, cli::parse_weights_flag(f.str("weights")), f.given("weights"),
                                   "--weights");
  const std::string save_quantized = f.str("save-quantized");
  opt.prepare_weights = true;  // packed (or quantized) at load: the timed prefill does not pack
  const cli::CommonFlags c = cli::read_common_flags(f, common);
  opt.device = c.device;
  const Precision precision = c.precision;
  HH_CHECK(opt.weights == WeightFormat::f32 || precision == Precision::f32, "--weights ",
           weight_format_name(opt.weights), " runs in f32 precision, not --precision ", precision_name(precision));
  if (c.threads > 0) set_num_threads(static_cast<int>(c.threads));
  f.integer("max-new-tokens", 0, 1 << 20);
  if (f.given("temperature")) f.number("temperature", 0.0, 100.0);
  if (f.given("top-k")) f.integer("top-k", 0);
  if (f.given("top-p")) f.number("top-p", 1e-6, 1.0);
  f.boolean("stop-at-eos");
  const int inputs_given =
      !in.prompt.empty() + !in.ids.empty() + !in.text.empty() + !in.image.empty() + !in.input_file.empty();
  if (!save_quantized.empty()) return save_quantized_folder(in, opt, save_quantized, inputs_given, hidden_states);
  if (!in.out_dir.empty()) train::check_output_folder(in.out_dir);
  HH_CHECK(inputs_given == 1, "give exactly one input: --prompt or --ids (GPT-2, Llama), --text or --ids (BERT), "
                              "--image (ViT), --input FILE (embed); got ", inputs_given);
  HH_CHECK(in.input_file.empty() || task == Task::embed || task == Task::automatic,
           "--input FILE is for --task embed (one text per line)");
  HH_CHECK(!hidden_states || in.input_file.empty(), "--hidden-states takes one input, not --input FILE");
  if (!in.input_file.empty()) check_regular_file(in.input_file, "--input");

  auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<nn::HFModel> model = nn::load_hf_model(in.model_dir, opt);
  const double load_s = seconds_since(t0);
  std::printf("loaded %s (%s, %lld parameters, attention: %s, weights: %s) in %.2f s\n", in.model_dir.c_str(),
              model->architecture().c_str(), static_cast<long long>(model->num_parameters()),
              nn::name(model->options().mixer).c_str(), weight_format_name(opt.weights), load_s);

  json result;
  PrecisionGuard autocast(precision);
  auto* lm = dynamic_cast<nn::CausalLM*>(model.get());
  auto* bert = dynamic_cast<nn::BertForSequenceClassification*>(model.get());
  auto* vit = dynamic_cast<nn::ViTForImageClassification*>(model.get());
  const bool encoder = nn::text_encoder_max_positions(*model) > 0 || vit_image_size(*model) > 0;
  Task run_task = task;
  if (run_task == Task::automatic)
    run_task = lm ? Task::generate : (bert || vit) && in.input_file.empty() ? Task::classify : Task::embed;
  const std::string arch = model->architecture();
  if (run_task == Task::generate) {
    HH_CHECK(lm, "--task generate: ", arch, " is not a decoder (GPT-2, Llama)");
    HH_CHECK(in.text.empty() && in.image.empty(), arch, " generates text: give --prompt or --ids");
    result = run_decoder(*lm, f, in);
  } else if (run_task == Task::classify) {
    HH_CHECK(bert || vit, "--task classify: ", arch, " has no classification head (try --task embed)");
    if (bert) {
      HH_CHECK(in.prompt.empty() && in.image.empty(), arch, " classifies text: give --text or --ids");
      result = run_bert(*bert, f, in, opt.device);
    } else {
      HH_CHECK(!in.image.empty(), arch, " classifies images: give --image");
      result = run_vit(*vit, in, opt.device);
    }
  } else {
    HH_CHECK(encoder, "--task embed: ", arch, " is not an encoder (BERT or ViT families)");
    result = run_embed(*model, f, in, opt.device);
  }
  result["task"] = run_task == Task::generate ? "generate" : run_task == Task::classify ? "classify" : "embed";
  if (hidden_states) result["hidden_states"] = run_hidden(*model, f, in, opt.device);
  result["model"] = in.model_dir;
  result["architecture"] = model->architecture();
  result["mixer"] = nn::name(model->options().mixer);  // what the folder runs (a converted folder: its own map)
  result["device"] = f.str("device");
  result["precision"] = precision_name(precision);
  result["weights"] = weight_format_name(opt.weights);
  result["load_seconds"] = load_s;
  if (!in.out_dir.empty()) {
    write_file_atomic(in.out_dir + "/results.json", result.dump(2) + "\n");
    write_file_atomic(in.out_dir + "/report.html", apps::hf_run_report_html(result));
    std::string arrays = result.contains("embeddings_file") ? ", embeddings.npy" : "";
    if (result.contains("hidden_states")) arrays += lm ? ", hidden_states.npy, logits.npy" : ", hidden_states.npy";
    std::printf("wrote %s/results.json and report.html%s\n", in.out_dir.c_str(), arrays.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return hh::cli::run_main(argc, argv, run); }
