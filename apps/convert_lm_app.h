// What convert_gpt2 and convert_llama share: the conversion flags (with a preset's defaults), the
// ConvertConfig they describe, the resume fingerprint, and the loop over the rows (one checkpoint
// per row under <out>/<row slug>/) that ends with the report.
#pragma once
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "apps/flags.h"
#include "core/atomic_file.h"
#include "core/backend.h"
#include "core/device.h"
#include "train/ar_report.h"
#include "train/convert.h"
#include "train/convert_report.h"

namespace hh::apps {

// The value of --preset in argv ("" when absent), read before the flags are declared so that the
// preset's values become their defaults (and --help shows them).
inline std::string preset_in_args(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--preset" && i + 1 < argc) return argv[i + 1];
    if (a.rfind("--preset=", 0) == 0) return a.substr(9);
  }
  return "";
}

// Declares the conversion flags; `d` gives each one's default (every name below must be in it). The
// names, meanings and values are those of every convert_* app (apps/convert_flags.h for
// convert_bert and convert_vit); the LM-only ones (max steps, gradient clip, lora-train-maps) follow.
inline void add_conversion_flags(Flags& f, std::map<std::string, std::string> d) {
  f.add("feature-map", "paper", "the students: paper (the paper's rows) or a comma list of feature maps");
  f.add("distill-epochs", d["distill-epochs"], "stage 1: maximum epochs of attention distillation (0 = skip)");
  f.add("distill-lr", d["distill-lr"], "stage 1: AdamW learning rate");
  f.add("distill-wd", "0", "stage 1: AdamW weight decay");
  f.add("distill-patience", "1", "stage 1: epochs without a lower validation loss before stopping");
  f.add("loss", "xent", "distillation loss: xent (soft cross-entropy; soft-ce is the same) or kl");
  f.add("mean-heads", "false", "average the distillation loss over layers and heads instead of summing", true);
  f.add("output-mse", "0", "weight of the attention-output MSE term in the distillation loss");
  f.add("finetune-epochs", d["finetune-epochs"], "stage 2: maximum epochs of finetuning (0 = none)");
  f.add("lr", d["lr"], "stage 2: AdamW learning rate");
  f.add("weight-decay", d["weight-decay"], "stage 2: AdamW weight decay");
  f.add("patience", "0", "stage 2: epochs without a better validation metric before stopping (0 = never)");
  f.add("schedule", "cosine", "stage 2 learning-rate schedule: cosine, linear or constant");
  f.add("warmup", d["warmup"], "stage 2 warmup, a fraction of its steps");
  f.add("finetune", d["finetune"], "stage 2 trains: full (every weight) or lora");
  f.add("lora-rank", "8", "LoRA rank");
  f.add("lora-alpha", "16", "LoRA alpha");
  f.add("lora-targets", "q_proj,k_proj,v_proj,o_proj", "LoRA: comma list of the Linear names that get adapters");
  f.add("joint-weight", "0", "> 0: the joint variant (stage 2 trains task loss + this x distillation loss)");
  f.add("batch", d["batch"], "sequences per batch (both stages and evaluation)");
  f.add("seed", "0", "seed for feature maps, LoRA and batch order");
  f.add("fidelity-batches", "4", "test batches for the attention fidelity (KL, entropy, monotonicity)");
  f.add("threads", "0", "CPU threads (0 = all cores)");
  f.add("device", "cpu", "cpu or cuda[:N]");
  f.add("resume", "false", "continue each row from its checkpoint under --out (same settings)", true);
  f.add("save", "false", "write each converted model as an HF folder under <out>/<row>/model", true);
  f.add("quiet", "false", "plain progress lines instead of a bar", true);
  f.add("out", d["out"], "output folder: results.json/csv, report.html, <row>/checkpoint.safetensors");
  // LM-only: step caps, gradient clipping, and whether LoRA finetuning also trains the feature maps.
  f.add("distill-max-steps", "0", "stage 1: stop after this many steps (0 = epochs only)");
  f.add("finetune-max-steps", "0", "stage 2: stop after this many steps (0 = epochs only)");
  f.add("grad-clip", "1.0", "stage 2: gradient norm clip (0 = off)");
  f.add("lora-train-maps", "true", "LoRA: also train the feature maps in stage 2");
}

// --device, checked: a CUDA device must be usable.
inline Device device_flag(const Flags& f) {
  const Device d = parse_device(f.str("device"));
  if (d.is_cuda()) HH_CHECK(cuda_available(), "--device ", f.str("device"), ": ", cuda_unavailable_reason());
  return d;
}

// --loss with its synonym resolved: "xent" (soft cross-entropy; also given as soft-ce) or "kl".
inline std::string loss_flag(const Flags& f) {
  const std::string loss = f.str("loss");
  HH_CHECK(loss == "xent" || loss == "soft-ce" || loss == "kl", "--loss: expected xent (or soft-ce) or kl, got '",
           loss, "'");
  return loss == "kl" ? "kl" : "xent";
}

// The app's flags (`app_names`: model, data, ...) and every conversion flag that shapes a converted
// model, as name=value; a resumed run must match it. --loss is recorded resolved, so soft-ce and
// xent resume each other. Threads, device, output and reporting flags are not in it.
inline std::string flags_fingerprint(const Flags& f, const std::vector<std::string>& app_names) {
  std::string s;
  for (const auto& n : app_names) s += n + "=" + f.str(n) + ";";
  for (const char* n : {"feature-map", "distill-epochs", "distill-lr", "distill-wd", "distill-patience"})
    s += std::string(n) + "=" + f.str(n) + ";";
  s += "loss=" + loss_flag(f) + ";";
  for (const char* n : {"mean-heads", "output-mse", "finetune-epochs", "lr", "weight-decay", "patience", "schedule",
                        "warmup", "finetune", "lora-rank", "lora-alpha", "lora-targets", "joint-weight", "batch",
                        "seed", "distill-max-steps", "finetune-max-steps", "grad-clip", "lora-train-maps"})
    s += std::string(n) + "=" + f.str(n) + ";";
  return s;
}

// The conversion's stages from the flags, every value checked (the error names the flag).
inline train::ConvertConfig conversion_config(const Flags& f) {
  train::ConvertConfig c;
  c.distill.epochs = f.integer("distill-epochs", 0, 100000);
  c.distill.lr = f.number("distill-lr", 1e-12, 10);
  c.distill.weight_decay = f.number("distill-wd", 0, 10);
  c.distill.patience = f.integer("distill-patience", 1, 100000);
  c.distill.max_steps = f.integer("distill-max-steps", 0);
  c.distill.loss.kl = loss_flag(f) == "kl";
  c.distill.loss.mean_over_heads = f.boolean("mean-heads");
  c.distill.loss.output_mse = f.number("output-mse", 0, 1e6);
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
  c.finetune.max_steps = f.integer("finetune-max-steps", 0);
  c.finetune.grad_clip = f.number("grad-clip", 0, 1e6);
  c.finetune.lora_rank = f.integer("lora-rank", 1, 65536);
  c.finetune.lora_alpha = f.number("lora-alpha", 1e-9, 1e9);
  c.finetune.lora_targets = Flags::split_list(f.str("lora-targets"));
  HH_CHECK(!c.finetune.lora_targets.empty(), "--lora-targets: no Linear name given");
  c.finetune.train_feature_maps = f.boolean("lora-train-maps");
  c.finetune.joint_weight = f.number("joint-weight", 0, 1e6);
  c.finetune.joint_loss = c.distill.loss;
  c.seed = static_cast<uint64_t>(f.integer("seed", 0));
  c.quiet = f.boolean("quiet");
  c.resume = f.boolean("resume");
  return c;
}

// Runs every row (make(mixer) builds a student task), calls save(<out>/<row slug>/model) after each
// row that succeeded (when save is set), and writes the report to `out`. Returns 1 when a row failed.
inline int run_rows(const std::vector<train::ConversionRow>& rows, const train::StudentFactory& make,
                    train::ConvertConfig cfg, int64_t fidelity_batches, const std::string& out,
                    train::ConversionReport& rep, const std::function<void(const std::string&)>& save) {
  int failed = 0;
  for (const auto& row : rows) {
    const std::string dir = out + "/" + train::file_slug(row.label);
    ensure_writable_dir(dir);
    cfg.checkpoint_path = dir + "/checkpoint.safetensors";
    std::cerr << "== " << row.label << (row.distill ? " (distilled)" : " (swap + finetune)") << "\n";
    rep.rows.push_back(train::run_conversion_row(row, make, cfg, true, fidelity_batches));
    const auto& o = rep.rows.back();
    if (o.status != "ok") {
      std::fprintf(stderr, "%s: %s\n", row.label.c_str(), o.status.c_str());
      ++failed;
    } else if (save) {
      save(dir + "/model");
      std::cerr << "saved " << dir << "/model\n";
    }
  }
  std::cout << "\n" << rep.title << "\n" << train::conversion_table(rep);
  train::write_conversion_report(out, rep);
  std::cout << "report: " << out << "/report.html\n";
  if (failed) std::fprintf(stderr, "error: %d of %zu rows failed (see the table)\n", failed, rows.size());
  return failed ? 1 : 0;
}

}  // namespace hh::apps
