// convert_gpt2: converts a pretrained GPT-2 (an HF folder) into linear attention by Hedgehog
// attention distillation, then finetunes it, evaluated by perplexity on WikiText (paper Table 10):
// the softmax teacher, then one row per student feature map (REFERENCE.md §4).
#include <omp.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/convert_lm_app.h"
#include "core/parallel.h"
#include "data/text_corpus.h"
#include "data/tokenizer.h"
#include "nn/models/hf_save.h"
#include "train/convert_lm.h"

using namespace hh;

namespace {

// Preset defaults. paper: Table 10 (distill 2 epochs, batch 8, lr 1e-2, 1024 tokens; finetune lr
// 6e-4, wd 0.01; the finetuning epochs are not given: one). quick: a few minutes on a CPU.
std::map<std::string, std::string> preset_defaults(const std::string& preset) {
  std::map<std::string, std::string> d = {
      {"context", "1024"},  {"distill-epochs", "2"},  {"distill-lr", "1e-2"},       {"finetune", "full"},
      {"finetune-epochs", "1"}, {"lr", "6e-4"},       {"weight-decay", "0.01"},     {"warmup", "0.01"},
      {"batch", "8"},       {"max-train-tokens", "0"}, {"max-eval-tokens", "0"},
      {"out", "out/convert_gpt2"}};
  if (preset == "quick") {
    d["context"] = "128";
    d["distill-epochs"] = "1";
    d["max-train-tokens"] = "200000";
    d["max-eval-tokens"] = "20000";
  } else {
    HH_CHECK(preset.empty() || preset == "paper", "--preset: expected paper or quick, got '", preset, "'");
  }
  return d;
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
  const std::string preset = apps::preset_in_args(argc, argv);
  auto d = preset_defaults(preset);
  apps::Flags f("convert_gpt2",
                "Converts a GPT-2 HF folder to linear attention (Hedgehog distillation, then finetuning) and reports\n"
                "WikiText perplexity for the teacher and each student (paper Table 10).");
  f.add("model", "", "HF folder of a GPT-2 model (GPT2LMHeadModel)");
  f.add("tokenizer", "", "folder with the tokenizer (vocab.json + merges.txt or tokenizer.json); default: --model");
  f.add("data", "", "WikiText folder: wiki.{train,valid,test}.raw (or .tokens)");
  f.add("preset", "paper", "defaults: paper (Table 10) or quick (a few minutes on a CPU)");
  f.add("context", d["context"], "tokens per window");
  f.add("stride", "0", "evaluation stride: tokens between strided windows, <= context (0 = context / 2)");
  f.add("max-train-tokens", d["max-train-tokens"], "use at most this many training tokens (0 = all)");
  f.add("max-eval-tokens", d["max-eval-tokens"], "use at most this many validation and test tokens (0 = all)");
  f.add("chunk", "64", "chunk size of the chunked linear-attention form");
  apps::add_conversion_flags(f, d);
  if (!f.parse(argc, argv)) return 0;

  // Every flag and input is checked before any long work.
  const std::string model_dir = f.str("model"), data_dir = f.str("data");
  HH_CHECK(!model_dir.empty(), "--model: no model folder given (see --help)");
  HH_CHECK(!data_dir.empty(), "--data: no WikiText folder given (see --help)");
  const int64_t context = f.integer("context", 1, 1 << 20);
  const int64_t stride_flag = f.integer("stride", 0, context);
  const int64_t stride = stride_flag > 0 ? stride_flag : std::max<int64_t>(1, context / 2);
  const int64_t max_train = f.integer("max-train-tokens", 0), max_eval = f.integer("max-eval-tokens", 0);
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
  const std::string train_path = data::wikitext_split_path(data_dir, "train");
  const std::string val_path = data::wikitext_split_path(data_dir, "valid");
  const std::string test_path = data::wikitext_split_path(data_dir, "test");

  nn::HFModelOptions teacher_opts;
  teacher_opts.mixer = "softmax";
  teacher_opts.device = device;
  auto teacher = nn::load_causal_lm(model_dir, teacher_opts);
  HH_CHECK(teacher->family() == "gpt2", "--model: ", model_dir, " holds a ", teacher->architecture(),
           " (family ", teacher->family(), "); convert_gpt2 converts GPT-2 models (GPT2LMHeadModel)");
  HH_CHECK(teacher->max_positions() < 0 || context <= teacher->max_positions(), "--context: ", context,
           " exceeds the model's ", teacher->max_positions(), " positions");
  const std::string tok_dir = f.str("tokenizer").empty() ? model_dir : f.str("tokenizer");
  auto tok = data::load_tokenizer(tok_dir);
  HH_CHECK(tok->vocab_size() <= teacher->vocab_size(), "--tokenizer: ", tok_dir, " has ", tok->vocab_size(),
           " tokens but the model's vocabulary has ", teacher->vocab_size());
  ensure_writable_dir(out);

  auto train_w = windows_of(train::encode_corpus(data::read_text_file(train_path), *tok, max_train), context, stride,
                            true, train_path);
  auto val_w = windows_of(train::encode_corpus(data::read_text_file(val_path), *tok, max_eval), context, stride,
                          false, val_path);
  auto test_w = windows_of(train::encode_corpus(data::read_text_file(test_path), *tok, max_eval), context, stride,
                           false, test_path);
  std::cerr << "tokens: train " << train_w->ids.size() << " (" << train_w->size() << " windows), validation "
            << val_w->ids.size() << ", test " << test_w->ids.size() << "\n";
  train::LmTaskConfig tc;
  tc.batch = batch;
  tc.seed = cfg.seed;
  tc.device = device;
  tc.pad_id = tok->eos_id() >= 0 ? tok->eos_id() : 0;

  cfg.fingerprint = apps::flags_fingerprint(
      f, {"model", "tokenizer", "data", "context", "stride", "max-train-tokens", "max-eval-tokens", "chunk"});

  train::LmConversionTask teacher_task(teacher, train_w, val_w, test_w, tc);
  train::ConversionReport rep;
  rep.title = "GPT-2 -> linear attention: WikiText perplexity (" + model_dir + ")";
  rep.percent = false;
  rep.higher_is_better = false;
  rep.teacher = teacher_task.evaluate(train::Split::test);
  train::Fidelity tf = train::measure_fidelity(teacher_task, train::Split::test, fidelity_batches, true);
  rep.teacher_entropy = tf.entropy_teacher;
  rep.teacher_monotonicity = tf.monotonicity_teacher;
  rep.config_json = nlohmann::json{{"app", "convert_gpt2"}, {"preset", f.str("preset")}, {"settings", cfg.fingerprint}}.dump(2);
  std::cerr << "teacher (softmax) test perplexity " << rep.teacher.front().second << "\n";

  std::shared_ptr<nn::CausalLM> last;  // the student of the row in progress (for --save)
  auto make = [&](const std::string& mixer) {
    nn::HFModelOptions o;
    o.mixer = mixer;
    o.form = nn::LinearForm::chunked;
    o.chunk = chunk;
    o.seed = cfg.seed;
    o.device = device;
    return std::unique_ptr<train::ConversionTask>(
        new train::LmConversionTask(last = nn::load_causal_lm(model_dir, o), train_w, val_w, test_w, tc));
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
