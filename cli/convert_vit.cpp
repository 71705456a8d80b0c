// convert_vit: converts an HF ViTForImageClassification folder to linear attention (Hedgehog and the
// paper's baselines) on an image classification data set, CIFAR-10 binary files or a folder of
// class sub-folders, and reports top-1 (and top-5) accuracy of the softmax teacher and every
// student, attention fidelity, and the stage curves (results.json/csv, report.html).
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/app.h"
#include "cli/convert_flags.h"
#include "cli/drivers.h"
#include "core/atomic_file.h"
#include "core/parallel.h"
#include "experiments/convert/convert_image.h"
#include "nn/models/hf_model.h"
#include "train/convert/convert_report.h"

using namespace hh;
using nlohmann::json;

namespace {

// The paper's ViT protocol (REFERENCE.md §4, Table 9): distillation with batch 32, AdamW lr 1e-2,
// 2 epochs; finetuning of every parameter with lr 1e-3 for up to 10 epochs.
std::vector<cli::ConversionPreset> presets() {
  cli::ConversionDefaults paper;
  paper.distill_epochs = 2;
  paper.distill_lr = 1e-2;
  paper.finetune_epochs = 10;
  paper.lr = 1e-3;
  paper.patience = 2;
  paper.batch = 32;
  paper.fidelity_batches = 4;
  paper.lora_targets = "query,key,value";
  paper.out = "out/convert_vit";
  return {{"paper", "Table 9: distill batch 32, lr 1e-2, 2 epochs; finetune all parameters, lr 1e-3, up to 10 epochs",
           paper}};
}

void declare_app_flags(cli::Flags& f) {
  // A gated state needs a causal model: refused (refuse_gate), so not listed.
  f.hide("gate");
  f.hide("gate-output");
  f.add("model", "", "HF model folder (config.json, model.safetensors, preprocessor_config.json) of a "
                     "ViTForImageClassification");
  f.add("data", "", "images: a cifar-10-batches-bin folder (data_batch_N.bin, test_batch.bin), a folder with train/ "
                    "and test/ (or val/) class sub-folders, or one folder of class sub-folders");
  f.add("val-fraction", "0.1", "share of the training images held out for validation (early stopping)");
  f.add("test-fraction", "0.2", "with one folder of class sub-folders: share of it held out as the test split");
  f.add("max-train", "-1", "use at most this many training images, a seeded random choice (-1 = all)");
  f.add("max-eval", "-1", "evaluate on at most this many validation and test images (-1 = all)");
}

int run(int argc, char** argv) {
  std::optional<cli::Flags> parsed = cli::parse_conversion_flags(
      "convert_vit",
      "Converts a ViT image classifier to linear attention by attention distillation (Hedgehog) and\n"
      "finetuning, and reports top-1 accuracy against the softmax teacher for each student.",
      presets(), declare_app_flags, argc, argv);
  if (!parsed) return 0;
  const cli::Flags& f = *parsed;
  // Every flag and input is checked before any model runs.
  const std::string model_dir = f.str("model"), data_dir = f.str("data");
  cli::refuse_gate(f, "convert_vit");
  HH_CHECK(!model_dir.empty(), "--model: no model folder given");
  HH_CHECK(!data_dir.empty(), "--data: no data folder given");
  const train::ConvertConfig cfg = cli::conversion_config(f);
  const cli::ConversionRun opts = cli::conversion_run(f);
  const std::string& out = opts.out;
  const double val_fraction = f.number("val-fraction", 1e-9, 0.9);
  const double test_fraction = f.number("test-fraction", 1e-9, 0.9);
  const int64_t max_train = cli::row_limit(f, "max-train"), max_eval = cli::row_limit(f, "max-eval");
  nn::HFModelOptions opt;
  opt.device = opts.device;
  opt.seed = cfg.seed;
  set_num_threads(opts.threads);

  std::shared_ptr<nn::HFModel> teacher_model = nn::load_hf_model(model_dir, opt);
  auto teacher_vit = std::dynamic_pointer_cast<nn::ViTForImageClassification>(teacher_model);
  HH_CHECK(teacher_vit != nullptr, "--model: ", model_dir, ": architecture ", teacher_model->architecture(),
           " is not ViTForImageClassification");
  const int64_t image_size = teacher_vit->vit->cfg.image_size;
  train::ImageTaskConfig tc;
  tc.batch = opts.batch;
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
  const std::unique_ptr<train::RunDir> run_folder = cli::open_conversion_folder(out);
  // Each row's checkpoint records the settings it was written with: --resume with other settings is
  // refused here, before any work.
  json config = cli::conversion_settings(f, cfg, opts);
  config.update({{"model", model_dir},
                 {"data", data_dir},
                 {"layout", data.layout},
                 {"train_images", train_split.size()},
                 {"val_images", val_split.size()},
                 {"test_images", test_split.size()},
                 {"val_fraction", val_fraction},
                 {"test_fraction", test_fraction},
                 {"max_train", max_train},
                 {"max_eval", max_eval}});
  if (cfg.resume) cli::check_resume(opts.rows, out, config);
  cli::start_conversion_folder(*run_folder, opts.rows, config, cfg.resume);

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
  train::Fidelity tf = train::measure_fidelity(*teacher, train::Split::test, opts.fidelity_batches, false);
  rep.teacher_entropy = tf.entropy_teacher;
  rep.teacher_monotonicity = tf.monotonicity_teacher;
  rep.config_json = config.dump(2);

  cli::convert_rows(opts, cfg, config, model_dir, false, [&](const nn::Mixer& mixer) {
    nn::HFModelOptions so = opt;
    so.mixer = mixer;
    auto student = std::dynamic_pointer_cast<nn::ViTForImageClassification>(nn::load_hf_model(model_dir, so));
    HH_CHECK(student != nullptr, "--model: not a ViTForImageClassification");
    return cli::Student{student, make_task(student)};
  }, rep);
  cli::finish_conversion(out, rep, *run_folder);
  return 0;
}

}  // namespace

int hh::cli::convert_vit(int argc, char** argv) { return run(argc, argv); }
