// hf_run: runs an imported HF model folder from the command line.
//   GPT-2 / Llama: next-token generation (greedy or sampled: temperature, top-k, top-p) from a text
//     prompt (the folder's tokenizer) or token ids, with a KV cache for softmax attention and the
//     O(1) recurrent state for a linear feature map (--mixer).
//   BERT: class logits for a text (and optional pair) or ids; ViT: class logits for an image file.
// Results go to stdout and, with --out, to results.json and report.html (written atomically).
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
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "apps/kit/flags.h"
#include "apps/hf_run_report.h"
#include "apps/kit/app.h"
#include "train/run_dir.h"
#include "core/atomic_file.h"
#include "core/backend.h"
#include "core/parallel.h"
#include "core/progress.h"
#include "data/image.h"
#include "data/tokenizer.h"
#include "nn/feature_maps.h"
#include "nn/models/bert.h"
#include "nn/models/generate.h"
#include "nn/models/hf_model.h"
#include "nn/models/vit.h"

using namespace hh;
using json = nlohmann::json;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<int64_t> parse_ids(const std::string& s, const std::string& flag) {
  std::vector<int64_t> ids;
  for (const std::string& item : apps::Flags::split_list(s)) {
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
  std::string model_dir, out_dir, prompt, ids, text, text_pair, image, tokenizer_dir;
};

json run_decoder(nn::CausalLM& lm, const apps::Flags& f, const Inputs& in) {
  std::unique_ptr<data::Tokenizer> tok;
  std::vector<int64_t> prompt;
  if (!in.ids.empty()) {
    prompt = parse_ids(in.ids, "ids");
  } else {
    tok = data::load_tokenizer(in.tokenizer_dir);
    for (int32_t id : tok->encode(in.prompt, true)) prompt.push_back(id);
    HH_CHECK(!prompt.empty(), "--prompt: the tokenizer produced no tokens for '", in.prompt, "'");
  }
  if (!tok && f.given("tokenizer")) tok = data::load_tokenizer(in.tokenizer_dir);
  for (int64_t id : prompt)
    HH_CHECK(id < lm.vocab_size(), "prompt token id ", id, " is outside the model's vocabulary of ", lm.vocab_size());
  const int64_t new_tokens = f.integer("max-new-tokens", 0, 1 << 20);
  const int64_t limit = lm.max_positions();
  HH_CHECK(limit < 0 || static_cast<int64_t>(prompt.size()) + new_tokens <= limit, "prompt (", prompt.size(),
           " tokens) + --max-new-tokens ", new_tokens, " exceeds the model's ", limit, " positions");
  nn::SamplingOptions so{f.number("temperature", 0.0, 100.0), f.integer("top-k", 0), f.number("top-p", 1e-6, 1.0),
                        static_cast<uint64_t>(f.integer("seed", 0))};
  nn::Sampler sampler(so);
  nn::GenerateOptions go;
  go.max_new_tokens = new_tokens;
  go.eos = f.boolean("stop-at-eos") ? (tok ? tok->eos_id() : lm.config().get_int("eos_token_id", -1)) : -1;
  ProgressOptions po;
  po.label = "generate";
  po.total = new_tokens;
  Progress bar(po);
  const auto t1 = std::chrono::steady_clock::now();
  go.on_token = [&](int64_t n, int64_t) { bar.update(n, {{"tok/s", n / std::max(seconds_since(t1), 1e-9)}}); };
  nn::Generation g = nn::generate(lm, prompt, sampler, go);
  bar.finish();
  const std::vector<int64_t>& generated = g.ids;
  const double prefill_s = g.prefill_seconds, gen_s = g.generate_seconds;

  json r = {{"prompt_ids", prompt},
            {"generated_ids", generated},
            {"prefill_seconds", prefill_s},
            {"generate_seconds", gen_s},
            {"tokens_per_second", generated.empty() ? 0.0 : generated.size() / std::max(gen_s, 1e-9)}};
  std::vector<int32_t> all32(prompt.begin(), prompt.end()), gen32(generated.begin(), generated.end());
  all32.insert(all32.end(), gen32.begin(), gen32.end());
  std::cout << "prompt ids:    " << json(prompt).dump() << "\ngenerated ids: " << json(generated).dump() << "\n";
  if (tok) {
    r["prompt"] = in.prompt;
    r["completion"] = tok->decode(gen32, true);
    r["text"] = tok->decode(all32, true);
    std::cout << "text: " << r["text"].get<std::string>() << "\n";
  }
  std::printf("%zu tokens in %.3f s (%.1f tokens/s; prompt of %zu tokens in %.3f s)\n", generated.size(), gen_s,
              r["tokens_per_second"].get<double>(), prompt.size(), prefill_s);
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

json run_bert(nn::BertForSequenceClassification& bert, const apps::Flags& f, const Inputs& in, Device device) {
  Tensor ids, types, mask;
  if (!in.ids.empty()) {
    std::vector<int64_t> v = parse_ids(in.ids, "ids");
    const int64_t L = static_cast<int64_t>(v.size());
    ids = from_vector(v, {1, L}, {DType::i64});
    types = zeros({1, L}, {DType::i64});
    if (f.given("token-types")) {
      std::vector<int64_t> tt = parse_ids(f.str("token-types"), "token-types");
      HH_CHECK(static_cast<int64_t>(tt.size()) == L, "--token-types: ", tt.size(), " values for ", L, " ids");
      types = from_vector(tt, {1, L}, {DType::i64});
    }
    mask = ones({1, L}, {DType::i64});
  } else {
    auto tok = data::load_tokenizer(in.tokenizer_dir);
    data::BatchEncoding enc = f.given("text-pair") ? data::encode_batch_pairs(*tok, {{in.text, in.text_pair}})
                                                   : data::encode_batch(*tok, {in.text});
    ids = enc.input_ids;
    types = enc.token_type_ids;
    mask = enc.attention_mask;
  }
  NoGradGuard ng;
  auto t0 = std::chrono::steady_clock::now();
  Tensor logits = bert.forward(ids.to(device), types.to(device), mask.to(device));
  const double s = seconds_since(t0);
  json r = report_logits(logits, bert);
  r["input_ids"] = to_vector<int64_t>(ids);
  r["forward_seconds"] = s;
  return r;
}

json run_vit(nn::ViTForImageClassification& vit, const Inputs& in, Device device) {
  const int64_t size = vit.vit->cfg.image_size;
  const std::string pre = in.model_dir + "/preprocessor_config.json";
  ImagePreprocess p = std::filesystem::exists(pre) ? ImagePreprocess::load(pre, size) : ImagePreprocess::defaults(size);
  Tensor pixels = unsqueeze(image_to_pixels(read_image(in.image), p), 0);  // (1,3,H,W)
  NoGradGuard ng;
  auto t0 = std::chrono::steady_clock::now();
  Tensor logits = vit.forward(pixels.to(device));
  const double s = seconds_since(t0);
  json r = report_logits(logits, vit);
  r["image"] = in.image;
  r["forward_seconds"] = s;
  return r;
}

int run(int argc, char** argv) {
  apps::Flags f("hf_run",
                "hf_run: runs an HF model folder (config.json + safetensors): text generation for GPT-2 and Llama, "
                "class logits for BERT (text) and ViT (an image).\n"
                "Every attention layer can be swapped for a linear feature map with --mixer (untrained maps give\n"
                "the converted-but-not-distilled model).");
  f.add("model", "", "HF model folder (config.json; model.safetensors, model.safetensors.index.json, pytorch_model.bin\n"
        "                       or pytorch_model.bin.index.json)");
  f.add("prompt", "", "decoders: the prompt text (needs a tokenizer in the folder or --tokenizer)");
  f.add("ids", "", "token ids instead of text, comma-separated (decoders: the prompt; BERT: the input)");
  f.add("tokenizer", "", "folder with the tokenizer files (default: the model folder)");
  f.add("max-new-tokens", "32", "decoders: tokens to generate");
  f.add("temperature", "1.0", "decoders: sampling temperature; 0 = greedy");
  f.add("top-k", "0", "decoders: sample among the k most likely tokens (0 = all)");
  f.add("top-p", "1.0", "decoders: nucleus sampling mass (1 = all)");
  f.add("stop-at-eos", "true", "decoders: stop when the end-of-sequence token is generated", true);
  f.add("text", "", "BERT: the input text");
  f.add("text-pair", "", "BERT: a second text ([CLS] text [SEP] pair [SEP])");
  f.add("token-types", "", "BERT with --ids: the token type of each id (default all 0)");
  f.add("image", "", "ViT: an image file (PNG or binary PPM)");
  f.add("mixer", "softmax", "attention of every layer: softmax, or a feature map (hedgehog, taylor, ...)");
  f.add("form", "chunked", "linear mixers: chunked, quadratic, noncausal or recurrent");
  apps::CommonFlagSpec common;
  common.seed_help = "decoders: sampling seed";
  common.out = true;
  common.out_help = "folder for results.json and report.html (optional)";
  apps::add_common_flags(f, common);
  if (!f.parse(argc, argv)) return 0;

  // Everything checkable is checked before the model is read.
  Inputs in{f.str("model"), f.str("out"), f.str("prompt"), f.str("ids"), f.str("text"), f.str("text-pair"),
            f.str("image"), f.str("tokenizer")};
  HH_CHECK(!in.model_dir.empty(), "--model is required: no model folder given (see --help)");
  if (in.tokenizer_dir.empty()) in.tokenizer_dir = in.model_dir;
  nn::HFModelOptions opt;
  opt.mixer = nn::parse_mixer(f.str("mixer"), "--mixer");
  opt.form = nn::parse_linear_form(f.str("form"));
  const apps::CommonFlags c = apps::read_common_flags(f, common);
  opt.device = c.device;
  const Precision precision = c.precision;
  if (c.threads > 0) set_num_threads(static_cast<int>(c.threads));
  f.integer("max-new-tokens", 0, 1 << 20);
  f.number("temperature", 0.0, 100.0);
  f.integer("top-k", 0);
  f.number("top-p", 1e-6, 1.0);
  f.boolean("stop-at-eos");
  if (!in.out_dir.empty()) train::check_output_folder(in.out_dir);
  const int inputs_given = !in.prompt.empty() + !in.ids.empty() + !in.text.empty() + !in.image.empty();
  HH_CHECK(inputs_given == 1, "give exactly one input: --prompt or --ids (GPT-2, Llama), --text or --ids (BERT), "
                              "--image (ViT); got ", inputs_given);

  auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<nn::HFModel> model = nn::load_hf_model(in.model_dir, opt);
  const double load_s = seconds_since(t0);
  std::printf("loaded %s (%s, %lld parameters, attention: %s) in %.2f s\n", in.model_dir.c_str(),
              model->architecture().c_str(), static_cast<long long>(model->num_parameters()),
              nn::name(model->options().mixer).c_str(), load_s);

  json result;
  PrecisionGuard autocast(precision);
  if (auto* lm = dynamic_cast<nn::CausalLM*>(model.get())) {
    HH_CHECK(in.text.empty() && in.image.empty(), model->architecture(), " generates text: give --prompt or --ids");
    result = run_decoder(*lm, f, in);
  } else if (auto* bert = dynamic_cast<nn::BertForSequenceClassification*>(model.get())) {
    HH_CHECK(in.prompt.empty() && in.image.empty(), model->architecture(), " classifies text: give --text or --ids");
    result = run_bert(*bert, f, in, opt.device);
  } else if (auto* vit = dynamic_cast<nn::ViTForImageClassification*>(model.get())) {
    HH_CHECK(!in.image.empty(), model->architecture(), " classifies images: give --image");
    result = run_vit(*vit, in, opt.device);
  } else {
    fail(str(model->architecture(), ": hf_run has no task for this architecture"));
  }
  result["model"] = in.model_dir;
  result["architecture"] = model->architecture();
  result["mixer"] = nn::name(model->options().mixer);  // what the folder runs (a converted folder: its own map)
  result["device"] = f.str("device");
  result["precision"] = precision_name(precision);
  result["load_seconds"] = load_s;
  if (!in.out_dir.empty()) {
    write_file_atomic(in.out_dir + "/results.json", result.dump(2) + "\n");
    write_file_atomic(in.out_dir + "/report.html", apps::hf_run_report_html(result));
    std::printf("wrote %s/results.json and report.html\n", in.out_dir.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return hh::apps::run_main(argc, argv, run); }
