// bench_embed: sentence-embedding throughput of a BERT-family folder (sentences/s), as a sentence
// encoder is served on a CPU: mean-pooled embeddings of `batch` sequences of `seq` tokens, at each
// thread count. Without --model a MiniLM-L6-shaped folder (all-MiniLM-L6-v2's configuration: 6
// layers, 384 wide, 12 heads, FFN 1536, vocabulary 30522) with random weights is generated once
// into --dir. Twin: tools/bench_embed_ort.py runs this beside ONNX Runtime (f32 and its dynamic
// int8) and PyTorch on the same folder, interleaved, and prints the ratios.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/app.h"
#include "apps/kit/bench_stats.h"
#include "cli/flags.h"
#include "core/atomic_file.h"
#include "core/parallel.h"
#include "core/prepacked.h"
#include "core/safetensors.h"
#include "nn/models/embedding.h"
#include "nn/models/hf_model.h"

using namespace hh;
namespace fs = std::filesystem;

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// all-MiniLM-L6-v2's shape as an HF BertModel folder, N(0, 0.02) weights.
void write_minilm_shaped(const std::string& dir) {
  const int64_t V = 30522, P = 512, C = 384, I = 1536, layers = 6;
  Generator g(4321);
  std::vector<std::pair<std::string, Tensor>> ts;
  auto w = [&](const std::string& name, Shape s) { ts.emplace_back(name, mul(randn(s, g), 0.02)); };
  auto ln = [&](const std::string& name) {
    ts.emplace_back(name + ".weight", ones({C}));
    ts.emplace_back(name + ".bias", zeros({C}));
  };
  auto dense = [&](const std::string& name, int64_t out, int64_t in) {
    w(name + ".weight", {out, in});
    ts.emplace_back(name + ".bias", zeros({out}));
  };
  w("embeddings.word_embeddings.weight", {V, C});
  w("embeddings.position_embeddings.weight", {P, C});
  w("embeddings.token_type_embeddings.weight", {2, C});
  ln("embeddings.LayerNorm");
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    for (const char* m : {"query", "key", "value"}) dense(p + "attention.self." + m, C, C);
    dense(p + "attention.output.dense", C, C);
    ln(p + "attention.output.LayerNorm");
    dense(p + "intermediate.dense", I, C);
    dense(p + "output.dense", C, I);
    ln(p + "output.LayerNorm");
  }
  dense("pooler.dense", C, C);
  nlohmann::json cfg = {{"architectures", {"BertModel"}}, {"model_type", "bert"}, {"vocab_size", V},
                        {"max_position_embeddings", P}, {"hidden_size", C}, {"num_hidden_layers", layers},
                        {"num_attention_heads", 12}, {"intermediate_size", I}, {"hidden_act", "gelu"},
                        {"layer_norm_eps", 1e-12}, {"type_vocab_size", 2}, {"pad_token_id", 0}};
  fs::create_directories(dir);
  save_safetensors(dir + "/model.safetensors", ts);
  write_file_atomic(dir + "/config.json", cfg.dump(2) + "\n");
}

int run(int argc, char** argv) {
  cli::Flags f("bench_embed",
                "bench_embed: sentence-embedding throughput (sentences/s) of a BERT-family folder, mean pooling");
  f.add("model", "", "an HF BERT-family folder (default: the generated MiniLM-shaped folder in --dir)");
  f.add("dir", "/tmp/hh_minilm_shaped", "where the MiniLM-shaped folder is generated (when it has no config.json)");
  f.add("batch", "1,32", "sentences per forward, a comma list");
  f.add("seq", "64,256", "tokens per sentence, a comma list");
  f.add("threads", "1,2", "CPU thread counts, a comma list");
  f.add("reps", "5", "timed repetitions per configuration (the median is reported)");
  f.add("weights", "f32", "Linear weights, a comma list of f32, int8 (per-channel, quantized at load) and bf16;\n"
        "                       for int8 and bf16 the embedding cosine to f32 on held-out inputs is reported too");
  f.add("json", "", "also write the figures to this JSON file");
  if (!f.parse(argc, argv)) return 0;
  const std::vector<int64_t> batches = f.integers("batch", 1, 4096), seqs = f.integers("seq", 1, 1 << 16),
                             threads = f.integers("threads", 1, 1024);
  const int64_t reps = f.integer("reps", 1, 10000);
  std::vector<WeightFormat> formats;
  for (const std::string& w : cli::Flags::split_list(f.str("weights"))) formats.push_back(cli::parse_weights_flag(w));
  HH_CHECK(!formats.empty(), "--weights: give f32, int8 or both");
  std::string folder = f.str("model");
  if (folder.empty()) {
    folder = f.str("dir");
    if (!fs::exists(folder + "/config.json")) {
      std::printf("writing %s (all-MiniLM-L6-v2's shape, random weights)...\n", folder.c_str());
      write_minilm_shaped(folder);
    }
  }
  std::vector<std::shared_ptr<nn::HFModel>> models;
  for (WeightFormat w : formats) {
    nn::HFModelOptions opt;
    opt.weights = w;
    models.push_back(nn::load_hf_model(folder, opt));
  }
  const auto& model = models.front();
  const int64_t positions = nn::text_encoder_max_positions(*model);
  HH_CHECK(positions > 0, "--model: ", folder, " is ", model->architecture(), ", not a BERT-family text encoder");
  for (int64_t L : seqs) HH_CHECK(L <= positions, "--seq: ", L, " is more than the model's ", positions, " positions");
  const int64_t V = model->config().get_int("vocab_size");
  std::printf("%s: %.1fM parameters, mean pooling, median of %lld runs after a warm-up\n\n", folder.c_str(),
              model->num_parameters() / 1e6, static_cast<long long>(reps));
  NoGradGuard ng;
  const auto embed_with = [](const nn::HFModel& m, const Tensor& ids) {
    const Tensor mask = ones(ids.shape(), {DType::boolean}), types = zeros(ids.shape(), {DType::i64});
    return nn::pool_hidden(nn::text_encoder_hidden(m, ids, types, mask), mask, nn::Pooling::mean);
  };
  nlohmann::json doc{{"model", folder}};
  // Fidelity: the cosine of each int8 or bf16 embedding to the f32 one, on held-out inputs (another
  // seed than the timed ones): 32 sequences of min(128, positions) tokens.
  for (size_t i = 0; i < formats.size(); ++i) {
    if (formats[i] == WeightFormat::f32) continue;
    const std::string name = weight_format_name(formats[i]);
    auto f32 = nn::load_hf_model(folder);
    Generator g(777);
    const Tensor ids = randint(1000, V, {32, std::min<int64_t>(128, positions)}, g);
    const std::vector<float> a = to_vector<float>(embed_with(*f32, ids)), b = to_vector<float>(embed_with(*models[i], ids));
    const int64_t C = static_cast<int64_t>(a.size()) / 32;
    double lo = 1.0, sum = 0.0;
    for (int64_t r = 0; r < 32; ++r) {
      double ab = 0, aa = 0, bb = 0;
      for (int64_t c = 0; c < C; ++c) {
        const double x = a[static_cast<size_t>(r * C + c)], y = b[static_cast<size_t>(r * C + c)];
        ab += x * y;
        aa += x * x;
        bb += y * y;
      }
      const double cos = ab / std::sqrt(aa * bb);
      lo = std::min(lo, cos);
      sum += cos;
    }
    std::printf("%s embedding cosine to f32 (32 held-out inputs): min %.5f, mean %.5f\n\n", name.c_str(), lo, sum / 32);
    doc[name + "_cosine_min"] = lo;
    doc[name + "_cosine_mean"] = sum / 32;
  }
  std::printf("weights  threads  batch    seq   ms/forward  sentences/s\n");
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t t : threads) {
    set_num_threads(static_cast<int>(t));
    for (int64_t B : batches)
      for (int64_t L : seqs) {
        Generator g(static_cast<uint64_t>(B * 1000 + L));
        const Tensor ids = randint(1000, V, {B, L}, g);  // past the special tokens
        for (size_t i = 0; i < formats.size(); ++i) {  // the formats back to back at each configuration
          const auto embed = [&] { return embed_with(*models[i], ids); };
          embed();  // warm-up
          std::vector<double> s;
          for (int64_t r = 0; r < reps; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            const Tensor e = embed();
            s.push_back(since(t0));
          }
          const double med = apps::median(s);
          std::printf("%7s %8lld %6lld %6lld %12.2f %12.1f\n", weight_format_name(formats[i]), static_cast<long long>(t),
                      static_cast<long long>(B), static_cast<long long>(L), med * 1e3, B / med);
          rows.push_back({{"weights", weight_format_name(formats[i])}, {"threads", t}, {"batch", B}, {"seq", L},
                          {"seconds_median", med}, {"sentences_per_second", B / med}});
        }
      }
  }
  doc["rows"] = rows;
  if (f.given("json")) write_file_atomic(f.str("json"), doc.dump(2) + "\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return hh::cli::run_main(argc, argv, run); }
