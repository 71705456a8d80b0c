// convert_llama: converts a Llama-layout HF folder (Llama, Mistral, Qwen2, Qwen3) into linear attention by Hedgehog attention distillation,
// then LoRA finetuning, on SAMSum-style JSON dialogues, evaluated by ROUGE-1/2/L of greedy summaries
// (paper Table 11): the softmax teacher (zero-shot), then one row per student feature map.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "cli/app.h"
#include "cli/convert_lm_flags.h"
#include "cli/drivers.h"
#include "core/parallel.h"
#include "data/samsum.h"
#include "data/tokenizer.h"
#include "experiments/convert/convert_samsum.h"

using namespace hh;

namespace {

// Presets. paper: Table 11 (LoRA rank 8, alpha 16 on q, k, v, o, lr 1e-4; distill 2 epochs, lr
// 1e-2; 1024 tokens; up to 100 new tokens). The finetuning epochs and batch are not given: 1 and 1.
// quick: a few minutes on a CPU for a small model (256 tokens, 1 distillation epoch, 500 training
// and 20 evaluation dialogues).
std::vector<cli::ConversionPreset> presets() {
  cli::ConversionDefaults paper = cli::lm_conversion_defaults();
  paper.distill_epochs = 2;
  paper.distill_lr = 1e-2;
  paper.finetune = "lora";
  paper.finetune_epochs = 1;
  paper.lr = 1e-4;
  paper.weight_decay = 0;
  paper.warmup = 0;
  paper.batch = 1;
  paper.out = "out/convert_llama";
  cli::ConversionDefaults quick = paper;
  quick.distill_epochs = 1;
  return {{"paper", "Table 11", paper}, {"quick", "a few minutes on a CPU", quick}};
}

void declare_app_flags(cli::Flags& f, const cli::ConversionPreset& p) {
  const bool quick = p.name == "quick";
  cli::add_lm_app_flags(f, "HF folder of a Llama-layout model (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                         "Qwen3ForCausalLM) with its tokenizer.json",
                         "folder with train.json, val.json (or validation.json), test.json (SAMSum records)");
  f.add("max-length", quick ? "256" : "1024",
        "training sequences (prompt + summary + eos) are cut to this many tokens");
  f.add("max-new-tokens", "100", "summary tokens generated at most (cut at the first end token)");
  f.add("max-eval", quick ? "20" : "100", "dialogues generated per evaluation of a split (0 = all)");
  f.add("max-train", quick ? "500" : "0", "use at most this many training dialogues (0 = all)");
}

// data_dir/name, or for the validation split also validation.json.
std::string split_file(const std::string& dir, const std::vector<std::string>& names) {
  for (const auto& n : names)
    if (std::filesystem::exists(dir + "/" + n)) return dir + "/" + n;
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : " or ") + n;
  fail(str("--data: ", dir, " has no ", list));
}

int run(int argc, char** argv) {
  std::optional<cli::Flags> parsed = cli::parse_conversion_flags(
      "convert_llama",
      "Converts a Llama HF folder to linear attention (Hedgehog distillation, then LoRA finetuning) and reports\n"
      "ROUGE-1/2/L of greedy summaries on SAMSum-style dialogues (paper Table 11).",
      presets(),
      [](cli::Flags& f, const cli::ConversionPreset& p) {
        declare_app_flags(f, p);
        cli::add_lm_conversion_flags(f);
      },
      argc, argv);
  if (!parsed) return 0;
  const cli::Flags& f = *parsed;

  const std::string model_dir = f.str("model"), data_dir = f.str("data");
  HH_CHECK(!model_dir.empty(), "--model: no model folder given (see --help)");
  HH_CHECK(!data_dir.empty(), "--data: no SAMSum folder given (see --help)");
  const int64_t max_length = f.integer("max-length", 2, 1 << 20);
  const int64_t max_new = f.integer("max-new-tokens", 1, 1 << 20);
  const int64_t max_eval = f.integer("max-eval", 0);
  const int64_t max_train = f.integer("max-train", 0);
  const train::ConvertConfig cfg = cli::lm_conversion_config(f);
  const cli::ConversionRun opts = cli::lm_conversion_run(f);
  const std::string& out = opts.out;
  set_num_threads(opts.threads);
  HH_CHECK(std::filesystem::is_directory(data_dir), "--data: ", data_dir, " is not a folder");
  const auto train_ex = data::read_samsum(split_file(data_dir, {"train.json"}), max_train > 0 ? max_train : -1);
  const auto val_ex = data::read_samsum(split_file(data_dir, {"val.json", "validation.json"}));
  const auto test_ex = data::read_samsum(split_file(data_dir, {"test.json"}));
  HH_CHECK(!train_ex.empty() && !val_ex.empty() && !test_ex.empty(), "--data: ", data_dir,
           ": a split has no dialogue");

  cli::LmTeacher teacher = cli::load_lm_teacher(f, opts.device, "convert_llama", {"llama"},
                                                  "Llama-layout models (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                                                  "Qwen3ForCausalLM)", "max-length", max_length);
  const std::shared_ptr<const data::Tokenizer> tok = teacher.tokenizer;
  HH_CHECK(tok->eos_id() >= 0, "--tokenizer: ", f.str("tokenizer").empty() ? model_dir : f.str("tokenizer"),
           " has no end token");
  const std::unique_ptr<train::RunDir> run_folder = cli::open_conversion_folder(out);

  auto samsum = std::make_shared<const train::SamsumData>(
      train::make_samsum_data(*tok, train_ex, val_ex, test_ex, max_length, max_length - 1));
  std::cerr << "dialogues: train " << samsum->train.size() << ", validation " << samsum->val.size() << ", test "
            << samsum->test.size() << "; " << samsum->cut << " cut to --max-length " << max_length << ", "
            << samsum->dropped << " of them left without a summary token\n";
  train::SamsumTaskConfig tc;
  tc.batch = opts.batch;
  tc.max_new_tokens = max_new;
  tc.max_eval = max_eval;
  tc.eos_id = tok->eos_id();
  tc.pad_id = tok->pad_id() >= 0 ? tok->pad_id() : tok->eos_id();
  tc.seed = cfg.seed;
  tc.device = opts.device;

  // Each row's checkpoint records the settings it was written with: --resume with other settings is
  // refused here, before any work.
  nlohmann::json config = cli::lm_conversion_settings("convert_llama", f, cfg, opts);
  config.update({{"max_length", max_length},
                 {"max_new_tokens", max_new},
                 {"max_eval", max_eval},
                 {"max_train", max_train},
                 {"train_dialogues", samsum->train.size()},
                 {"val_dialogues", samsum->val.size()},
                 {"test_dialogues", samsum->test.size()}});
  if (cfg.resume) cli::check_resume(opts.rows, out, config);
  cli::start_conversion_folder(*run_folder, opts.rows, config, cfg.resume);

  train::ConversionReport rep;
  rep.title = "Llama -> linear attention: SAMSum ROUGE (" + model_dir + ")";
  {
    train::SamsumConversionTask teacher_task(teacher.model, tok, samsum, tc);
    rep.teacher = teacher_task.evaluate(train::Split::test);
    train::Fidelity tf = train::measure_fidelity(teacher_task, train::Split::test, opts.fidelity_batches, true);
    rep.teacher_entropy = tf.entropy_teacher;
    rep.teacher_monotonicity = tf.monotonicity_teacher;
  }
  if (cli::needs_teacher_logits(cfg))
    tc.teacher = teacher.model;  // logit distillation runs it on every batch, KL-guided selection on validation
  teacher.model.reset();
  rep.config_json = config.dump(2);
  std::cerr << "teacher (softmax, zero-shot) test ROUGE-1 " << rep.teacher.front().second << "\n";

  cli::convert_rows(opts, cfg, config, model_dir, true, [&](const nn::Mixer& mixer) {
    std::shared_ptr<nn::CausalLM> student = cli::load_lm_student(f, mixer, opts.gate, cfg.seed, opts.device);
    return cli::Student{student, std::make_unique<train::SamsumConversionTask>(student, tok, samsum, tc)};
  }, rep);
  cli::finish_conversion(out, rep, *run_folder);
  return 0;
}

}  // namespace

int hh::cli::convert_llama(int argc, char** argv) { return run(argc, argv); }
