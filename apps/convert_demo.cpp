// convert_demo: the offline end-to-end demonstration of conversion by attention distillation
// (issue 10). It trains its own softmax teachers, converts each into linear-attention students
// (the paper's rows: swap + finetune for 1+ELU, T2R, untrained Hedgehog; distilled T2R-HH and
// Hedgehog) and prints the paper's table for (a) an associative-recall decoder and (b) a small
// BERT-style encoder on a word-order task built from real text.
#include <omp.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/flags.h"
#include "core/atomic_file.h"
#include "core/parallel.h"
#include "data/associative_recall.h"
#include "train/convert_ar.h"
#include "train/convert_report.h"

using namespace hh;

namespace {

struct Common {
  std::string out;
  std::vector<train::ConversionRow> rows;
  uint64_t seed = 0;
  bool quiet = false;
  int64_t distill_epochs = 0, finetune_epochs = 0, teacher_epochs = 0;
};

// (a) Associative recall: the small preset of ar_probe (8 keys in 32 tokens), a 2-layer decoder.
train::ConversionReport run_ar(const Common& c, apps::Flags& f) {
  ArConfig dc;
  dc.vocab = 16;
  dc.seq_len = 32;
  dc.num_train = f.integer("ar-train", 100, 10000000);
  dc.num_test = 1000;
  dc.seed = c.seed;
  validate(dc);
  ArDataset data = make_associative_recall(dc);
  const int64_t N = data.train.inputs.size(0), n_val = N / 10;
  ArSplit train_split{slice(data.train.inputs, 0, 0, N - n_val), slice(data.train.targets, 0, 0, N - n_val)};
  ArSplit val_split{slice(data.train.inputs, 0, N - n_val, N), slice(data.train.targets, 0, N - n_val, N)};

  nn::TransformerConfig mc;
  mc.vocab = dc.vocab;
  mc.layers = 2;
  mc.heads = 2;
  mc.head_dim = 32;
  mc.dim = 64;
  mc.mlp_hidden = 128;
  mc.max_len = dc.seq_len;
  mc.positions = "rope";
  mc.attention.form = nn::LinearForm::chunked;
  train::ArTaskConfig tc;
  tc.batch = 32;
  tc.seed = c.seed;
  auto make_task = [&](const std::string& mixer) {
    nn::TransformerConfig m = mc;
    m.attention.mixer = mixer;
    Generator gen(c.seed + 1);
    auto model = std::make_shared<nn::DecoderLM>(m, nn::Init{gen});
    return std::make_unique<train::ArConversionTask>(model, dc, train_split, val_split, data.test, tc);
  };

  // The teacher: a softmax decoder trained from scratch (the driver's finetune stage alone).
  train::ConvertConfig tcfg;
  tcfg.distill.epochs = 0;
  tcfg.finetune.epochs = c.teacher_epochs;
  tcfg.finetune.lr = 1e-3;
  tcfg.finetune.schedule = "constant";
  tcfg.finetune.warmup_fraction = 0.02;
  tcfg.finetune.stop_at = 0.99;
  tcfg.finetune.patience = 3;
  tcfg.quiet = c.quiet;
  std::cerr << "(a) associative recall: training the softmax teacher\n";
  auto teacher = make_task("softmax");
  train::convert(*teacher, tcfg);
  train::ConversionReport rep;
  rep.title = "Associative recall: a softmax decoder converted to linear attention";
  rep.teacher = teacher->evaluate(train::Split::test);
  train::Fidelity tf = train::measure_fidelity(*teacher, train::Split::test, 4, true);
  rep.teacher_entropy = tf.entropy_teacher;
  rep.teacher_monotonicity = tf.monotonicity_teacher;
  nn::Module& teacher_model = teacher->model();

  train::ConvertConfig cfg;
  cfg.distill.epochs = c.distill_epochs;
  cfg.distill.patience = 2;
  cfg.finetune.epochs = c.finetune_epochs;
  cfg.finetune.lr = 1e-3;
  cfg.finetune.schedule = "constant";
  cfg.finetune.warmup_fraction = 0.02;
  cfg.finetune.stop_at = 0.99;
  cfg.finetune.patience = 2;
  cfg.seed = c.seed;
  cfg.quiet = c.quiet;
  for (const auto& row : c.rows) {
    std::cerr << "(a) " << row.label << "\n";
    rep.rows.push_back(train::run_conversion_row(
        row,
        [&](const std::string& mixer) {
          auto task = make_task(mixer);
          train::load_teacher_weights(task->model(), teacher_model);
          return std::unique_ptr<train::ConversionTask>(std::move(task));
        },
        cfg, true, 4));
  }
  return rep;
}

int run(int argc, char** argv) {
  apps::Flags f("convert_demo",
                "Offline demonstration of Hedgehog conversion: trains softmax teachers, converts them by attention\n"
                "distillation, prints the paper's table (teacher; swap + finetune; distilled T2R-HH and Hedgehog).");
  f.add("part", "ar", "which demonstrations: ar (associative recall), text (word-order encoder), or ar,text");
  f.add("feature-map", "paper", "the students: paper (the paper's five rows) or a comma list of feature maps");
  f.add("ar-train", "8000", "associative recall: training sequences (10% held out for validation)");
  f.add("teacher-epochs", "10", "teacher training: maximum epochs");
  f.add("distill-epochs", "2", "stage 1: maximum epochs of attention distillation");
  f.add("finetune-epochs", "2", "stage 2: maximum epochs of finetuning");
  f.add("seed", "0", "seed for data, initialization and batch order");
  f.add("threads", "0", "CPU threads (0 = all cores)");
  f.add("out", "out/convert_demo", "output folder: <out>/<part>/{results.json,results.csv,report.html,*.svg}");
  f.add("quiet", "false", "plain progress lines instead of a bar", true);
  if (!f.parse(argc, argv)) return 0;
  Common c;
  c.out = f.str("out");
  c.rows = train::parse_conversion_rows(f.str("feature-map"));
  c.seed = static_cast<uint64_t>(f.integer("seed", 0));
  c.quiet = f.boolean("quiet");
  c.teacher_epochs = f.integer("teacher-epochs", 1, 100000);
  c.distill_epochs = f.integer("distill-epochs", 0, 100000);
  c.finetune_epochs = f.integer("finetune-epochs", 0, 100000);
  const int64_t threads = f.integer("threads", 0, 4096);
  set_num_threads(static_cast<int>(threads == 0 ? std::max(1, omp_get_num_procs()) : threads));
  const std::string parts = f.str("part");
  HH_CHECK(parts == "ar" || parts == "text" || parts == "ar,text" || parts == "text,ar", "--part: expected ar, text ",
           "or ar,text, got '", parts, "'");
  ensure_writable_dir(c.out);
  if (parts.find("ar") != std::string::npos) {
    train::ConversionReport rep = run_ar(c, f);
    std::cout << "\n" << rep.title << "\n" << train::conversion_table(rep);
    train::write_conversion_report(c.out + "/ar", rep);
    std::cout << "report: " << c.out << "/ar/report.html\n";
  }
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
