// hedgehog.load and hedgehog.Tokenizer: HF model folders (every family the importer reads,
// converted folders included) with logits, generation, embeddings and multiple-choice scores, as
// hf_run and eval_lm compute them.
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "experiments/eval/choice_eval.h"
#include "experiments/eval/retrieval_eval.h"
#include "nn/mixer.h"
#include "nn/models/embedding.h"
#include "nn/models/generate.h"
#include "nn/models/hf_int8.h"
#include "nn/models/hf_model.h"
#include "python/src/bind.h"
#include "python/src/interrupt.h"

namespace hh::py {

namespace {


struct PyTokenizer {
  std::shared_ptr<data::Tokenizer> tok;
  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const {
    return tok->encode(text, add_special_tokens);
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
    return tok->decode(ids, skip_special_tokens);
  }
};

// A loaded folder. close() frees the weights; any later call raises.
class PyModel {
 public:
  PyModel(const std::string& folder, const std::optional<std::string>& mixer, std::optional<int64_t> window,
          const std::string& device, const std::optional<std::string>& weights)
      : folder_(folder) {
    nn::HFModelOptions o;
    if (weights) {
      WeightFormat asked;
      try {
        asked = parse_weight_format(*weights);
      } catch (const Error& e) {
        throw Error(std::string("weights: ") + e.what());
      }
      o.weights = nn::folder_weights(folder, asked, true, "weights");  // a quantized folder: int8 only
      o.prepare_weights = true;  // packed or quantized now, not by the first forward
    }
    if (mixer) o.mixer = nn::parse_mixer(*mixer, "mixer");
    if (window) {
      HH_CHECK(*window >= 1, "window: expected a positive number of tokens, got ", *window);
      o.window = *window;
    }
    o.device = parse_device(device);
    {
      nb::gil_scoped_release release;
      model_ = nn::load_hf_model(folder, o);
      lm_ = std::dynamic_pointer_cast<nn::CausalLM>(model_);
      try {
        tok_ = data::load_tokenizer(folder);
      } catch (const Error& e) {  // token ids still work; text says why it cannot be read
        tok_error_ = e.what();
      }
    }
  }

  const nn::HFModel& model() const {
    HH_CHECK(model_, "hedgehog.Model: the model is closed");
    return *model_;
  }
  nn::CausalLM& lm() const {
    model();
    HH_CHECK(lm_, model_->architecture(), " is not a decoder (logits and generate need one)");
    return *lm_;
  }
  const data::Tokenizer& tok() const {
    model();
    HH_CHECK(tok_, folder_, ": no tokenizer (", tok_error_, "); pass token ids instead of text");
    return *tok_;
  }

  nb::ndarray<nb::numpy> logits(nb::handle ids) const {
    const Tensor x = token_ids(ids).to(model().options().device);
    Tensor y;
    {
      nb::gil_scoped_release release;
      NoGradGuard ng;
      y = lm().forward(x).to(Device::cpu()).to(DType::f32).contiguous();
    }
    return numpy_view(y);
  }

  nb::object generate(nb::handle prompt, int64_t max_new_tokens, double temperature, int64_t top_k, double top_p,
                      uint64_t seed, bool stop_at_eos) const {
    const bool text = nb::isinstance<nb::str>(prompt);
    std::vector<int64_t> ids;
    if (text) {
      for (int32_t id : tok().encode(nb::cast<std::string>(prompt), true)) ids.push_back(id);
    } else {
      const Tensor t = token_ids(prompt);
      HH_CHECK(t.size(0) == 1, "generate: one prompt at a time, got ", t.size(0), " rows");
      ids = to_vector<int64_t>(t);
    }
    nn::GenerateOptions go;
    go.max_new_tokens = max_new_tokens;
    if (stop_at_eos)
      go.eos = nn::stop_ids(nn::read_generation_config(folder_), tok_ ? tok_->eos_id() : -1, lm().config());
    go.keep_eos = false;
    go.should_stop = [] { return InterruptScope::requested(); };  // Ctrl-C ends the generation
    nn::Generation g;
    InterruptScope interrupt;
    {
      nb::gil_scoped_release release;
      nn::Sampler sampler(nn::SamplingOptions{temperature, top_k, top_p, seed});
      g = nn::generate(lm(), ids, sampler, go);
    }
    interrupt.finish();
    if (!text) return nb::cast(g.ids);
    return nb::cast(tok().decode(std::vector<int32_t>(g.ids.begin(), g.ids.end()), true));
  }

  nb::ndarray<nb::numpy> embed(const std::vector<std::string>& texts, int64_t batch) const {
    const int64_t positions = nn::text_encoder_max_positions(model());
    HH_CHECK(positions > 0, model().architecture(), ": embed needs a BERT-family text encoder");
    HH_CHECK(!texts.empty(), "embed: no texts");
    HH_CHECK(batch >= 1, "embed: batch must be positive, got ", batch);
    const nn::EmbeddingConfig ec = nn::read_embedding_config(folder_);
    Tensor emb;
    {
      nb::gil_scoped_release release;
      NoGradGuard ng;
      data::BatchOptions bo;
      bo.truncation = true;
      bo.max_length = ec.max_seq_length > 0 ? std::min(ec.max_seq_length, positions) : positions;
      std::vector<Tensor> rows;
      for (size_t at = 0; at < texts.size(); at += static_cast<size_t>(batch)) {
        const std::vector<std::string> part(
            texts.begin() + static_cast<std::ptrdiff_t>(at),
            texts.begin() + static_cast<std::ptrdiff_t>(std::min(texts.size(), at + static_cast<size_t>(batch))));
        const data::BatchEncoding enc = data::encode_batch(tok(), part, bo);
        const Device d = model().options().device;
        const Tensor mask = enc.attention_mask.to(d);
        const Tensor h = nn::text_encoder_hidden(model(), enc.input_ids.to(d), enc.token_type_ids.to(d), mask);
        rows.push_back(nn::pool_hidden(h, mask, ec.pooling).to(DType::f32).to(Device::cpu()));
      }
      emb = cat(rows, 0);
      if (ec.normalize) emb = nn::l2_normalize(emb);
      emb = emb.contiguous();
    }
    return numpy_view(emb);
  }

  std::vector<double> score_choices(const std::string& context, const std::vector<std::string>& choices) const {
    train::ChoiceExample e;
    e.context = context;
    e.choices = choices;
    HH_CHECK(!choices.empty(), "score_choices: no choices");
    nb::gil_scoped_release release;
    return train::score_choices(lm(), tok(), {e}).examples.at(0).loglikelihoods;
  }

  // eval_lm's retrieval tasks (passkey, needle, RULER's niah_multikey, niah_multivalue, vt) -> a
  // dict: accuracy (the mean score), and per (length, depth) cell its trials, correct and accuracy.
  nb::dict retrieval(const std::string& task, const std::vector<int64_t>& lengths, const std::vector<double>& depths,
                     int64_t trials, uint64_t seed) const {
    train::RetrievalOptions o;
    o.task = train::parse_retrieval_task(task);
    o.lengths = lengths;
    o.depths = depths;
    o.trials = trials;
    o.seed = seed;
    train::check_retrieval_options(o);
    // Ctrl-C: run_retrieval stops after the trial at hand (StopRequested), then KeyboardInterrupt.
    train::RetrievalResult r;
    InterruptScope interrupt;
    try {
      nb::gil_scoped_release release;
      r = train::run_retrieval(lm(), tok(), o);
    } catch (const StopRequested&) {
    }
    interrupt.finish();
    nb::list cells;
    for (const train::RetrievalCell& c : r.cells) {
      nb::dict d;
      d["length"] = c.length;
      d["depth"] = c.depth;
      d["trials"] = c.trials;
      d["correct"] = c.correct;
      d["accuracy"] = c.accuracy;
      cells.append(d);
    }
    nb::dict out;
    out["task"] = task;
    out["accuracy"] = r.accuracy;
    out["correct"] = r.correct;
    out["count"] = r.count;
    out["cells"] = cells;
    return out;
  }

  void close() {
    model_.reset();
    lm_.reset();
  }
  std::string repr() const {
    if (!model_) return "<hedgehog.Model (closed) " + folder_ + ">";
    return "<hedgehog.Model " + model_->architecture() + " " + folder_ + ">";
  }
  const std::string& folder() const { return folder_; }

 private:
  std::string folder_;
  std::shared_ptr<nn::HFModel> model_;
  std::shared_ptr<nn::CausalLM> lm_;
  std::shared_ptr<data::Tokenizer> tok_;
  std::string tok_error_;  // why the folder's tokenizer could not be loaded
};

}  // namespace

void bind_models(nb::module_& m) {
  nb::class_<PyTokenizer>(m, "Tokenizer", "An HF folder's tokenizer (tokenizer.json, vocab files), as transformers reads it")
      .def("__init__",
           [](PyTokenizer* t, const std::filesystem::path& folder) {
             new (t) PyTokenizer{data::load_tokenizer(folder.string())};
           },
           nb::arg("folder"))
      .def("encode", &PyTokenizer::encode, nb::arg("text"), nb::arg("add_special_tokens") = true)
      .def("decode", &PyTokenizer::decode, nb::arg("ids"), nb::arg("skip_special_tokens") = false)
      .def_prop_ro("vocab_size", [](const PyTokenizer& t) { return t.tok->vocab_size(); });
  nb::class_<PyModel>(m, "Model", "A loaded HF folder (hedgehog.load makes one)")
      .def("logits", &PyModel::logits, nb::arg("ids"), "ids (L) or (B,L) -> logits (B,L,V), float32")
      .def("generate", &PyModel::generate, nb::arg("prompt"), nb::arg("max_new_tokens") = 32,
           nb::arg("temperature") = 0.0, nb::arg("top_k") = 0, nb::arg("top_p") = 1.0, nb::arg("seed") = 0,
           nb::arg("stop_at_eos") = true,
           "The continuation of a text prompt (a str) or of token ids (their ids); temperature 0 is greedy")
      .def("embed", &PyModel::embed, nb::arg("texts"), nb::arg("batch") = 32,
           "Sentence embeddings (N,C), pooled as the folder's sentence-transformers files say")
      .def("score_choices", &PyModel::score_choices, nb::arg("context"), nb::arg("choices"),
           "Each choice's log-likelihood after the context, as lm-evaluation-harness scores it")
      .def("retrieval", &PyModel::retrieval, nb::arg("task"), nb::arg("lengths"),
           nb::arg("depths") = std::vector<double>{0.0, 0.25, 0.5, 0.75, 1.0}, nb::arg("trials") = 5, nb::arg("seed") = 0,
           "eval_lm's retrieval tasks (passkey, needle, niah_multikey, niah_multivalue, vt), decoded greedily")
      .def("close", &PyModel::close, "Frees the weights; later calls raise")
      .def_prop_ro("folder", &PyModel::folder)
      .def("__repr__", &PyModel::repr);
  m.def(
      "load",
      [](const std::filesystem::path& folder, std::optional<std::string> mixer, std::optional<int64_t> window,
         const std::string& device, std::optional<std::string> weights) {
        return std::make_unique<PyModel>(folder.string(), mixer, window, device, weights);
      },
      nb::arg("folder"), nb::arg("mixer") = nb::none(), nb::arg("window") = nb::none(), nb::arg("device") = "cpu",
      nb::arg("weights") = nb::none(),
      "Loads an HF folder (config.json + weights): mixer swaps the attention (a feature map, hybrid-<map>), "
      "window the hybrid's sliding window, weights every Linear's inference weights on the CPU: 'f32', "
      "'bf16' or 'int8' (per-channel), prepared at load (default: the folder's, f32 for a plain one)");
}

}  // namespace hh::py
