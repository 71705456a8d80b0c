// The common face of every imported HF family, so apps drive a model without knowing which one:
// HFModel (family, architecture, config, options) and CausalLM (logits, hidden states, one-token
// decoding) for the decoders. load_hf_model reads a folder's config.json, picks the family from
// "architectures"[0] (else "model_type"), builds it, loads its weights, moves/casts it, eval().
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/attention.h"
#include "nn/layers.h"
#include "nn/models/hf_config.h"
#include "nn/models/hf_weights.h"
#include "nn/module.h"

namespace hh::nn {

// One attention layer of a model, for changes after it is built (layers kept as softmax).
struct AttentionSite {
  Module* owner = nullptr;  // the attention module whose child "feature_map" is the map
  AttentionMixer* mixer = nullptr;
  std::shared_ptr<FeatureMap>* feature_map = nullptr;  // the owner's member (null for softmax)
};

class HFModel : public Module {
 public:
  HFModel(std::string family, std::string architecture, HFConfig config, HFModelOptions options)
      : family_(std::move(family)),
        architecture_(std::move(architecture)),
        config_(std::move(config)),
        options_(std::move(options)) {}

  // "gpt2", "llama" (also Mistral, Qwen2, Qwen3: one decoder), "bert", "vit"
  const std::string& family() const { return family_; }
  const std::string& architecture() const { return architecture_; }  // e.g. "GPT2LMHeadModel"
  const HFConfig& config() const { return config_; }
  const HFModelOptions& options() const { return options_; }
  // The weights as an HF file stores them (names and layouts), plus the feature-map tensors: what
  // save_hf_model writes. GPT-2 transposes its Conv1D weights back; the other families store their
  // state_dict as is.
  virtual NamedTensors hf_state_dict() const { return state_dict(); }
  // Every attention layer in order.
  virtual std::vector<AttentionSite> attention_sites() = 0;
  // Turns the listed layers (0-based, distinct) of a linear or hybrid model back into softmax
  // attention: their feature maps (and those parameters) are dropped and options().softmax_layers
  // records them, so save_hf_model writes them and load_hf_model builds them as softmax again.
  void keep_softmax(const std::vector<int64_t>& layers);

 private:
  std::string family_, architecture_;
  HFConfig config_;
  HFModelOptions options_;
};

// Decoding state of a causal LM: one DecodeCache per layer (a KV cache for softmax, the O(1)
// recurrent state for a linear mixer). pos = tokens fed so far.
struct DecodeState {
  std::vector<DecodeCache> layers;
  int64_t pos = 0;
};

// Bytes a sequence's decode state holds once it has seen `tokens` tokens, read off `probe` (a state
// of the same model after a short prefill): a softmax layer's keys and values grow by their bytes
// per token (an upper bound under a sliding window), a hybrid's ring by its bytes per slot up to its
// window, linear, gated and delta states stay their size.
size_t decode_state_bytes(const DecodeState& probe, int64_t tokens);

class CausalLM : public HFModel {
 public:
  using HFModel::HFModel;
  // ids (B,L) i64 -> logits (B,L,V). trace (may be null) gets every attention layer's trace.
  virtual Tensor forward(const Tensor& ids, TraceRequest* trace = nullptr) = 0;
  // ids (B,L) i64 -> (B,L,C): the last hidden state (after the final norm), as HF's hidden_states[-1].
  virtual Tensor hidden(const Tensor& ids, TraceRequest* trace = nullptr) = 0;
  virtual DecodeState start_decoding() const = 0;
  // ids (B,1) i64 at position state.pos -> logits (B,1,V); state advances by one token.
  virtual Tensor step(const Tensor& ids, DecodeState& state) = 0;
  // ids (B,L) i64 at positions state.pos.. -> the last position's logits (B,1,V); state advances by
  // L tokens and ends as L steps would leave it (the KV caches, the linear states). This one steps
  // token by token; GPT-2 and the Llama decoder run the L tokens through every layer's full
  // forward at once (AttentionMixer::prefill), from a fresh state or a started one (pos > 0).
  virtual Tensor prefill(const Tensor& ids, DecodeState& state);
  // One token for each of N independent sequences: ids (N,1) i64, row i at states[i]->pos with its
  // own caches -> logits (N,1,V); every state advances by one token. The per-token products
  // (embeddings, norms, projections, MLPs, the head) run on the N rows at once, attention on each
  // row's own cache; under a BatchInvariant guard (core/batch_invariant.h) a row's logits are
  // bit-identical whatever the other rows are. This default steps the rows one by one; GPT-2 and
  // the Llama decoder batch them.
  virtual Tensor step_many(const Tensor& ids, const std::vector<DecodeState*>& states);
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_positions() const = 0;  // longest sequence (forward or decoding); -1 = no limit

  // Layer by layer (attention transfer on the teacher's hidden states, one block of layers at a
  // time): ids (B,L) i64 -> the hidden state entering layer 0 (B,L,C); layer l on x (B,L,C) -> its
  // output (B,L,C), traced like forward (TraceRequest::teacher_forward runs it as the teacher).
  virtual int64_t num_layers() const = 0;
  virtual Tensor embed(const Tensor& ids) const = 0;
  virtual Tensor layer_forward(int64_t layer, const Tensor& x, TraceRequest* trace) const = 0;
};

// Factories, one per family. Each builds its model from `config` (every field that changes the
// computation is read; unsupported values are errors naming key and file) and loads its weights
// from `folder` with its own rename/transform table. It may build directly on options.device in
// options.dtype; load_hf_model moves/casts afterwards anyway (a no-op then) and calls eval().
std::shared_ptr<HFModel> make_gpt2(const HFConfig& config, const HFModelOptions& options, const std::string& folder);
// Llama, Mistral, Qwen2 and Qwen3 are one decoder (nn/models/llama.h), each its own config reader.
std::shared_ptr<HFModel> make_llama(const HFConfig& config, const HFModelOptions& options, const std::string& folder);
std::shared_ptr<HFModel> make_mistral(const HFConfig& config, const HFModelOptions& options, const std::string& folder);
std::shared_ptr<HFModel> make_qwen2(const HFConfig& config, const HFModelOptions& options, const std::string& folder);
std::shared_ptr<HFModel> make_qwen3(const HFConfig& config, const HFModelOptions& options, const std::string& folder);
std::shared_ptr<HFModel> make_bert(const HFConfig& config, const HFModelOptions& options, const std::string& folder);
std::shared_ptr<HFModel> make_vit(const HFConfig& config, const HFModelOptions& options, const std::string& folder);

// Helpers shared by the families.
// The activation named by config key `key` (`def` when not given); an unknown name is an error
// naming the key, the value and the file.
Activation hf_activation(const HFConfig& config, const std::string& key, const std::string& def);
// ids must be (B,L) i64 with L >= 1 and pos + L <= max_positions (when max_positions >= 0);
// errors start with `who`.
void check_token_ids(const Tensor& ids, int64_t pos, int64_t max_positions, const std::string& who);
// step_many's arguments: ids (N,1) i64, N non-null states, each row's token at its position within
// max_positions; errors start with `who`.
void check_step_rows(const Tensor& ids, const std::vector<DecodeState*>& states, int64_t max_positions,
                     const std::string& who);

// The "architectures" entries load_hf_model accepts (and the "model_type" fallbacks it maps).
std::vector<std::string> supported_hf_architectures();

// folder/config.json -> the model, weights loaded, on options.device in options.dtype, eval mode.
// An unsupported architecture is an error naming it, the file, and the supported ones.
// A quantized folder (config.json's quantization_config, nn/models/hf_int8.h) loads with int8
// weights whatever options.weights says (its Linears' stored values and scales; CPU and f32 only).
std::shared_ptr<HFModel> load_hf_model(const std::string& folder, const HFModelOptions& options = {});
// The same, for callers that need a decoder: an error naming the architecture when it is not one.
std::shared_ptr<CausalLM> load_causal_lm(const std::string& folder, const HFModelOptions& options = {});

}  // namespace hh::nn
