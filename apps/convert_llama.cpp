// convert_llama: converts a Llama HF folder into linear attention by Hedgehog attention distillation,
// then LoRA finetuning, on SAMSum-style JSON dialogues, evaluated by ROUGE-1/2/L of greedy summaries
// (paper Table 11): the softmax teacher (zero-shot), then one row per student feature map.
#include <omp.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/convert_lm_app.h"
#include "core/parallel.h"
#include "data/samsum.h"
#include "data/tokenizer.h"
#include "nn/models/hf_save.h"
#include "train/convert_samsum.h"

using namespace hh;

namespace {

// Preset defaults. paper: Table 11 (LoRA rank 8, alpha 16 on q, k, v, o, lr 1e-4; distill 2 epochs,
// lr 1e-2; 1024 tokens; up to 100 new tokens). The finetuning epochs and batch are not given: 1 and
// 1. quick: a few minutes on a CPU for a small model.
std::map<std::string, std::string> preset_defaults(const std::string& preset) {
  std::map<std::string, std::string> d = {
      {"max-length", "1024"}, {"distill-epochs", "2"},   {"distill-lr", "1e-2"}, {"finetune", "lora"},
      {"finetune-epochs", "1"}, {"lr", "1e-4"},          {"weight-decay", "0"},  {"warmup", "0"},
      {"batch", "1"},         {"max-eval", "100"},       {"max-train", "0"},     {"out", "out/convert_llama"}};
  if (preset == "quick") {
    d["max-length"] = "256";
    d["distill-epochs"] = "1";
    d["max-train"] = "500";
    d["max-eval"] = "20";
  } else {
    HH_CHECK(preset.empty() || preset == "paper", "--preset: expected paper or quick, got '", preset, "'");
  }
  return d;
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
  const std::string preset = apps::preset_in_args(argc, argv);
  auto d = preset_defaults(preset);
  apps::Flags f("convert_llama",
                "Converts a Llama HF folder to linear attention (Hedgehog distillation, then LoRA finetuning) and reports\n"
                "ROUGE-1/2/L of greedy summaries on SAMSum-style dialogues (paper Table 11).");
  f.add("model", "", "HF folder of a Llama model (LlamaForCausalLM) with its tokenizer.json");
  f.add("tokenizer", "", "folder with the tokenizer; default: --model");
  f.add("data", "", "folder with train.json, val.json (or validation.json), test.json (SAMSum records)");
  f.add("preset", "paper", "defaults: paper (Table 11) or quick (a few minutes on a CPU)");
  f.add("max-length", d["max-length"], "training sequences (prompt + summary + eos) are cut to this many tokens");
  f.add("max-new-tokens", "100", "summary tokens generated at most (cut at the first end token)");
  f.add("max-eval", d["max-eval"], "dialogues generated per evaluation of a split (0 = all)");
  f.add("max-train", d["max-train"], "use at most this many training dialogues (0 = all)");
  f.add("chunk", "64", "chunk size of the chunked linear-attention form");
  apps::add_conversion_flags(f, d);
  if (!f.parse(argc, argv)) return 0;

  const std::string model_dir = f.str("model"), data_dir = f.str("data");
  HH_CHECK(!model_dir.empty(), "--model: no model folder given (see --help)");
  HH_CHECK(!data_dir.empty(), "--data: no SAMSum folder given (see --help)");
  const int64_t max_length = f.integer("max-length", 2, 1 << 20);
  const int64_t max_new = f.integer("max-new-tokens", 1, 1 << 20);
  const int64_t max_eval = f.integer("max-eval", 0);
  const int64_t max_train = f.integer("max-train", 0);
  const int64_t chunk = f.integer("chunk", 1, 1 << 20);
  const int64_t batch = f.integer("batch", 1, 1 << 20);
  const int64_t fidelity_batches = f.integer("fidelity-batches", 1, 1 << 20);
  const auto rows = train::parse_conversion_rows(f.str("feature-map"));
  train::ConvertConfig cfg = apps::conversion_config(f);
  const bool save_models = f.boolean("save");
  const Device device = apps::device_flag(f);
  const int64_t threads = f.integer("threads", 0, 4096);
  set_num_threads(static_cast<int>(threads == 0 ? std::max(1, omp_get_num_procs()) : threads));
  const std::string out = f.str("out");
  HH_CHECK(!out.empty(), "--out: empty path");
  HH_CHECK(std::filesystem::is_directory(data_dir), "--data: ", data_dir, " is not a folder");
  const auto train_ex = data::read_samsum(split_file(data_dir, {"train.json"}), max_train > 0 ? max_train : -1);
  const auto val_ex = data::read_samsum(split_file(data_dir, {"val.json", "validation.json"}));
  const auto test_ex = data::read_samsum(split_file(data_dir, {"test.json"}));
  HH_CHECK(!train_ex.empty() && !val_ex.empty() && !test_ex.empty(), "--data: ", data_dir,
           ": a split has no dialogue");

  nn::HFModelOptions teacher_opts;
  teacher_opts.mixer = "softmax";
  teacher_opts.device = device;
  auto teacher = nn::load_causal_lm(model_dir, teacher_opts);
  HH_CHECK(teacher->family() == "llama", "--model: ", model_dir, " holds a ", teacher->architecture(),
           " (family ", teacher->family(), "); convert_llama converts Llama models (LlamaForCausalLM)");
  HH_CHECK(teacher->max_positions() < 0 || max_length <= teacher->max_positions(), "--max-length: ", max_length,
           " exceeds the model's ", teacher->max_positions(), " positions");
  const std::string tok_dir = f.str("tokenizer").empty() ? model_dir : f.str("tokenizer");
  std::shared_ptr<const data::Tokenizer> tok(data::load_tokenizer(tok_dir).release());
  HH_CHECK(tok->vocab_size() <= teacher->vocab_size(), "--tokenizer: ", tok_dir, " has ", tok->vocab_size(),
           " tokens but the model's vocabulary has ", teacher->vocab_size());
  HH_CHECK(tok->eos_id() >= 0, "--tokenizer: ", tok_dir, " has no end token");
  ensure_writable_dir(out);

  auto samsum = std::make_shared<const train::SamsumData>(
      train::make_samsum_data(*tok, train_ex, val_ex, test_ex, max_length, max_length - 1));
  std::cerr << "dialogues: train " << samsum->train.size() << ", validation " << samsum->val.size() << ", test "
            << samsum->test.size() << "; " << samsum->cut << " cut to --max-length " << max_length << ", "
            << samsum->dropped << " of them left without a summary token\n";
  train::SamsumTaskConfig tc;
  tc.batch = batch;
  tc.max_new_tokens = max_new;
  tc.max_eval = max_eval;
  tc.eos_id = tok->eos_id();
  tc.pad_id = tok->pad_id() >= 0 ? tok->pad_id() : tok->eos_id();
  tc.seed = cfg.seed;
  tc.device = device;

  cfg.fingerprint = apps::flags_fingerprint(
      f, {"model", "tokenizer", "data", "max-length", "max-new-tokens", "max-eval", "max-train", "chunk"});

  train::SamsumConversionTask teacher_task(teacher, tok, samsum, tc);
  train::ConversionReport rep;
  rep.title = "Llama -> linear attention: SAMSum ROUGE (" + model_dir + ")";
  rep.teacher = teacher_task.evaluate(train::Split::test);
  train::Fidelity tf = train::measure_fidelity(teacher_task, train::Split::test, fidelity_batches, true);
  rep.teacher_entropy = tf.entropy_teacher;
  rep.teacher_monotonicity = tf.monotonicity_teacher;
  rep.config_json = nlohmann::json{{"app", "convert_llama"}, {"preset", f.str("preset")}, {"settings", cfg.fingerprint}}.dump(2);
  std::cerr << "teacher (softmax, zero-shot) test ROUGE-1 " << rep.teacher.front().second << "\n";

  std::shared_ptr<nn::CausalLM> last;  // the student of the row in progress (for --save)
  auto make = [&](const std::string& mixer) {
    nn::HFModelOptions o;
    o.mixer = mixer;
    o.form = nn::LinearForm::chunked;
    o.chunk = chunk;
    o.seed = cfg.seed;
    o.device = device;
    return std::unique_ptr<train::ConversionTask>(
        new train::SamsumConversionTask(last = nn::load_causal_lm(model_dir, o), tok, samsum, tc));
  };
  std::function<void(const std::string&)> save;
  if (save_models) save = [&](const std::string& dir) { nn::save_hf_model(*last, dir, model_dir); };
  return apps::run_rows(rows, make, cfg, fidelity_batches, out, rep, save);
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
