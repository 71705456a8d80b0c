// What convert_gpt2 and convert_llama add to the flags every convert_* app shares
// (cli/convert_flags.h: the flags, presets, parsing, resume check, row loop and closing report):
// the LM-only conversion flags (step caps, gradient clip, whether LoRA also trains the feature
// maps), the app flags both LM apps have (model, tokenizer, data, chunk), and the loading of the
// softmax teacher with its tokenizer, checked against each other.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/convert_flags.h"
#include "data/tokenizer.h"
#include "nn/gate.h"
#include "nn/models/hf_model.h"
#include "train/convert/convert.h"

namespace hh::cli {

// The paper's LoRA targets in a Llama/GPT-2 HF model (attention projections), and the LM apps'
// attention-fidelity batches: the LM defaults of two shared flags.
inline ConversionDefaults lm_conversion_defaults() {
  ConversionDefaults d;
  d.lora_targets = "q_proj,k_proj,v_proj,o_proj";
  d.fidelity_batches = 4;
  return d;
}

// The app flags both LM apps declare first; `data_help` says what --data holds.
inline void add_lm_app_flags(Flags& f, const std::string& model_help, const std::string& data_help) {
  f.add("model", "", model_help);
  f.add("tokenizer", "", "folder with the tokenizer (vocab.json + merges.txt or tokenizer.json); default: --model");
  f.add("data", "", data_help);
  f.add("chunk", "64", "chunk size of the chunked linear-attention form");
}

// The LM-only conversion flags, declared after the shared ones.
inline void add_lm_conversion_flags(Flags& f) {
  f.add("distill-max-steps", "0", "stage 1: stop after this many steps (0 = epochs only)");
  f.add("finetune-max-steps", "0", "stage 2: stop after this many steps (0 = epochs only)");
  f.add("grad-clip", "1.0", "stage 2: gradient norm clip (0 = off)");
  f.add("lora-train-maps", "true", "LoRA: also train the feature maps in stage 2");
  f.add("attention", "linear",
        "linear: each --feature-map row is plain linear attention; hybrid: LoLCATs' sliding window (--window "
        "softmax keys) + linear attention with the row's map");
  f.add("window", "64", "hybrid attention: the sliding window W (softmax over the last W keys)");
  f.add("window-affine", "false",
        "hybrid attention: weight the linear part by 1 - the window factor (LoLCATs' affine factors) instead of 1");
  f.add("blocks", "0",
        "stage 1 as LoLCATs' block-wise transfer, this many layers at a time on the teacher's hidden states "
        "(0 = the whole model at once)");
  f.add("hidden-on", "device",
        "block-wise transfer: hidden states between blocks on the device, in host memory, or on disk "
        "(memory-mapped shards under <out>/<row>/hidden)");
  f.add("kl-select-batches", "0",
        "--softmax-layers-by kl: validation batches the KL to the teacher is measured on (0 = all)");
  f.add("kl-select-finetune", "0",
        "--softmax-layers-by kl: logit-distillation steps (every weight, --logit-lr, --logit-temperature) given to "
        "the all-linear student and to each candidate before its KL, from the same weights each time (0 = none)");
  f.add("logit-distill-tokens", "0",
        "after stage 1, distill the teacher's next-token distributions over this many training tokens (0 = skip)");
  f.add("logit-lr", "1e-4", "logit distillation: AdamW learning rate");
  f.add("logit-temperature", "1", "logit distillation: softmax temperature T (the loss is T^2 KL)");
  f.add("logit-finetune", "full", "logit distillation trains: full (every weight) or lora (merged after)");
  f.add("logit-cache", "none",
        "logit distillation: none (the teacher's logits on the fly) or topk (the teacher runs once before the stage; "
        "its top-k logits per position go to shards under <out>/<row>/logit-cache, reused on --resume)");
  f.add("logit-topk", "64",
        "--logit-cache topk: the teacher's logits kept per position (1 to the vocabulary size); the rest of its "
        "mass is one bucket");
}

// The run's rows, made hybrid with --attention hybrid.
inline ConversionRun lm_conversion_run(const Flags& f) {
  ConversionRun r = conversion_run(f);
  const std::string a = f.str("attention");
  HH_CHECK(a == "linear" || a == "hybrid", "--attention: expected linear or hybrid, got '", a, "'");
  HH_CHECK(r.gate == nn::Gate::none || a == "linear", "--gate: a gate needs --attention linear (a hybrid's softmax ",
           "window has no state to gate)");
  if (a == "hybrid")
    for (train::ConversionRow& row : r.rows) row = train::hybrid_row(row);
  return r;
}

// The conversion's stages: the shared flags (conversion_config) and the LM-only ones, checked.
inline train::ConvertConfig lm_conversion_config(const Flags& f) {
  train::ConvertConfig c = conversion_config(f, /*teacher_logits=*/true);
  c.distill.kl_select_batches = f.integer("kl-select-batches", 0);
  c.distill.kl_select_finetune = f.integer("kl-select-finetune", 0, 1 << 20);
  const bool kl = c.distill.softmax_layers > 0 && c.distill.softmax_choice == train::SoftmaxLayerChoice::kl;
  for (const char* name : {"kl-select-batches", "kl-select-finetune"})
    HH_CHECK(!f.given(name) || kl, "--", name, ": only KL-guided selection (--softmax-layers auto:K with ",
             "--softmax-layers-by kl) measures a KL");
  c.distill.max_steps = f.integer("distill-max-steps", 0);
  c.finetune.max_steps = f.integer("finetune-max-steps", 0);
  c.finetune.grad_clip = f.number("grad-clip", 0, 1e6);
  c.finetune.train_feature_maps = f.boolean("lora-train-maps");
  c.distill.blocks = f.integer("blocks", 0, 1 << 20);
  try {
    c.distill.hidden = train::parse_hidden_place(f.str("hidden-on"));
  } catch (const Error& e) {
    fail(str("--hidden-on: ", e.what()));
  }
  HH_CHECK(c.distill.hidden == train::HiddenPlace::device || c.distill.blocks > 0,
           "--hidden-on: only block-wise transfer (--blocks N) keeps hidden states between blocks");
  c.logits.tokens = f.integer("logit-distill-tokens", 0);
  c.logits.lr = f.number("logit-lr", 1e-12, 10);
  c.logits.temperature = f.number("logit-temperature", 1e-3, 1e3);
  c.logits.grad_clip = c.finetune.grad_clip;
  c.logits.mode = f.str("logit-finetune");
  HH_CHECK(c.logits.mode == "full" || c.logits.mode == "lora", "--logit-finetune: expected full or lora, got '",
           c.logits.mode, "'");
  try {
    c.logits.cache = train::parse_logit_cache(f.str("logit-cache"));
  } catch (const Error& e) {
    fail(str("--logit-cache: ", e.what()));
  }
  HH_CHECK(c.logits.cache == train::LogitCache::none || c.logits.tokens > 0,
           "--logit-cache: only logit distillation (--logit-distill-tokens N) has teacher logits to cache");
  c.logits.topk = f.integer("logit-topk", 1, INT32_MAX);  // at most the vocabulary: load_lm_teacher
  HH_CHECK(!f.given("logit-topk") || c.logits.cache == train::LogitCache::topk,
           "--logit-topk: only the top-k logit cache (--logit-cache topk) keeps a top-k");
  f.integer("window", 1, 1 << 20);  // checked here, before any work; used by load_lm_student
  return c;
}

// Whether the students' tasks need the softmax teacher: logit distillation, or KL-guided choice of
// the softmax layers.
inline bool needs_teacher_logits(const train::ConvertConfig& c) {
  return c.logits.tokens > 0 || (c.distill.softmax_layers > 0 && c.distill.softmax_choice == train::SoftmaxLayerChoice::kl);
}

// The settings that shape a converted LM (conversion_settings plus the LM-only ones and the
// shared app flags); the app adds its data's.
inline nlohmann::json lm_conversion_settings(const std::string& app, const Flags& f, const train::ConvertConfig& c,
                                             const ConversionRun& r) {
  nlohmann::json s = conversion_settings(f, c, r);
  s.update({{"app", app},
            {"distill_max_steps", c.distill.max_steps},
            {"finetune_max_steps", c.finetune.max_steps},
            {"grad_clip", c.finetune.grad_clip},
            {"lora_train_maps", c.finetune.train_feature_maps},
            {"model", f.str("model")},
            {"tokenizer", f.str("tokenizer")},
            {"data", f.str("data")},
            {"chunk", f.integer("chunk", 1, 1 << 20)}});
  // Settings added later are written only when set, so earlier runs' fingerprints still match.
  if (f.str("attention") != "linear") s.update({{"attention", f.str("attention")}, {"window", f.integer("window", 1, 1 << 20)}});
  if (f.boolean("window-affine")) s["window_affine"] = true;
  if (c.distill.blocks > 0) s.update({{"blocks", c.distill.blocks}, {"hidden_on", train::hidden_place_name(c.distill.hidden)}});
  if (c.distill.softmax_layers > 0 && c.distill.softmax_choice == train::SoftmaxLayerChoice::kl) {
    s["kl_select_batches"] = c.distill.kl_select_batches;
    if (c.distill.kl_select_finetune > 0)  // its steps run at the logit stage's lr and temperature
      s.update({{"kl_select_finetune", c.distill.kl_select_finetune},
                {"logit_lr", c.logits.lr},
                {"logit_temperature", c.logits.temperature}});
  }
  if (c.logits.tokens > 0)
    s.update({{"logit_distill_tokens", c.logits.tokens},
              {"logit_lr", c.logits.lr},
              {"logit_temperature", c.logits.temperature},
              {"logit_finetune", c.logits.mode}});
  if (c.logits.cache != train::LogitCache::none)
    s.update({{"logit_cache", train::logit_cache_name(c.logits.cache)}, {"logit_topk", c.logits.topk}});
  return s;
}

// The softmax teacher of --model (whose family must be one of `families`, e.g. {"gpt2"}; the error says that
// `app` converts `expected`) and the tokenizer of --tokenizer (default --model), whose vocabulary must fit the
// model's. `length_flag` = `length` tokens per sequence must fit the model's positions.
struct LmTeacher {
  std::shared_ptr<nn::CausalLM> model;
  std::shared_ptr<const data::Tokenizer> tokenizer;
};

inline LmTeacher load_lm_teacher(const Flags& f, const Device& device, const std::string& app,
                                 const std::vector<std::string>& families, const std::string& expected,
                                 const std::string& length_flag, int64_t length) {
  const std::string model_dir = f.str("model");
  nn::HFModelOptions o;
  o.mixer = nn::Mixer::softmax();
  o.device = device;
  LmTeacher t;
  t.model = nn::load_causal_lm(model_dir, o);
  HH_CHECK(std::find(families.begin(), families.end(), t.model->family()) != families.end(), "--model: ", model_dir,
           " holds a ", t.model->architecture(), " (family ", t.model->family(), "); ", app, " converts ", expected);
  HH_CHECK(t.model->max_positions() < 0 || length <= t.model->max_positions(), "--", length_flag, ": ", length,
           " exceeds the model's ", t.model->max_positions(), " positions");
  const std::string tok_dir = f.str("tokenizer").empty() ? model_dir : f.str("tokenizer");
  t.tokenizer = std::shared_ptr<const data::Tokenizer>(data::load_tokenizer(tok_dir).release());
  HH_CHECK(t.tokenizer->vocab_size() <= t.model->vocab_size(), "--tokenizer: ", tok_dir, " has ",
           t.tokenizer->vocab_size(), " tokens but the model's vocabulary has ", t.model->vocab_size());
  // The top-k of the logit cache must fit the vocabulary (checked here, before any conversion work).
  const int64_t topk = f.integer("logit-topk", 1, INT32_MAX);
  HH_CHECK(f.str("logit-cache") != "topk" || topk <= t.model->vocab_size(), "--logit-topk: ", topk,
           " exceeds the vocabulary of ", model_dir, " (", t.model->vocab_size(), " tokens)");
  // Kept softmax layers must be layers of this model (checked here, before any conversion work).
  const int64_t layers = t.model->num_layers();
  const int64_t keep = parse_softmax_layers_flag(f).count;
  HH_CHECK(keep < layers, "--softmax-layers: ", f.str("softmax-layers"), ", but ", model_dir, " has ", layers,
           " layers (keep fewer than all)");
  for (const std::string& s : Flags::split_list(f.str("softmax-layer-list")))
    HH_CHECK(std::stoll(s) < layers, "--softmax-layer-list: layer ", s, " is not one of the ", layers, " layers of ",
             model_dir, " (0 to ", layers - 1, ")");
  return t;
}

// A student of --model: the teacher's weights with `mixer` attention in the chunked form, its state
// gated by `gate` (none for a softmax mixer).
inline std::shared_ptr<nn::CausalLM> load_lm_student(const Flags& f, const nn::Mixer& mixer, nn::Gate gate,
                                                     uint64_t seed, const Device& device) {
  nn::HFModelOptions o;
  o.mixer = mixer;
  o.gate = mixer.is_linear() && !mixer.is_hybrid() ? gate : nn::Gate::none;
  if (o.gate != nn::Gate::none) o.gate_output = nn::parse_gate_output(f.str("gate-output"), "--gate-output");
  o.form = nn::LinearForm::chunked;
  o.chunk = f.integer("chunk", 1, 1 << 20);
  o.window = f.integer("window", 1, 1 << 20);
  o.feature_map.hybrid_affine = f.boolean("window-affine");
  o.seed = seed;
  o.device = device;
  return nn::load_causal_lm(f.str("model"), o);
}

}  // namespace hh::cli
