// convert_demo: the offline end-to-end demonstration of conversion by attention distillation
// (issue 10). It trains its own softmax teachers, converts each into linear-attention students
// (the paper's rows: swap + finetune for 1+ELU, T2R, untrained Hedgehog; distilled T2R-HH and
// Hedgehog) and prints the paper's table for (a) an associative-recall decoder and (b) a small
// BERT-style encoder on a word-order task built from real text.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <thread>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/app.h"
#include "train/run_dir.h"
#include "cli/flags.h"
#include "core/atomic_file.h"
#include "core/parallel.h"
#include "data/associative_recall.h"
#include "data/word_order.h"
#include "experiments/ar/ar_convert.h"
#include "experiments/convert/convert_classify.h"
#include "nn/gate.h"
#include "train/convert/convert_report.h"

using namespace hh;

namespace {

struct Common {
  std::string out;
  std::vector<train::ConversionRow> rows;
  nn::Gate gate = nn::Gate::none;  // on the linear students of (a): its rows are "<row>+<gate>"
  nn::GateOutput gate_output = nn::GateOutput::normalizer;  // their output (nn/gate.h)
  uint64_t seed = 0;
  bool quiet = false;
  Precision precision = Precision::f32;
  int64_t distill_epochs = 0, finetune_epochs = 0, teacher_epochs = 0;
  bool check_teacher = true;  // --check-teacher
};

using TaskMaker = std::function<std::unique_ptr<train::ConversionTask>(const nn::Mixer& mixer)>;

// Trains the softmax teacher that `make` builds (the driver's finetune stage alone, from scratch),
// then converts a copy of it per row.
// `chance`: what a guess scores on the part's test metric; a teacher within 5 points of it stops the
// part (train::check_teacher_learned) unless --no-check-teacher.
train::ConversionReport run_part(const std::string& title, const Common& c, const TaskMaker& make, bool causal,
                                 train::ConvertConfig teacher_cfg, const train::ConvertConfig& student_cfg,
                                 double chance, const train::AfterConversion& after = {}) {
  std::cerr << title << ": training the softmax teacher\n";
  teacher_cfg.distill.epochs = 0;
  teacher_cfg.quiet = c.quiet;
  std::unique_ptr<train::ConversionTask> teacher = make(nn::Mixer::softmax());
  train::convert(*teacher, teacher_cfg);
  train::ConversionReport rep;
  rep.title = title;
  rep.teacher = teacher->evaluate(train::Split::test);
  const train::Fidelity tf = train::measure_fidelity(*teacher, train::Split::test, 4, causal);
  rep.teacher_entropy = tf.entropy_teacher;
  rep.teacher_monotonicity = tf.monotonicity_teacher;
  if (c.check_teacher) train::check_teacher_learned(rep, chance, 0.05);
  for (const auto& row : c.rows) {
    std::cerr << title << ": " << row.label << "\n";
    rep.rows.push_back(train::run_conversion_row(
        row,
        [&](const nn::Mixer& mixer) {
          auto task = make(mixer);
          train::load_teacher_weights(task->model(), teacher->model());
          return task;
        },
        student_cfg, causal, 4, after));
  }
  return rep;
}

train::ConvertConfig student_config(const Common& c, double finetune_lr) {
  train::ConvertConfig cfg;
  cfg.distill.epochs = c.distill_epochs;
  cfg.distill.patience = 2;
  cfg.finetune.epochs = c.finetune_epochs;
  cfg.finetune.lr = finetune_lr;
  cfg.finetune.schedule = "constant";
  cfg.finetune.warmup_fraction = 0.02;
  cfg.finetune.patience = 2;
  cfg.seed = c.seed;
  cfg.quiet = c.quiet;
  cfg.precision = c.precision;
  return cfg;
}

// (a) Associative recall: the small preset of ar_probe (8 keys in 32 tokens), a 2-layer decoder.
train::ConversionReport run_ar(const Common& c, int64_t num_train) {
  ArConfig dc;
  dc.vocab = 16;
  dc.seq_len = 32;
  dc.num_train = num_train;
  dc.num_test = 1000;
  dc.seed = c.seed;
  validate(dc);
  const ArDataset data = make_associative_recall(dc);
  const int64_t N = data.train.inputs.size(0), n_val = N / 10;
  const ArSplit train_split{slice(data.train.inputs, 0, 0, N - n_val), slice(data.train.targets, 0, 0, N - n_val)};
  const ArSplit val_split{slice(data.train.inputs, 0, N - n_val, N), slice(data.train.targets, 0, N - n_val, N)};
  nn::TransformerConfig mc;
  mc.vocab = dc.vocab;
  mc.layers = 2;
  mc.heads = 2;
  mc.head_dim = 32;
  mc.dim = 64;
  mc.mlp_hidden = 128;
  mc.max_len = dc.seq_len;
  mc.positions = "rope";
  train::ArTaskConfig tc;
  tc.batch = 32;
  tc.seed = c.seed;
  auto make = [&](const nn::Mixer& mixer) -> std::unique_ptr<train::ConversionTask> {
    nn::TransformerConfig m = mc;
    m.attention.mixer = mixer;
    m.attention.gate = mixer.is_linear() && !mixer.is_hybrid() ? c.gate : nn::Gate::none;  // the teacher: none
    if (m.attention.gate != nn::Gate::none) m.attention.gate_output = c.gate_output;
    Generator gen(c.seed + 1);
    auto model = std::make_shared<nn::DecoderLM>(m, nn::Init{gen});
    return std::make_unique<train::ArConversionTask>(model, dc, train_split, val_split, data.test, tc);
  };
  train::ConvertConfig teacher = student_config(c, 1e-3);
  teacher.finetune.epochs = c.teacher_epochs;
  teacher.finetune.stop_at = 0.99;
  teacher.finetune.patience = 4;
  train::ConvertConfig student = student_config(c, 1e-3);
  student.finetune.stop_at = 0.99;
  // A guess among the values (half the vocabulary) is right one time in vocab / 2.
  return run_part("(a) associative recall: a softmax decoder converted to linear attention", c, make, true, teacher,
                  student, 2.0 / static_cast<double>(dc.vocab));
}

// (b) Word order on real text: a 2-layer bidirectional (BERT-style) encoder with a [CLS] head.
train::ConversionReport run_text(const Common& c, const std::vector<std::string>& files) {
  data::WordOrderConfig wc;
  wc.window = 10;
  wc.min_count = 3;
  wc.train_stride = 2;  // overlapping training windows: 5x the examples, each with its own coin
  wc.seed = c.seed;
  const data::WordOrderData d = data::make_word_order(files, wc);
  std::cerr << "(b) word order: " << d.words << " words, vocabulary " << d.vocab.size() << ", windows "
            << d.train.ids.size(0) << "/" << d.val.ids.size(0) << "/" << d.test.ids.size(0) << "\n";
  nn::TransformerConfig mc;
  mc.vocab = static_cast<int64_t>(d.vocab.size());
  mc.layers = 2;
  mc.heads = 2;
  mc.head_dim = 32;
  mc.dim = 64;
  mc.mlp_hidden = 128;
  mc.max_len = wc.window + 1;
  // RoPE: with learned positions neither this task nor associative recall trained past chance in
  // the epochs a demo has (a position-selective head has to be found first).
  mc.positions = "rope";
  auto make = [&](const nn::Mixer& mixer) -> std::unique_ptr<train::ConversionTask> {
    nn::TransformerConfig m = mc;
    m.attention.mixer = mixer;
    Generator gen(c.seed + 2);
    auto model = std::make_shared<nn::EncoderClassifier>(m, 2, "cls", nn::Init{gen});
    return std::make_unique<train::ClassifierConversionTask>(model, train::ClassifySplit{d.train.ids, d.train.labels},
                                                             train::ClassifySplit{d.val.ids, d.val.labels},
                                                             train::ClassifySplit{d.test.ids, d.test.labels}, 32,
                                                             c.seed);
  };
  // The teacher at 5e-4: at 1e-3 it stayed on its first plateau (at chance) for all 10 epochs at 2
  // seeds of 6 (issue 35: 50.53% on another machine), at 3e-3 at every seed; at 5e-4 it climbed in
  // epoch 3-4 at each of seeds 0-9 (test accuracy 60-71%, mean 67.9%).
  train::ConvertConfig teacher = student_config(c, 5e-4);
  teacher.finetune.epochs = c.teacher_epochs;
  teacher.finetune.patience = 0;  // plateaus of several epochs come before the climb
  train::ConvertConfig student = student_config(c, 1e-4);
  // Paper Table 5: fidelity as the evaluated length grows. The converted encoder (RoPE, trained on
  // 10-word windows) reads the test text in windows of 10 to 80 words; KL to its own softmax weights.
  auto kl_by_length = [&](train::ConversionTask& task, train::ConversionOutcome& o) {
    auto encoder = dynamic_cast<train::ClassifierConversionTask&>(task).encoder();
    for (int64_t len : {10, 20, 40, 80}) {
      if (d.words < 20 * len) continue;  // too little text for test windows of this length
      data::WordOrderConfig lc = wc;
      lc.window = len;
      lc.train_stride = 0;
      lc.vocab = d.vocab;
      const data::WordOrderData dl = data::make_word_order(files, lc);
      const train::ClassifySplit test{dl.test.ids, dl.test.labels};
      train::ClassifierConversionTask at_len(encoder, test, test, test, 8, c.seed);
      o.extra.emplace_back("kl_len" + std::to_string(len), train::measure_fidelity(at_len, train::Split::test, 8, false).kl_mean);
    }
  };
  // A guess: the test split's majority label.
  const std::vector<int64_t> labels = to_vector<int64_t>(d.test.labels);
  const int64_t ones = std::count(labels.begin(), labels.end(), int64_t{1});
  const double majority = labels.empty() ? 0.5
                                         : static_cast<double>(std::max<int64_t>(ones, labels.size() - ones)) /
                                               static_cast<double>(labels.size());
  return run_part("(b) word order on real text: a BERT-style encoder converted to linear attention", c, make, false,
                  teacher, student, majority, kl_by_length);
}

int run(int argc, char** argv) {
  cli::Flags f("convert_demo",
                "Offline demonstration of Hedgehog conversion: trains softmax teachers, converts them by attention\n"
                "distillation, prints the paper's table (teacher; swap + finetune; distilled T2R-HH and Hedgehog).");
  f.add("part", "ar,text", "which demonstrations: ar (associative recall), text (word-order encoder), or ar,text");
  f.add("feature-map", "paper", "the students: paper (the paper's five rows) or a comma list of feature maps");
  f.add("gate", "none",
        "gate on the linear students' state in (a), the causal part: none, decay, gla, liger or delta (rows are\n"
        "                       named <row>+<gate>; (b) is a bidirectional encoder: use --part ar)");
  f.add("gate-output", "normalizer", "output of the gated students: normalizer or groupnorm (GLA's RMSNorm per head)");
  f.add("ar-train", "16000", "associative recall: training sequences (10% held out for validation)");
  f.add("text", "/usr/share/common-licenses", "word order: a folder of English text files (or one file)");
  f.add("check-teacher", "true", "stop a part whose softmax teacher stays within 5 points of a guess (its students would\n"
        "\"recover\" chance); --no-check-teacher for smoke runs");
  f.add("teacher-epochs", "10", "teacher training: maximum epochs (AR stops at 99% validation accuracy; the best\n"
        "                       validation epoch's weights are kept)");
  f.add("distill-epochs", "2", "stage 1: maximum epochs of attention distillation");
  f.add("finetune-epochs", "2", "stage 2: maximum epochs of finetuning");
  f.add("jobs", "", "parts trained at once (default: 2 when the machine has 2 cores, else 1)");
  cli::CommonFlagSpec common;
  common.device = false;  // the demo runs on the CPU
  common.seed_help = "seed for data, initialization and batch order";
  common.threads_default = "1";
  common.threads_help = "CPU threads (0 = all cores; the demo models are too small to gain from more)";
  common.out = true;
  common.out_default = "out/convert_demo";
  common.out_help = "output folder: <out>/<part>/{results.json,results.csv,report.html,*.svg}";
  cli::add_common_flags(f, common);
  f.add("quiet", "false", "plain progress lines instead of a bar", true);
  if (!f.parse(argc, argv)) return 0;
  const cli::CommonFlags flags = cli::read_common_flags(f, common);
  Common c;
  c.out = flags.out;
  c.rows = train::parse_conversion_rows(f.str("feature-map"));
  c.gate = nn::parse_gate(f.str("gate"), "--gate");
  c.rows = train::gated_rows(c.rows, c.gate, "--gate");
  c.gate_output = nn::parse_gate_output(f.str("gate-output"), {c.gate}, "--gate-output");
  c.seed = flags.seed;
  c.quiet = f.boolean("quiet");
  c.precision = flags.precision;
  c.teacher_epochs = f.integer("teacher-epochs", 1, 100000);
  c.check_teacher = f.boolean("check-teacher");
  c.distill_epochs = f.integer("distill-epochs", 0, 100000);
  c.finetune_epochs = f.integer("finetune-epochs", 0, 100000);
  const int64_t threads = flags.threads;
  const int64_t per_job_threads = threads == 0 ? std::max(1, omp_get_num_procs()) : threads;
  const int64_t jobs = f.given("jobs") ? f.integer("jobs", 1, 2) : std::min(2, std::max(1, omp_get_num_procs()));
  set_num_threads(static_cast<int>(per_job_threads));
  const std::string parts = f.str("part");
  HH_CHECK(parts == "ar" || parts == "text" || parts == "ar,text" || parts == "text,ar", "--part: expected ar, text ",
           "or ar,text, got '", parts, "'");
  HH_CHECK(c.gate == nn::Gate::none || parts == "ar", "--gate: part text converts a bidirectional encoder; a gated ",
           "state needs the causal decoder of part ar (--part ar)");
  const int64_t ar_train = f.integer("ar-train", 100, 10000000);
  std::vector<std::string> text_files;
  if (parts.find("text") != std::string::npos) {
    const std::string text = f.str("text");
    text_files = std::filesystem::is_directory(text) ? data::text_files_in(text) : std::vector<std::string>{text};
    HH_CHECK(std::filesystem::is_regular_file(text_files[0]), "--text: '", text, "' is neither a folder nor a file");
  }
  train::check_output_folder(c.out);
  // The two parts are independent: with --jobs 2 they train at once, one thread each.
  std::vector<std::pair<std::string, std::function<train::ConversionReport()>>> todo;
  if (parts.find("ar") != std::string::npos) todo.emplace_back("ar", [&] { return run_ar(c, ar_train); });
  if (!text_files.empty()) todo.emplace_back("text", [&] { return run_text(c, text_files); });
  std::vector<std::pair<std::string, train::ConversionReport>> done(todo.size());
  std::vector<std::string> errors(todo.size());
  auto work = [&](size_t i) {
    try {
      done[i] = {todo[i].first, todo[i].second()};
    } catch (const std::exception& e) {
      errors[i] = e.what();
    }
  };
  if (jobs > 1 && todo.size() > 1) {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < todo.size(); ++i)
      threads.emplace_back([&, i] {
        set_num_threads(static_cast<int>(per_job_threads));
        work(i);
      });
    for (auto& t : threads) t.join();
  } else {
    for (size_t i = 0; i < todo.size(); ++i) work(i);
  }
  for (size_t i = 0; i < todo.size(); ++i)
    HH_CHECK(errors[i].empty(), "part ", todo[i].first, ": ", errors[i]);
  for (const auto& [name, rep] : done) {
    train::write_conversion_report(c.out + "/" + name, rep);
    std::cout << "\n" << rep.title << "\n" << train::conversion_table(rep) << "report: " << c.out << "/" << name
              << "/report.html\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return hh::cli::run_main(argc, argv, run); }
