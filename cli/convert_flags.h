// The flags every convert_* app shares, with one vocabulary: the conversion's hyperparameters
// (stage 1 distillation, stage 2 finetuning, LoRA) and the run's (batch, seed, device, output),
// their per-app and per-preset defaults, their parsing and checks, and the task-free pieces of an
// app's run: the settings record that checkpoints are fingerprinted with, the check of --resume
// before any work, the loop over the rows (folders, checkpoints, --save), the closing table.
//
// An app calls parse_conversion_flags with its own flags (a function that declares them) and its
// presets; the named preset (the first one when --preset is not given) sets the defaults of the
// shared flags, and a flag given on the command line always wins over its preset. Then:
// conversion_config and conversion_run read the shared flags, conversion_settings (plus the app's
// model and data) records them, check_resume, convert_rows (the app builds each student) and
// finish_conversion.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "cli/app.h"
#include "cli/flags.h"
#include "core/atomic_file.h"
#include "core/backend.h"
#include "core/device.h"
#include "core/parallel.h"
#include "core/safetensors.h"
#include "core/stop.h"
#include "nn/gate.h"
#include "nn/models/hf_model.h"
#include "nn/models/hf_save.h"
#include "train/convert/convert.h"
#include "train/convert/convert_report.h"
#include "train/run_dir.h"

namespace hh::cli {

// Defaults of the shared flags, for one app and preset (the flag each one sets in brackets).
struct ConversionDefaults {
  std::string feature_map = "paper";  // --feature-map: the students
  // stage 1: attention distillation (paper App. A.3: AdamW, lr 1e-2, wd 0)
  int64_t distill_epochs = 5;     // --distill-epochs (0 = skip stage 1)
  double distill_lr = 1e-2;       // --distill-lr
  double distill_wd = 0.0;        // --distill-wd
  int64_t distill_patience = 1;   // --distill-patience
  std::string loss = "xent";      // --loss: xent (soft-ce) or kl
  // stage 2: finetuning
  int64_t finetune_epochs = 5;    // --finetune-epochs (0 = none)
  double lr = 1e-5;               // --lr
  double weight_decay = 0.0;      // --weight-decay
  int64_t patience = 0;           // --patience (0 = never stop early)
  std::string schedule = "cosine";  // --schedule: cosine, linear or constant
  double warmup = 0.0;            // --warmup: fraction of stage 2's steps
  std::string finetune = "full";  // --finetune: full or lora
  int64_t lora_rank = 8;          // --lora-rank
  double lora_alpha = 16.0;       // --lora-alpha
  std::string lora_targets = "query,key,value";  // --lora-targets: Linear names
  // the run
  int64_t batch = 8;              // --batch (both stages and evaluation)
  int64_t fidelity_batches = 8;   // --fidelity-batches
  std::string out = "out/convert";  // --out
};

struct ConversionPreset {
  std::string name;   // the value of --preset
  std::string about;  // for --help, e.g. "App. B.2/B.4"
  ConversionDefaults defaults;
};

// The shortest decimal text that reads back as x (a flag's default is text).
inline std::string number_text(double x) {
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

// Declares the shared flags with the defaults `d`.
// The common flags of every convert app (cli/app.h); `out` is the default output folder.
inline CommonFlagSpec conversion_common(const std::string& out) {
  CommonFlagSpec c;
  c.seed_help = "seed of the new feature-map weights, held-out rows, batch order and LoRA";
  c.resume = true;
  c.resume_help = "continue each row from its checkpoint under --out (same settings)";
  c.out = true;
  c.out_default = out;
  c.out_help = "output folder: results.json/csv, config.json, report.html, <row>/checkpoint.safetensors";
  return c;
}

inline void add_conversion_flags(Flags& f, const ConversionDefaults& d) {
  const auto num = [](double x) { return number_text(x); };
  const auto integer = [](int64_t x) { return std::to_string(x); };
  f.add("feature-map", d.feature_map, "the students: paper (the paper's five rows) or a comma list of feature maps");
  f.add("gate", "none",
        "gate on every linear student's state (causal models only): none, decay (RetNet), gla (a new gate "
        "projection), liger (Liger: from the key projection, no new weights) or delta; each row is named "
        "<row>+<gate>");
  f.add("gate-output", "normalizer", "output of the gated students: normalizer or groupnorm (GLA's RMSNorm per head)");
  f.add("distill-epochs", integer(d.distill_epochs), "stage 1: maximum epochs of attention distillation (0 = skip)");
  f.add("distill-lr", num(d.distill_lr), "stage 1: AdamW learning rate");
  f.add("distill-wd", num(d.distill_wd), "stage 1: AdamW weight decay");
  f.add("distill-patience", integer(d.distill_patience),
        "stage 1: epochs without a lower validation loss before stopping");
  f.add("loss", d.loss, "distillation loss: xent (soft cross-entropy; soft-ce is the same) or kl");
  f.add("mean-heads", "false", "average the distillation loss over layers and heads instead of summing", true);
  f.add("output-mse", "0", "weight of the attention-output MSE term in the distillation loss");
  f.add("transfer", "xent",
        "stage 1 loss per layer: xent (the weights term of --loss), mse (LoLCATs: the attention outputs' MSE, "
        "weight --output-mse or 1; no (L,L) matrix) or both");
  f.add("softmax-layers", "0",
        "after stage 1, keep layers as softmax: N = the N layers of highest transfer error; auto:K = K layers "
        "(1 <= K < the model's layers) chosen by --softmax-layers-by");
  f.add("softmax-layers-by", "kl",
        "how auto:K chooses: kl (each layer restored to the teacher's softmax in turn on the all-linear student; "
        "the K largest drops of the validation next-token KL to the teacher; LM apps), transfer (highest transfer "
        "error) or every (layers floor(i*L/K), i = 0..K-1 of L: 0 for K = 1, 0,4,...,24 for 7 of 28)");
  f.add("softmax-layer-list", "", "or keep exactly these layers (0-based comma list) as softmax");
  f.add("finetune-epochs", integer(d.finetune_epochs), "stage 2: maximum epochs of finetuning (0 = none)");
  f.add("lr", num(d.lr), "stage 2: AdamW learning rate");
  f.add("weight-decay", num(d.weight_decay), "stage 2: AdamW weight decay");
  f.add("patience", integer(d.patience),
        "stage 2: epochs without a better validation metric before stopping (0 = never)");
  f.add("schedule", d.schedule, "stage 2 learning-rate schedule: cosine, linear or constant");
  f.add("warmup", num(d.warmup), "stage 2 warmup, a fraction of its steps");
  f.add("finetune", d.finetune, "stage 2 trains: full (every weight) or lora");
  f.add("lora-rank", integer(d.lora_rank), "LoRA rank");
  f.add("lora-alpha", num(d.lora_alpha), "LoRA alpha");
  f.add("lora-targets", d.lora_targets, "LoRA: comma list of the Linear names that get adapters");
  f.add("joint-weight", "0", "> 0: the joint variant (stage 2 trains task loss + this x distillation loss)");
  f.add("batch", integer(d.batch), "batch size (both stages and evaluation)");
  f.add("fidelity-batches", integer(d.fidelity_batches),
        "test batches for the attention fidelity (KL, entropy, monotonicity)");
  add_common_flags(f, conversion_common(d.out));
  f.add("save", "false", "write each converted model as an HF folder under <out>/<row>/model (loads back)", true);
  f.add("quiet", "false", "plain progress lines instead of a bar", true);
}

// The value of --preset in argv ("" when absent), read before the flags are declared so that
// --help shows the named preset's defaults.
inline std::string preset_in_args(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--preset" && i + 1 < argc) return argv[i + 1];
    if (a.rfind("--preset=", 0) == 0) return a.substr(9);
  }
  return "";
}

// Declares the app's own flags (declare_app_flags, given the preset in force, for apps whose own
// flags have per-preset defaults), --preset and the shared flags, and parses argv. The defaults
// of the shared flags are those of the preset that --preset names (the first of `presets` when it
// is not given), --help included. --help gives nullopt.
inline std::optional<Flags> parse_conversion_flags(
    const std::string& program, const std::string& about, const std::vector<ConversionPreset>& presets,
    const std::function<void(Flags&, const ConversionPreset&)>& declare_app_flags, int argc, char** argv) {
  HH_CHECK(!presets.empty(), "internal: ", program, " has no preset");
  std::string names, help;
  for (const auto& p : presets) {
    names += (names.empty() ? "" : " or ") + p.name;
    help += (help.empty() ? "" : ", ") + p.name + (p.about.empty() ? "" : " (" + p.about + ")");
  }
  auto find = [&](const std::string& name) {
    return std::find_if(presets.begin(), presets.end(), [&](const ConversionPreset& p) { return p.name == name; });
  };
  auto declare = [&](const ConversionPreset& p) {
    Flags f(program, about);
    declare_app_flags(f, p);
    f.add("preset", presets.front().name,
          "defaults of the conversion flags: " + help + "; a flag given always wins");
    add_conversion_flags(f, p.defaults);
    return f;
  };
  // A first guess from a plain scan of argv (so that --help shows that preset), checked by the parse.
  auto guess = find(preset_in_args(argc, argv));
  if (guess == presets.end()) guess = presets.begin();
  Flags first = declare(*guess);
  if (!first.parse(argc, argv)) return std::nullopt;
  const std::string name = first.str("preset");
  auto it = find(name);
  HH_CHECK(it != presets.end(), "--preset: expected ", names, ", got '", name, "'");
  if (it == guess) return first;
  Flags f = declare(*it);
  f.parse(argc, argv);  // the same arguments: they parsed above
  return f;
}

// The same, for apps whose own flags do not depend on the preset.
inline std::optional<Flags> parse_conversion_flags(const std::string& program, const std::string& about,
                                                   const std::vector<ConversionPreset>& presets,
                                                   const std::function<void(Flags&)>& declare_app_flags,
                                                   int argc, char** argv) {
  return parse_conversion_flags(
      program, about, presets, [&](Flags& f, const ConversionPreset&) { declare_app_flags(f); }, argc, argv);
}

// --softmax-layers (N or auto:K) and --softmax-layers-by, parsed once: how many layers stay softmax
// and how they are chosen (a plain N: by transfer error). Errors name the flag.
struct SoftmaxLayersFlag {
  int64_t count = 0;
  bool automatic = false;  // auto:K
  train::SoftmaxLayerChoice choice = train::SoftmaxLayerChoice::transfer;
};

inline SoftmaxLayersFlag parse_softmax_layers_flag(const Flags& f) {
  SoftmaxLayersFlag s;
  const std::string v = f.str("softmax-layers");
  if (v.rfind("auto:", 0) == 0) {
    const std::string k = v.substr(5);
    size_t used = 0;
    try {
      s.count = std::stoll(k, &used);
    } catch (...) {
      used = 0;
    }
    HH_CHECK(used == k.size() && !k.empty(), "--softmax-layers: '", v, "': expected auto:K with K a layer count");
    HH_CHECK(s.count >= 1, "--softmax-layers: ", v, ": K must be >= 1 (auto:K keeps K layers; 0 keeps none: "
             "leave the flag out)");
    s.automatic = true;
    try {
      s.choice = train::parse_softmax_layer_choice(f.str("softmax-layers-by"));
    } catch (const Error& e) {
      fail(str("--softmax-layers-by: ", e.what()));
    }
  } else {
    s.count = f.integer("softmax-layers", 0, 1 << 20);
    HH_CHECK(!f.given("softmax-layers-by"), "--softmax-layers-by: only with --softmax-layers auto:K (a plain N keeps ",
             "the N layers of highest transfer error)");
  }
  return s;
}

// The conversion's stages from the shared flags, every value checked (the error names the flag).
// teacher_logits: the app has the softmax teacher's next-token logits (the LM apps), which
// KL-guided layer selection needs; without them --softmax-layers-by kl is refused here.
inline train::ConvertConfig conversion_config(const Flags& f, bool teacher_logits = false) {
  train::ConvertConfig c;
  c.distill.epochs = f.integer("distill-epochs", 0, 100000);
  c.distill.lr = f.number("distill-lr", 1e-12, 10);
  c.distill.weight_decay = f.number("distill-wd", 0, 10);
  c.distill.patience = f.integer("distill-patience", 1, 100000);
  const std::string loss = f.str("loss");
  HH_CHECK(loss == "xent" || loss == "soft-ce" || loss == "kl", "--loss: expected xent (or soft-ce) or kl, got '",
           loss, "'");
  nn::Transfer transfer = nn::Transfer::xent;
  try {
    transfer = nn::parse_transfer(f.str("transfer"));
  } catch (const Error& e) {
    fail(str("--transfer: ", e.what()));
  }
  const double mse = f.number("output-mse", 0, 1e6);
  if (transfer == nn::Transfer::xent) {  // --output-mse > 0 adds the MSE term, as before --transfer
    c.distill.loss.output_mse = mse;
  } else {
    c.distill.loss = nn::transfer_options(transfer, mse > 0 ? mse : 1.0);
  }
  c.distill.loss.kl = loss == "kl";
  c.distill.loss.mean_over_heads = f.boolean("mean-heads");
  const SoftmaxLayersFlag keep = parse_softmax_layers_flag(f);
  c.distill.softmax_layers = keep.count;
  c.distill.softmax_choice = keep.choice;
  HH_CHECK(teacher_logits || keep.choice != train::SoftmaxLayerChoice::kl, "--softmax-layers-by kl: this app has no ",
           "teacher next-token logits to measure a KL on (convert_gpt2 and convert_llama have); give ",
           "--softmax-layers-by transfer or every");
  for (const std::string& s : Flags::split_list(f.str("softmax-layer-list"))) {
    int64_t l = -1;
    try {
      size_t used = 0;
      l = std::stoll(s, &used);
      HH_CHECK(used == s.size(), "");
    } catch (...) {
      fail(str("--softmax-layer-list: '", s, "' is not a layer number"));
    }
    HH_CHECK(l >= 0, "--softmax-layer-list: layer ", l, " is negative");
    c.distill.softmax_layer_list.push_back(l);
  }
  HH_CHECK(c.distill.softmax_layers == 0 || c.distill.softmax_layer_list.empty(),
           "--softmax-layers and --softmax-layer-list: give one of them");
  c.finetune.epochs = f.integer("finetune-epochs", 0, 100000);
  c.finetune.lr = f.number("lr", 1e-12, 10);
  c.finetune.weight_decay = f.number("weight-decay", 0, 10);
  c.finetune.patience = f.integer("patience", 0, 100000);
  c.finetune.schedule = f.str("schedule");
  HH_CHECK(c.finetune.schedule == "cosine" || c.finetune.schedule == "linear" || c.finetune.schedule == "constant",
           "--schedule: expected cosine, linear or constant, got '", c.finetune.schedule, "'");
  c.finetune.warmup_fraction = f.number("warmup", 0, 1);
  c.finetune.mode = f.str("finetune");
  HH_CHECK(c.finetune.mode == "full" || c.finetune.mode == "lora", "--finetune: expected full or lora, got '",
           c.finetune.mode, "'");
  c.finetune.lora_rank = f.integer("lora-rank", 1, 1 << 16);
  c.finetune.lora_alpha = f.number("lora-alpha", 1e-9, 1e9);
  c.finetune.lora_targets = Flags::split_list(f.str("lora-targets"));
  HH_CHECK(!c.finetune.lora_targets.empty(), "--lora-targets: no Linear name given");
  c.finetune.joint_weight = f.number("joint-weight", 0, 1e6);
  c.finetune.joint_loss = c.distill.loss;
  const CommonFlags common = read_common_flags(f, conversion_common(f.str("out")));
  c.seed = common.seed;
  c.quiet = f.boolean("quiet");
  c.resume = common.resume;
  return c;
}

// The shared flags that are not the stages' (checked; --device cuda needs a CUDA build and GPU).
struct ConversionRun {
  std::vector<train::ConversionRow> rows;  // --feature-map, labelled "<row>+<gate>" when gated
  nn::Gate gate = nn::Gate::none;           // --gate
  nn::GateOutput gate_output = nn::GateOutput::normalizer;  // --gate-output
  int64_t batch = 8;
  int64_t fidelity_batches = 8;
  int threads = 1;                          // --threads resolved (0 = every core)
  Device device;
  Precision precision = Precision::f32;
  std::string out;
  bool save = false;
};

inline ConversionRun conversion_run(const Flags& f) {
  ConversionRun r;
  r.rows = train::parse_conversion_rows(f.str("feature-map"));
  r.gate = nn::parse_gate(f.str("gate"), "--gate");
  r.rows = train::gated_rows(r.rows, r.gate, "--gate");
  r.gate_output = nn::parse_gate_output(f.str("gate-output"), {r.gate}, "--gate-output");
  r.batch = f.integer("batch", 1, 1 << 20);
  r.fidelity_batches = f.integer("fidelity-batches", 1, 1 << 20);
  const CommonFlags common = read_common_flags(f, conversion_common(f.str("out")));
  r.threads = static_cast<int>(common.threads == 0 ? std::max(1, omp_get_num_procs()) : common.threads);
  r.device = common.device;
  r.precision = common.precision;
  r.out = common.out;
  train::refuse_system_folder(r.out);  // the app creates and checks it (train::check_output_folder)
  r.save = f.boolean("save");
  return r;
}

// Bidirectional apps (convert_bert, convert_vit): a gated state runs causally, so --gate other than
// none is refused before any work, naming the app.
inline void refuse_gate(const Flags& f, const std::string& app) {
  HH_CHECK(f.str("gate") == "none", "--gate: ", app, " converts a bidirectional encoder; a gated state needs a ",
           "causal model (convert_gpt2, convert_llama), got '", f.str("gate"), "'");
}

// A cap on the rows (examples, images) an app reads, as every app spells it: -1 = all, else a
// count >= 1 (0 is an error: it would leave nothing to train or evaluate on).
inline int64_t row_limit(const Flags& f, const std::string& name) {
  const int64_t n = f.integer(name, -1, INT64_MAX);
  HH_CHECK(n != 0, "--", name, ": 0 rows; use -1 for all or a count >= 1");
  return n;
}

// The settings that shape a converted model, under the flags' names (dashes as underscores): the
// "config" of results and the base of each row's checkpoint fingerprint. An app adds its own
// (model, data, split sizes). Threads, device, output and reporting flags are not in it.
inline nlohmann::json conversion_settings(const Flags& f, const train::ConvertConfig& c, const ConversionRun& r) {
  nlohmann::json s = {{"preset", f.str("preset")},
          {"distill_epochs", c.distill.epochs},
          {"distill_lr", c.distill.lr},
          {"distill_wd", c.distill.weight_decay},
          {"distill_patience", c.distill.patience},
          {"loss", c.distill.loss.kl ? "kl" : "xent"},
          {"mean_heads", c.distill.loss.mean_over_heads},
          {"output_mse", c.distill.loss.output_mse},
          {"finetune_epochs", c.finetune.epochs},
          {"lr", c.finetune.lr},
          {"weight_decay", c.finetune.weight_decay},
          {"patience", c.finetune.patience},
          {"schedule", c.finetune.schedule},
          {"warmup", c.finetune.warmup_fraction},
          {"finetune", c.finetune.mode},
          {"lora_rank", c.finetune.lora_rank},
          {"lora_alpha", c.finetune.lora_alpha},
          {"lora_targets", c.finetune.lora_targets},
          {"joint_weight", c.finetune.joint_weight},
          {"batch", r.batch},
          {"precision", precision_name(r.precision)},
          {"seed", c.seed}};
  // Settings added later are written only when set, so earlier runs' fingerprints still match.
  if (!c.distill.loss.weights) s["transfer"] = "mse";
  if (c.distill.softmax_layers > 0) s["softmax_layers"] = c.distill.softmax_layers;
  // How they were chosen; absent: by transfer error (a plain N, or auto:K by transfer: the same run).
  if (c.distill.softmax_layers > 0 && c.distill.softmax_choice != train::SoftmaxLayerChoice::transfer)
    s["softmax_layers_by"] = train::softmax_layer_choice_name(c.distill.softmax_choice);
  if (!c.distill.softmax_layer_list.empty()) s["softmax_layer_list"] = c.distill.softmax_layer_list;
  if (r.gate != nn::Gate::none) s["gate"] = nn::name(r.gate);
  if (r.gate_output != nn::GateOutput::normalizer) s["gate_output"] = nn::name(r.gate_output);
  return s;
}

// "Hedgehog (untrained)" -> "hedgehog-untrained", "1+ELU" -> "1pluselu": a row's folder name.
inline std::string row_slug(const std::string& label) {
  std::string s;
  for (char ch : label) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c)) {
      s += static_cast<char>(std::tolower(c));
    } else if (ch == '+') {
      s += "plus";
    } else if (!s.empty() && s.back() != '-') {
      s += '-';
    }
  }
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s.empty() ? "row" : s;
}

inline std::string row_dir(const std::string& out, const train::ConversionRow& row) {
  return out + "/" + row_slug(row.label);
}

// What a row's checkpoint is written with; --resume refuses a checkpoint with another one.
inline std::string row_fingerprint(const nlohmann::json& settings, const train::ConversionRow& row) {
  nlohmann::json fp = settings;
  fp["row"] = row.label;
  fp["mixer"] = nn::name(row.mixer);
  fp["distill"] = row.distill;
  return fp.dump();
}

// With --resume, before any work: at least one row has a checkpoint under `out`, and every one
// found was written with the same settings (train/run_dir.h's resume check: the error names the
// file, the settings that differ and what to do).
inline void check_resume(const std::vector<train::ConversionRow>& rows, const std::string& out,
                         const nlohmann::json& settings) {
  int found = 0;
  std::error_code ec;
  for (const auto& row : rows) {
    const std::string path = row_dir(out, row) + "/checkpoint.safetensors";
    if (!std::filesystem::exists(path, ec)) continue;
    ++found;
    const SafeTensors ck = load_safetensors(path);
    nlohmann::json written;
    try {
      const std::optional<std::string> fp = train::conversion_checkpoint_fingerprint(ck.metadata);
      HH_CHECK(fp.has_value(), "--resume: ", path, " is not a conversion checkpoint");
      written = nlohmann::json::parse(*fp);
    } catch (const nlohmann::json::exception& e) {
      fail(str("--resume: ", path, ": bad conversion state: ", e.what()));
    }
    train::check_same_settings(str(path, " was written with other settings, model or data"), written.dump(),
                               row_fingerprint(settings, row), {},
                               "rerun with the original flags, or without --resume (or another --out) to start afresh");
  }
  HH_CHECK(found > 0, "--resume: no checkpoint found under ", out, " (nothing to resume)");
}

// One row's student: the model (kept for --save) and the task that trains and evaluates it.
struct Student {
  std::shared_ptr<nn::HFModel> model;
  std::unique_ptr<train::ConversionTask> task;
};
using MakeStudent = std::function<Student(const nn::Mixer& mixer)>;

// Converts every row of --feature-map in turn, each with its folder <out>/<row>, its checkpoint
// there (fingerprinted with `settings`) and, with --save, the converted model written as an HF
// folder <out>/<row>/model (a failure marks the row, the run goes on). Outcomes go to rep.rows.
inline void convert_rows(const ConversionRun& opts, const train::ConvertConfig& cfg, const nlohmann::json& settings,
                         const std::string& model_folder, bool causal, const MakeStudent& make_student,
                         train::ConversionReport& rep) {
  for (const auto& row : opts.rows) {
    if (stop_requested()) {  // core/stop.h: the row in flight ended at a step (its checkpoint kept)
      std::cerr << "stopped (a stop was requested): the rows from " << row.label << " on were not run\n";
      break;
    }
    // "distilled" only when stage 1 runs: a trainable map with --distill-epochs 0 is not (issue 23).
    const bool distilled = row.distill && cfg.distill.epochs > 0;
    std::cerr << "== " << row.label << " (" << nn::name(row.mixer) << (distilled ? ", distilled" : ", no distillation")
              << ")\n";
    train::ConvertConfig rc = cfg;
    rc.precision = opts.precision;
    const std::string dir = row_dir(opts.out, row);
    ensure_writable_dir(dir);
    rc.checkpoint_path = dir + "/checkpoint.safetensors";
    rc.distill.hidden_folder = dir + "/hidden";  // block-wise transfer with --hidden-on disk
    rc.logits.cache_folder = dir + "/logit-cache";  // logit distillation with --logit-cache topk
    rc.fingerprint = row_fingerprint(settings, row);
    std::shared_ptr<nn::HFModel> student;
    try {
      rep.rows.push_back(train::run_conversion_row(
          row,
          [&](const nn::Mixer& mixer) {
            Student s = make_student(mixer);
            student = s.model;
            return std::move(s.task);
          },
          rc, causal, opts.fidelity_batches));
    } catch (const StopRequested&) {
      break;  // its checkpoint is written; finish_conversion ends the run for --resume
    }
    train::ConversionOutcome& outcome = rep.rows.back();
    if (!opts.save || outcome.status != "ok") continue;
    try {
      HH_CHECK(student != nullptr, "no converted model");
      nn::save_hf_model(*student, dir + "/model", model_folder);
      std::cerr << "saved: " << dir << "/model\n";
    } catch (const Error& e) {
      outcome.status = str("error: saving the model: ", e.what());
    }
  }
}

// The conversion apps' run folder (train/run_dir.h), opened before any long work (the folder
// checks and its lock): a fresh run sets the previous result aside (results, report, figures, each
// row's checkpoint and saved model) and puts it back whole when it fails; a run stopped early
// (--stop-after-epochs) leaves both for --resume. The settings live in each row's checkpoint.
inline std::unique_ptr<train::RunDir> open_conversion_folder(const std::string& out) {
  train::RunDir::Options o;
  o.settings_file = "";
  return std::make_unique<train::RunDir>(out, o);
}

// Starts the run (after the resume checks): the files of this conversion.
inline void start_conversion_folder(train::RunDir& folder, const std::vector<train::ConversionRow>& rows,
                                    const nlohmann::json& settings, bool resume) {
  const std::vector<std::string> reports = {"config.json", "results.json", "results.csv", "report.html", "*.svg"};
  std::vector<std::string> results = reports;
  for (const auto& row : rows) {
    const std::string dir = row_slug(row.label);
    for (const char* f : {"/checkpoint.safetensors", "/model/*"}) results.push_back(dir + f);
  }
  folder.start(settings.dump(), resume, results, reports);
}

// The end of a run: prints the table, writes the report under `out`, ends the run folder (the
// previous result dropped, kept for --resume, or put back) and fails (an error, exit 1 from main)
// when a row did not finish. After a requested stop (core/stop.h) it writes no report, leaves the
// folder for --resume and throws StopRequested.
inline void finish_conversion(const std::string& out, const train::ConversionReport& rep, train::RunDir& folder) {
  if (stop_requested()) {  // core/stop.h (Ctrl-C in Python): no report; the checkpoints stay for --resume
    const std::string note = folder.finish(train::RunDir::End::partial);
    if (!note.empty()) std::cerr << note << "\n";
    std::cerr << "stopped: the rows' checkpoints under " << out << " are kept (--resume continues)\n";
    throw StopRequested("convert");
  }
  std::cout << "\n" << rep.title << "\n" << train::conversion_table(rep);
  size_t failed = 0;
  bool interrupted = false;
  for (const auto& o : rep.rows) {
    failed += o.status != "ok";
    interrupted = interrupted || o.result.interrupted;
  }
  try {
    train::write_conversion_report(out, rep);
  } catch (const Error&) {
    const std::string note = folder.finish(train::RunDir::End::failed);
    if (!note.empty()) std::cerr << note << "\n";
    throw;
  }
  std::cout << "report: " << out << "/report.html\n";
  const std::string note = folder.finish(failed ? train::RunDir::End::failed
                                         : interrupted ? train::RunDir::End::partial
                                                       : train::RunDir::End::complete);
  if (!note.empty()) std::cerr << note << "\n";
  HH_CHECK(failed == 0, failed, " of ", rep.rows.size(), " rows failed (see the table)");
}

}  // namespace hh::cli
