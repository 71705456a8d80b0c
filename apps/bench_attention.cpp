// bench_attention: speed and memory of softmax vs linear attention per sequence length, and the
// training-step throughput of the associative-recall model. Companions with the same --json
// schema: tools/bench_attention_torch.py and tools/bench_ar_step_torch.py (PyTorch).
//
//   bench_attention [--device cpu|cuda[:N]] [--threads N] [--lengths 256,512,...,8192] [--batch 1]
//                   [--heads N] [--head-dim 64] [--maps softmax,hedgehog,elu,taylor]
//                   [--forms chunked,quadratic,recurrent] [--gate none,decay,gla,delta] [--window 64]
//                   [--reps 3] [--json FILE]
//   bench_attention --ar-step [--ar-mixers softmax,hedgehog] [--ar-batch 32] [--ar-len 128] ...
//
// Attention rows: q, k, v are random (B,H,L,D) f32 leaves requiring grad. The timed region applies
// the feature map φ to q and k (its cost is part of linear attention) and then the mixer form:
//   softmax    causal softmax attention (map "softmax" only; weights materialized, O(L²))
//   chunked    the fused chunked causal op linear_attention_causal (O(L·F·D), the training path)
//   quadratic  linear attention with the (L,L) weights materialized
//   recurrent  token-by-token state updates (O(L) small ops; its backward keeps L states)
// A hybrid map ("hybrid-hedgehog": LoLCATs' softmax window of --window keys + linear attention
// with that feature map, autograd/ops/hybrid_attention.h) runs these forms instead:
//   chunked    hybrid_attention_chunked (window band tiles + the chunked linear scan, the
//              training path), chunk --chunk
//   quadratic  hybrid_attention_quadratic ((L,L) weights materialized, the reference)
// with wf = sigmoid(window factor) (init 0, as the mixer) and lf = 1; its recurrent form is the
// decoding step (no training form), so a hybrid's recurrent row is a skip.
// --gate (a comma list, default none): each pure linear map runs once per gate, its rows named
// "<map>+<gate>" (softmax and hybrid maps run once, ungated). The gate's inputs are drawn once
// outside the timed region like q, k, v (leaves requiring grad, except decay's fixed gate), and
// the mixer forms run the gated ops on φ(q), φ(k), normalized as the engine's gated mixer
// (nn/attention.cpp: normalize = true, eps 1e-6):
//   decay  RetNet's fixed per-head log gate log γ_h = log(1 - 2^(-5-h)) (B,H,L,1)
//          (nn::retnet_log_decays) -> gated_attention_chunked / _quadratic / _recurrent
//   gla    a per-channel data-dependent log gate logsigmoid(z)/16 (B,H,L,F), z ~ N(0,1) (GLA's
//          gate_logit_normalizer 16) -> the same three ops
//   delta  the gated delta rule on L2-normalized φ(q), φ(k) (nn::delta_l2norm, scale 1/sqrt(F)),
//          β = sigmoid(z) (B,H,L) and log α = logsigmoid(z')/16 (B,H,L) ->
//          delta_attention_chunked / _recurrent; it has no quadratic form (a skip)
// A per-channel (gla) quadratic row materializes (B,H,L,L,F) decays (several copies in its graph):
// skipped when one exceeds --max-gated-quadratic-mib (default 512; L <= 512 at B=1, H=4, F=128).
// "fwd" runs without autograd (inference); "fwd+bwd" records the graph and backpropagates a fixed
// random dy into q, k, v (and the feature map's weights). Each is the median of --reps runs after
// one warm-up. Peak memory is the device's peak allocation during one run minus what was
// allocated just before it (so inputs are excluded, outputs/grads/intermediates included), in MiB.
// tok/s = B·L / time.
//
// Skips (printed as "skip"; gated rows too): quadratic above --max-quadratic-len (default 4096),
// recurrent above --max-recurrent-len (default 1024) or when the recurrent backward's per-token
// states (L·B·H·F·D·4 bytes) exceed --max-recurrent-mib (default 2048; this keeps taylor's
// recurrent form at L <= 480 with B=1, H=4), and every form of "taylor" above --max-taylor-len
// (default 2048): Taylor's F = 1 + D + D² (4161 at D=64) makes φ(q), φ(k) and the (B,H,L,D,D) outer product
// huge, so it is slow by design; drop it with --maps. Default heads: 4 on the CPU, 12 on CUDA.
//
// --distill-step: the same model with a feature map (default hedgehog), one stage-1 step of a
// conversion: only the feature maps train (AdamW lr 1e-2), the loss is the distillation soft
// cross-entropy between each head's quadratic linear weights and the softmax weights of the same
// q, k, summed over heads and layers (train/convert/convert.h's stage 1).
// --ar-step: one training step (forward, cross-entropy over all positions, backward, AdamW) of the
// paper-preset AR decoder (apps/ar_probe --preset paper: vocab 40, 4 layers, 4 heads × 64, dim 256,
// MLP 512, RoPE, pre-LN, GELU, chunked linear form, chunk 64), batch 32, length 128, per mixer;
// zero_grad runs untimed before each step; median of --reps steps after two warm-up steps;
// tok/s = batch·length / step time; peak MiB excludes parameters and optimizer state.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/app.h"
#include "apps/kit/bench_stats.h"
#include "cli/flags.h"
#include "autograd/ops.h"
#include "core/backend.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "nn/attention.h"
#include "nn/diagnostics.h"
#include "nn/feature_maps.h"
#include "nn/gate.h"
#include "nn/transformer.h"
#include "train/optim.h"

namespace hh {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
constexpr int kWarmup = 1;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kEps = 1e-6;

using ::hh::apps::median;

struct Measure {
  double ms = 0;        // median wall time
  double peak_mib = 0;  // max over runs of (peak during the run - allocated before it)
};

// Times `run` on `dev`: kWarmup untimed runs, then `reps` timed ones. `prep` runs before each
// (untimed, and before the memory baseline is taken), e.g. to drop last run's gradients.
Measure measure(Device dev, int reps, int warmup, const std::function<void()>& prep, const std::function<void()>& run) {
  Backend& be = backend_for(dev);
  for (int i = 0; i < warmup; ++i) {
    prep();
    run();
  }
  std::vector<double> ts;
  size_t peak = 0;
  for (int i = 0; i < reps; ++i) {
    prep();
    be.synchronize();
    const size_t base = memory_stats(dev).current;
    reset_peak_memory(dev);
    auto t0 = Clock::now();
    run();
    be.synchronize();
    ts.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    const size_t p = memory_stats(dev).peak;
    peak = std::max(peak, p > base ? p - base : 0);
  }
  return {median(ts) * 1e3, static_cast<double>(peak) / kMiB};
}

std::vector<int64_t> parse_int_list(const std::string& flag, const std::string& text, int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  for (const std::string& item : cli::Flags::split_list(text)) {
    size_t pos = 0;
    int64_t x = 0;
    try {
      x = std::stoll(item, &pos);
    } catch (...) {
      pos = 0;
    }
    HH_CHECK(pos == item.size() && !item.empty(), "--", flag, ": expected integers, got '", item, "'");
    HH_CHECK(x >= lo && x <= hi, "--", flag, ": ", x, " is out of range [", lo, ", ", hi, "]");
    out.push_back(x);
  }
  HH_CHECK(!out.empty(), "--", flag, ": expected a comma-separated list of integers, got '", text, "'");
  return out;
}

std::vector<std::string> parse_name_list(const std::string& flag, const std::string& text) {
  std::vector<std::string> out = cli::Flags::split_list(text);
  HH_CHECK(!out.empty(), "--", flag, ": expected a comma-separated list, got '", text, "'");
  return out;
}

// A comma list of mixers: softmax or feature maps.
std::vector<nn::Mixer> parse_mixer_list(const std::string& flag, const std::string& text) {
  std::vector<nn::Mixer> out;
  for (const std::string& name : parse_name_list(flag, text)) out.push_back(nn::parse_mixer(name, "--" + flag));
  return out;
}

// --gate: a comma list of none, decay, gla, delta, each once (liger reads the key projection, which
// this benchmark does not model).
std::vector<nn::Gate> parse_gate_list(const std::string& text) {
  const std::vector<nn::Gate> out = nn::parse_gate_list(parse_name_list("gate", text), "--gate");
  HH_CHECK(std::find(out.begin(), out.end(), nn::Gate::liger) == out.end(),
           "--gate: 'liger' is not benchmarked here (expected none, decay, gla, delta)");
  return out;
}

// The gates a map runs with: every --gate for a pure linear map, none for softmax and hybrids.
std::vector<nn::Gate> map_gates(const nn::Mixer& map, const std::vector<nn::Gate>& gates) {
  if (map.is_linear() && !map.is_hybrid()) return gates;
  return {nn::Gate::none};
}

// ---------------------------------------------------------------- attention rows

struct Settings {
  Device device;
  int64_t batch, heads, head_dim, chunk, window;
  int reps;
  int64_t max_quadratic, max_recurrent, max_taylor;
  double max_recurrent_mib, max_gated_quadratic_mib;
};

struct Row {
  nn::Mixer map;
  nn::Gate gate = nn::Gate::none;
  std::string form, status = "ok", reason;
  int64_t L = 0, F = 0;
  Measure fwd, train;
};

// The row's name: the map's, then "+<gate>" when gated ("hedgehog+gla").
std::string label(const Row& r) { return nn::gated_label(nn::name(r.map), r.gate); }

json row_json(const Row& r, int64_t batch) {
  json j = {{"map", label(r)}, {"form", r.form}, {"L", r.L}, {"F", r.F}, {"status", r.status}};
  if (r.gate != nn::Gate::none) j["gate"] = nn::name(r.gate);
  if (r.status == "ok") {
    const double tokens = static_cast<double>(batch * r.L);
    j["fwd_ms"] = r.fwd.ms;
    j["fwd_bwd_ms"] = r.train.ms;
    j["fwd_peak_mib"] = r.fwd.peak_mib;
    j["fwd_bwd_peak_mib"] = r.train.peak_mib;
    j["fwd_tokens_per_s"] = tokens / (r.fwd.ms * 1e-3);
    j["fwd_bwd_tokens_per_s"] = tokens / (r.train.ms * 1e-3);
  } else {
    j["reason"] = r.reason;
  }
  return j;
}

void print_header() {
  std::printf("%-15s %-10s %6s %5s %10s %11s %9s %11s %11s %11s\n", "map", "form", "L", "F", "fwd ms", "fwd+bwd ms",
              "fwd MiB", "f+b MiB", "fwd tok/s", "f+b tok/s");
}

void print_row(const Row& r, int64_t batch) {
  std::printf("%-15s %-10s %6lld %5lld ", label(r).c_str(), r.form.c_str(), (long long)r.L, (long long)r.F);
  if (r.status == "ok") {
    const double tokens = static_cast<double>(batch * r.L);
    std::printf("%10.2f %11.2f %9.1f %11.1f %11.0f %11.0f\n", r.fwd.ms, r.train.ms, r.fwd.peak_mib, r.train.peak_mib,
                tokens / (r.fwd.ms * 1e-3), tokens / (r.train.ms * 1e-3));
  } else {
    std::printf("%s (%s)\n", r.status.c_str(), r.reason.c_str());
  }
  std::fflush(stdout);
}

// The recurrent form's backward keeps one (B,H,F,D) f32 state per token: L·B·H·F·D·4 bytes.
double recurrent_state_mib(const Settings& s, int64_t L, int64_t F) {
  return static_cast<double>(L) * static_cast<double>(s.batch * s.heads) * static_cast<double>(F * s.head_dim) * 4.0 / kMiB;
}

// A per-channel gate's quadratic form materializes (B,H,L,L,F) f32 decays.
double gated_quadratic_mib(const Settings& s, int64_t L, int64_t F) {
  return static_cast<double>(L) * static_cast<double>(L) * static_cast<double>(s.batch * s.heads * F) * 4.0 / kMiB;
}

// A gated row's inputs besides q, k, v, drawn once outside the timed region: log_a (decay
// (B,H,L,1), fixed; gla (B,H,L,F), a leaf), or the delta rule's beta and log_alpha (B,H,L), leaves.
struct GateInputs {
  Tensor log_a, beta, log_alpha;
  std::vector<Tensor> leaves() const {
    std::vector<Tensor> out;
    for (const Tensor* t : {&log_a, &beta, &log_alpha})
      if (t->defined() && t->requires_grad()) out.push_back(*t);
    return out;
  }
};

// logsigmoid(z)/16 of z ~ N(0,1) (GLA's gate_logit_normalizer 16), a leaf requiring grad.
Tensor random_log_gate(const Shape& shape, Generator& gen, const Options& o) {
  NoGradGuard ng;
  Tensor z = randn(shape, gen, o);
  return div(neg(softplus(neg(z))), nn::kGateLogitNormalizer).requires_grad_();
}

GateInputs make_gate_inputs(nn::Gate gate, const Settings& s, int64_t L, int64_t F, Generator& gen) {
  const Options o{DType::f32, s.device};
  GateInputs g;
  if (gate == nn::Gate::decay) {
    Tensor d = from_vector(nn::retnet_log_decays(s.heads), {1, s.heads, 1, 1}, o);
    g.log_a = contiguous(expand(d, {s.batch, s.heads, L, 1}));
  } else if (gate == nn::Gate::gla) {
    g.log_a = random_log_gate({s.batch, s.heads, L, F}, gen, o);
  } else if (gate == nn::Gate::delta) {
    NoGradGuard ng;
    g.beta = sigmoid(randn({s.batch, s.heads, L}, gen, o)).requires_grad_();
    g.log_alpha = random_log_gate({s.batch, s.heads, L}, gen, o);
  }
  return g;
}

// The gated forms on φ(q), φ(k) (B,H,L,F) and v (B,H,L,D) -> (B,H,L,D).
Tensor gated_forward(const Settings& s, nn::Gate gate, const std::string& form, const Tensor& pq, const Tensor& pk,
                     const Tensor& v, const GateInputs& g) {
  if (gate == nn::Gate::delta) {
    Tensor dq = nn::delta_l2norm(pq), dk = nn::delta_l2norm(pk);
    if (form == "chunked")
      return delta_attention_chunked(dq, dk, v, g.beta, g.log_alpha, -1, Tensor(), Tensor(), nullptr, s.chunk);
    return delta_attention_recurrent(dq, dk, v, g.beta, g.log_alpha);
  }
  if (form == "chunked") return gated_attention_chunked(pq, pk, v, g.log_a, true, kEps, Tensor(), s.chunk);
  if (form == "quadratic") return gated_attention_quadratic(pq, pk, v, g.log_a, true, kEps);
  return gated_attention_recurrent(pq, pk, v, g.log_a, true, kEps);
}

// Why the row is skipped ("" when it runs).
std::string skip_reason(const Settings& s, const nn::Mixer& map, nn::Gate gate, const std::string& form, int64_t L,
                        int64_t F) {
  if (map.is_hybrid() && form == "recurrent")
    return "a hybrid's recurrent form is the decoding step, not a training form";
  if (gate == nn::Gate::delta && form == "quadratic") return "the delta rule has no quadratic form";
  if (map.feature_map() == "taylor" && L > s.max_taylor) return str("taylor above --max-taylor-len ", s.max_taylor);
  if (form == "quadratic" && L > s.max_quadratic) return str("quadratic above --max-quadratic-len ", s.max_quadratic);
  if (form == "quadratic" && gate == nn::Gate::gla && gated_quadratic_mib(s, L, F) > s.max_gated_quadratic_mib)
    return str("per-channel decays (B,H,L,L,F) are ~", static_cast<int64_t>(gated_quadratic_mib(s, L, F)),
               " MiB > --max-gated-quadratic-mib ", s.max_gated_quadratic_mib);
  if (form == "recurrent" && L > s.max_recurrent) return str("recurrent above --max-recurrent-len ", s.max_recurrent);
  if (form == "recurrent" && recurrent_state_mib(s, L, F) > s.max_recurrent_mib)
    return str("recurrent backward keeps ~", static_cast<int64_t>(recurrent_state_mib(s, L, F)),
               " MiB of states > --max-recurrent-mib ", s.max_recurrent_mib);
  return "";
}

// One (map, gate, form, L) row; throws on an op failure (the caller records it).
Row run_case(const Settings& s, const nn::Mixer& map, nn::Gate gate, const std::string& form, int64_t L,
             const std::shared_ptr<nn::FeatureMap>& fm) {
  Row r;
  r.map = map;
  r.gate = gate;
  r.form = form;
  r.L = L;
  r.F = fm ? fm->feature_dim() : s.head_dim;
  r.reason = skip_reason(s, map, gate, form, L, r.F);
  if (!r.reason.empty()) {
    r.status = "skip";
    return r;
  }

  const Shape shape{s.batch, s.heads, L, s.head_dim};
  Generator gen(1234 + static_cast<uint64_t>(L));
  const Options o{DType::f32, s.device};
  Tensor q = randn(shape, gen, o).requires_grad_(), k = randn(shape, gen, o).requires_grad_();
  Tensor v = randn(shape, gen, o).requires_grad_();
  Tensor dy = randn(shape, gen, o);
  const GateInputs gates = make_gate_inputs(gate, s, L, r.F, gen);  // after dy: ungated rows draw as before
  std::vector<Tensor> params = fm ? fm->parameters() : std::vector<Tensor>{};
  for (const Tensor& t : gates.leaves()) params.push_back(t);
  const nn::FeatureContext ctx{0, L};

  const auto* hm = dynamic_cast<const nn::HybridFeatureMap*>(fm.get());  // null unless a hybrid

  // q, k, v (B,H,L,D) -> (B,H,L,D), φ included (and a hybrid's window factor).
  auto forward = [&]() -> Tensor {
    if (form == "softmax") return nn::softmax_attention(q, k, v, true, Tensor());
    Tensor pq = fm->forward(q, true, ctx), pk = fm->forward(k, false, ctx);  // (B,H,L,F)
    if (gate != nn::Gate::none)  // in f32 under autocast too, as the engine's gated mixer
      return gated_forward(s, gate, form, pq.to(DType::f32), pk.to(DType::f32), v, gates);
    if (hm) {
      Tensor wf = hm->window_weight(DType::f32), lf = hm->linear_weight(DType::f32);  // (H)
      if (form == "chunked") return hybrid_attention_chunked(q, k, v, pq, pk, wf, lf, s.window, -1, Tensor(), s.chunk);
      return hybrid_attention_quadratic(q, k, v, pq, pk, wf, lf, s.window, -1, Tensor());
    }
    if (form == "chunked") return linear_attention_causal(pq, pk, v, s.chunk, kEps);
    if (form == "quadratic") return nn::linear_attention_quadratic(pq, pk, v, true, kEps);
    return nn::linear_attention_recurrent(pq, pk, v, kEps);
  };
  auto drop_grads = [&]() {
    q.zero_grad();
    k.zero_grad();
    v.zero_grad();
    for (Tensor& p : params) p.zero_grad();
  };
  r.fwd = measure(s.device, s.reps, kWarmup, drop_grads, [&]() {
    NoGradGuard ng;
    Tensor y = forward();
  });
  r.train = measure(s.device, s.reps, kWarmup, drop_grads, [&]() {
    Tensor y = forward();
    y.backward(dy);
  });
  drop_grads();
  return r;
}

// Smallest measured L from which (map, gate, form) is faster than softmax at every longer measured L
// (0: never).
int64_t crossover(const std::vector<Row>& rows, const nn::Mixer& map, nn::Gate gate, const std::string& form,
                  bool train) {
  std::vector<std::pair<int64_t, bool>> faster;  // (L, linear faster), by L
  for (const Row& r : rows) {
    if (r.map != map || r.gate != gate || r.form != form || r.status != "ok") continue;
    for (const Row& sm : rows)
      if (sm.map.is_softmax() && sm.L == r.L && sm.status == "ok") {
        double tl = train ? r.train.ms : r.fwd.ms, ts = train ? sm.train.ms : sm.fwd.ms;
        faster.emplace_back(r.L, tl < ts);
      }
  }
  std::sort(faster.begin(), faster.end());
  int64_t from = 0;
  for (auto it = faster.rbegin(); it != faster.rend() && it->second; ++it) from = it->first;
  return from;
}

int run_attention(const cli::Flags& f, Device device, json& out) {
  Settings s;
  s.device = device;
  s.batch = f.integer("batch", 1, 1 << 20);
  const int64_t heads = f.integer("heads", 0, 4096);
  s.heads = heads > 0 ? heads : (device.is_cuda() ? 12 : 4);
  s.head_dim = f.integer("head-dim", 1, 4096);
  s.chunk = f.integer("chunk", 1, 1 << 20);
  s.window = f.integer("window", 1, int64_t(1) << 24);
  s.reps = static_cast<int>(f.integer("reps", 1, 1000));
  s.max_quadratic = f.integer("max-quadratic-len", 0, INT64_MAX);
  s.max_recurrent = f.integer("max-recurrent-len", 0, INT64_MAX);
  s.max_taylor = f.integer("max-taylor-len", 0, INT64_MAX);
  s.max_recurrent_mib = f.number("max-recurrent-mib", 0, 1e12);
  s.max_gated_quadratic_mib = f.number("max-gated-quadratic-mib", 0, 1e12);
  const std::vector<int64_t> lengths = parse_int_list("lengths", f.str("lengths"), 1, int64_t(1) << 24);
  const std::vector<nn::Mixer> maps = parse_mixer_list("maps", f.str("maps"));
  const std::vector<std::string> forms = parse_name_list("forms", f.str("forms"));
  for (const std::string& fo : forms)
    HH_CHECK(fo == "chunked" || fo == "quadratic" || fo == "recurrent" || fo == "softmax", "--forms: unknown form '", fo,
             "' (expected chunked, quadratic, recurrent; softmax is implied by --maps softmax)");
  const std::vector<nn::Gate> gates = parse_gate_list(f.str("gate"));

  std::string gate_text;  // empty when ungated: the line reads as before
  if (gates != std::vector<nn::Gate>{nn::Gate::none})
    for (size_t i = 0; i < gates.size(); ++i) gate_text += (i ? "," : ", gates ") + nn::name(gates[i]);
  std::printf("attention benchmark: %s, %d thread(s), B=%lld H=%lld D=%lld, chunk %lld, hybrid window %lld%s, f32, "
              "median of %d after %d warm-up\n\n",
              device.str().c_str(), num_threads(), (long long)s.batch, (long long)s.heads, (long long)s.head_dim,
              (long long)s.chunk, (long long)s.window, gate_text.c_str(), s.reps, kWarmup);
  print_header();
  std::vector<Row> rows;
  int failures = 0;
  for (const nn::Mixer& map : maps) {
    std::shared_ptr<nn::FeatureMap> fm;
    std::vector<std::string> map_forms{"softmax"};
    if (map.is_linear()) {
      Generator init_gen(7);
      fm = nn::make_mixer_feature_map(map, nn::FeatureMapConfig(), s.heads, s.head_dim, {init_gen, device});
      map_forms.clear();
      for (const std::string& fo : forms)
        if (fo != "softmax") map_forms.push_back(fo);
    }
    for (nn::Gate gate : map_gates(map, gates))
      for (const std::string& form : map_forms)
        for (int64_t L : lengths) {
          Row r;
          try {
            r = run_case(s, map, gate, form, L, fm);
          } catch (const std::exception& e) {
            r.map = map;
            r.gate = gate;
            r.form = form;
            r.L = L;
            r.F = fm ? fm->feature_dim() : s.head_dim;
            r.status = "error";
            r.reason = e.what();
            ++failures;
          }
          print_row(r, s.batch);
          rows.push_back(r);
        }
  }

  json jrows = json::array(), jcross = json::array();
  for (const Row& r : rows) jrows.push_back(row_json(r, s.batch));
  const bool have_softmax =
      std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.map.is_softmax() && r.status == "ok"; });
  const bool have_linear = std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.map.is_linear(); });
  if (have_softmax && have_linear) {
    std::printf("\nwhere linear attention overtakes softmax (faster at this and every longer measured L):\n");
    for (const nn::Mixer& map : maps) {
      if (map.is_softmax()) continue;
      for (nn::Gate gate : map_gates(map, gates))
        for (const std::string& form : forms) {
          if (form == "softmax") continue;
          int64_t a = crossover(rows, map, gate, form, false), b = crossover(rows, map, gate, form, true);
          auto say = [](int64_t L) { return L > 0 ? "L=" + std::to_string(L) : std::string("not within the measured lengths"); };
          const std::string name = nn::gated_label(nn::name(map), gate);
          std::printf("  %-15s %-10s fwd: %-32s fwd+bwd: %s\n", name.c_str(), form.c_str(), say(a).c_str(),
                      say(b).c_str());
          jcross.push_back({{"map", name}, {"form", form}, {"fwd_L", a > 0 ? json(a) : json(nullptr)},
                            {"fwd_bwd_L", b > 0 ? json(b) : json(nullptr)}});
        }
    }
  }
  out["batch"] = s.batch;
  out["heads"] = s.heads;
  out["head_dim"] = s.head_dim;
  out["chunk"] = s.chunk;
  out["window"] = s.window;
  if (gates != std::vector<nn::Gate>{nn::Gate::none}) {  // ungated runs keep their keys as before
    json jg = json::array();
    for (nn::Gate g : gates) jg.push_back(nn::name(g));
    out["gates"] = jg;
  }
  out["reps"] = s.reps;
  out["warmup"] = kWarmup;
  out["results"] = jrows;
  out["crossover"] = jcross;
  if (failures) std::printf("\n%d case(s) failed (status \"error\" above)\n", failures);
  return failures ? 1 : 0;
}

// ---------------------------------------------------------------- AR training step

int run_ar_step(const cli::Flags& f, Device device, json& out) {
  const bool distill = f.boolean("distill-step");
  const int64_t batch = f.integer("ar-batch", 1, 1 << 20), len = f.integer("ar-len", 2, 1 << 20);
  const int reps = static_cast<int>(f.integer("reps", 1, 1000));
  const std::vector<nn::Mixer> mixers =
      parse_mixer_list("ar-mixers", distill && !f.given("ar-mixers") ? "hedgehog" : f.str("ar-mixers"));
  constexpr int64_t kVocab = 40;
  std::printf(distill ? "Stage-1 distillation step (feature maps only; quadratic weights vs the softmax teacher), "
                       "AR model " : "");
  std::printf("AR training step (paper preset: 4 layers, 4 heads x 64, dim 256, MLP 512, RoPE, vocab %lld): %s, %d "
              "thread(s), batch %lld, length %lld, median of %d after 2 warm-up steps\n\n",
              (long long)kVocab, device.str().c_str(), num_threads(), (long long)batch, (long long)len, reps);
  std::printf("%-12s %10s %10s %12s %10s\n", "mixer", "params", "step ms", "tok/s", "peak MiB");
  json jrows = json::array();
  int failures = 0;
  for (const nn::Mixer& mixer : mixers) {
    json row = {{"mixer", nn::name(mixer)}};
    try {
      nn::TransformerConfig mc;
      mc.vocab = kVocab;
      mc.layers = 4;
      mc.heads = 4;
      mc.head_dim = 64;
      mc.dim = 256;
      mc.mlp_hidden = 512;
      mc.positions = "rope";
      mc.pre_ln = true;
      mc.max_len = len;
      mc.attention.mixer = mixer;
      mc.attention.form = nn::LinearForm::chunked;
      mc.attention.chunk = 64;
      Generator gen(0);
      nn::DecoderLM model(mc, {gen, device});
      model.train();
      if (distill) {  // stage 1 of a conversion: only the feature maps train
        HH_CHECK(model.num_parameters(true) > 0 && mixer.is_linear(), "--distill-step: mixer '", nn::name(mixer),
                 "' has no feature-map weights to distill");
        model.freeze("*");
        model.unfreeze("*feature_map.*");
      }
      train::AdamW opt(train::decay_groups(model, 0.0), distill ? 1e-2 : 1e-3);
      Generator data_gen(1);
      Tensor ids = randint(0, kVocab, {batch, len}, data_gen).to(device);
      Tensor targets = randint(0, kVocab, {batch * len}, data_gen).to(device);
      // Gradients are dropped untimed before each step (and before the memory baseline).
      auto step = [&]() {
        nn::TraceRequest trace;
        trace.weights = trace.teacher = distill;
        Tensor logits = model.forward(ids, distill ? &trace : nullptr);  // (B,L,V)
        Tensor loss = distill ? nn::distillation_loss(trace) : cross_entropy(reshape(logits, {-1, kVocab}), targets);
        loss.backward();
        opt.step();
        model.on_optimizer_step();
      };
      Measure m = measure(device, reps, 2, [&] { opt.zero_grad(); }, step);
      const double tps = static_cast<double>(batch * len) / (m.ms * 1e-3);
      std::printf("%-12s %10lld %10.1f %12.0f %10.1f\n", nn::name(mixer).c_str(), (long long)model.num_parameters(),
                  m.ms, tps, m.peak_mib);
      row["params"] = model.num_parameters();
      row["step_ms"] = m.ms;
      row["tokens_per_s"] = tps;
      row["peak_mib"] = m.peak_mib;
      row["status"] = "ok";
    } catch (const std::exception& e) {
      std::printf("%-12s error: %s\n", nn::name(mixer).c_str(), e.what());
      row["status"] = "error";
      row["reason"] = e.what();
      ++failures;
    }
    std::fflush(stdout);
    jrows.push_back(row);
  }
  out["batch"] = batch;
  out["length"] = len;
  out["reps"] = reps;
  out["warmup"] = 2;
  out["results"] = jrows;
  return failures ? 1 : 0;
}

int run(int argc, char** argv) {
  cli::Flags f("bench_attention",
                "Softmax vs linear (and hybrid window + linear) attention: time, memory and tokens/s per sequence length (fwd and fwd+bwd), "
                "or (--ar-step) the AR model's training-step throughput.");
  cli::CommonFlagSpec common;
  common.seed = false;
  cli::add_common_flags(f, common);
  f.add("lengths", "256,512,1024,2048,4096,8192", "sequence lengths L");
  f.add("batch", "1", "batch size B");
  f.add("heads", "0", "heads H (0 = 4 on cpu, 12 on cuda)");
  f.add("head-dim", "64", "head dimension D");
  f.add("maps", "softmax,hedgehog,elu,taylor", "softmax and/or feature-map names");
  f.add("forms", "chunked,quadratic,recurrent", "linear-attention forms to run for each feature map");
  f.add("chunk", "64", "chunk size of the chunked form");
  f.add("window", "64", "hybrid maps (hybrid-<map>): the sliding window W");
  f.add("reps", "3", "timed runs per measurement (median)");
  f.add("max-quadratic-len", "4096", "skip the quadratic linear form above this L");
  f.add("max-recurrent-len", "1024", "skip the recurrent linear form above this L");
  f.add("max-recurrent-mib", "2048", "skip the recurrent form when its L per-token states (L*B*H*F*D*4 bytes) exceed this");
  f.add("max-taylor-len", "2048", "skip every taylor form above this L (F = 1+D+D^2)");
  f.add("gate", "none", "gates of the linear maps' state, a comma list: none, decay (RetNet), gla, delta\n"
        "                       (Gated DeltaNet); rows <map>+<gate>; softmax and hybrids run ungated");
  f.add("max-gated-quadratic-mib", "512", "skip a gla quadratic row when its (B,H,L,L,F) f32 decays exceed this");
  f.add("json", "", "also write the results as JSON to this file");
  f.add("ar-step", "false", "benchmark the AR model's training step instead of the attention table", true);
  f.add("distill-step", "false", "benchmark the stage-1 distillation step of a conversion on the AR model (implies\n"
        "                       --ar-step; default mixer hedgehog)", true);
  f.add("ar-mixers", "softmax,hedgehog", "--ar-step: mixers to compare");
  f.add("ar-batch", "32", "--ar-step: batch size");
  f.add("ar-len", "128", "--ar-step: sequence length");
  if (!f.parse(argc, argv)) return 0;

  const cli::CommonFlags common_flags = cli::read_common_flags(f, common);
  const Device device = common_flags.device;
  const Precision precision = common_flags.precision;
  PrecisionGuard autocast(precision);  // every timed forward (backward runs outside autocast)
  const int64_t threads = common_flags.threads;
  if (threads > 0) set_num_threads(static_cast<int>(threads));
  const std::string json_path = f.str("json");
  // Fail on an unwritable --json before spending minutes measuring.
  if (!json_path.empty()) HH_CHECK(std::ofstream(json_path).good(), "--json: cannot write '", json_path, "'");

  json out = {{"library", "hedgehog"}, {"device", device.str()}, {"threads", num_threads()},
              {"precision", precision_name(precision)}};
  const bool ar = f.boolean("ar-step") || f.boolean("distill-step");
  out["benchmark"] = f.boolean("distill-step") ? "distill_step" : ar ? "ar_step" : "attention";
  const int rc = ar ? run_ar_step(f, device, out) : run_attention(f, device, out);
  if (!json_path.empty()) {
    std::ofstream file(json_path);
    HH_CHECK(file.good(), "--json: cannot write '", json_path, "'");
    file << out.dump(2) << "\n";
    std::printf("\nwrote %s\n", json_path.c_str());
  }
  return rc;
}

}  // namespace
}  // namespace hh

int main(int argc, char** argv) { return hh::cli::run_main(argc, argv, hh::run); }
