#include "nn/attention.h"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/backend.h"
#include "core/batch_invariant.h"
#include "nn/rope.h"

namespace hh::nn {

LinearForm parse_linear_form(const std::string& s) {
  if (s == "quadratic") return LinearForm::quadratic;
  if (s == "chunked") return LinearForm::chunked;
  if (s == "noncausal") return LinearForm::noncausal;
  if (s == "recurrent") return LinearForm::recurrent;
  fail(str("attention: unknown linear form '", s, "' (expected quadratic, chunked, noncausal, recurrent)"));
}

namespace {

// The dtype a gated mixer computes in: f64 stays, everything else runs in f32.
DType gated_compute_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// (L,L) bool, true above the diagonal (future keys); built on the device, no host L² array.
Tensor future_mask(int64_t L, Device d) { return gt(triu(ones({L, L}, {DType::f32, d}), 1), 0.5); }

// (L,L) bool, true where key j is `window` or more positions before query i (out of a sliding window).
Tensor distant_mask(int64_t L, int64_t window, Device d) {
  return gt(tril(ones({L, L}, {DType::f32, d}), -window), 0.5);
}

// key_mask (B,L) bool -> (B,1,1,L) as `dtype` (1 keep, 0 drop).
Tensor key_mask_4d(const Tensor& key_mask, DType dtype) {
  return reshape(key_mask.to(dtype), {key_mask.size(0), 1, 1, key_mask.size(1)});
}

void check_key_mask(const Tensor& key_mask, const Tensor& k, const char* op) {
  if (!key_mask.defined()) return;
  HH_CHECK(key_mask.dim() == 2 && key_mask.size(0) == k.size(0) && key_mask.size(1) == k.size(2), op,
           ": key mask ", key_mask.shape(), " does not match (B,L) = (", k.size(0), ", ", k.size(2), ")");
}

// The KV cache's growth: t (B,H,T,D) <- t with x (B,H,n,D) appended along dim 2. t is kept as a view
// of slots [s0, s0 + T) of a (B,H,cap,D) buffer with room to spare: while the buffer has room and
// nothing but t holds it (no other handle on t's TensorImpl or its storage: a copied DecodeState
// shares them, and then this copies on write, so neither sees the other's tokens), x is written
// into the next slots in place; otherwise t and x move into a new buffer with a quarter as many
// slots again to spare (at most 2.25 caches' memory while it moves, as a cat's 2). A decoding step so copies its own token's keys, not the whole cache (a cat per
// step did: 17% of a 1,000-token decode). The values are those a cat gives.
void append_slots(Tensor& t, const Tensor& x) {
  const int64_t n = x.size(2);
  if (!t.defined()) {
    t = x;  // (maybe a view of a projection: the next append moves it into a buffer of its own)
    return;
  }
  HH_CHECK(t.dim() == 4 && x.dim() == 4 && t.size(0) == x.size(0) && t.size(1) == x.size(1) && t.size(3) == x.size(3),
           "KV cache: cannot append ", x.shape(), " to ", t.shape());
  const int64_t B = t.size(0), H = t.size(1), T = t.size(2), D = t.size(3);
  NoGradGuard ng;
  if (D > 0 && T > 0 && t.dtype() == x.dtype() && t.device() == x.device() && t.impl_ptr().use_count() == 1 &&
      t.storage().use_count() == 1 && t.stride(3) == 1 && t.stride(2) == D && t.offset() % D == 0) {
    const int64_t cap = t.stride(1) / D, s0 = t.offset() / D;
    const bool fits = t.stride(1) == cap * D && (B == 1 || t.stride(0) == H * cap * D) && s0 + T + n <= cap &&
                      static_cast<size_t>(B * H * cap * D) * itemsize(t.dtype()) <= t.storage()->nbytes;
    if (fits) {
      const Tensor buf = t.as_strided({B, H, cap, D}, {H * cap * D, cap * D, D, 1}, 0);
      copy_(slice(buf, 2, s0 + T, s0 + T + n), x);
      t = slice(buf, 2, s0, s0 + T + n);
      return;
    }
  }
  const int64_t cap = T + n + std::max<int64_t>(16, (T + n) / 4);
  const Tensor buf = empty({B, H, cap, D}, {x.dtype(), x.device()});
  copy_(slice(buf, 2, 0, T), t.to(x.dtype()));
  copy_(slice(buf, 2, T, T + n), x);
  t = slice(buf, 2, 0, T + n);
}

// Drops the keys before the last `keep` of t (B,H,T,D): a view of the same buffer.
Tensor last_slots(const Tensor& t, int64_t keep) { return slice(t, 2, t.size(2) - keep, t.size(2)); }

}  // namespace

Tensor softmax_attention_weights(const Tensor& q, const Tensor& k, bool causal, const Tensor& key_mask,
                                 int64_t window) {
  HH_CHECK(q.dim() == 4 && k.dim() == 4 && q.size(-1) == k.size(-1), "softmax_attention: expected q, k (B,H,L,D), got ",
           q.shape(), " and ", k.shape());
  check_key_mask(key_mask, k, "softmax_attention");
  HH_CHECK(window >= 0 && (window == 0 || causal), "softmax_attention: a sliding window (", window,
           ") needs causal attention and a size >= 0");
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor s = mul(matmul(q, transpose(k, -1, -2)), scale);  // (B,H,Lq,Lk)
  // keep (no grad): 1 where query i may see key j, 0 for the future, padded keys and -inf scores.
  Tensor keep = gt(s, -std::numeric_limits<double>::infinity()).to(s.dtype());
  if (causal) {
    HH_CHECK(q.size(2) == k.size(2), "softmax_attention: causal attention needs equal query/key lengths, got ",
             q.size(2), " and ", k.size(2));
    keep = masked_fill(keep, future_mask(q.size(2), q.device()), 0.0);
    if (window > 0 && window < q.size(2)) keep = masked_fill(keep, distant_mask(q.size(2), window, q.device()), 0.0);
  }
  if (key_mask.defined()) keep = mul(keep, key_mask_4d(key_mask, s.dtype()));
  // Blocked scores get a large finite negative (exp gives exactly 0 next to any real score); the
  // final product zeroes rows with no visible key at all, which the softmax alone would make
  // uniform over every key, future ones included. Such rows give zeros, as the fused kernels.
  s = masked_fill(s, eq(keep, 0.0), -1e30);
  return mul(softmax(s, -1), keep);
}

Tensor softmax_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor& key_mask,
                         Tensor* weights, int64_t window) {
  // The fused (FlashAttention-style) op never builds the L×L matrix; it is used whenever the
  // weights are not wanted, with a padding mask too where the backend's kernel takes one (CPU),
  // and a sliding window only where it hides nothing (window >= L).
  const bool windowed = window > 0 && window < k.size(2);
  if (!weights && !windowed && (!key_mask.defined() || backend_of(q).flash_attention_takes_key_mask())) {
    check_key_mask(key_mask, k, "softmax_attention");
    return scaled_dot_product_attention(q, k, v, causal, -1, key_mask);
  }
  Tensor a = softmax_attention_weights(q, k, causal, key_mask, window);
  if (weights) *weights = a;
  return matmul(a, v);
}

Tensor softmax_attention_continued(const Tensor& q, const Tensor& k, const Tensor& v, int64_t query_pos,
                                   int64_t key_pos, int64_t window) {
  HH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.size(-1) == k.size(-1) && k.size(2) == v.size(2),
           "softmax_attention_continued: expected q (B,H,Lq,D), k (B,H,Lk,D), v (B,H,Lk,Dv), got ", q.shape(), ", ",
           k.shape(), ", ", v.shape());
  HH_CHECK(window >= 0, "softmax_attention_continued: window must be >= 0, got ", window);
  const int64_t Lq = q.size(2), Lk = k.size(2);
  // Blocks of queries, so a long continuation holds (block, Lk) weights at a time, not (Lq, Lk).
  constexpr int64_t kQueryBlock = 256;
  if (Lq > kQueryBlock) {
    std::vector<Tensor> parts;
    for (int64_t i = 0; i < Lq; i += kQueryBlock) {
      const int64_t e = std::min(Lq, i + kQueryBlock);
      parts.push_back(softmax_attention_continued(slice(q, 2, i, e), k, v, query_pos + i, key_pos, window));
    }
    return cat(parts, 2);
  }
  // blocked (Lq,Lk): a future key, or one that left the query's window.
  std::vector<double> blocked(static_cast<size_t>(Lq * Lk), 0.0);
  for (int64_t i = 0; i < Lq; ++i)
    for (int64_t j = 0; j < Lk; ++j) {
      const int64_t dist = query_pos + i - (key_pos + j);
      if (dist < 0 || (window > 0 && dist >= window)) blocked[static_cast<size_t>(i * Lk + j)] = 1.0;
    }
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor s = mul(matmul(q, transpose(k, -1, -2)), scale);  // (B,H,Lq,Lk)
  const Tensor blocked_f = from_vector(blocked, {Lq, Lk}, {DType::f32, q.device()});
  // As softmax_attention_weights: blocked scores get a large finite negative, rows with no
  // visible key give zeros.
  s = masked_fill(s, gt(blocked_f, 0.5), -1e30);
  return matmul(mul(softmax(s, -1), eq(blocked_f, 0.0).to(s.dtype())), v);
}

Tensor linear_attention_weights(const Tensor& phi_q, const Tensor& phi_k, bool causal, double eps,
                                const Tensor& key_mask) {
  check_key_mask(key_mask, phi_k, "linear_attention");
  Tensor a = matmul(phi_q, transpose(phi_k, -1, -2));  // (B,H,L,L)
  if (causal) a = tril(a);
  if (key_mask.defined()) a = mul(a, key_mask_4d(key_mask, a.dtype()));
  return div(a, add(sum(a, {-1}, true), eps));
}

Tensor linear_attention_quadratic(const Tensor& phi_q, const Tensor& phi_k, const Tensor& v, bool causal, double eps,
                                  const Tensor& key_mask, Tensor* weights) {
  Tensor a = linear_attention_weights(phi_q, phi_k, causal, eps, key_mask);
  if (weights) *weights = a;
  return matmul(a, v);
}

Tensor linear_attention_noncausal(const Tensor& phi_q, const Tensor& phi_k, const Tensor& v, double eps,
                                  const Tensor& key_mask) {
  check_key_mask(key_mask, phi_k, "linear_attention");
  Tensor pk = phi_k;
  if (key_mask.defined()) pk = mul(pk, transpose(key_mask_4d(key_mask, pk.dtype()), -1, -2));  // (B,1,L,1)
  Tensor S = matmul(transpose(pk, -1, -2), v);                      // (B,H,F,D)
  Tensor z = unsqueeze(sum(pk, {-2}), -1);                          // (B,H,F,1)
  return div(matmul(phi_q, S), add(matmul(phi_q, z), eps));         // (B,H,L,D)
}

Tensor linear_attention_step(const Tensor& phi_q, const Tensor& phi_k, const Tensor& v, double eps,
                             RecurrentState& st) {
  HH_CHECK(phi_q.dim() == 4 && phi_q.size(2) == 1 && v.size(2) == 1, "linear_attention_step: expected one token, got ",
           phi_q.shape(), " and ", v.shape());
  Tensor kv = matmul(transpose(phi_k, -1, -2), v);  // (B,H,F,D)
  Tensor k1 = transpose(phi_k, -1, -2);             // (B,H,F,1)
  st.S = st.S.defined() ? add(st.S, kv) : kv;
  st.z = st.z.defined() ? add(st.z, k1) : k1;
  ++st.pos;
  Tensor den = add(matmul(phi_q, st.z), eps);  // (B,H,1,1)
  {
    NoGradGuard ng;
    double check = sum(den.detach()).item<double>();
    HH_CHECK(std::isfinite(check), "linear_attention_step: the recurrent state became NaN/Inf at position ", st.pos);
  }
  return div(matmul(phi_q, st.S), den);
}

Tensor linear_attention_recurrent(const Tensor& phi_q, const Tensor& phi_k, const Tensor& v, double eps) {
  RecurrentState st;
  std::vector<Tensor> ys;
  for (int64_t l = 0; l < v.size(2); ++l)
    ys.push_back(linear_attention_step(slice(phi_q, 2, l, l + 1), slice(phi_k, 2, l, l + 1), slice(v, 2, l, l + 1), eps, st));
  return cat(ys, 2);
}

AttentionMixer::AttentionMixer(MixerConfig c, std::shared_ptr<FeatureMap> fm) : cfg(std::move(c)), feature_map(std::move(fm)) {
  HH_CHECK(cfg.chunk > 0, "attention: chunk must be positive, got ", cfg.chunk);
  HH_CHECK(cfg.sliding_window >= 0 && (cfg.sliding_window == 0 || cfg.causal),
           "attention: a sliding window needs causal attention and a size >= 0, got ", cfg.sliding_window);
  HH_CHECK(cfg.mixer.is_softmax() == (feature_map == nullptr), "attention: mixer '", name(cfg.mixer),
           "' needs ", feature_map ? "no feature map" : "a feature map");
  if (cfg.mixer.is_hybrid()) {
    HH_CHECK(cfg.window >= 1, "attention: mixer '", name(cfg.mixer), "': window must be >= 1, got ", cfg.window);
    HH_CHECK(std::dynamic_pointer_cast<HybridFeatureMap>(feature_map) != nullptr, "attention: mixer '",
             name(cfg.mixer), "' needs a hybrid feature map (make_mixer_feature_map), got '", feature_map->name(), "'");
  }
  HH_CHECK(cfg.gate_output == GateOutput::normalizer || cfg.gate != Gate::none, "attention: gate output '",
           name(cfg.gate_output), "' needs a gate on a linear mixer");
  if (cfg.gate != Gate::none) {
    HH_CHECK(cfg.mixer.is_linear() && !cfg.mixer.is_hybrid(), "attention: gate '", name(cfg.gate),
             "' needs a linear mixer (a feature map), not '", name(cfg.mixer), "'");
    HH_CHECK(std::dynamic_pointer_cast<GatedFeatureMap>(feature_map) != nullptr, "attention: gate '", name(cfg.gate),
             "' needs a gated feature map (make_mixer_feature_map with the gate), got '", feature_map->name(), "'");
    const auto& gm = static_cast<const GatedFeatureMap&>(*feature_map);
    HH_CHECK((gm.g_norm != nullptr) == (cfg.gate_output == GateOutput::group_norm), "attention: gate output '",
             name(cfg.gate_output), "' needs a feature map built with it (make_mixer_feature_map), got one ",
             gm.g_norm ? "with" : "without", " g_norm");
  }
}

std::shared_ptr<FeatureMap> make_mixer_feature_map(const Mixer& mixer, FeatureMapConfig fc, int64_t heads,
                                                   int64_t head_dim, Init init, Gate gate, int64_t model_dim,
                                                   GateOutput output) {
  HH_CHECK(gate == Gate::none || (mixer.is_linear() && !mixer.is_hybrid()), "attention: gate '", name(gate),
           "' needs a linear mixer (a feature map), not '", name(mixer), "'");
  if (mixer.is_softmax()) return nullptr;
  init.draw = true;  // new weights, never loaded from an HF file
  fc.name = mixer.feature_map();
  fc.heads = heads;
  fc.head_dim = head_dim;
  std::shared_ptr<FeatureMap> map = make_feature_map(fc, init);
  if (mixer.is_hybrid()) return std::make_shared<HybridFeatureMap>(std::move(map), heads, init, fc.hybrid_affine);
  if (gate != Gate::none)
    return std::make_shared<GatedFeatureMap>(std::move(map), gate, heads, model_dim, init, output, head_dim);
  return map;
}

Tensor AttentionMixer::forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                               TraceRequest* trace, const GateInput& gate) const {
  return run(q, k, v, key_mask, trace, gate, nullptr);
}

Tensor AttentionMixer::prefill(const Tensor& q, const Tensor& k, const Tensor& v, DecodeCache& cache,
                               const GateInput& gate) const {
  HH_CHECK(q.dim() == 4 && q.size(2) >= 1, "attention prefill: expected q, k, v (B,H,L,D) with L >= 1, got ",
           q.shape());
  HH_CHECK(cfg.causal, "attention prefill: decoding needs a causal model");
  if (cache.pos() > 0) return continue_prefill(q, k, v, cache, gate);
  return run(q, k, v, Tensor(), nullptr, gate, &cache);
}

Tensor AttentionMixer::continue_prefill(const Tensor& q, const Tensor& k, const Tensor& v, DecodeCache& cache,
                                        const GateInput& gate) const {
  const int64_t P = cache.pos(), L = q.size(2);
  if (!feature_map) {
    HH_CHECK(cache.k.defined(), "attention prefill: a softmax layer's cache holds no keys at position ", P);
    append_slots(cache.k, k);  // (B,H,T+L,D): positions evicted..
    append_slots(cache.v, v);
    Tensor y = softmax_attention_continued(q, cache.k, cache.v, P, cache.evicted, cfg.sliding_window);
    const int64_t W = cfg.sliding_window, T = cache.k.size(2), keep = W > 0 ? std::min(W, T) : T;
    cache.k = last_slots(cache.k, keep);
    cache.v = last_slots(cache.v, keep);
    cache.evicted += T - keep;
    return y;
  }
  if (cfg.gate == Gate::delta) return delta_forward(q, k, v, Tensor(), gate, nullptr, &cache);
  FeatureContext ctx{P, P + L};
  ctx.keys_one_by_one = true;  // as the steps map them
  if (cfg.mixer.is_hybrid()) {
    HH_CHECK(cache.hybrid.window == cfg.window, "attention prefill: the cache's window ", cache.hybrid.window,
             " is not the mixer's ", cfg.window);
    const auto& hm = static_cast<const HybridFeatureMap&>(*feature_map);
    const DType dt = q.dtype();
    Tensor pq = feature_map->forward(q, true, ctx).to(dt), pk = feature_map->forward(k, false, ctx).to(dt);
    Tensor y = hybrid_attention_chunked(q, k, v, pq, pk, hm.window_weight(dt), hm.linear_weight(dt), cfg.window, -1,
                                        Tensor(), cfg.chunk, &cache.hybrid);
    cache.hybrid = hybrid_decode_state(k, v, pk, cfg.window, &cache.hybrid);
    return y;
  }
  // Gated and plain linear mixers: the gated op from the carried state, in f32 (f64 for f64).
  const DType ct = gated_compute_dtype(v.dtype());
  Tensor pq = feature_map->forward(q, true, ctx), pk = feature_map->forward(k, false, ctx);
  RecurrentState& st = cache.linear;
  Tensor y;
  if (cfg.gate != Gate::none) {
    const auto& gm = static_cast<const GatedFeatureMap&>(*feature_map);
    const bool normalize = cfg.gate_output == GateOutput::normalizer;
    Tensor pqc = pq.to(ct), pkc = pk.to(ct), vv = v.to(ct), log_a = gm.log_gate(gate, ct);
    y = gated_attention_chunked(pqc, pkc, vv, log_a, normalize, cfg.eps, Tensor(), cfg.chunk, &st.gated);
    st.gated = gated_decode_state(pkc, vv, log_a, normalize, &st.gated);
    if (!normalize) y = gm.norm_output(y);
  } else {
    HH_CHECK(st.S.defined() && st.z.defined(), "attention prefill: the linear state is empty at position ", P);
    // The plain prefix sum is the gated scan with α = 1 (log α = 0).
    const GatedDecodeState carried{st.S.to(ct), st.z.to(ct), P};
    Tensor zero_gate = zeros({q.size(0), q.size(1), L, 1}, {ct, q.device()});
    y = gated_attention_chunked(pq.to(ct), pk.to(ct), v.to(ct), zero_gate, true, cfg.eps, Tensor(), cfg.chunk,
                                &carried);
    NoGradGuard ng;  // S += Σ pk_j v_jᵀ, z += Σ pk_j (in the steps' dtype)
    st.S = add(st.S, matmul(transpose(pk, -1, -2), v));
    st.z = add(st.z, transpose(sum(pk, {-2}, true), -1, -2));
  }
  st.pos = P + L;
  return y.to(v.dtype());
}

Tensor AttentionMixer::run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                           TraceRequest* trace, const GateInput& gate, DecodeCache* fill) const {
  const int64_t L = q.size(2);
  AttentionTrace tr;
  Tensor y;  // (B,H,L,Dv)
  FeatureContext ctx{0, L, key_mask};  // padded keys: see FeatureContext::key_mask
  ctx.keys_one_by_one = fill != nullptr;
  const LinearForm form = fill ? LinearForm::chunked : cfg.form;  // a prefill runs the efficient form
  if (!feature_map) {
    y = softmax_attention(q, k, v, cfg.causal, key_mask, trace && trace->weights ? &tr.weights : nullptr,
                          cfg.sliding_window);
    if (fill) {  // the KV cache: every key/value, or the last sliding_window of them
      const int64_t W = cfg.sliding_window, keep = W > 0 ? std::min(W, L) : L;
      fill->k = contiguous(slice(k, 2, L - keep, L));
      fill->v = contiguous(slice(v, 2, L - keep, L));
      fill->evicted = L - keep;
    }
  } else if (cfg.mixer.is_hybrid()) {
    HH_CHECK(cfg.causal, "attention: mixer '", name(cfg.mixer), "' is causal only (a sliding window over past keys)");
    const auto& hm = static_cast<const HybridFeatureMap&>(*feature_map);
    const DType dt = q.dtype();
    Tensor pq = feature_map->forward(q, true, ctx).to(dt), pk = feature_map->forward(k, false, ctx).to(dt);
    Tensor wf = hm.window_weight(dt), lf = hm.linear_weight(dt);
    if (trace && (trace->weights || trace->teacher))
      y = hybrid_attention_quadratic(q, k, v, pq, pk, wf, lf, cfg.window, -1, key_mask, &tr.weights);
    else
      y = hybrid_attention_chunked(q, k, v, pq, pk, wf, lf, cfg.window, -1, key_mask, cfg.chunk);
    if (fill) fill->hybrid = hybrid_decode_state(k, v, pk, cfg.window);
  } else if (cfg.gate == Gate::delta) {
    HH_CHECK(cfg.causal, "attention: gate 'delta' is causal only (a gated recurrent state)");
    y = delta_forward(q, k, v, key_mask, gate, trace && (trace->weights || trace->teacher) ? &tr.weights : nullptr,
                      fill);
  } else if (cfg.gate != Gate::none) {
    HH_CHECK(cfg.causal, "attention: gate '", name(cfg.gate), "' is causal only (a gated recurrent state)");
    const auto& gm = static_cast<const GatedFeatureMap&>(*feature_map);
    // The state, the cumulative log gates and the normalizer in f32 whatever the input dtype
    // (REFERENCE.md §1; bf16 autocast gives bf16 v), the output back in v's dtype.
    const DType ct = gated_compute_dtype(v.dtype());
    Tensor pq = feature_map->forward(q, true, ctx).to(ct), pk = feature_map->forward(k, false, ctx).to(ct);
    Tensor vv = v.to(ct), log_a = gm.log_gate(gate, ct);
    const bool normalize = cfg.gate_output == GateOutput::normalizer;
    if ((trace && (trace->weights || trace->teacher)) || form == LinearForm::quadratic)
      y = gated_attention_quadratic(pq, pk, vv, log_a, normalize, cfg.eps, key_mask, &tr.weights);
    else if (form == LinearForm::recurrent)
      y = gated_attention_recurrent(pq, pk, vv, log_a, normalize, cfg.eps, key_mask);
    else
      y = gated_attention_chunked(pq, pk, vv, log_a, normalize, cfg.eps, key_mask, cfg.chunk);
    if (fill) {
      fill->linear.gated = gated_decode_state(pk, vv, log_a, normalize);
      fill->linear.pos = L;
    }
    if (!normalize) y = gm.norm_output(y);
    y = y.to(v.dtype());
  } else {
    Tensor pq = feature_map->forward(q, true, ctx), pk = feature_map->forward(k, false, ctx);
    bool need_weights = trace && (trace->weights || trace->teacher);
    if (need_weights || form == LinearForm::quadratic) {
      y = linear_attention_quadratic(pq, pk, v, cfg.causal, cfg.eps, key_mask, &tr.weights);
    } else if (!cfg.causal || form == LinearForm::noncausal) {
      HH_CHECK(!cfg.causal, "attention: the noncausal form cannot be used in a causal model");
      y = linear_attention_noncausal(pq, pk, v, cfg.eps, key_mask);
    } else if (form == LinearForm::recurrent) {
      HH_CHECK(!key_mask.defined(), "attention: the recurrent form takes no key mask");
      y = linear_attention_recurrent(pq, pk, v, cfg.eps);
    } else {
      Tensor pk_masked = key_mask.defined() ? mul(pk, transpose(key_mask_4d(key_mask, pk.dtype()), -1, -2)) : pk;
      y = linear_attention_causal(pq, pk_masked, v, cfg.chunk, cfg.eps);
    }
    if (fill) {  // S = Σ pk_j v_jᵀ (B,H,F,D), z = Σ pk_j (B,H,F,1): the prefix sums after L tokens
      NoGradGuard ng;
      fill->linear.S = matmul(transpose(pk, -1, -2), v);
      fill->linear.z = transpose(sum(pk, {-2}, true), -1, -2);
      fill->linear.pos = L;
    }
  }
  if (trace) {
    NoGradGuard ng;
    const int64_t W = cfg.sliding_window;  // the softmax teacher is the model's own: its window too
    if (trace->teacher)  // the softmax teacher sees the same q, k the student maps
      tr.teacher = softmax_attention_weights(q.detach(), k.detach(), cfg.causal, key_mask, W);
    if (trace->outputs || trace->teacher_forward) {  // without the weights, the fused softmax: no (L,L) matrix
      tr.teacher_output = tr.teacher.defined()
                              ? matmul(tr.teacher, v.detach())
                              : softmax_attention(q.detach(), k.detach(), v.detach(), cfg.causal, key_mask, nullptr, W);
      tr.output = y;  // keeps its graph: the output-MSE term trains through it
    }
    if (trace->teacher_forward) y = tr.teacher_output;
    if (trace->scores)
      tr.scores = mul(matmul(q.detach(), transpose(k.detach(), -1, -2)), 1.0 / std::sqrt(double(q.size(-1))));
    trace->layers.push_back(tr);
  }
  return y;
}

Tensor AttentionMixer::delta_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                                     const GateInput& gate, Tensor* weights, DecodeCache* fill) const {
  const auto& gm = static_cast<const GatedFeatureMap&>(*feature_map);
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2);
  const int64_t P = fill ? fill->linear.pos : 0;  // a started state: these tokens continue it
  FeatureContext ctx{P, P + L, key_mask};
  ctx.keys_one_by_one = fill != nullptr;
  const LinearForm form = fill ? LinearForm::chunked : cfg.form;  // a prefill runs the chunked op
  // The state and the gates in f32 whatever the input dtype (the op casts half inputs anyway), the
  // output back in v's dtype.
  const DType ct = gated_compute_dtype(v.dtype());
  Tensor pq = delta_l2norm(feature_map->forward(q, true, ctx).to(ct));
  Tensor pk = delta_l2norm(feature_map->forward(k, false, ctx).to(ct));
  const DeltaGates g = gm.delta_gates(gate, ct);
  Tensor vv = v.to(ct), y;
  if (weights || form == LinearForm::quadratic) {
    // y is linear in v: W = the rule applied to identity values (B,H,L,L), y = W v.
    Tensor eye_v = expand(reshape(eye(L, {ct, v.device()}), {1, 1, L, L}), {B, H, L, L});
    Tensor W = delta_attention_chunked(pq, pk, eye_v, g.beta, g.log_alpha, -1, key_mask, Tensor(), nullptr, cfg.chunk);
    if (weights) *weights = W;
    y = matmul(W, vv);
  } else if (form == LinearForm::recurrent) {
    y = delta_attention_recurrent(pq, pk, vv, g.beta, g.log_alpha, -1, key_mask);
  } else {  // a prefill takes the op's final state: the state the steps would leave
    Tensor* final_state = fill ? &fill->linear.delta.S : nullptr;
    const Tensor initial = fill ? fill->linear.delta.S : Tensor();  // undefined (zeros) for a fresh state
    y = delta_attention_chunked(pq, pk, vv, g.beta, g.log_alpha, -1, key_mask, initial, final_state, cfg.chunk);
  }
  if (fill) fill->linear.delta.tokens = fill->linear.pos = P + L;
  if (cfg.gate_output == GateOutput::group_norm) y = gm.norm_output(y);
  return y.to(v.dtype());
}

Tensor AttentionMixer::linear_step(const Tensor& q, const Tensor& k, const Tensor& v, RecurrentState& state,
                                   const GateInput& gate) const {
  HH_CHECK(feature_map != nullptr, "attention: recurrent decoding needs a linear (feature-map) mixer, not softmax");
  HH_CHECK(!cfg.mixer.is_hybrid(), "attention: mixer '", name(cfg.mixer),
           "' decodes with AttentionMixer::step and a DecodeCache, not the linear recurrent state");
  HH_CHECK(cfg.causal, "attention: recurrent decoding needs a causal model");
  FeatureContext ctx{state.pos, 0};
  Tensor pq = feature_map->forward(q, true, ctx), pk = feature_map->forward(k, false, ctx);
  if (cfg.gate == Gate::none) return linear_attention_step(pq, pk, v, cfg.eps, state);
  const auto& gm = static_cast<const GatedFeatureMap&>(*feature_map);
  const DType ct = gated_compute_dtype(v.dtype());
  const bool normalize = cfg.gate_output == GateOutput::normalizer;
  Tensor y;
  ++state.pos;
  if (cfg.gate == Gate::delta) {
    const DeltaGates g = gm.delta_gates(gate, ct);
    y = delta_attention_step(state.delta, delta_l2norm(pq.to(ct)), delta_l2norm(pk.to(ct)), v.to(ct), g.beta,
                             g.log_alpha);
  } else {
    y = gated_attention_step(state.gated, pq.to(ct), pk.to(ct), v.to(ct), gm.log_gate(gate, ct), normalize, cfg.eps);
  }
  if (!normalize) y = gm.norm_output(y);
  return y.to(v.dtype());
}

Tensor AttentionMixer::step(const Tensor& q, const Tensor& k, const Tensor& v, DecodeCache& cache,
                            const GateInput& gate) const {
  HH_CHECK(q.dim() == 4 && q.size(2) == 1 && k.size(2) == 1 && v.size(2) == 1,
           "attention step: expected one token q, k, v (B,H,1,D), got ", q.shape(), ", ", k.shape(), ", ", v.shape());
  if (cfg.mixer.is_hybrid()) {
    HH_CHECK(cfg.causal, "attention step: mixer '", name(cfg.mixer), "' is causal only");
    if (cache.hybrid.tokens == 0) cache.hybrid = HybridDecodeState(cfg.window);
    HH_CHECK(cache.hybrid.window == cfg.window, "attention step: the cache's window ", cache.hybrid.window,
             " is not the mixer's ", cfg.window);
    const auto& hm = static_cast<const HybridFeatureMap&>(*feature_map);
    FeatureContext ctx{cache.hybrid.tokens, 0};
    const DType dt = q.dtype();
    Tensor pq = feature_map->forward(q, true, ctx).to(dt), pk = feature_map->forward(k, false, ctx).to(dt);
    return hybrid_attention_step(cache.hybrid, q, k, v, pq, pk, hm.window_weight(dt), hm.linear_weight(dt));
  }
  if (feature_map) return linear_step(q, k, v, cache.linear, gate);
  HH_CHECK(cfg.causal, "attention step: decoding needs a causal model");
  append_slots(cache.k, k);  // (B,H,T,D), in place (see append_slots)
  append_slots(cache.v, v);
  const int64_t W = cfg.sliding_window, T = cache.k.size(2);
  if (W > 0 && T > W) {  // keys that left the window are never seen again: the cache keeps W
    cache.k = last_slots(cache.k, W);
    cache.v = last_slots(cache.v, W);
    cache.evicted += T - W;
  }
  // The newest query sees every cached key (the window's): non-causal attention of one query over T keys.
  return softmax_attention(q, cache.k, cache.v, false, Tensor());
}

Tensor AttentionMixer::step_rows(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const std::vector<DecodeCache*>& caches, const GateInput& gate) const {
  const int64_t N = static_cast<int64_t>(caches.size());
  HH_CHECK(q.dim() == 4 && q.size(0) == N && k.dim() == 4 && k.size(0) == N && v.dim() == 4 && v.size(0) == N,
           "attention step_rows: expected q, k, v (", N, ",H,1,D) for ", N, " caches, got ", q.shape(), ", ",
           k.shape(), ", ", v.shape());
  if (cfg.mixer.is_hybrid() && cfg.causal && !feature_map->reads_position()) {
    std::vector<HybridDecodeState*> states;
    for (DecodeCache* c : caches) {
      if (c->hybrid.tokens == 0) c->hybrid = HybridDecodeState(cfg.window);
      HH_CHECK(c->hybrid.window == cfg.window, "attention step: the cache's window ", c->hybrid.window,
               " is not the mixer's ", cfg.window);
      states.push_back(&c->hybrid);
    }
    const auto& hm = static_cast<const HybridFeatureMap&>(*feature_map);
    FeatureContext ctx;
    ctx.keys_one_by_one = true;  // each row's key by its own max, as a step of one key
    const DType dt = q.dtype();
    Tensor pq = feature_map->forward(q, true, ctx).to(dt), pk = feature_map->forward(k, false, ctx).to(dt);
    return hybrid_attention_step_rows(states, q, k, v, pq, pk, hm.window_weight(dt), hm.linear_weight(dt));
  }
  const auto row = [](const Tensor& x, int64_t r) { return x.defined() ? slice(x, 0, r, r + 1) : x; };
  std::vector<Tensor> y(caches.size());
  parallel_rows(N, [&](int64_t r) {
    y[static_cast<size_t>(r)] = step(row(q, r), row(k, r), row(v, r), *caches[static_cast<size_t>(r)],
                                     GateInput{row(gate.x, r), row(gate.k, r)});
  });
  return cat(y, 0);
}

Attention::Attention(const AttentionConfig& c, Init init) : cfg(c) {
  HH_CHECK(c.dim > 0 && c.heads > 0 && c.head_dim > 0, "Attention: dim, heads, head_dim must be positive, got ", c.dim,
           ", ", c.heads, ", ", c.head_dim);
  HH_CHECK(c.chunk > 0, "Attention: chunk must be positive, got ", c.chunk);
  const int64_t inner = c.heads * c.head_dim;
  q_proj = register_module("q_proj", std::make_shared<Linear>(c.dim, inner, c.bias, init));
  k_proj = register_module("k_proj", std::make_shared<Linear>(c.dim, inner, c.bias, init));
  v_proj = register_module("v_proj", std::make_shared<Linear>(c.dim, inner, c.bias, init));
  o_proj = register_module("o_proj", std::make_shared<Linear>(inner, c.dim, c.bias, init));
  if (c.mixer.is_linear())
    feature_map = register_module(
        "feature_map",
        make_mixer_feature_map(c.mixer, c.feature_map, c.heads, c.head_dim, init, c.gate, c.dim, c.gate_output));
  mixer = AttentionMixer(MixerConfig{c.mixer, c.causal, c.form, c.chunk, c.eps, c.window, c.gate, c.gate_output},
                         feature_map);
}

void Attention::project(const Tensor& x, int64_t pos_offset, Tensor& q, Tensor& k, Tensor& v, Tensor* k_raw) const {
  HH_CHECK(x.dim() == 3 && x.size(2) == cfg.dim, "Attention: expected x (B,L,", cfg.dim, "), got ", x.shape());
  const int64_t B = x.size(0), L = x.size(1), H = cfg.heads, D = cfg.head_dim;
  auto heads = [&](const Tensor& t) { return transpose(reshape(t, {B, L, H, D}), 1, 2); };  // (B,H,L,D)
  q = heads(q_proj->forward(x));
  k = heads(k_proj->forward(x));
  v = heads(v_proj->forward(x));
  if (k_raw) *k_raw = k;
  if (cfg.rope) {
    q = apply_rope(q, pos_offset, cfg.rope_theta);
    k = apply_rope(k, pos_offset, cfg.rope_theta);
  }
}

Tensor Attention::forward(const Tensor& x, const Tensor& key_mask, TraceRequest* trace) {
  Tensor q, k, v, k_raw;
  project(x, 0, q, k, v, &k_raw);
  const int64_t B = x.size(0), L = x.size(1);
  Tensor y = mixer.forward(q, k, v, key_mask, trace, GateInput{x, k_raw});  // (B,H,L,D)
  Tensor merged = reshape(transpose(y, 1, 2), {B, L, cfg.heads * cfg.head_dim});
  return o_proj->forward(merged);
}

Tensor Attention::step(const Tensor& x, DecodeCache& cache) {
  HH_CHECK(x.dim() == 3 && x.size(1) == 1, "Attention::step: expected x (B,1,C), got ", x.shape());
  Tensor q, k, v, k_raw;
  project(x, cache.pos(), q, k, v, &k_raw);
  Tensor y = mixer.step(q, k, v, cache, GateInput{x, k_raw});
  return o_proj->forward(reshape(transpose(y, 1, 2), {x.size(0), 1, cfg.heads * cfg.head_dim}));
}

void parallel_rows(int64_t n, const std::function<void(int64_t)>& fn) {
  if (omp_in_parallel()) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  // Every row on one thread, alone or among many: a kernel inside sees one thread either way, so a
  // row's arithmetic does not depend on how many rows there are.
  const int threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), n)));
  const bool grad = GradMode::is_enabled(), invariant = BatchInvariant::active();
  std::exception_ptr error;
#pragma omp parallel num_threads(threads)
  {
    const bool prev = GradMode::is_enabled();
    GradMode::set_enabled(grad);
    omp_set_num_threads(1);  // this row's kernels run on this thread (the region's own setting)
    std::unique_ptr<BatchInvariant> guard = invariant ? std::make_unique<BatchInvariant>() : nullptr;
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) {
      try {
        fn(i);
      } catch (...) {
#pragma omp critical(hh_parallel_rows_error)
        if (!error) error = std::current_exception();
      }
    }
    guard.reset();
    GradMode::set_enabled(prev);
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace hh::nn
