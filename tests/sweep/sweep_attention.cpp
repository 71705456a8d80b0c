// Threshold sweep (issue 41): softmax attention (the fused flash kernel behind
// scaled_dot_product_attention and nn's softmax_attention), the linear attention forms (the chunked
// causal kernel linear_attention_causal, nn's quadratic / noncausal / recurrent forms) and
// Hedgehog's feature map (hedgehog_features), each against a naive host loop written here:
//   softmax:  y_i = Σ_j e_ij v_j / Σ_j e_ij,  e_ij = exp(s·q_i·k_j - max),  over the keys j query i
//             sees (j <= i when causal, real under the key mask); a query that sees none gets 0;
//   linear:   y_i = Σ_j a_ij v_j / (Σ_j a_ij + eps),  a_ij = φq_i·φk_j over the same keys;
//   hedgehog: [softmax(z), softmax(-z)] per row.
//
// The constants that choose a path, and the sizes that cross them:
//   flash attention, CPU (core/cpu/cpu_flash_attention.inc, baseline and core/cpu/avx2/ copies):
//     - kTile = 64 queries x keys per tile (cpu_flash_attention.inc:26): Lq, Lk in
//       crossing({64, 128}, {1, 2, 17}), Lq != Lk (3 x 70, 70 x 3, 65 x 129), Lk = 0.
//     - the causal diagonal tile (:78 mask_tile: a tile entirely at or below the diagonal is not
//       masked; :114 key_end): causal at every L above, both sides of 64 and 128.
//     - OpenMP `if (tasks > 1 && work > kParallelGrain)`, kParallelGrain = 32768
//       (core/cpu/cpu_backend.h:93), work = G·Lq·Lk·(D+Dv) (:113, :170): G = 1, Lq = 32,
//       D = Dv = 16 and Lk in {31, 32, 33} (work 31744, 32768, 33792).
//     - the backward's scheme (:185): one pass per group when G >= 2·threads, else two passes over
//       tiles: G = B·H in {1, 2, 3, 4, 5, 7, 8, 9, 16} under 1, 2 and 4 threads, L = 70 (two tiles).
//     - the key mask: padded columns (:102 mask_keys), a whole tile of padding skipped (:93
//       any_key, keys 0..63 padded), a query that sees no key (lse = -inf, :142, :150: causal
//       queries before the first real key, a batch entry with every key padded): B = 4, L in
//       {5, 63, 64, 65, 129}, causal and not.
//     - vec::exp / Eigen packets (4/8/16 f32 lanes, 2/4/8 f64): odd tile widths (every odd L) and
//       D, Dv in crossing({4, 8, 16}, {1}).
//     - the op (autograd/ops/attention.cpp:40 kernel_readable): inputs the kernel reads in place
//       (head views of a (B,L,H,D) projection) or copied (harness non_contiguous: stride(3) != 1);
//       Dv = 0 (no output: zero gradients, :132), B = 0.
//   flash attention, CUDA (cuda/cuda_flash_attention.cu, cuda/cuda_attention.cpp), f32 only, no key
//     mask (those cases run on the CPU only):
//     - kTile = tile::kRows = 64 (cuda_flash_attention.cu:22): the L list above.
//     - accumulator width NJ = 4 for Dv <= 64, 8 above (:273 forward, :292 kv: D > 64 || Dv > 64,
//       :299 q: D > 64), head dims up to kMaxFlashHeadDim = 128 (cuda_attention.cpp:30):
//       D = Dv in crossing({4, 8, 16, 64}, {1, 127, 128}), and (D, Dv) in {(1, 9), (1, 65), (16, 65),
//       (65, 16), (128, 3)}.
//     - the backward's delta kernel grid blocks_for(G·Lq, 8) (:288) and the tile blocks G·ceil(L/64).
//   chunked causal linear attention, CPU (core/cpu/cpu_attention.inc, baseline and avx2 copies):
//     - the chunk C (argument, default 64): chunk in {1, 7, 16, 64} and L crossing C and 2C
//       (the first chunk reads no state :48 c0 > 0, :97; the last writes none :56 c0 + n < L,
//       :101; the reverse sweep's last chunk :113, :127 and first :133), L = 1, 2.
//     - OpenMP `if (G > 1)` (:32, :70): G in {1, 2, 3, 5} under 1, 2 and 4 threads.
//     - Eigen packets over F and D: F, D in crossing({4, 8, 16}, {1}).
//   chunked causal linear attention, CUDA (cuda/cuda_attention.cu):
//     - ChunkCap = 64 (f32) / 32 (f64) rows (:34): chunk in crossing({32, 64}) and 100 (capped),
//       L crossing them.
//     - segments P (:378 plan_segments): about 4 blocks per SM over G·P, whole chunks per segment;
//       P > 1 whenever G is small and L spans several chunks: L = 200 with chunk 7 and 32.
//     - 64-wide block tile products over F and D (cuda_attention_tile.cuh:17 kRows = 64, :18
//       kSlab = 16): F, D in crossing({16, 64}).
//     - the running state F·(D+1) in dynamic shared memory or, past the opt-in limit (~227 KiB),
//       a global workspace (:354 shared_state_bytes): F = 512, D = 127 (f32 256 KiB, f64 512 KiB).
//   nn's linear forms (nn/attention.cpp, composed of ops: matmul, tril, sum, div; reductions over
//     the key dim cross cpu_reduce's split at 128 rows): L in {1, 63, 64, 65, 127, 128, 129, 130},
//     causal or not, with and without the key mask; the recurrent form token by token.
//   nn's softmax_attention with a sliding window (the composed path, nn/attention.cpp:76, when
//     window < L) and with the weights asked for: L in {17, 129}, window in {1, 15, L-1}, key mask.
//   hedgehog features, CPU (core/cpu/cpu_nn.inc:184): OpenMP `if (n·f > kParallelGrain)` (32768):
//     rows n = 4096 at f = 8 (n·f = 32768) and 4097; the f32 row (Eigen's vectorized exp, 4/8/16
//     lanes) and the f64 row: f in crossing({4, 8, 16}, {1}). CUDA (cuda/cuda_feature_maps.cpp: a
//     softmax over (2N, F) rows; cuda_common.cuh:174 row_launch: tx doubles from 32 while 4·tx < F
//     up to kMaxRowThreads = 512, ty = 256 / tx rows per block): f in crossing({128, 256, 512,
//     1024, 2048}) in the full list, rows crossing ty.
// Backward: check_directional in f64 for every differentiable input (q, k, v; φq, φk, v; z), and
// for the fused softmax kernel the f32 gradients against a naive host backward (the check that runs
// on CUDA, whose kernel is f32 only). Random shapes on top (sweep_seed()).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/ops/attention.h"
#include "autograd/ops/fused.h"
#include "nn/attention.h"
#include "tests/sweep/sweep.h"

namespace hh::test::sweep {
namespace {


constexpr double kEps = 1e-6;

bool has(const Host& h) { return !h.v.empty() || !h.shape.empty(); }

// ---- softmax attention ----

// Naive softmax attention on host values: q (B,H,Lq,D), k (B,H,Lk,D), v (B,H,Lk,Dv)[, mask (B,Lk)].
// With probs, the (B,H,Lq,Lk) weights as well.
Host softmax_ref(const std::vector<Host>& in, bool causal, double scale, std::vector<double>* probs = nullptr,
                 int64_t window = 0) {
  const Host &q = in[0], &k = in[1], &v = in[2];
  const bool masked = in.size() > 3 && has(in[3]);
  const int64_t B = q.shape[0], H = q.shape[1], Lq = q.shape[2], D = q.shape[3], Lk = k.shape[2], Dv = v.shape[3];
  const double s = scale == -1 ? 1.0 / std::sqrt(static_cast<double>(D)) : scale;
  Host out{{B, H, Lq, Dv}, std::vector<double>(static_cast<size_t>(B * H * Lq * Dv), 0.0)};
  if (probs) probs->assign(static_cast<size_t>(B * H * Lq * Lk), 0.0);
  std::vector<double> sc(static_cast<size_t>(Lk));
  std::vector<char> see(static_cast<size_t>(Lk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < Lk; ++j) {
          const bool vis = (!causal || j <= i) && (window == 0 || j > i - window) &&
                           (!masked || in[3].v[static_cast<size_t>(b * Lk + j)] != 0.0);
          see[static_cast<size_t>(j)] = vis;
          if (!vis) continue;
          double d = 0;
          for (int64_t c = 0; c < D; ++c) d += q.v[at4(q.shape, b, h, i, c)] * k.v[at4(k.shape, b, h, j, c)];
          sc[static_cast<size_t>(j)] = s * d;
          mx = std::max(mx, s * d);
        }
        if (mx == -std::numeric_limits<double>::infinity()) continue;  // no visible key: 0
        double sum = 0;
        for (int64_t j = 0; j < Lk; ++j)
          if (see[static_cast<size_t>(j)]) sum += (sc[static_cast<size_t>(j)] = std::exp(sc[static_cast<size_t>(j)] - mx));
        for (int64_t j = 0; j < Lk; ++j) {
          if (!see[static_cast<size_t>(j)]) continue;
          const double p = sc[static_cast<size_t>(j)] / sum;
          if (probs) (*probs)[static_cast<size_t>(((b * H + h) * Lq + i) * Lk + j)] = p;
          for (int64_t c = 0; c < Dv; ++c) out.v[at4(out.shape, b, h, i, c)] += p * v.v[at4(v.shape, b, h, j, c)];
        }
      }
  return out;
}

// The naive backward of softmax attention for loss = Σ w ∘ y: {gq, gk, gv}.
std::vector<Host> softmax_grad_ref(const std::vector<Host>& in, const Host& w, bool causal, double scale) {
  const Host &q = in[0], &k = in[1], &v = in[2];
  const int64_t B = q.shape[0], H = q.shape[1], Lq = q.shape[2], D = q.shape[3], Lk = k.shape[2], Dv = v.shape[3];
  const double s = scale == -1 ? 1.0 / std::sqrt(static_cast<double>(D)) : scale;
  std::vector<double> P;
  softmax_ref(in, causal, scale, &P);
  Host gq{q.shape, std::vector<double>(q.v.size(), 0.0)}, gk{k.shape, std::vector<double>(k.v.size(), 0.0)},
      gv{v.shape, std::vector<double>(v.v.size(), 0.0)};
  std::vector<double> dP(static_cast<size_t>(Lk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        const double* p = P.data() + ((b * H + h) * Lq + i) * Lk;
        double row = 0;
        for (int64_t j = 0; j < Lk; ++j) {
          double d = 0;
          for (int64_t c = 0; c < Dv; ++c) {
            const double go = w.v[at4(w.shape, b, h, i, c)];
            d += go * v.v[at4(v.shape, b, h, j, c)];
            gv.v[at4(gv.shape, b, h, j, c)] += p[j] * go;
          }
          dP[static_cast<size_t>(j)] = d;
          row += p[j] * d;
        }
        for (int64_t j = 0; j < Lk; ++j) {
          const double ds = s * p[j] * (dP[static_cast<size_t>(j)] - row);
          if (ds == 0) continue;
          for (int64_t c = 0; c < D; ++c) {
            gq.v[at4(gq.shape, b, h, i, c)] += ds * k.v[at4(k.shape, b, h, j, c)];
            gk.v[at4(gk.shape, b, h, j, c)] += ds * q.v[at4(q.shape, b, h, i, c)];
          }
        }
      }
  return {gq, gk, gv};
}

struct FlashCase {
  int64_t B = 1, H = 2, Lq = 1, Lk = 1, D = 8, Dv = 8;
  bool causal = false, masked = false;
  double scale = -1;
  bool backward = true;
  std::string label() const {
    std::ostringstream o;
    o << (causal ? "causal" : "full") << " B=" << B << " H=" << H << " Lq=" << Lq << " Lk=" << Lk << " D=" << D
      << " Dv=" << Dv << (masked ? " masked" : "") << (scale == -1 ? "" : " scale=" + std::to_string(scale));
    return o.str();
  }
};

// q, k, v as head views of (B,L,H,C) projections: the strides the kernel reads in place.
Tensor head_view(const Tensor& x) { return transpose(contiguous(transpose(x, 1, 2)), 1, 2); }

OpFn flash_fn(const FlashCase& c, bool views) {
  return [c, views](const std::vector<Tensor>& x) {
    auto lay = [&](const Tensor& t) { return views ? head_view(t) : t; };
    return scaled_dot_product_attention(lay(x[0]), lay(x[1]), lay(x[2]), c.causal, c.scale, x[3]);
  };
}

std::vector<Tensor> flash_inputs(const FlashCase& c, Generator& g, DType t) {
  return {input({c.B, c.H, c.Lq, c.D}, g, t, -2, 2), input({c.B, c.H, c.Lk, c.D}, g, t, -2, 2),
          input({c.B, c.H, c.Lk, c.Dv}, g, t), c.masked ? key_mask_of(c.B, c.Lk, 64) : Tensor()};
}

// The CUDA kernel is f32 only, without a key mask.
bool flash_runs(const FlashCase& c, DType t) { return !cuda_requested() || (t == DType::f32 && !c.masked); }

void check_flash(const FlashCase& c, uint64_t seed) {
  INFO(c.label());
  for (DType t : float_dtypes()) {
    if (!flash_runs(c, t)) continue;
    Generator g(seed);
    const std::vector<Tensor> x = flash_inputs(c, g, t);
    const RefFn ref = [c](const std::vector<Host>& h) { return softmax_ref(h, c.causal, c.scale); };
    check_forward(flash_fn(c, false), ref, x, c.label(), rtol_of(t), atol_of(t));
    {
      NoGradGuard ng;
      compare(flash_fn(c, true)(x), ref({to_host(x[0]), to_host(x[1]), to_host(x[2]), x[3].defined() ? to_host(x[3]) : Host{}}),
              rtol_of(t), atol_of(t), c.label() + " (head views)");
    }
    if (!c.backward) continue;
    // f32 (and f64) gradients against the naive backward: the check CUDA runs.
    std::vector<Tensor> leaves = {clone(x[0]).detach().requires_grad_(true), clone(x[1]).detach().requires_grad_(true),
                                  clone(x[2]).detach().requires_grad_(true), x[3]};
    Tensor y = flash_fn(c, true)(leaves);
    Tensor w = input(y.shape(), g, t);
    sum(mul(y, w)).backward();
    const std::vector<Host> want =
        softmax_grad_ref({to_host(x[0]), to_host(x[1]), to_host(x[2]), x[3].defined() ? to_host(x[3]) : Host{}},
                         to_host(w), c.causal, c.scale);
    const char* names[] = {"gq", "gk", "gv"};
    for (size_t i = 0; i < 3; ++i)
      compare(leaves[i].grad(), want[i], rtol_of(t), atol_of(t), c.label() + " " + names[i] + " vs naive backward");
    // The naive backward above is exact in f64; the directional check adds the finite difference
    // of the op itself (contiguous inputs; the head views' gradients are the ones compared above).
    if (t == DType::f64) check_directional(flash_fn(c, false), x, {0, 1, 2}, c.label());
  }
}

TEST_SUITE("sweep") {
TEST_CASE("sweep: attention: flash softmax attention across kTile, the grain, the backward schemes") {
  std::vector<FlashCase> cases;
  // L across kTile = 64 and 2·kTile, causal and not.
  for (int64_t L : pick(std::vector<int64_t>{1, 63, 65, 129}, crossing({64, 128}, {1, 2, 17})))
    for (bool causal : {false, true}) {
      FlashCase c;
      c.Lq = c.Lk = L;
      c.causal = causal;
      cases.push_back(c);
    }
  // Lq != Lk (non-causal), no keys at all, no output columns, no batch.
  for (auto qk : pick(std::vector<std::pair<int64_t, int64_t>>{{3, 70}, {5, 0}},
                      std::vector<std::pair<int64_t, int64_t>>{{3, 70}, {70, 3}, {65, 129}, {129, 65}, {5, 0}})) {
    FlashCase c;
    c.Lq = qk.first;
    c.Lk = qk.second;
    c.backward = qk.second > 0;
    cases.push_back(c);
  }
  {
    FlashCase c;
    c.Lq = c.Lk = 9;
    c.Dv = 0;
    c.backward = false;
    cases.push_back(c);
    c.Dv = 8;
    c.B = 0;
    cases.push_back(c);
  }
  // The key mask: holes, a padded tail and front, a padded tile, a batch entry with every key padded.
  for (int64_t L : pick(std::vector<int64_t>{65}, std::vector<int64_t>{5, 63, 64, 65, 129}))
    for (bool causal : {false, true}) {
      FlashCase c;
      c.B = 4;
      c.H = 1;
      c.Lq = c.Lk = L;
      c.causal = causal;
      c.masked = true;
      cases.push_back(c);
    }
  // The parallel grain: work = Lq·Lk·(D+Dv) around 32768.
  for (int64_t Lk : pick(std::vector<int64_t>{33}, std::vector<int64_t>{31, 32, 33})) {
    FlashCase c;
    c.B = c.H = 1;
    c.Lq = 32;
    c.Lk = Lk;
    c.D = c.Dv = 16;
    cases.push_back(c);
  }
  // G = B·H across 2·threads (the one-pass and two-pass backward), two tiles per group.
  for (auto bh : pick(std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 3}},
                      std::vector<std::pair<int64_t, int64_t>>{
                          {1, 1}, {1, 2}, {1, 3}, {2, 2}, {1, 5}, {1, 7}, {2, 4}, {3, 3}, {4, 4}}))
    for (bool causal : {false, true}) {
      FlashCase c;
      c.B = bh.first;
      c.H = bh.second;
      c.Lq = c.Lk = 70;
      c.D = c.Dv = 4;
      c.causal = causal;
      cases.push_back(c);
    }
  // Head dims: Eigen packets (CPU), the CUDA accumulator widths (64, 128); an explicit scale.
  std::vector<std::pair<int64_t, int64_t>> dims;
  for (int64_t D : pick(std::vector<int64_t>{1, 17}, crossing({4, 8, 16, 64}, {1, 127, 128}))) dims.push_back({D, D});
  // D != Dv: on both sides of 64 (the CUDA kernels pick NJ by D and Dv apart); D = 1 with Dv > 1 (a
  // non-contiguous (B,H,L,1) q once laid the output out with Dv outermost, which the kernel rejected).
  for (auto dd : pick(std::vector<std::pair<int64_t, int64_t>>{{1, 9}},
                        std::vector<std::pair<int64_t, int64_t>>{{1, 9}, {1, 65}, {16, 65}, {65, 16}, {128, 3}}))
    dims.push_back(dd);
  for (auto dd : dims) {
    FlashCase c;
    c.H = 1;
    c.Lq = c.Lk = 33;
    c.D = dd.first;
    c.Dv = dd.second;
    c.causal = c.D % 2 == 1;
    cases.push_back(c);
  }
  {
    FlashCase c;
    c.Lq = c.Lk = 20;
    c.scale = 0.7;
    c.causal = true;
    cases.push_back(c);
  }
  for_each_config([&](const Config&) {
    uint64_t seed = 1000;
    for (const FlashCase& c : cases) check_flash(c, ++seed);
  });
}

// ---- nn's softmax_attention: the composed path (sliding window, weights) ----

TEST_CASE("sweep: attention: softmax_attention composed path (window, weights, mask)") {
  struct Case {
    int64_t B, L, window;
    bool masked;
  };
  std::vector<Case> cases;
  for (int64_t L : pick(std::vector<int64_t>{17}, std::vector<int64_t>{17, 129}))
    for (int64_t W : std::vector<int64_t>{1, 15, L - 1})
      for (bool masked : {false, true}) cases.push_back({masked ? 4 : 1, L, W, masked});
  for_each_config([&](const Config&) {
    uint64_t seed = 2000;
    for (const Case& c : cases) {
      const std::string label = "B=" + std::to_string(c.B) + " L=" + std::to_string(c.L) +
                                " window=" + std::to_string(c.window) + (c.masked ? " masked" : "");
      for (DType t : float_dtypes()) {
        Generator g(++seed);
        std::vector<Tensor> x = {input({c.B, 2, c.L, 8}, g, t, -2, 2), input({c.B, 2, c.L, 8}, g, t, -2, 2),
                                 input({c.B, 2, c.L, 5}, g, t), c.masked ? key_mask_of(c.B, c.L, 64) : Tensor()};
        const OpFn fn = [c](const std::vector<Tensor>& v) {
          return nn::softmax_attention(v[0], v[1], v[2], true, v[3], nullptr, c.window);
        };
        const RefFn ref = [c](const std::vector<Host>& h) { return softmax_ref(h, true, -1, nullptr, c.window); };
        check_forward(fn, ref, x, label, rtol_of(t), atol_of(t));
        // The weights asked for: the composed path at any window.
        const OpFn weights = [](const std::vector<Tensor>& v) {
          Tensor w;
          nn::softmax_attention(v[0], v[1], v[2], true, v[3], &w);
          return w;
        };
        const RefFn wref = [](const std::vector<Host>& h) {
          std::vector<double> p;
          softmax_ref(h, true, -1, &p);
          return Host{{h[0].shape[0], h[0].shape[1], h[0].shape[2], h[1].shape[2]}, p};
        };
        check_forward(weights, wref, x, label + " weights", rtol_of(t), atol_of(t));
        if (t == DType::f64 && c.L <= 17) check_directional(fn, x, {0, 1, 2}, label);
      }
    }
  });
}

// ---- linear attention ----

// Naive linear attention: φq, φk (B,H,L,F), v (B,H,L,D)[, mask (B,L)].
Host linear_ref(const std::vector<Host>& in, bool causal, double eps) {
  const Host &pq = in[0], &pk = in[1], &v = in[2];
  const bool masked = in.size() > 3 && has(in[3]);
  const int64_t B = pq.shape[0], H = pq.shape[1], L = pq.shape[2], F = pq.shape[3], D = v.shape[3];
  Host out{v.shape, std::vector<double>(v.v.size(), 0.0)};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        double den = 0;
        std::vector<double> num(static_cast<size_t>(D), 0.0);
        for (int64_t j = 0; j < (causal ? i + 1 : L); ++j) {
          if (masked && in[3].v[static_cast<size_t>(b * L + j)] == 0.0) continue;
          double a = 0;
          for (int64_t f = 0; f < F; ++f) a += pq.v[at4(pq.shape, b, h, i, f)] * pk.v[at4(pk.shape, b, h, j, f)];
          den += a;
          for (int64_t c = 0; c < D; ++c) num[static_cast<size_t>(c)] += a * v.v[at4(v.shape, b, h, j, c)];
        }
        for (int64_t c = 0; c < D; ++c) out.v[at4(out.shape, b, h, i, c)] = num[static_cast<size_t>(c)] / (den + eps);
      }
  return out;
}

struct LinearCase {
  int64_t B = 1, H = 1, L = 1, F = 4, D = 4, chunk = 64;
  bool backward = true;
  std::string label() const {
    std::ostringstream o;
    o << "B=" << B << " H=" << H << " L=" << L << " F=" << F << " D=" << D << " chunk=" << chunk;
    return o.str();
  }
};

// Positive features (a normalizer away from 0), as a feature map gives.
std::vector<Tensor> linear_inputs(int64_t B, int64_t H, int64_t L, int64_t F, int64_t D, Generator& g, DType t) {
  return {input({B, H, L, F}, g, t, 0.05, 1.0), input({B, H, L, F}, g, t, 0.05, 1.0), input({B, H, L, D}, g, t)};
}

TEST_CASE("sweep: attention: chunked causal linear attention across the chunk, G, F and D") {
  std::vector<LinearCase> cases;
  // L across the chunk and twice the chunk.
  for (int64_t chunk : pick(std::vector<int64_t>{7, 64}, std::vector<int64_t>{1, 7, 16, 64}))
    for (int64_t L : pick(crossing({chunk, 2 * chunk}, {1}), crossing({chunk, 2 * chunk}, {1, 2}))) {
      LinearCase c;
      c.H = 2;
      c.L = L;
      c.chunk = chunk;
      cases.push_back(c);
    }
  // G = B·H across the OpenMP split.
  for (auto bh : pick(std::vector<std::pair<int64_t, int64_t>>{{1, 3}},
                      std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 2}, {1, 3}, {1, 5}, {2, 4}})) {
    LinearCase c;
    c.B = bh.first;
    c.H = bh.second;
    c.L = 20;
    c.chunk = 8;
    cases.push_back(c);
  }
  // F and D across the packets (CPU) and the 64-wide CUDA tiles.
  for (int64_t F : pick(std::vector<int64_t>{1, 17}, crossing({4, 8, 16, 64}, {1})))
    for (int64_t D : pick(std::vector<int64_t>{F == 1 ? 9 : 3}, std::vector<int64_t>{F <= 16 ? 65 : 3, F})) {
      LinearCase c;
      c.L = 24;
      c.chunk = 16;
      c.F = F;
      c.D = D;
      cases.push_back(c);
    }
  if (full()) {
    // CUDA: ChunkCap 64 (f32) / 32 (f64), segments over a long L, the state out of shared memory.
    for (int64_t chunk : crossing({32, 64}, {100})) {
      LinearCase c;
      c.L = 2 * chunk + 1;
      c.chunk = chunk;
      cases.push_back(c);
    }
    for (int64_t chunk : {7, 32}) {
      LinearCase c;
      c.H = 2;
      c.L = 200;
      c.chunk = chunk;
      cases.push_back(c);
    }
    LinearCase big;
    big.L = 70;
    big.F = 512;
    big.D = 127;
    cases.push_back(big);
  }
  for_each_config([&](const Config&) {
    uint64_t seed = 3000;
    for (const LinearCase& c : cases) {
      INFO(c.label());
      for (DType t : float_dtypes()) {
        Generator g(++seed);
        const std::vector<Tensor> x = linear_inputs(c.B, c.H, c.L, c.F, c.D, g, t);
        const OpFn fn = [c](const std::vector<Tensor>& v) { return linear_attention_causal(v[0], v[1], v[2], c.chunk, kEps); };
        const RefFn ref = [](const std::vector<Host>& h) { return linear_ref(h, true, kEps); };
        check_forward(fn, ref, x, c.label(), rtol_of(t), atol_of(t));
        if (t == DType::f64 && c.backward) check_directional(fn, x, {0, 1, 2}, c.label());
      }
    }
  });
}

TEST_CASE("sweep: attention: linear attention forms (quadratic, noncausal, recurrent, step)") {
  std::vector<int64_t> lengths = pick(std::vector<int64_t>{1, 65, 129}, crossing({64, 128}, {1, 2}));
  for_each_config([&](const Config&) {
    uint64_t seed = 4000;
    for (int64_t L : lengths)
      for (bool masked : {false, true}) {
        const int64_t B = masked ? 4 : 1;
        const std::string label = "L=" + std::to_string(L) + (masked ? " masked" : "");
        for (DType t : float_dtypes()) {
          Generator g(++seed);
          std::vector<Tensor> x = linear_inputs(B, 2, L, 5, 3, g, t);
          x.push_back(masked ? key_mask_of(B, L, 64) : Tensor());
          for (bool causal : {false, true}) {
            const RefFn ref = [causal](const std::vector<Host>& h) { return linear_ref(h, causal, kEps); };
            const OpFn quad = [causal](const std::vector<Tensor>& v) {
              return nn::linear_attention_quadratic(v[0], v[1], v[2], causal, kEps, v[3]);
            };
            const std::string lq = label + (causal ? " causal quadratic" : " quadratic");
            check_forward(quad, ref, x, lq, rtol_of(t), atol_of(t));
            if (t == DType::f64 && L <= 65) check_directional(quad, x, {0, 1, 2}, lq);
          }
          const OpFn nc = [](const std::vector<Tensor>& v) { return nn::linear_attention_noncausal(v[0], v[1], v[2], kEps, v[3]); };
          const RefFn ncref = [](const std::vector<Host>& h) { return linear_ref(h, false, kEps); };
          check_forward(nc, ncref, x, label + " noncausal", rtol_of(t), atol_of(t));
          if (t == DType::f64) check_directional(nc, x, {0, 1, 2}, label + " noncausal");
          if (!masked && L <= 65) {  // the recurrent form and its step have no key mask; L steps each
            const std::vector<Tensor> x3(x.begin(), x.begin() + 3);
            const OpFn rec = [](const std::vector<Tensor>& v) { return nn::linear_attention_recurrent(v[0], v[1], v[2], kEps); };
            const RefFn cref = [](const std::vector<Host>& h) { return linear_ref(h, true, kEps); };
            check_forward(rec, cref, x3, label + " recurrent", rtol_of(t), atol_of(t));
            if (t == DType::f64) check_directional(rec, x3, {0, 1, 2}, label + " recurrent");
          }
        }
      }
  });
}

// ---- Hedgehog's feature map ----

Host hedgehog_ref(const std::vector<Host>& in) {
  const Host& z = in[0];
  const int64_t f = z.shape.back(), n = f == 0 ? 0 : z.numel() / f;
  Shape s = z.shape;
  s.back() = 2 * f;
  Host y{s, std::vector<double>(static_cast<size_t>(n * 2 * f), 0.0)};
  for (int64_t i = 0; i < n; ++i)
    for (int sign : {1, -1}) {
      double mx = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t j = 0; j < f; ++j) mx = std::max(mx, sign * z.v[static_cast<size_t>(i * f + j)]);
      for (int64_t j = 0; j < f; ++j) sum += std::exp(sign * z.v[static_cast<size_t>(i * f + j)] - mx);
      for (int64_t j = 0; j < f; ++j)
        y.v[static_cast<size_t>(i * 2 * f + (sign == 1 ? 0 : f) + j)] =
            std::exp(sign * z.v[static_cast<size_t>(i * f + j)] - mx) / sum;
    }
  return y;
}

TEST_CASE("sweep: attention: hedgehog feature map across packets and the grain") {
  std::vector<Shape> shapes;
  for (int64_t f : pick(crossing({8}, {1}), crossing({4, 8, 16}, {1})))
    for (int64_t n : pick(std::vector<int64_t>{3}, std::vector<int64_t>{1, 3, 8})) shapes.push_back({n, f});
  shapes.push_back({2, 3, 0});  // no features
  shapes.push_back({0, 4});     // no rows
  shapes.push_back({2, 2, 3, 7});
  for (int64_t n : pick(std::vector<int64_t>{4097}, std::vector<int64_t>{4095, 4096, 4097})) shapes.push_back({n, 8});
  if (full())
    for (int64_t f : crossing({128, 256, 512, 1024, 2048})) shapes.push_back({f < 1024 ? 9 : 3, f});
  for_each_config([&](const Config&) {
    uint64_t seed = 5000;
    for (const Shape& s : shapes) {
      const std::string label = "hedgehog_features " + shape_str(s);
      for (DType t : float_dtypes()) {
        Generator g(++seed);
        const std::vector<Tensor> x = {input(s, g, t, -3, 3)};
        const OpFn fn = [](const std::vector<Tensor>& v) { return hedgehog_features(v[0]); };
        check_forward(fn, hedgehog_ref, x, label, rtol_of(t), atol_of(t));
        int64_t n = 1;
        for (int64_t d : s) n *= d;
        if (t == DType::f64 && n > 0) check_directional(fn, x, {0}, label);
      }
    }
  });
}

// ---- random shapes (property test) ----

TEST_CASE("sweep: attention: random shapes (seeded)") {
  std::mt19937_64 rng(sweep_seed());
  INFO("HH_SWEEP_SEED=" << sweep_seed());
  auto draw = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int n = full() ? 10 : 3;
  std::vector<FlashCase> flash;
  std::vector<LinearCase> linear;
  for (int i = 0; i < n; ++i) {
    FlashCase c;
    c.B = draw(1, 3);
    c.H = draw(1, 3);
    c.causal = draw(0, 1) == 1;
    c.Lq = draw(1, 150);
    c.Lk = c.causal ? c.Lq : draw(1, 150);
    c.D = draw(1, 40);
    c.Dv = draw(1, 40);
    c.masked = draw(0, 2) == 0;
    flash.push_back(c);
    LinearCase l;
    l.B = draw(1, 3);
    l.H = draw(1, 3);
    l.L = draw(1, 150);
    l.F = draw(1, 24);
    l.D = draw(1, 24);
    l.chunk = draw(1, 80);
    linear.push_back(l);
  }
  for_each_config([&](const Config&) {
    uint64_t seed = sweep_seed();
    for (const FlashCase& c : flash) check_flash(c, ++seed);
    for (const LinearCase& c : linear) {
      INFO(c.label());
      for (DType t : float_dtypes()) {
        Generator g(++seed);
        const std::vector<Tensor> x = linear_inputs(c.B, c.H, c.L, c.F, c.D, g, t);
        const OpFn fn = [c](const std::vector<Tensor>& v) { return linear_attention_causal(v[0], v[1], v[2], c.chunk, kEps); };
        check_forward(fn, [](const std::vector<Host>& h) { return linear_ref(h, true, kEps); }, x, c.label(),
                      rtol_of(t), atol_of(t));
        if (t == DType::f64) check_directional(fn, x, {0, 1, 2}, c.label());
      }
    }
  });
}
}  // TEST_SUITE("sweep")

}  // namespace
}  // namespace hh::test::sweep
