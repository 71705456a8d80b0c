// convert_bert: converts an HF BERT sequence classifier (BertForSequenceClassification) finetuned
// on a GLUE task into linear attention (paper §4, App. B.2/B.4): every attention's softmax is
// swapped for a feature map; stage 1 distills the maps to mimic the softmax weights (the rest
// frozen), stage 2 finetunes on the task. One row per student (the paper's rows by default), each
// evaluated with the task's GLUE metrics against the softmax teacher, with fidelity (KL, entropy,
// monotonicity), the report (results.json/csv, report.html with figures) and per-row checkpoints.
//
// GLUE's test files have no labels: the dev file is the test split. Early stopping and model
// selection use a part of train held out as validation (--val-fraction), so dev stays untouched.
#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/flags.h"
#include "core/atomic_file.h"
#include "core/backend.h"
#include "core/parallel.h"
#include "core/safetensors.h"
#include "data/tokenizer.h"
#include "nn/models/bert.h"
#include "nn/models/hf_model.h"
#include "nn/models/hf_save.h"
#include "train/convert_glue.h"
#include "train/convert_report.h"

using namespace hh;

namespace {

// "Hedgehog (untrained)" -> "hedgehog-untrained": the row's folder under --out.
std::string slug(const std::string& label) {
  std::string s;
  for (char c : label) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (c == '+') {
      s += "plus";
    } else if (!s.empty() && s.back() != '-') {
      s += '-';
    }
  }
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s.empty() ? "row" : s;
}

std::shared_ptr<nn::BertForSequenceClassification> load_bert(const std::string& folder, const nn::HFModelOptions& o) {
  std::shared_ptr<nn::HFModel> m = nn::load_hf_model(folder, o);
  auto bert = std::dynamic_pointer_cast<nn::BertForSequenceClassification>(m);
  HH_CHECK(bert != nullptr, "--model ", folder, ": the model is a ", m->architecture(),
           "; convert_bert needs a BertForSequenceClassification");
  return bert;
}

void declare_flags(apps::Flags& f) {
  f.add("model", "", "HF model folder: config.json (BertForSequenceClassification), model.safetensors, tokenizer");
  f.add("task", "", "GLUE task: CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI or RTE");
  f.add("data", "", "the task's GLUE folder (train.tsv, dev.tsv; MNLI: dev_matched.tsv [, dev_mismatched.tsv])");
  f.add("feature-map", "paper", "the students: paper (the paper's five rows) or a comma list of feature maps");
  f.add("preset", "paper", "defaults of the hyperparameters: paper (App. B.2/B.4) or tiny (a smoke test)");
  f.add("distill-epochs", "preset", "stage 1: maximum epochs of attention distillation (paper 5, tiny 1; 0 = skip)");
  f.add("distill-lr", "preset", "stage 1: AdamW learning rate (paper 1e-2, tiny 1e-2)");
  f.add("distill-patience", "1", "stage 1: epochs without a lower validation loss before stopping");
  f.add("finetune-epochs", "preset", "stage 2: maximum epochs of finetuning (paper 5, tiny 1; 0 = skip)");
  f.add("lr", "preset", "stage 2: AdamW learning rate, cosine schedule (paper 1e-5, tiny 1e-3)");
  f.add("weight-decay", "0", "AdamW weight decay of both stages (paper: 0)");
  f.add("patience", "0", "stage 2: epochs without a better validation metric before stopping (0 = never)");
  f.add("batch", "preset", "batch size (paper 8, tiny 8)");
  f.add("max-length", "128", "tokens per example, specials included, longer ones truncated as HF does; when not given,\n"
        "                       at most the model's positions");
  f.add("max-train", "-1", "read at most this many training rows (-1 = all)");
  f.add("max-eval", "-1", "read at most this many dev rows (-1 = all)");
  f.add("val-fraction", "0.1", "fraction of train held out for validation (early stopping); 0 = validate on dev");
  f.add("skip-malformed", "false", "skip malformed TSV rows (counted) instead of failing", true);
  f.add("loss", "xent", "distillation loss: xent (soft cross-entropy) or kl");
  f.add("mean-heads", "false", "average the distillation loss over layers and heads instead of summing", true);
  f.add("output-mse", "0", "weight of the attention-output MSE term in the distillation loss");
  f.add("joint-weight", "0", "stage 2 joint variant: task loss + this x distillation loss (0 = off)");
  f.add("finetune", "full", "stage 2: full (every weight) or lora");
  f.add("lora-rank", "8", "LoRA rank");
  f.add("lora-alpha", "16", "LoRA alpha");
  f.add("lora-targets", "query,key,value", "LoRA: comma list of Linear names to adapt");
  f.add("fidelity-batches", "8", "test batches for the attention fidelity (KL, entropy, monotonicity)");
  f.add("seed", "0", "seed of the new feature-map weights, held-out rows, batch order and LoRA");
  f.add("threads", "0", "CPU threads (0 = all cores)");
  f.add("device", "cpu", "cpu or cuda[:N]");
  f.add("out", "out/convert_bert", "output folder: results.json/csv, report.html, <row>/checkpoint.safetensors");
  f.add("save", "false", "write each converted model as an HF folder under <out>/<row>/model (loads back)", true);
  f.add("resume", "false", "continue each row from its checkpoint under --out (same settings)", true);
  f.add("quiet", "false", "plain progress lines instead of a bar", true);
}

int run(int argc, char** argv) {
  apps::Flags f("convert_bert",
                "Converts an HF BERT classifier finetuned on a GLUE task into linear attention (Hedgehog, paper §4):\n"
                "swap every softmax attention for a feature map, distill the maps (stage 1), finetune (stage 2), and\n"
                "report the GLUE metrics against the softmax teacher. GLUE test files have no labels: dev is the\n"
                "test split; validation is a held-out part of train (--val-fraction).");
  declare_flags(f);
  if (!f.parse(argc, argv)) return 0;

  // ---- every flag checked before any file is read ----
  const std::string model_dir = f.str("model"), data_dir = f.str("data"), out = f.str("out");
  HH_CHECK(!model_dir.empty(), "--model: no model folder given");
  HH_CHECK(!f.str("task").empty(), "--task: no GLUE task given");
  HH_CHECK(!data_dir.empty(), "--data: no GLUE task folder given");
  const data::GlueTask task = data::glue_task(f.str("task"));
  const std::vector<train::ConversionRow> rows = train::parse_conversion_rows(f.str("feature-map"));
  const std::string preset = f.str("preset");
  HH_CHECK(preset == "paper" || preset == "tiny", "--preset: expected paper or tiny, got '", preset, "'");
  const bool paper = preset == "paper";
  auto pick = [&](const std::string& name, const std::string& paper_value, const std::string& tiny_value) {
    return f.given(name) ? f.str(name) : paper ? paper_value : tiny_value;
  };
  apps::Flags p("", "");  // the preset-resolved values, read with the same range checks
  p.add("distill-epochs", pick("distill-epochs", "5", "1"), "");
  p.add("distill-lr", pick("distill-lr", "1e-2", "1e-2"), "");
  p.add("finetune-epochs", pick("finetune-epochs", "5", "1"), "");
  p.add("lr", pick("lr", "1e-5", "1e-3"), "");
  p.add("batch", pick("batch", "8", "8"), "");
  train::ConvertConfig cfg;
  cfg.distill.epochs = p.integer("distill-epochs", 0, 100000);
  cfg.distill.lr = p.number("distill-lr", 1e-12, 10);
  cfg.finetune.epochs = p.integer("finetune-epochs", 0, 100000);
  cfg.finetune.lr = p.number("lr", 1e-12, 10);
  const int64_t batch = p.integer("batch", 1, 1 << 20);
  cfg.distill.patience = f.integer("distill-patience", 1, 100000);
  cfg.distill.weight_decay = cfg.finetune.weight_decay = f.number("weight-decay", 0, 10);
  cfg.finetune.patience = f.integer("patience", 0, 100000);
  cfg.finetune.schedule = "cosine";
  const std::string loss = f.str("loss");
  HH_CHECK(loss == "xent" || loss == "kl", "--loss: expected xent or kl, got '", loss, "'");
  cfg.distill.loss.kl = loss == "kl";
  cfg.distill.loss.mean_over_heads = f.boolean("mean-heads");
  cfg.distill.loss.output_mse = f.number("output-mse", 0, 1e6);
  cfg.finetune.joint_weight = f.number("joint-weight", 0, 1e6);
  cfg.finetune.joint_loss = cfg.distill.loss;
  cfg.finetune.mode = f.str("finetune");
  HH_CHECK(cfg.finetune.mode == "full" || cfg.finetune.mode == "lora", "--finetune: expected full or lora, got '",
           cfg.finetune.mode, "'");
  cfg.finetune.lora_rank = f.integer("lora-rank", 1, 1 << 16);
  cfg.finetune.lora_alpha = f.number("lora-alpha", 1e-9, 1e9);
  cfg.finetune.lora_targets = apps::Flags::split_list(f.str("lora-targets"));
  HH_CHECK(!cfg.finetune.lora_targets.empty(), "--lora-targets: no Linear name given");
  train::GlueDataConfig dc;
  dc.max_length = f.integer("max-length", 3, 1 << 20);
  dc.max_train = f.integer("max-train", -1, INT64_MAX);
  dc.max_eval = f.integer("max-eval", -1, INT64_MAX);
  HH_CHECK(dc.max_train != 0 && dc.max_eval != 0, "--max-train/--max-eval: 0 rows; use -1 for all or a count >= 1");
  dc.val_fraction = f.number("val-fraction", 0, 0.9);
  dc.skip_malformed = f.boolean("skip-malformed");
  const int64_t fidelity_batches = f.integer("fidelity-batches", 1, 1 << 20);
  const uint64_t seed = static_cast<uint64_t>(f.integer("seed", 0));
  dc.seed = seed;
  cfg.seed = seed;
  cfg.quiet = f.boolean("quiet");
  cfg.resume = f.boolean("resume");
  const bool save = f.boolean("save");
  const int64_t threads = f.integer("threads", 0, 4096);
  set_num_threads(static_cast<int>(threads == 0 ? std::max(1, omp_get_num_procs()) : threads));
  nn::HFModelOptions mo;
  mo.device = parse_device(f.str("device"));
  if (mo.device.is_cuda()) HH_CHECK(cuda_available(), "--device ", f.str("device"), ": ", cuda_unavailable_reason());
  mo.seed = seed;
  ensure_writable_dir(out);

  // ---- the model, tokenizer and data, read and checked before any training ----
  std::error_code ec;
  HH_CHECK(std::filesystem::is_directory(model_dir, ec), "--model: ", model_dir, " is not a folder");
  HH_CHECK(std::filesystem::is_directory(data_dir, ec), "--data: ", data_dir, " is not a folder");
  mo.mixer = "softmax";
  std::shared_ptr<nn::BertForSequenceClassification> teacher_model = load_bert(model_dir, mo);
  HH_CHECK(teacher_model->options().mixer == "softmax", "--model ", model_dir, ": the folder holds a converted model (",
           "its config.json names the attention '", teacher_model->options().mixer,
           "'); convert_bert needs the softmax original as the teacher");
  if (!f.given("max-length"))
    dc.max_length = std::min(dc.max_length, teacher_model->bert->cfg.max_position_embeddings);
  try {
    train::check_model_for_task(*teacher_model, task, dc.max_length);
  } catch (const Error& e) {
    fail(str("--model ", model_dir, ": ", e.what()));
  }
  std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer(model_dir);
  auto data = std::make_shared<const train::GlueData>(train::load_glue_data(task, data_dir, *tok, dc));
  std::fprintf(stderr, "GLUE %s: %lld train, %lld validation (%s), %lld test rows (dev: %s)%s\n", task.name.c_str(),
               static_cast<long long>(data->train.size()), static_cast<long long>(data->val.size()),
               dc.val_fraction > 0 ? "held out of train" : "the dev file", static_cast<long long>(data->test.size()),
               data->dev_path.c_str(),
               data->skipped > 0 ? str(", ", data->skipped, " malformed rows skipped").c_str() : "");

  train::GlueTaskConfig tc;
  tc.batch = batch;
  tc.seed = seed;
  tc.device = mo.device;

  nlohmann::json config = {{"model", model_dir},
                           {"task", task.name},
                           {"data", data_dir},
                           {"train_rows", data->train.size()},
                           {"val_rows", data->val.size()},
                           {"test_rows", data->test.size()},
                           {"test_split", "dev (GLUE test labels are not public)"},
                           {"val_split", dc.val_fraction > 0 ? "held out of train" : "dev"},
                           {"preset", preset},
                           {"distill_epochs", cfg.distill.epochs},
                           {"distill_lr", cfg.distill.lr},
                           {"distill_patience", cfg.distill.patience},
                           {"finetune_epochs", cfg.finetune.epochs},
                           {"lr", cfg.finetune.lr},
                           {"weight_decay", cfg.finetune.weight_decay},
                           {"patience", cfg.finetune.patience},
                           {"batch", batch},
                           {"max_length", dc.max_length},
                           {"max_train", dc.max_train},
                           {"max_eval", dc.max_eval},
                           {"val_fraction", dc.val_fraction},
                           {"loss", loss},
                           {"mean_heads", cfg.distill.loss.mean_over_heads},
                           {"output_mse", cfg.distill.loss.output_mse},
                           {"joint_weight", cfg.finetune.joint_weight},
                           {"finetune", cfg.finetune.mode},
                           {"lora_rank", cfg.finetune.lora_rank},
                           {"lora_alpha", cfg.finetune.lora_alpha},
                           {"lora_targets", cfg.finetune.lora_targets},
                           {"seed", seed}};
  // Each row's checkpoint records the settings it was written with: --resume with other settings is
  // refused here, before any work.
  auto row_dir = [&](const train::ConversionRow& row) { return out + "/" + slug(row.label); };
  auto fingerprint = [&](const train::ConversionRow& row) {
    nlohmann::json fp = config;
    fp["row"] = row.label;
    fp["mixer"] = row.mixer;
    fp["distill"] = row.distill;
    return fp.dump();
  };
  if (cfg.resume) {
    int found = 0;
    for (const auto& row : rows) {
      const std::string path = row_dir(row) + "/checkpoint.safetensors";
      if (!std::filesystem::exists(path, ec)) continue;
      ++found;
      const SafeTensors ck = load_safetensors(path);
      auto it = ck.metadata.find("convert.state");
      HH_CHECK(it != ck.metadata.end(), "--resume: ", path, " is not a conversion checkpoint");
      std::string written;
      try {
        written = nlohmann::json::parse(it->second).at("fingerprint").get<std::string>();
      } catch (const nlohmann::json::exception& e) {
        fail(str("--resume: ", path, ": bad conversion state: ", e.what()));
      }
      HH_CHECK(written == fingerprint(row), "--resume: ", path, " was written with other settings, model or data; ",
               "rerun with the original flags, or without --resume (or another --out) to start afresh");
    }
    HH_CHECK(found > 0, "--resume: no checkpoint found under ", out, " (nothing to resume)");
  }

  // ---- the teacher: the softmax model as loaded, on the test split ----
  train::ConversionReport rep;
  rep.title = str("GLUE ", task.name, ": BERT softmax attention converted to linear attention (test = the dev set; ",
                  "GLUE's test labels are not public)");
  {
    train::GlueConversionTask teacher(teacher_model, data, tc);
    rep.teacher = teacher.evaluate(train::Split::test);
    // A softmax model's trace carries teacher = its own weights: the teacher's entropy/monotonicity.
    train::Fidelity tf = train::measure_fidelity(teacher, train::Split::test, fidelity_batches, false);
    rep.teacher_entropy = tf.entropy_teacher;
    rep.teacher_monotonicity = tf.monotonicity_teacher;
  }
  teacher_model.reset();
  std::fprintf(stderr, "teacher (softmax): %s %.4f on dev\n", rep.teacher.front().first.c_str(),
               rep.teacher.front().second);

  rep.config_json = config.dump(2);

  for (const auto& row : rows) {
    std::cerr << "== " << row.label << " (" << row.mixer << (row.distill ? ", distilled" : ", no distillation")
              << ")\n";
    train::ConvertConfig rc = cfg;
    const std::string dir = row_dir(row);
    ensure_writable_dir(dir);
    rc.checkpoint_path = dir + "/checkpoint.safetensors";
    rc.fingerprint = fingerprint(row);
    std::shared_ptr<nn::BertForSequenceClassification> student;  // kept for --save
    rep.rows.push_back(train::run_conversion_row(
        row,
        [&](const std::string& mixer) {
          nn::HFModelOptions o = mo;
          o.mixer = mixer;
          student = load_bert(model_dir, o);
          return std::unique_ptr<train::ConversionTask>(std::make_unique<train::GlueConversionTask>(student, data, tc));
        },
        rc, false, fidelity_batches));
    if (save && rep.rows.back().status == "ok") {
      try {
        nn::save_hf_model(*student, dir + "/model", model_dir);
        std::cerr << "saved: " << dir << "/model\n";
      } catch (const Error& e) {
        rep.rows.back().status = str("error: saving the model: ", e.what());
      }
    }
  }

  std::cout << "\n" << rep.title << "\n" << train::conversion_table(rep);
  train::write_conversion_report(out, rep);
  std::cout << "report: " << out << "/report.html\n";
  int failed = 0;
  for (const auto& o : rep.rows) failed += o.status != "ok";
  HH_CHECK(failed == 0, failed, " of ", rep.rows.size(), " rows failed (see the table)");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
