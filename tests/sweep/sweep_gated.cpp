// Threshold sweep (issue 41): gated linear attention (autograd/ops/gated_attention.h), its three
// forms against a naive host loop of the recurrence written here:
//   S_t = diag(a_t) S_{t-1} + k_t v_tᵀ,  z_t = a_t ⊙ z_{t-1} + k_t,  y_t = q_tᵀ S_t  (or / (q_tᵀ z_t + eps))
// with a padded token (key_mask) adding nothing and not decaying (a_t = 1, k_t = 0).
//
// The constants that choose a path, and the sizes that cross them:
//   chunked form, CPU kernel core/cpu/cpu_gated.inc (baseline and core/cpu/avx2/cpu_gated.cpp):
//     - block length n (cpu_gated.inc:145 block_of): n = chunk for a per-head gate (A = 1), n =
//       gcd(chunk, 16) for a per-channel gate (A = F). chunk in {1, 7, 16, 24, 64 (the default)},
//       so n in {1, 7, 16, 24, 64} (per head) and {1, 8, 16} (per channel: chunks 7 and 64 would
//       repeat 1 and 16); L crosses n and 2n (n-1, n, n+1, 2n-1, 2n, 2n+1), with L = 0, 1, 2.
//     - the first block reads no state (cpu_gated.inc:164 t0 > 0, :191, :231) and the last block
//       carries none (:165 / :202 / :219 t0 + m < L; :208 the last block's start): crossed by the
//       same L (one block, a full last block, a one-token last block).
//     - OpenMP over G = B·H groups, `if (G > 1)` (:152, :176, :251): G in {1, 2, 3, 4, 5, 8, 9}
//       under 1, 2 and 4 threads (fewer groups than threads, equal, more, not a multiple).
//     - Eigen's packet widths (the vectorized exp in GatedBlock::load, the products with the
//       state): 4/2 (SSE), 8/4 (AVX2), 16/8 (AVX-512) lanes for f32/f64, over F and over
//       E = Dv (+1 with normalize: autograd/ops/gated_attention.cpp:129 appends a column of ones):
//       F and Dv in crossing({4, 8, 16}, {1}), each with normalize off and on.
//     - the op skips the kernel when G·L = 0 (gated_attention.cpp:137): B = 0 and L = 0.
//   quadratic form (composed of ops): its reductions (core/cpu/cpu_reduce.cpp:21-23 kColBlock
//     = 256, kChunkElems = 32768, kFewTasks = 64, and :190-194: a reduced middle dim R is split
//     past max(16, 32768 / min(I, 256)) rows only when O·ceil(I / 256) < 64 tasks). Its backward
//     reduces (B,H,L,L,F) over the query axis: O = B·H, R = L, I = L·F, so the split is at
//     R = 128 and the task count B·H·ceil(L·F / 256) crosses 64 with B·H = 8: F = 13, 15, 16
//     give 56, 64, 72 tasks at L = 129, F = 16 at L = 128 is R just at 128; B·H = 1, F = 3 (the split
//     path) for L in {1, 2, 16, 127, 128, 129, 130}. The reduction defect fixed in 618237c
//     (an unsplit task stopped at 128 rows) made the gradients of pk and log_a wrong at
//     L >= 129 once there were >= 64 tasks: restoring it, the fast case (B·H = 8, F = 16,
//     L = 129) and the full one with F = 15 fail, the others pass, as they should.
//   recurrent form: the decoding step, a kernel without gradients (cpu_gated.inc:246 gated_step,
//     OpenMP if G > 1; the normalizer is a second state with E = 1, gated_attention.cpp:178) and
//     composed ops with them (gated_attention.cpp:182): its forward checks (NoGradGuard) run the
//     kernel, its directional checks the composed step (analytic) against the kernel (the two
//     forwards). G, F and Dv as above.
//   CUDA (cuda/cuda_gated.cu), more sizes here (they run on the CPU too):
//     - one block per group with E threads rounded up to a warp (:172 block_threads, E <= 1024;
//       F <= 2048 at :178): E = Dv (+1) in {31, 32, 33, 63, 64, 65} (Dv 31 and 63 with normalize).
//     - loops strided by the block over F (:89 the sums' reset, :101 gq, :125 gk, :142 glog_a per
//       channel): F in {31, 32, 33, 40} with E <= 32 (one warp).
//     - the per-head glog_a loop strided by the block over L (:130) and its serial reverse cumsum
//       (:137): L in {31, 32, 33, 65} with E <= 32.
//     - the step kernel's grid (:241 blocks_for(G·E), kBlock = 256 in cuda/cuda_common.cuh:21):
//       G·E in {255, 256, 257, 512, 513}.
// Backward: every differentiable input (pq, pk, v, log_a) by check_directional in f64, on
// contiguous and non-contiguous inputs; in f32 the gradients against the same op's f64 gradients
// (checked directionally) with the harness's f32 tolerance. Random shapes on top (sweep_seed()).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/ops/gated_attention.h"
#include "tests/sweep/sweep.h"

namespace hh::test::sweep {
namespace {

constexpr double kEps = 1e-6;

enum class Form { chunked, quadratic, recurrent };

const char* form_name(Form f) {
  switch (f) {
    case Form::chunked: return "chunked";
    case Form::quadratic: return "quadratic";
    case Form::recurrent: return "recurrent";
  }
  return "?";
}

struct GatedCase {
  Form form = Form::chunked;
  int64_t B = 1, H = 1, L = 1, F = 1, Dv = 1;
  bool per_channel = true, normalize = false, masked = false;
  int64_t chunk = 64;
  bool backward = true;  // the directional checks (not for empty dims: no gradient flows)
  // The large quadratic cases (2M-element intermediates) aim at the reductions' task split
  // (core/cpu/cpu_reduce.cpp, one copy for every ISA): they run on the scalar path only, under
  // each thread count, and their backward on contiguous inputs only (the op's intermediates are
  // what the reductions see, whatever the inputs' layout).
  bool reduction_only = false;

  std::string label() const {
    std::ostringstream s;
    s << form_name(form) << " B=" << B << " H=" << H << " L=" << L << " F=" << F << " Dv=" << Dv
      << (per_channel ? " per-channel" : " per-head") << (normalize ? " normalized" : "") << (masked ? " masked" : "");
    if (form == Form::chunked) s << " chunk=" << chunk;
    return s.str();
  }
};

// The naive recurrence on host values: in = pq, pk, v, log_a[, key mask (B,L)].
Host gated_ref(const std::vector<Host>& in, bool normalize) {
  const Host &pq = in[0], &pk = in[1], &v = in[2], &la = in[3];
  const bool masked = in.size() > 4 && !in[4].v.empty();
  const int64_t B = pq.shape[0], H = pq.shape[1], L = pq.shape[2], F = pq.shape[3], Dv = v.shape[3];
  const bool per_channel = la.shape[3] == F;
  Host out{v.shape, std::vector<double>(v.v.size(), 0.0)};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> S(static_cast<size_t>(F * Dv), 0.0), z(static_cast<size_t>(F), 0.0);
      for (int64_t t = 0; t < L; ++t) {
        // Row t of each input (row-major host values).
        const int64_t row = (b * H + h) * L + t;
        const double *qt = pq.v.data() + row * F, *kt = pk.v.data() + row * F, *vt = v.v.data() + row * Dv;
        const double* at = la.v.data() + row * (per_channel ? F : 1);
        const bool real = !masked || in[4].v[static_cast<size_t>(b * L + t)] != 0.0;
        for (int64_t f = 0; f < F; ++f) {
          const double a = real ? std::exp(at[per_channel ? f : 0]) : 1.0;
          const double k = real ? kt[f] : 0.0;
          z[static_cast<size_t>(f)] = a * z[static_cast<size_t>(f)] + k;
          for (int64_t c = 0; c < Dv; ++c) {
            double& x = S[static_cast<size_t>(f * Dv + c)];
            x = a * x + k * vt[c];
          }
        }
        double den = 0;
        for (int64_t f = 0; f < F; ++f) den += qt[f] * z[static_cast<size_t>(f)];
        for (int64_t c = 0; c < Dv; ++c) {
          double num = 0;
          for (int64_t f = 0; f < F; ++f) num += qt[f] * S[static_cast<size_t>(f * Dv + c)];
          out.v[static_cast<size_t>(row * Dv + c)] = normalize ? num / (den + kEps) : num;
        }
      }
    }
  return out;
}

// pq, pk (positive when normalizing, so the normalizer stays away from 0), v, log_a in
// [-0.5, -0.01] (decays whose cumulative sums stay representable in f32 over the quadratic form's
// lengths) and the padding mask when masked.
std::vector<Tensor> gated_inputs(const GatedCase& c, Generator& g, DType t) {
  const double lo = c.normalize ? 0.05 : -1.0;
  std::vector<Tensor> x = {input({c.B, c.H, c.L, c.F}, g, t, lo, 1.0), input({c.B, c.H, c.L, c.F}, g, t, lo, 1.0),
                           input({c.B, c.H, c.L, c.Dv}, g, t),
                           input({c.B, c.H, c.L, c.per_channel ? c.F : 1}, g, t, -0.5, -0.01)};
  x.push_back(c.masked ? padding_test_mask(c.B, c.L).to(test_device()) : Tensor());
  return x;
}

OpFn gated_fn(const GatedCase& c) {
  return [c](const std::vector<Tensor>& x) {
    switch (c.form) {
      case Form::chunked: return gated_attention_chunked(x[0], x[1], x[2], x[3], c.normalize, kEps, x[4], c.chunk);
      case Form::quadratic: return gated_attention_quadratic(x[0], x[1], x[2], x[3], c.normalize, kEps, x[4]);
      case Form::recurrent: return gated_attention_recurrent(x[0], x[1], x[2], x[3], c.normalize, kEps, x[4]);
    }
    return Tensor();
  };
}

// One case under the current config: the forward in f32 and f64 (contiguous and not) against the
// reference, then (unless c.backward is off) the directional checks in f64 and the f32 gradients.
void run_case(const GatedCase& c, uint64_t seed, bool both_layouts_backward) {
  const std::string label = c.label();
  INFO("case: " << label);
  const OpFn fn = gated_fn(c);
  const RefFn ref = [c](const std::vector<Host>& in) { return gated_ref(in, c.normalize); };
  for (DType t : float_dtypes()) {
    Generator g(seed);
    check_forward(fn, ref, gated_inputs(c, g, t), label + " " + dtype_name(t), rtol_of(t), atol_of(t));
  }
  if (!c.backward || c.B * c.H * c.L * c.Dv == 0) return;  // nothing flows back from an empty output
  Generator g(seed);
  const std::vector<Tensor> x = gated_inputs(c, g, DType::f64);
  // The composed recurrent form never decays its zero initial state, so a single token's log gate
  // gets no gradient at all (undefined, not zeros): it is left out there.
  const std::vector<int> which =
      c.form == Form::recurrent && c.L == 1 ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1, 2, 3};
  check_directional(fn, x, which, label);
  if (both_layouts_backward) check_directional(strided(fn), x, which, label + " (non-contiguous)");
  check_f32_grads(fn, x, which, label, rtol_of(DType::f32));
}

void run_cases(const std::vector<GatedCase>& cases) {
  for_each_config([&](const Config& cfg) {
    uint64_t seed = 4100;
    size_t i = 0;
    for (const GatedCase& c : cases) {
      ++seed;
      if (c.reduction_only && !cuda_requested() && cfg.isa != CpuIsa::scalar) continue;
      run_case(c, seed, !c.reduction_only && (full() || (i++ % 2 == 0)));
    }
  });
}

}  // namespace

TEST_SUITE("sweep") {
  TEST_CASE("sweep: gated: chunked, L across the block lengths (chunk, gcd(chunk, 16)) per head and per channel") {
    std::vector<GatedCase> cases;
    const std::vector<int64_t> chunks = pick(std::vector<int64_t>{16, 24}, std::vector<int64_t>{1, 7, 16, 24, 64});
    for (int64_t chunk : chunks)
      for (bool per_channel : {false, true}) {
        const int64_t n = per_channel ? std::gcd(chunk, int64_t{16}) : chunk;
        // Per channel only n matters: chunks 7 and 64 repeat the blocks of chunks 1 and 16.
        if (per_channel && (chunk == 7 || chunk == 64)) continue;
        std::vector<int64_t> Ls = full() ? crossing({n, 2 * n}, {1, 2}) : std::vector<int64_t>{n, n + 1, 2 * n + 1};
        for (int64_t L : Ls) {
          GatedCase c;
          c.B = 1, c.H = 2, c.L = L, c.F = 5, c.Dv = 3, c.per_channel = per_channel, c.chunk = chunk;
          cases.push_back(c);
        }
      }
    run_cases(cases);
  }

  TEST_CASE("sweep: gated: chunked, F and Dv around the vector widths, normalize off and on") {
    std::vector<GatedCase> cases;
    const std::vector<int64_t> widths = pick(std::vector<int64_t>{1, 8, 17}, crossing({4, 8, 16}, {1}));
    for (bool normalize : {false, true})
      for (bool per_channel : {false, true})
        for (int64_t w : widths)
          for (bool vary_f : {true, false}) {
            GatedCase c;
            c.B = 1, c.H = 1, c.L = 19, c.F = vary_f ? w : 5, c.Dv = vary_f ? 3 : w;
            c.per_channel = per_channel, c.normalize = normalize, c.chunk = 16;
            cases.push_back(c);
          }
    run_cases(cases);
  }

  TEST_CASE("sweep: gated: chunked, key mask with padding, and B*H across the parallel split") {
    std::vector<GatedCase> cases;
    const std::vector<Shape> groups = pick(std::vector<Shape>{{2, 1}, {3, 3}},
                                           std::vector<Shape>{{1, 1}, {2, 1}, {1, 3}, {2, 2}, {5, 1}, {2, 4}, {3, 3}});
    for (const Shape& bh : groups)
      for (bool masked : {false, true})
        for (bool per_channel : {false, true}) {
          GatedCase c;
          c.B = bh[0], c.H = bh[1], c.L = 21, c.F = 4, c.Dv = 3;
          c.per_channel = per_channel, c.masked = masked, c.normalize = masked, c.chunk = 8;
          cases.push_back(c);
        }
    run_cases(cases);
  }

  TEST_CASE("sweep: gated: empty and size-1 dims") {
    std::vector<GatedCase> cases;
    for (Form form : {Form::chunked, Form::quadratic, Form::recurrent})
      for (const Shape& s : std::vector<Shape>{{0, 2, 5, 3, 2}, {1, 1, 0, 3, 2}, {1, 1, 1, 1, 1}, {1, 1, 4, 1, 1},
                                               {1, 1, 4, 3, 0}})
        for (bool normalize : {false, true}) {
          GatedCase c;
          c.form = form, c.B = s[0], c.H = s[1], c.L = s[2], c.F = s[3], c.Dv = s[4];
          c.normalize = normalize, c.chunk = 2;
          cases.push_back(c);
        }
    run_cases(cases);
  }

  TEST_CASE("sweep: gated: quadratic form, L across 128 (the reduction split) with its gradients") {
    // The backward reduces the (B,H,L,L,F) products over the query axis: O = B·H outer rows, R = L,
    // I = L·F. With I >= 256 a task's rows are split past 128 only when O·ceil(I / 256) < 64 tasks;
    // otherwise one task takes every row (the 618237c defect: it stopped at 128). B·H = 8, F = 16:
    // 72 tasks at L = 129 (unsplit, R > 128), 64 at L = 128 (unsplit, R = 128); F = 15: 64 tasks
    // (unsplit), F = 13: 56 (split). B·H = 1, F = 3: 1 or 2 tasks, split past 128 rows; L in
    // {1, 2, 16, 127..130}.
    // With the defect restored, the directional checks of pk and log_a fail at L = 129 for
    // F = 16 and 15 (and pass at L = 128, and with F = 13: 56 tasks, split).
    std::vector<GatedCase> cases;
    auto add = [&](int64_t B, int64_t H, int64_t L, int64_t F, bool per_channel) {
      GatedCase c;
      c.form = Form::quadratic, c.B = B, c.H = H, c.L = L, c.F = F, c.Dv = 2;
      c.per_channel = per_channel, c.normalize = !per_channel, c.masked = !per_channel;
      c.reduction_only = B * H > 1;
      cases.push_back(c);
    };
    add(2, 4, 129, 16, true);
    if (full()) {
      add(2, 4, 128, 16, true);
      add(2, 4, 129, 15, true);
      add(2, 4, 129, 13, true);
      for (int64_t L : {1, 2, 16, 127, 128, 129, 130})
        for (bool per_channel : {true, false}) add(1, 1, L, 3, per_channel);  // per head normalized, masked
    }
    run_cases(cases);
  }

  TEST_CASE("sweep: gated: recurrent form (the decoding kernel) across G, F and Dv") {
    std::vector<GatedCase> cases;
    const std::vector<Shape> shapes = pick(std::vector<Shape>{{1, 1, 5, 17, 3}, {3, 1, 4, 4, 9}},
                                           std::vector<Shape>{{1, 1, 7, 1, 1},
                                                              {2, 1, 6, 4, 3},
                                                              {1, 3, 5, 8, 4},
                                                              {3, 3, 4, 9, 17},
                                                              {1, 1, 5, 16, 8},
                                                              {1, 1, 5, 17, 7},
                                                              {2, 2, 17, 5, 5}});
    for (const Shape& s : shapes)
      for (bool per_channel : {true, false})
        for (bool normalize : {false, true}) {
          GatedCase c;
          c.form = Form::recurrent, c.B = s[0], c.H = s[1], c.L = s[2], c.F = s[3], c.Dv = s[4];
          c.per_channel = per_channel, c.normalize = normalize, c.masked = normalize && per_channel;
          cases.push_back(c);
        }
    run_cases(cases);
  }

  TEST_CASE("sweep: gated: the CUDA kernels' thresholds (warps over E, strided F and L, the step's grid)") {
    if (!full() && !cuda_requested()) return;  // more sizes on the CPU; they run in the full sweep
    std::vector<GatedCase> cases;
    // E = Dv (+1 normalized) around one and two warps.
    for (int64_t Dv : {31, 32, 33, 63, 64, 65})
      for (bool normalize : {false, true}) {
        if (normalize && Dv != 31 && Dv != 63) continue;  // E = Dv + 1 = 32, 64
        GatedCase c;
        c.B = 1, c.H = 2, c.L = 9, c.F = 3, c.Dv = Dv, c.normalize = normalize, c.chunk = 4;
        cases.push_back(c);
      }
    // F and L past the block of one warp (E <= 32), per channel and per head.
    for (int64_t F : {31, 32, 33, 40})
      for (bool per_channel : {true, false}) {
        GatedCase c;
        c.B = 1, c.H = 1, c.L = 6, c.F = F, c.Dv = 2, c.per_channel = per_channel, c.chunk = 4;
        cases.push_back(c);
      }
    for (int64_t L : {31, 32, 33, 65}) {
      GatedCase c;
      c.B = 1, c.H = 1, c.L = L, c.F = 2, c.Dv = 3, c.per_channel = false, c.chunk = 16;
      cases.push_back(c);
    }
    // The step kernel's grid: G·E around 256 and 512 threads.
    for (const Shape& s : std::vector<Shape>{{5, 1, 2, 2, 51}, {8, 1, 2, 2, 32}, {257, 1, 2, 2, 1}, {16, 1, 2, 2, 32},
                                             {19, 1, 2, 2, 27}}) {
      GatedCase c;
      c.form = Form::recurrent, c.B = s[0], c.H = s[1], c.L = s[2], c.F = s[3], c.Dv = s[4];
      c.backward = c.B * c.Dv < 300;  // the composed backward of 257 groups adds nothing the others lack
      cases.push_back(c);
    }
    run_cases(cases);
  }

  TEST_CASE("sweep: gated: random shapes (property, seeded)") {
    const uint64_t seed = sweep_seed();
    INFO("HH_SWEEP_SEED=" << seed);
    std::mt19937_64 rng(seed);
    auto draw = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
    std::vector<GatedCase> cases;
    const int n = full() ? 24 : 2;
    for (int i = 0; i < n; ++i) {
      GatedCase c;
      c.form = draw(0, 5) == 0 ? Form::quadratic : Form::chunked;
      c.B = draw(1, 3), c.H = draw(1, 3), c.L = draw(0, c.form == Form::quadratic ? 40 : 150);
      c.F = draw(1, 20), c.Dv = draw(1, 20), c.chunk = draw(1, 70);
      c.per_channel = draw(0, 1) == 1, c.normalize = draw(0, 1) == 1, c.masked = draw(0, 1) == 1;
      cases.push_back(c);
    }
    run_cases(cases);
  }
}

}  // namespace hh::test::sweep
