// convert_gpt2: converts a pretrained GPT-2 (an HF folder) into linear attention by Hedgehog
// attention distillation, then finetunes it, evaluated by perplexity on WikiText (paper Table 10):
// the softmax teacher, then one row per student feature map (REFERENCE.md §4). The same WikiText
// conversion takes a Llama-layout decoder too (e.g. a `train_lm --arch llama` teacher: RoPE):
// convert_llama is the summarisation regime (SAMSum), this is the language-modelling one.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "cli/app.h"
#include "cli/convert_lm_flags.h"
#include "cli/drivers.h"
#include "core/parallel.h"
#include "data/text_corpus.h"
#include "data/tokenizer.h"
#include "experiments/convert/convert_lm.h"

using namespace hh;

namespace {

// Presets. paper: Table 10 (distill 2 epochs, batch 8, lr 1e-2, 1024 tokens; finetune lr 6e-4,
// wd 0.01; the finetuning epochs are not given: one). quick: a few minutes on a CPU (128 tokens,
// 1 distillation epoch, 200,000 training and 20,000 evaluation tokens).
std::vector<cli::ConversionPreset> presets() {
  cli::ConversionDefaults paper = cli::lm_conversion_defaults();
  paper.distill_epochs = 2;
  paper.distill_lr = 1e-2;
  paper.finetune = "full";
  paper.finetune_epochs = 1;
  paper.lr = 6e-4;
  paper.weight_decay = 0.01;
  paper.warmup = 0.01;
  paper.batch = 8;
  paper.out = "out/convert_gpt2";
  cli::ConversionDefaults quick = paper;
  quick.distill_epochs = 1;
  return {{"paper", "Table 10", paper}, {"quick", "a few minutes on a CPU", quick}};
}

void declare_app_flags(cli::Flags& f, const cli::ConversionPreset& p) {
  const bool quick = p.name == "quick";
  cli::add_lm_app_flags(f, "HF folder of a GPT-2 model (GPT2LMHeadModel; or a Llama-layout decoder: LlamaForCausalLM, ...)",
                         "WikiText folder: wiki.{train,valid,test}.raw (or .tokens)");
  f.add("context", quick ? "128" : "1024", "tokens per window");
  f.add("stride", "0", "evaluation stride: tokens between strided windows, <= context (0 = context / 2)");
  f.add("max-train-tokens", quick ? "200000" : "0", "use at most this many training tokens (0 = all)");
  f.add("max-eval-tokens", quick ? "20000" : "0", "use at most this many validation and test tokens (0 = all)");
}

std::shared_ptr<const data::LmWindows> windows_of(std::vector<int32_t> ids, int64_t context, int64_t stride,
                                                  bool blocks, const std::string& what) {
  const int64_t need = blocks ? context + 1 : 2;
  HH_CHECK(static_cast<int64_t>(ids.size()) >= need, what, ": ", ids.size(), " tokens, fewer than the ", need,
           " one window needs (--context ", context, ")");
  return std::make_shared<const data::LmWindows>(blocks ? data::lm_blocks(std::move(ids), context)
                                                        : data::lm_strided(std::move(ids), context, stride));
}

int run(int argc, char** argv) {
  std::optional<cli::Flags> parsed = cli::parse_conversion_flags(
      "convert_gpt2",
      "Converts a GPT-2 HF folder to linear attention (Hedgehog distillation, then finetuning) and reports\n"
      "WikiText perplexity for the teacher and each student (paper Table 10).",
      presets(),
      [](cli::Flags& f, const cli::ConversionPreset& p) {
        declare_app_flags(f, p);
        cli::add_lm_conversion_flags(f);
      },
      argc, argv);
  if (!parsed) return 0;
  const cli::Flags& f = *parsed;

  // Every flag and input is checked before any long work.
  const std::string model_dir = f.str("model"), data_dir = f.str("data");
  HH_CHECK(!model_dir.empty(), "--model: no model folder given (see --help)");
  HH_CHECK(!data_dir.empty(), "--data: no WikiText folder given (see --help)");
  const int64_t context = f.integer("context", 1, 1 << 20);
  const int64_t stride_flag = f.integer("stride", 0, context);
  const int64_t stride = stride_flag > 0 ? stride_flag : std::max<int64_t>(1, context / 2);
  const int64_t max_train = f.integer("max-train-tokens", 0), max_eval = f.integer("max-eval-tokens", 0);
  const train::ConvertConfig cfg = cli::lm_conversion_config(f);
  const cli::ConversionRun opts = cli::lm_conversion_run(f);
  const std::string& out = opts.out;
  set_num_threads(opts.threads);
  const std::string train_path = data::wikitext_split_path(data_dir, "train");
  const std::string val_path = data::wikitext_split_path(data_dir, "valid");
  const std::string test_path = data::wikitext_split_path(data_dir, "test");

  cli::LmTeacher teacher =
      cli::load_lm_teacher(f, opts.device, "convert_gpt2", {"gpt2", "llama"},
                           "GPT-2 and Llama-layout decoders (GPT2LMHeadModel, LlamaForCausalLM, ...)", "context", context);
  const data::Tokenizer& tok = *teacher.tokenizer;
  const std::unique_ptr<train::RunDir> run_folder = cli::open_conversion_folder(out);

  auto train_w = windows_of(train::encode_corpus(data::read_text_file(train_path), tok, max_train), context, stride,
                            true, train_path);
  auto val_w = windows_of(train::encode_corpus(data::read_text_file(val_path), tok, max_eval), context, stride,
                          false, val_path);
  auto test_w = windows_of(train::encode_corpus(data::read_text_file(test_path), tok, max_eval), context, stride,
                           false, test_path);
  std::cerr << "tokens: train " << train_w->ids.size() << " (" << train_w->size() << " windows), validation "
            << val_w->ids.size() << ", test " << test_w->ids.size() << "\n";
  train::LmTaskConfig tc;
  tc.batch = opts.batch;
  tc.seed = cfg.seed;
  tc.device = opts.device;
  tc.pad_id = tok.eos_id() >= 0 ? tok.eos_id() : 0;

  // Each row's checkpoint records the settings it was written with: --resume with other settings is
  // refused here, before any work.
  nlohmann::json config = cli::lm_conversion_settings("convert_gpt2", f, cfg, opts);
  config.update({{"context", context},
                 {"stride", stride},
                 {"max_train_tokens", max_train},
                 {"max_eval_tokens", max_eval},
                 {"train_tokens", train_w->ids.size()},
                 {"val_tokens", val_w->ids.size()},
                 {"test_tokens", test_w->ids.size()}});
  if (cfg.resume) cli::check_resume(opts.rows, out, config);
  cli::start_conversion_folder(*run_folder, opts.rows, config, cfg.resume);

  train::ConversionReport rep;
  rep.title = std::string(teacher.model->family() == "gpt2" ? "GPT-2" : teacher.model->architecture()) +
              " -> linear attention: WikiText perplexity (" + model_dir + ")";
  rep.percent = false;
  rep.higher_is_better = false;
  {
    train::LmConversionTask teacher_task(teacher.model, train_w, val_w, test_w, tc);
    rep.teacher = teacher_task.evaluate(train::Split::test);
    train::Fidelity tf = train::measure_fidelity(teacher_task, train::Split::test, opts.fidelity_batches, true);
    rep.teacher_entropy = tf.entropy_teacher;
    rep.teacher_monotonicity = tf.monotonicity_teacher;
  }
  if (cli::needs_teacher_logits(cfg))
    tc.teacher = teacher.model;  // logit distillation runs it on every batch, KL-guided selection on validation
  teacher.model.reset();
  rep.config_json = config.dump(2);
  std::cerr << "teacher (softmax) test perplexity " << rep.teacher.front().second << "\n";

  cli::convert_rows(opts, cfg, config, model_dir, true, [&](const nn::Mixer& mixer) {
    std::shared_ptr<nn::CausalLM> student = cli::load_lm_student(f, mixer, opts.gate, cfg.seed, opts.device);
    return cli::Student{student, std::make_unique<train::LmConversionTask>(student, train_w, val_w, test_w, tc)};
  }, rep);
  cli::finish_conversion(out, rep, *run_folder);
  return 0;
}

}  // namespace

int hh::cli::convert_gpt2(int argc, char** argv) { return run(argc, argv); }
