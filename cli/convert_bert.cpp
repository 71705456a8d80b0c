// convert_bert: converts an HF BERT sequence classifier (BertForSequenceClassification) finetuned
// on a GLUE task into linear attention (paper §4, App. B.2/B.4): every attention's softmax is
// swapped for a feature map; stage 1 distills the maps to mimic the softmax weights (the rest
// frozen), stage 2 finetunes on the task. One row per student (the paper's rows by default), each
// evaluated with the task's GLUE metrics against the softmax teacher, with fidelity (KL, entropy,
// monotonicity), the report (results.json/csv, report.html with figures) and per-row checkpoints.
//
// GLUE's test files have no labels: the dev file is the test split. Early stopping and model
// selection use a part of train held out as validation (--val-fraction), so dev stays untouched.
//
// --task embed converts an embedding model (a bare BertModel, e.g. a sentence-transformers folder)
// on raw text alone (--data FILE, one text per line): stage 2 trains the student to give the
// teacher's pooled embeddings; the report gives the mean cosine to the teacher, the Spearman
// correlation of the pairwise similarities and the nearest-neighbour agreement on held-out text.
#include <algorithm>
#include <cstdio>
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
#include "core/regular_file.h"
#include "data/tokenizer.h"
#include "experiments/convert/convert_embed.h"
#include "experiments/convert/convert_glue.h"
#include "nn/models/bert.h"
#include "nn/models/embedding.h"
#include "nn/models/hf_model.h"
#include "train/convert/convert_report.h"

using namespace hh;

namespace {

std::shared_ptr<nn::BertForSequenceClassification> load_bert(const std::shared_ptr<nn::HFModel>& m) {
  auto bert = std::dynamic_pointer_cast<nn::BertForSequenceClassification>(m);
  HH_CHECK(bert != nullptr, "convert_bert: the model is a ", m->architecture(), ", not a BertForSequenceClassification");
  return bert;
}

// The paper's GLUE protocol (App. B.2/B.4): distillation 5 epochs at lr 1e-2, finetuning 5 epochs
// at lr 1e-5, batch 8; "tiny" is a smoke test (1 epoch each, finetuning lr 1e-3).
std::vector<cli::ConversionPreset> presets() {
  cli::ConversionDefaults paper;
  paper.distill_epochs = 5;
  paper.distill_lr = 1e-2;
  paper.finetune_epochs = 5;
  paper.lr = 1e-5;
  paper.patience = 0;
  paper.batch = 8;
  paper.fidelity_batches = 8;
  paper.lora_targets = "query,key,value";
  paper.out = "out/convert_bert";
  cli::ConversionDefaults tiny = paper;
  tiny.distill_epochs = 1;
  tiny.finetune_epochs = 1;
  tiny.lr = 1e-3;
  return {{"paper", "App. B.2/B.4: distill 5 epochs at lr 1e-2, finetune 5 epochs at lr 1e-5, batch 8", paper},
          {"tiny", "a smoke test: 1 epoch each, finetune lr 1e-3", tiny}};
}

void declare_app_flags(cli::Flags& f) {
  // A gated state needs a causal model: refused (refuse_gate), so not listed.
  f.hide("gate");
  f.hide("gate-output");
  f.add("model", "", "HF model folder: config.json (BertForSequenceClassification; --task embed: any BERT, e.g.\n"
        "                       a sentence-transformers folder), model.safetensors, tokenizer");
  f.add("task", "", "GLUE task: CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI or RTE; custom (--data DIR holds\n"
        "                       train.tsv|jsonl and dev.tsv|jsonl: text, optional text_pair, label); or embed (raw\n"
        "                       text, no labels)");
  f.add("teacher-epochs", "3", "a BertModel folder (no head): epochs of stage 0, the teacher finetuned with a fresh head");
  f.add("teacher-lr", "2e-5", "a BertModel folder (no head): stage 0's learning rate");
  f.add("data", "", "the task's GLUE folder (train.tsv, dev.tsv; MNLI: dev_matched.tsv [, dev_mismatched.tsv]);\n"
        "                       --task embed: a text file, one text per line");
  f.add("embed-loss", "cosine", "--task embed: stage 2's loss against the teacher's embeddings: cosine (1 - cos) or mse");
  f.add("test-fraction", "0.1", "--task embed: fraction of the texts held out for the reported metrics");
  f.add("max-length", "128", "tokens per example, specials included, longer ones truncated as HF does; when not given,\n"
        "                       at most the model's positions");
  f.add("max-train", "-1", "read at most this many training rows (-1 = all)");
  f.add("max-eval", "-1", "read at most this many dev rows (-1 = all)");
  f.add("val-fraction", "0.1", "fraction of train held out for validation (early stopping); 0 = validate on dev\n"
        "                       (--task embed: of the texts, > 0)");
  f.add("skip-malformed", "false", "skip malformed TSV rows (counted) instead of failing", true);
}

// The threads, the output folder and --model checked; the options every model of the run loads with.
nn::HFModelOptions start_run(const cli::ConversionRun& opts, const train::ConvertConfig& cfg,
                             const std::string& model_dir, std::unique_ptr<train::RunDir>& run_folder) {
  set_num_threads(opts.threads);
  run_folder = cli::open_conversion_folder(opts.out);
  std::error_code ec;
  HH_CHECK(std::filesystem::is_directory(model_dir, ec), "--model: ", model_dir, " is not a folder");
  nn::HFModelOptions mo;
  mo.device = opts.device;
  mo.seed = cfg.seed;
  return mo;
}

// --task embed: the teacher's pooled embeddings on raw text are the targets (convert_embed.h).
int run_embed(const cli::Flags& f, const std::string& model_dir, const std::string& data_path) {
  const train::ConvertConfig cfg = cli::conversion_config(f);
  const cli::ConversionRun opts = cli::conversion_run(f);
  const std::string& out = opts.out;
  train::EmbedDataConfig dc;
  dc.max_length = f.integer("max-length", 3, 1 << 20);
  dc.max_texts = cli::row_limit(f, "max-train");
  dc.val_fraction = f.number("val-fraction", 1e-6, 0.9);
  dc.test_fraction = f.number("test-fraction", 1e-6, 0.9);
  dc.seed = cfg.seed;
  train::EmbedTaskConfig tc;
  tc.loss = train::parse_embed_loss(f.str("embed-loss"), "--embed-loss");
  tc.batch = opts.batch;
  tc.seed = cfg.seed;
  tc.device = opts.device;
  std::unique_ptr<train::RunDir> run_folder;
  nn::HFModelOptions mo = start_run(opts, cfg, model_dir, run_folder);
  check_regular_file(data_path, "--data");

  std::shared_ptr<nn::HFModel> teacher_model = nn::load_hf_model(model_dir, mo);
  HH_CHECK(teacher_model->family() == "bert", "--model ", model_dir, ": the model is a ",
           teacher_model->architecture(), "; --task embed converts BERT-family encoders");
  HH_CHECK(teacher_model->options().mixer.is_softmax(), "--model ", model_dir,
           ": the folder holds a converted model (its config.json names the attention '",
           nn::name(teacher_model->options().mixer), "'); convert_bert needs the softmax original as the teacher");
  tc.embedding = nn::read_embedding_config(model_dir);
  const int64_t positions = nn::text_encoder_max_positions(*teacher_model);
  if (!f.given("max-length")) dc.max_length = std::min(dc.max_length, positions);
  HH_CHECK(dc.max_length <= positions, "--max-length ", dc.max_length, " exceeds the model's ", positions, " positions");
  std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer(model_dir);
  auto data = std::make_shared<train::EmbedData>(train::load_embed_texts(data_path, *tok, dc));
  std::fprintf(stderr, "texts %s: %lld train, %lld validation, %lld test (%lld empty lines skipped); pooling %s%s (%s)\n",
               data_path.c_str(), static_cast<long long>(data->train.size()), static_cast<long long>(data->val.size()),
               static_cast<long long>(data->test.size()), static_cast<long long>(data->empty_lines),
               nn::pooling_name(tc.embedding.pooling), tc.embedding.normalize ? ", normalized" : "",
               tc.embedding.source.c_str());
  train::teacher_embeddings(*data, *teacher_model, tc);

  nlohmann::json config = cli::conversion_settings(f, cfg, opts);
  config.update({{"model", model_dir},
                 {"task", "embed"},
                 {"data", data_path},
                 {"train_rows", data->train.size()},
                 {"val_rows", data->val.size()},
                 {"test_rows", data->test.size()},
                 {"max_length", dc.max_length},
                 {"max_train", dc.max_texts},
                 {"val_fraction", dc.val_fraction},
                 {"test_fraction", dc.test_fraction},
                 {"pooling", nn::pooling_name(tc.embedding.pooling)},
                 {"normalize", tc.embedding.normalize},
                 {"embed_loss", f.str("embed-loss")}});
  if (cfg.resume) cli::check_resume(opts.rows, out, config);
  cli::start_conversion_folder(*run_folder, opts.rows, config, cfg.resume);

  train::ConversionReport rep;
  rep.title = str("Embeddings on raw text (", data_path, "): BERT softmax attention converted to linear attention; ",
                  "metrics against the softmax teacher's embeddings on held-out text");
  std::shared_ptr<const train::EmbedData> shared = data;
  {
    train::EmbeddingConversionTask teacher(teacher_model, shared, tc);
    rep.teacher = teacher.evaluate(train::Split::test);  // 1, 1, 1: the teacher against itself
    train::Fidelity tf = train::measure_fidelity(teacher, train::Split::test, opts.fidelity_batches, false);
    rep.teacher_entropy = tf.entropy_teacher;
    rep.teacher_monotonicity = tf.monotonicity_teacher;
  }
  teacher_model.reset();
  rep.config_json = config.dump(2);
  cli::convert_rows(opts, cfg, config, model_dir, false, [&](const nn::Mixer& mixer) {
    nn::HFModelOptions o = mo;
    o.mixer = mixer;
    std::shared_ptr<nn::HFModel> student = nn::load_hf_model(model_dir, o);
    return cli::Student{student, std::make_unique<train::EmbeddingConversionTask>(student, shared, tc)};
  }, rep);
  cli::finish_conversion(out, rep, *run_folder);
  return 0;
}

int run(int argc, char** argv) {
  std::optional<cli::Flags> parsed = cli::parse_conversion_flags(
      "convert_bert",
      "Converts an HF BERT classifier finetuned on a GLUE task into linear attention (Hedgehog, paper §4):\n"
      "swap every softmax attention for a feature map, distill the maps (stage 1), finetune (stage 2), and\n"
      "report the GLUE metrics against the softmax teacher. GLUE test files have no labels: dev is the\n"
      "test split; validation is a held-out part of train (--val-fraction).",
      presets(), declare_app_flags, argc, argv);
  if (!parsed) return 0;
  const cli::Flags& f = *parsed;

  // ---- every flag checked before any file is read ----
  const std::string model_dir = f.str("model"), data_dir = f.str("data");
  cli::refuse_gate(f, "convert_bert");
  HH_CHECK(!model_dir.empty(), "--model: no model folder given");
  HH_CHECK(!f.str("task").empty(), "--task: no GLUE task given");
  if (f.str("task") == "embed") {
    HH_CHECK(!data_dir.empty(), "--data: no text file given (--task embed: one text per line)");
    return run_embed(f, model_dir, data_dir);
  }
  HH_CHECK(!data_dir.empty(), "--data: no task folder given");
  const bool custom = f.str("task") == "custom";
  if (!custom) data::glue_task(f.str("task"));  // an unknown name fails here, before any file is read
  const train::ConvertConfig cfg = cli::conversion_config(f);
  const cli::ConversionRun opts = cli::conversion_run(f);
  const std::string& out = opts.out;
  train::GlueDataConfig dc;
  dc.max_length = f.integer("max-length", 3, 1 << 20);
  dc.max_train = cli::row_limit(f, "max-train");
  dc.max_eval = cli::row_limit(f, "max-eval");
  dc.val_fraction = f.number("val-fraction", 0, 0.9);
  dc.skip_malformed = f.boolean("skip-malformed");
  dc.seed = cfg.seed;
  const int64_t teacher_epochs = f.integer("teacher-epochs", 1, 1000);
  const double teacher_lr = f.number("teacher-lr", 1e-9, 1.0);
  std::unique_ptr<train::RunDir> run_folder;
  nn::HFModelOptions mo = start_run(opts, cfg, model_dir, run_folder);

  // ---- the model, tokenizer and data, read and checked before any training ----
  std::error_code ec;
  HH_CHECK(std::filesystem::is_directory(data_dir, ec), "--data: ", data_dir, " is not a folder");
  mo.mixer = nn::Mixer::softmax();
  std::shared_ptr<nn::HFModel> base = nn::load_hf_model(model_dir, mo);
  HH_CHECK(base->family() == "bert", "--model ", model_dir, ": the model is a ", base->architecture(),
           "; convert_bert needs a BERT model (BertForSequenceClassification, or a BertModel to give a head)");
  HH_CHECK(base->options().mixer.is_softmax(), "--model ", model_dir, ": the folder holds a converted model (",
           "its config.json names the attention '", nn::name(base->options().mixer),
           "'); convert_bert needs the softmax original as the teacher");
  // A base checkpoint (BertModel) has no head for the task: it gets a fresh one and the teacher is
  // finetuned first (stage 0), as transformers' from_pretrained(num_labels=N) then training.
  const bool fresh_head = std::dynamic_pointer_cast<nn::BertForSequenceClassification>(base) == nullptr;
  const int64_t positions = nn::text_encoder_max_positions(*base);
  if (!f.given("max-length")) dc.max_length = std::min(dc.max_length, positions);
  std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer(model_dir);
  auto data = std::make_shared<const train::GlueData>(
      custom ? train::load_user_task_data(data_dir, *tok, dc)
             : train::load_glue_data(data::glue_task(f.str("task")), data_dir, *tok, dc));
  const data::GlueTask& task = data->task;
  if (fresh_head) {
    mo.new_head_labels = task.num_labels;
    base = nn::load_hf_model(model_dir, mo);
  }
  std::shared_ptr<nn::BertForSequenceClassification> teacher_model = load_bert(base);
  try {
    train::check_model_for_task(*teacher_model, task, dc.max_length);
  } catch (const Error& e) {
    fail(str("--model ", model_dir, ": ", e.what()));
  }
  std::fprintf(stderr, "%s %s: %lld train, %lld validation (%s), %lld test rows (dev: %s)%s\n",
               custom ? "task" : "GLUE", custom ? data->train_path.c_str() : task.name.c_str(),
               static_cast<long long>(data->train.size()), static_cast<long long>(data->val.size()),
               dc.val_fraction > 0 ? "held out of train" : "the dev file", static_cast<long long>(data->test.size()),
               data->dev_path.c_str(),
               data->skipped > 0 ? str(", ", data->skipped, " malformed rows skipped").c_str() : "");

  train::GlueTaskConfig tc;
  tc.batch = opts.batch;
  tc.seed = cfg.seed;
  tc.device = mo.device;

  // Each row's checkpoint records the settings it was written with: --resume with other settings is
  // refused here, before any work.
  nlohmann::json config = cli::conversion_settings(f, cfg, opts);
  config.update({{"model", model_dir},
                 {"task", custom ? "custom" : task.name},
                 {"data", data_dir},
                 {"train_rows", data->train.size()},
                 {"val_rows", data->val.size()},
                 {"test_rows", data->test.size()},
                 {"test_split", custom ? "dev" : "dev (GLUE test labels are not public)"},
                 {"val_split", dc.val_fraction > 0 ? "held out of train" : "dev"},
                 {"max_length", dc.max_length},
                 {"max_train", dc.max_train},
                 {"max_eval", dc.max_eval},
                 {"val_fraction", dc.val_fraction}});
  if (custom) config["labels"] = task.num_labels == 1 ? nlohmann::json("regression") : nlohmann::json(task.label_names);
  if (fresh_head) config.update({{"teacher_epochs", teacher_epochs}, {"teacher_lr", teacher_lr}});
  if (cfg.resume) cli::check_resume(opts.rows, out, config);
  cli::start_conversion_folder(*run_folder, opts.rows, config, cfg.resume);

  // ---- stage 0 (a base checkpoint): the teacher with its fresh head finetuned on the task ----
  if (fresh_head) {
    std::fprintf(stderr, "stage 0: %s is a %s: a fresh %d-output head, the softmax teacher finetuned for %lld epochs "
                 "at lr %g first\n", model_dir.c_str(), "BertModel", task.num_labels,
                 static_cast<long long>(teacher_epochs), teacher_lr);
    train::ConvertConfig t0 = cfg;
    t0.distill.epochs = 0;
    t0.finetune.epochs = teacher_epochs;
    t0.finetune.lr = teacher_lr;
    t0.finetune.mode = "full";
    t0.finetune.joint_weight = 0;
    t0.finetune.patience = 0;
    t0.precision = opts.precision;
    ensure_writable_dir(out + "/teacher");
    t0.checkpoint_path = out + "/teacher/checkpoint.safetensors";
    t0.fingerprint = config.dump() + " stage 0";
    t0.resume = cfg.resume;
    train::GlueConversionTask stage0(teacher_model, data, tc);
    const train::ConvertResult r0 = train::convert(stage0, t0);
    config["teacher_stage0"] = {{"steps", r0.finetune.steps}, {"stopped", r0.finetune.stopped}};
  }

  // ---- the teacher: the softmax model (as loaded, or after stage 0), on the test split ----
  train::ConversionReport rep;
  rep.title = custom ? str("Task ", data_dir, ": BERT softmax attention converted to linear attention (test = dev)")
                     : str("GLUE ", task.name, ": BERT softmax attention converted to linear attention (test = the dev ",
                           "set; GLUE's test labels are not public)");
  {
    train::GlueConversionTask teacher(teacher_model, data, tc);
    rep.teacher = teacher.evaluate(train::Split::test);
    // A softmax model's trace carries teacher = its own weights: the teacher's entropy/monotonicity.
    train::Fidelity tf = train::measure_fidelity(teacher, train::Split::test, opts.fidelity_batches, false);
    rep.teacher_entropy = tf.entropy_teacher;
    rep.teacher_monotonicity = tf.monotonicity_teacher;
  }
  if (!fresh_head) teacher_model.reset();  // the students load the folder; after stage 0 they copy the teacher
  std::fprintf(stderr, "teacher (softmax): %s %.4f on dev\n", rep.teacher.front().first.c_str(),
               rep.teacher.front().second);

  rep.config_json = config.dump(2);

  cli::convert_rows(opts, cfg, config, model_dir, false, [&](const nn::Mixer& mixer) {
    nn::HFModelOptions o = mo;
    o.mixer = mixer;
    std::shared_ptr<nn::BertForSequenceClassification> student = load_bert(nn::load_hf_model(model_dir, o));
    if (fresh_head) train::load_teacher_weights(*student, *teacher_model);  // stage 0's weights, its head
    return cli::Student{student, std::make_unique<train::GlueConversionTask>(student, data, tc)};
  }, rep);
  cli::finish_conversion(out, rep, *run_folder);
  return 0;
}

}  // namespace

int hh::cli::convert_bert(int argc, char** argv) { return run(argc, argv); }
