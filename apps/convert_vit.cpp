// convert_vit: converts an HF ViTForImageClassification folder to linear attention (Hedgehog and the
// paper's baselines) on an image classification data set, CIFAR-10 binary files or a folder of
// class sub-folders, and reports top-1 (and top-5) accuracy of the softmax teacher and every
// student, attention fidelity, and the stage curves (results.json/csv, report.html).
#include <omp.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/flags.h"
#include "core/atomic_file.h"
#include "core/backend.h"
#include "core/parallel.h"
#include "nn/models/hf_model.h"
#include "train/ar_report.h"
#include "train/convert_image.h"
#include "train/convert_report.h"

using namespace hh;
using nlohmann::json;

namespace {

// The paper's ViT protocol (REFERENCE.md §4, Table 9): distillation with batch 32, AdamW lr 1e-2,
// 2 epochs; finetuning of every parameter with lr 1e-3 for up to 10 epochs.
void add_flags(apps::Flags& f) {
  f.add("model", "", "HF model folder (config.json, model.safetensors, preprocessor_config.json) of a "
                     "ViTForImageClassification");
  f.add("data", "", "images: a cifar-10-batches-bin folder (data_batch_N.bin, test_batch.bin), a folder with train/ "
                    "and test/ (or val/) class sub-folders, or one folder of class sub-folders");
  f.add("preset", "paper", "defaults of the flags below: paper (Table 9: distill batch 32, lr 1e-2, 2 epochs; "
                           "finetune all parameters, lr 1e-3, up to 10 epochs)");
  f.add("feature-map", "paper", "the students: paper (the paper's five rows) or a comma list of feature maps");
  f.add("val-fraction", "0.1", "share of the training images held out for validation (early stopping)");
  f.add("test-fraction", "0.2", "with one folder of class sub-folders: share of it held out as the test split");
  f.add("batch", "32", "images per batch (both stages and evaluation)");
  f.add("distill-epochs", "2", "stage 1: maximum epochs of attention distillation (0 = swap only)");
  f.add("distill-lr", "1e-2", "stage 1: AdamW learning rate");
  f.add("distill-wd", "0", "stage 1: weight decay");
  f.add("distill-patience", "1", "stage 1: epochs without a lower validation loss before stopping");
  f.add("finetune-epochs", "10", "stage 2: maximum epochs of finetuning (0 = none)");
  f.add("finetune-lr", "1e-3", "stage 2: AdamW learning rate");
  f.add("finetune-wd", "0", "stage 2: weight decay");
  f.add("finetune-patience", "2", "stage 2: epochs without a better validation top-1 before stopping (0 = never)");
  f.add("schedule", "cosine", "stage 2 learning-rate schedule: cosine, linear or constant");
  f.add("warmup", "0", "stage 2 warmup, a fraction of its steps");
  f.add("finetune", "full", "stage 2 trains: full (every parameter) or lora");
  f.add("lora-rank", "8", "LoRA rank");
  f.add("lora-alpha", "16", "LoRA alpha");
  f.add("lora-targets", "query,key,value", "LoRA: the Linear layers that get adapters (last name components)");
  f.add("loss", "soft-ce", "distillation loss: soft-ce (soft cross-entropy) or kl");
  f.add("mean-heads", "false", "average the distillation loss over layers and heads instead of summing", true);
  f.add("output-mse", "0", "weight of the attention-output MSE term in the distillation loss");
  f.add("joint-weight", "0", "> 0: the joint variant (task loss + this × distillation loss in stage 2)");
  f.add("max-train", "0", "use at most this many training images, a seeded random choice (0 = all)");
  f.add("max-eval", "0", "evaluate on at most this many validation and test images (0 = all)");
  f.add("fidelity-batches", "4", "test batches for the attention fidelity figures");
  f.add("device", "cpu", "cpu or cuda[:N]");
  f.add("seed", "0", "seed for the splits, feature-map initialization and batch order");
  f.add("threads", "0", "CPU threads (0 = all cores)");
  f.add("out", "out/convert_vit", "output folder: results.json, results.csv, report.html, figures; <row>/checkpoint");
  f.add("resume", "false", "continue each row from its checkpoint under <out>/<row>/ when there is one", true);
  f.add("quiet", "false", "plain progress lines instead of a bar", true);
}

train::ConvertConfig convert_config(const apps::Flags& f) {
  train::ConvertConfig c;
  c.distill.epochs = f.integer("distill-epochs", 0, 100000);
  c.distill.lr = f.number("distill-lr", 0, 100);
  c.distill.weight_decay = f.number("distill-wd", 0, 10);
  c.distill.patience = f.integer("distill-patience", 1, 100000);
  const std::string loss = f.str("loss");
  HH_CHECK(loss == "soft-ce" || loss == "kl", "--loss: expected soft-ce or kl, got '", loss, "'");
  c.distill.loss.kl = loss == "kl";
  c.distill.loss.mean_over_heads = f.boolean("mean-heads");
  c.distill.loss.output_mse = f.number("output-mse", 0, 1e6);
  c.finetune.epochs = f.integer("finetune-epochs", 0, 100000);
  c.finetune.lr = f.number("finetune-lr", 0, 100);
  c.finetune.weight_decay = f.number("finetune-wd", 0, 10);
  c.finetune.patience = f.integer("finetune-patience", 0, 100000);
  c.finetune.schedule = f.str("schedule");
  HH_CHECK(c.finetune.schedule == "cosine" || c.finetune.schedule == "linear" || c.finetune.schedule == "constant",
           "--schedule: expected cosine, linear or constant, got '", c.finetune.schedule, "'");
  c.finetune.warmup_fraction = f.number("warmup", 0, 1);
  c.finetune.mode = f.str("finetune");
  HH_CHECK(c.finetune.mode == "full" || c.finetune.mode == "lora", "--finetune: expected full or lora, got '",
           c.finetune.mode, "'");
  c.finetune.lora_rank = f.integer("lora-rank", 1, 1 << 20);
  c.finetune.lora_alpha = f.number("lora-alpha", 1e-9, 1e9);
  c.finetune.lora_targets = apps::Flags::split_list(f.str("lora-targets"));
  HH_CHECK(!c.finetune.lora_targets.empty(), "--lora-targets: empty list");
  c.finetune.joint_weight = f.number("joint-weight", 0, 1e6);
  c.finetune.joint_loss = c.distill.loss;
  c.seed = static_cast<uint64_t>(f.integer("seed", 0));
  c.quiet = f.boolean("quiet");
  c.resume = f.boolean("resume");
  return c;
}

int run(int argc, char** argv) {
  apps::Flags f("convert_vit",
                "Converts a ViT image classifier to linear attention by attention distillation (Hedgehog) and\n"
                "finetuning, and reports top-1 accuracy against the softmax teacher for each student.");
  add_flags(f);
  if (!f.parse(argc, argv)) return 0;
  // Every flag and input is checked before any model runs.
  HH_CHECK(f.str("preset") == "paper", "--preset: expected paper, got '", f.str("preset"), "'");
  const std::string model_dir = f.str("model"), data_dir = f.str("data");
  HH_CHECK(!model_dir.empty(), "--model: no model folder given");
  HH_CHECK(!data_dir.empty(), "--data: no data folder given");
  const std::vector<train::ConversionRow> rows = train::parse_conversion_rows(f.str("feature-map"));
  train::ConvertConfig cfg = convert_config(f);
  const double val_fraction = f.number("val-fraction", 1e-9, 0.9);
  const double test_fraction = f.number("test-fraction", 1e-9, 0.9);
  const int64_t batch = f.integer("batch", 1, 1 << 20);
  const int64_t max_train = f.integer("max-train", 0), max_eval = f.integer("max-eval", 0);
  const int64_t fidelity_batches = f.integer("fidelity-batches", 1, 1 << 20);
  const int64_t threads = f.integer("threads", 0, 4096);
  const std::string out = f.str("out");
  HH_CHECK(!out.empty(), "--out: empty path");
  nn::HFModelOptions opt;
  opt.device = parse_device(f.str("device"));
  if (opt.device.is_cuda()) HH_CHECK(cuda_available(), "--device ", f.str("device"), ": ", cuda_unavailable_reason());
  opt.seed = cfg.seed;
  set_num_threads(static_cast<int>(threads == 0 ? std::max(1, omp_get_num_procs()) : threads));

  std::shared_ptr<nn::HFModel> teacher_model = nn::load_hf_model(model_dir, opt);
  auto teacher_vit = std::dynamic_pointer_cast<nn::ViTForImageClassification>(teacher_model);
  HH_CHECK(teacher_vit != nullptr, "--model: ", model_dir, ": architecture ", teacher_model->architecture(),
           " is not ViTForImageClassification");
  const int64_t image_size = teacher_vit->vit->cfg.image_size;
  train::ImageTaskConfig tc;
  tc.batch = batch;
  tc.seed = cfg.seed;
  tc.device = opt.device;
  tc.preprocess = train::vit_preprocess(model_dir, image_size);
  train::ImageData data = train::read_image_data(data_dir, test_fraction, cfg.seed);
  auto [train_rows, val_rows] = train::hold_out(data.train_rows, val_fraction, cfg.seed + 1);
  HH_CHECK(!val_rows.empty(), "--val-fraction ", val_fraction, " holds out no image of ", data.train_rows.size());
  train::ImageSplit train_split{data.train, train::cap_rows(train_rows, max_train, cfg.seed + 2)};
  train::ImageSplit val_split{data.train, train::cap_rows(val_rows, max_eval, cfg.seed + 3)};
  train::ImageSplit test_split{data.test, train::cap_rows(data.test_rows, max_eval, cfg.seed + 4)};
  // Decoding one image of each split checks the files and the preprocessing before any training.
  for (const auto* s : {&train_split, &val_split, &test_split}) (void)s->data->batch({s->rows.front()}, tc.preprocess);
  ensure_writable_dir(out);

  auto make_task = [&](std::shared_ptr<nn::ViTForImageClassification> m) {
    return std::make_unique<train::ImageConversionTask>(std::move(m), train_split, val_split, test_split, tc);
  };
  auto teacher = make_task(teacher_vit);  // the class count is checked here
  std::cerr << "convert_vit: " << model_dir << " (" << teacher_vit->vit->cfg.num_hidden_layers << " layers, "
            << image_size << "px, " << teacher_vit->vit->cfg.num_labels << " labels) on " << data_dir << " ("
            << data.layout << ": " << train_split.size() << " train, " << val_split.size() << " val, "
            << test_split.size() << " test images)\n";

  train::ConversionReport rep;
  rep.title = "ViT image classification: softmax attention converted to linear attention";
  rep.teacher = teacher->evaluate(train::Split::test);
  train::Fidelity tf = train::measure_fidelity(*teacher, train::Split::test, fidelity_batches, false);
  rep.teacher_entropy = tf.entropy_teacher;
  rep.teacher_monotonicity = tf.monotonicity_teacher;
  json config = {{"model", model_dir}, {"data", data_dir}, {"layout", data.layout}, {"preset", f.str("preset")},
                 {"train_images", train_split.size()}, {"val_images", val_split.size()},
                 {"test_images", test_split.size()}, {"batch", batch}, {"distill_epochs", cfg.distill.epochs},
                 {"distill_lr", cfg.distill.lr}, {"finetune_epochs", cfg.finetune.epochs},
                 {"finetune_lr", cfg.finetune.lr}, {"finetune", cfg.finetune.mode}, {"loss", f.str("loss")},
                 {"seed", cfg.seed}};
  rep.config_json = config.dump(2);

  for (const auto& row : rows) {
    std::cerr << "convert_vit: " << row.label << "\n";
    train::ConvertConfig rc = cfg;
    const std::string row_dir = out + "/" + train::file_slug(row.label);
    ensure_writable_dir(row_dir);
    rc.checkpoint_path = row_dir + "/checkpoint.safetensors";
    json fp = config;
    fp["row"] = row.label;
    fp["mixer"] = row.mixer;
    fp["distill"] = row.distill;
    rc.fingerprint = fp.dump();
    rep.rows.push_back(train::run_conversion_row(
        row,
        [&](const std::string& mixer) {
          nn::HFModelOptions so = opt;
          so.mixer = mixer;
          auto m = std::dynamic_pointer_cast<nn::ViTForImageClassification>(nn::load_hf_model(model_dir, so));
          HH_CHECK(m != nullptr, "--model: not a ViTForImageClassification");
          return std::unique_ptr<train::ConversionTask>(make_task(m));
        },
        rc, false, fidelity_batches));
  }
  std::cout << "\n" << rep.title << "\n" << train::conversion_table(rep);
  train::write_conversion_report(out, rep);
  std::cout << "report: " << out << "/report.html\n";
  for (const auto& o : rep.rows)
    if (o.status != "ok") return 1;
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
