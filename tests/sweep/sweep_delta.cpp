// Threshold sweep (issue 41): the gated delta rule (autograd/ops/delta_attention.h), its forms
// against a naive host loop of the rule written here, per (b, h), with s the scale (1/sqrt(Dk)
// for -1), a padded token (key_mask) counting as β = 0, log α = 0:
//   p = S_{t-1}ᵀ k_t,  u = β_t (v_t − α_t p),  S_t = α_t S_{t-1} + k_t uᵀ,  o_t = S_tᵀ (s q_t)
// from S_0 = the initial state (zeros if none); the forms' outputs are o (B,H,L,Dv) and S_L.
//
// The constants that choose a path, and the sizes that cross them:
//   chunked form, CPU kernel core/cpu/cpu_delta.inc (baseline and core/cpu/avx2/cpu_delta.cpp):
//     - the column tile W = 128 / sizeof(T) (cpu_delta.inc:43 in DeltaHead::token, :162 in the
//       backward's delta_outer_project): 32 columns in f32, 16 in f64, the last E % W columns one
//       by one (:47, :165): Dv in crossing({16, 32, 64}, {0, 1}) (tiles only, tiles and a tail,
//       a tail only; both dtypes run every Dv, so each crosses both widths). Dk is not tiled
//       (rows of the state; the `omp simd` reductions over E at :185): Dk in {1, 5, 16, 17, 32, 33}.
//     - the chunk C = min(chunk, L) and N = ceil(L / C) checkpoints (autograd/ops/delta_attention.cpp
//       :137; the forward keeps one every C tokens, cpu_delta.inc:124; the backward recomputes
//       each chunk, the last one m = L - t0 tokens, :148-149): chunk in {1, 3, 16, 64 (the
//       default)} and L crossing chunk and 2·chunk (with L = 1, 2 and L < chunk).
//     - OpenMP over G = B·H, `if (G > 1)` (:116, :137, :207): G in {1, 2, 3, 4, 5, 8, 9} under 1, 2
//       and 4 threads.
//     - the op's L = 0 path (delta_attention.cpp:129) and B = 0, Dv = 0.
//   recurrent form: composed of ops (autograd): its own reference path, checked forward and backward.
//   decoding step: the same token() (cpu_delta.inc:203 delta_step, OpenMP if G > 1): a loop of
//     steps, and a chunked prefill handing its final state to the steps, against the reference.
//   CUDA (cuda/cuda_delta.cu), more sizes here (they run on the CPU too):
//     - one block per group, E threads rounded up to a warp (:193 block_threads, E <= 1024; Dk <= 1024
//       at :200): Dv in {31, 32, 33, 63, 64, 65}.
//     - the backward's reset of 2F + 3 sums strided by the block (:120) and the gq/gk writes (:156):
//       Dk in {14, 15, 16, 33, 40} with E <= 32 (2F + 3 around 32 and past 64).
//     - checkpoints every C tokens (:76) and the last chunk's m (:104): the chunk sizes above.
//     - the step kernel's grid (:270 blocks_for(G·E), kBlock = 256 in cuda/cuda_common.cuh:21):
//       G·E in {255, 256, 257, 512, 513}.
// Backward: every differentiable input (q, k, v, β, log α, the initial state) through both outputs
// (o and S_L) by check_directional in f64, on contiguous and non-contiguous inputs; in f32 the
// gradients against the same op's f64 gradients (checked directionally) with the harness's f32
// tolerance. Random shapes on top (sweep_seed()).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/ops/delta_attention.h"
#include "tests/sweep/sweep.h"

namespace hh::test::sweep {
namespace {

enum class Form { chunked, recurrent, step, prefill_step };

const char* form_name(Form f) {
  switch (f) {
    case Form::chunked: return "chunked";
    case Form::recurrent: return "recurrent";
    case Form::step: return "decoding steps";
    case Form::prefill_step: return "chunked prefill + decoding steps";
  }
  return "?";
}

struct DeltaCase {
  Form form = Form::chunked;
  int64_t B = 1, H = 1, L = 1, Dk = 1, Dv = 1;
  int64_t chunk = 64;
  bool masked = false, init = false;
  double scale = -1;
  bool backward = true;  // the directional checks (not for empty dims, nor the steps: no gradient)

  std::string label() const {
    std::ostringstream s;
    s << form_name(form) << " B=" << B << " H=" << H << " L=" << L << " Dk=" << Dk << " Dv=" << Dv
      << (masked ? " masked" : "") << (init ? " initial state" : "") << " scale=" << scale;
    if (form == Form::chunked || form == Form::prefill_step) s << " chunk=" << chunk;
    return s.str();
  }
};

// The naive rule on host values: in = q, k, v, beta, log_alpha[, key mask (B,L)[, S0]] -> o and S_L,
// flattened and concatenated (as delta_fn returns them).
Host delta_ref(const std::vector<Host>& in, double scale) {
  const Host &q = in[0], &k = in[1], &v = in[2], &beta = in[3], &la = in[4];
  const bool masked = !in[5].v.empty(), init = !in[6].v.empty();
  const int64_t B = q.shape[0], H = q.shape[1], L = q.shape[2], F = q.shape[3], E = v.shape[3];
  const double s = scale == -1 ? 1.0 / std::sqrt(static_cast<double>(F)) : scale;
  const int64_t ny = B * H * L * E;
  Host out{{ny + B * H * F * E}, std::vector<double>(static_cast<size_t>(ny + B * H * F * E), 0.0)};
  std::vector<double> S(static_cast<size_t>(F * E)), p(static_cast<size_t>(E)), u(static_cast<size_t>(E));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = b * H + h;
      for (int64_t i = 0; i < F * E; ++i) S[static_cast<size_t>(i)] = init ? in[6].v[static_cast<size_t>(g * F * E + i)] : 0.0;
      for (int64_t t = 0; t < L; ++t) {
        // Row t of each input (row-major host values).
        const int64_t row = g * L + t;
        const double *qt = q.v.data() + row * F, *kt = k.v.data() + row * F, *vt = v.v.data() + row * E;
        const bool real = !masked || in[5].v[static_cast<size_t>(b * L + t)] != 0.0;
        const double bt = real ? beta.v[static_cast<size_t>(row)] : 0.0;
        const double at = std::exp(real ? la.v[static_cast<size_t>(row)] : 0.0);
        for (int64_t e = 0; e < E; ++e) {
          double acc = 0;
          for (int64_t f = 0; f < F; ++f) acc += S[static_cast<size_t>(f * E + e)] * kt[f];
          p[static_cast<size_t>(e)] = acc;
          u[static_cast<size_t>(e)] = bt * (vt[e] - at * acc);
        }
        for (int64_t f = 0; f < F; ++f)
          for (int64_t e = 0; e < E; ++e) {
            double& x = S[static_cast<size_t>(f * E + e)];
            x = at * x + kt[f] * u[static_cast<size_t>(e)];
          }
        for (int64_t e = 0; e < E; ++e) {
          double acc = 0;
          for (int64_t f = 0; f < F; ++f) acc += S[static_cast<size_t>(f * E + e)] * s * qt[f];
          out.v[static_cast<size_t>(row * E + e)] = acc;
        }
      }
      for (int64_t i = 0; i < F * E; ++i) out.v[static_cast<size_t>(ny + g * F * E + i)] = S[static_cast<size_t>(i)];
    }
  return out;
}

// q, v U(-1, 1); k U(-1, 1) / sqrt(Dk) (so ‖k‖² <= 1 and, with β in (0, 1), the rule is a
// contraction at any length); β in [0.05, 0.95]; log α in [-0.5, 0]; the padding mask and an
// initial state U(-0.5, 0.5) when asked.
std::vector<Tensor> delta_inputs(const DeltaCase& c, Generator& g, DType t) {
  const double kr = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(c.Dk, 1)));
  std::vector<Tensor> x = {input({c.B, c.H, c.L, c.Dk}, g, t), input({c.B, c.H, c.L, c.Dk}, g, t, -kr, kr),
                           input({c.B, c.H, c.L, c.Dv}, g, t), input({c.B, c.H, c.L}, g, t, 0.05, 0.95),
                           input({c.B, c.H, c.L}, g, t, -0.5, 0.0)};
  x.push_back(c.masked ? padding_test_mask(c.B, c.L).to(test_device()) : Tensor());
  x.push_back(c.init ? input({c.B, c.H, c.Dk, c.Dv}, g, t, -0.5, 0.5) : Tensor());
  return x;
}

Tensor flat_cat(const Tensor& y, const Tensor& S) { return cat({reshape(y, {-1}), reshape(S, {-1})}, 0); }

// The decoding steps over tokens [t0, L) from `st`, outputs concatenated along L.
Tensor steps(DeltaDecodeState& st, const std::vector<Tensor>& x, double scale, int64_t t0) {
  std::vector<Tensor> ys;
  const int64_t L = x[0].size(2);
  for (int64_t t = t0; t < L; ++t) {
    auto tok = [&](const Tensor& a) { return slice(a, 2, t, t + 1); };
    ys.push_back(delta_attention_step(st, tok(x[0]), tok(x[1]), tok(x[2]), tok(x[3]), tok(x[4]), scale,
                                      x[5].defined() ? slice(x[5], 1, t, t + 1) : Tensor()));
  }
  return cat(ys, 2);
}

// The form's o and S_L, flattened and concatenated: x = q, k, v, beta, log_alpha, mask, S0.
OpFn delta_fn(const DeltaCase& c) {
  return [c](const std::vector<Tensor>& x) {
    Tensor final_state;
    switch (c.form) {
      case Form::chunked: {
        Tensor y = delta_attention_chunked(x[0], x[1], x[2], x[3], x[4], c.scale, x[5], x[6], &final_state, c.chunk);
        return flat_cat(y, final_state);
      }
      case Form::recurrent: {
        Tensor y = delta_attention_recurrent(x[0], x[1], x[2], x[3], x[4], c.scale, x[5], x[6], &final_state);
        return flat_cat(y, final_state);
      }
      case Form::step: {
        DeltaDecodeState st;
        if (x[6].defined()) st.S = contiguous(x[6]);
        Tensor y = steps(st, x, c.scale, 0);
        return flat_cat(y, st.S);
      }
      case Form::prefill_step: {
        const int64_t L1 = c.L / 2;  // the prefill's tokens; the steps take the rest
        auto head = [&](const Tensor& a, int64_t dim) { return slice(a, dim, 0, L1); };
        Tensor y1 = delta_attention_chunked(head(x[0], 2), head(x[1], 2), head(x[2], 2), head(x[3], 2),
                                            head(x[4], 2), c.scale, x[5].defined() ? head(x[5], 1) : Tensor(), x[6],
                                            &final_state, c.chunk);
        DeltaDecodeState st;
        st.S = final_state;
        Tensor y2 = steps(st, x, c.scale, L1);
        return flat_cat(cat({y1, y2}, 2), st.S);
      }
    }
    return Tensor();
  };
}

void run_case(const DeltaCase& c, uint64_t seed, bool both_layouts_backward) {
  const std::string label = c.label();
  INFO("case: " << label);
  const OpFn fn = delta_fn(c);
  const RefFn ref = [c](const std::vector<Host>& in) { return delta_ref(in, c.scale); };
  for (DType t : float_dtypes()) {
    Generator g(seed);
    check_forward(fn, ref, delta_inputs(c, g, t), label + " " + dtype_name(t), rtol_of(t), atol_of(t));
  }
  // Nothing flows back from an empty output, nor from the decoding steps (no gradient).
  const bool grads = c.backward && c.B * c.H * c.L * c.Dv > 0 && (c.form == Form::chunked || c.form == Form::recurrent);
  if (!grads) return;
  Generator g(seed);
  const std::vector<Tensor> x = delta_inputs(c, g, DType::f64);
  std::vector<int> which = {0, 1, 2, 3, 4};
  if (c.init) which.push_back(6);
  check_directional(fn, x, which, label);
  if (both_layouts_backward) check_directional(strided(fn), x, which, label + " (non-contiguous)");
  check_f32_grads(fn, x, which, label, rtol_of(DType::f32));
}

void run_cases(const std::vector<DeltaCase>& cases) {
  for_each_config([&](const Config&) {
    uint64_t seed = 4200;
    size_t i = 0;
    for (const DeltaCase& c : cases) run_case(c, ++seed, full() || (i++ % 2 == 0));
  });
}

}  // namespace

TEST_SUITE("sweep") {
  TEST_CASE("sweep: delta: chunked, L across the chunks (checkpoints, the last chunk's length)") {
    std::vector<DeltaCase> cases;
    const std::vector<int64_t> chunks = pick(std::vector<int64_t>{3, 16}, std::vector<int64_t>{1, 3, 16, 64});
    for (int64_t chunk : chunks) {
      const std::vector<int64_t> Ls =
          full() ? crossing({chunk, 2 * chunk}, {1, 2}) : std::vector<int64_t>{chunk, chunk + 1, 2 * chunk + 1};
      for (int64_t L : Ls) {
        DeltaCase c;
        c.B = 1, c.H = 2, c.L = L, c.Dk = 5, c.Dv = 7, c.chunk = chunk, c.init = L % 2 == 1;
        cases.push_back(c);
      }
    }
    run_cases(cases);
  }

  TEST_CASE("sweep: delta: chunked, Dv around the column tile (32 f32, 16 f64) and Dk") {
    std::vector<DeltaCase> cases;
    const std::vector<int64_t> Dvs = pick(std::vector<int64_t>{15, 16, 17, 33}, crossing({16, 32, 64}, {1}));
    const std::vector<int64_t> Dks = pick(std::vector<int64_t>{1, 17}, std::vector<int64_t>{1, 5, 16, 17, 32, 33});
    for (int64_t Dv : Dvs) {
      DeltaCase c;
      c.B = 1, c.H = 1, c.L = 9, c.Dk = 4, c.Dv = Dv, c.chunk = 4, c.init = true;
      cases.push_back(c);
    }
    for (int64_t Dk : Dks) {
      DeltaCase c;
      c.B = 1, c.H = 1, c.L = 9, c.Dk = Dk, c.Dv = 33, c.chunk = 4, c.init = Dk % 2 == 1;
      cases.push_back(c);
    }
    run_cases(cases);
  }

  TEST_CASE("sweep: delta: chunked, key mask, initial state, scale and B*H across the parallel split") {
    std::vector<DeltaCase> cases;
    const std::vector<Shape> groups = pick(std::vector<Shape>{{2, 1}, {3, 3}},
                                           std::vector<Shape>{{1, 1}, {2, 1}, {1, 3}, {2, 2}, {5, 1}, {2, 4}, {3, 3}});
    for (const Shape& bh : groups)
      for (bool masked : {false, true})
        for (bool init : {false, true}) {
          if (!full() && masked != init) continue;
          DeltaCase c;
          c.B = bh[0], c.H = bh[1], c.L = 11, c.Dk = 4, c.Dv = 5, c.chunk = 4;
          c.masked = masked, c.init = init, c.scale = init ? 0.7 : -1;
          cases.push_back(c);
        }
    run_cases(cases);
  }

  TEST_CASE("sweep: delta: empty and size-1 dims") {
    std::vector<DeltaCase> cases;
    for (Form form : {Form::chunked, Form::recurrent, Form::step})
      for (const Shape& s : std::vector<Shape>{{0, 2, 5, 3, 2}, {1, 1, 0, 3, 2}, {1, 1, 1, 1, 1}, {1, 1, 4, 1, 1},
                                               {1, 1, 4, 3, 0}})
        for (bool init : {false, true}) {
          if (form == Form::step && s[2] == 0) continue;  // no token to step
          DeltaCase c;
          c.form = form, c.B = s[0], c.H = s[1], c.L = s[2], c.Dk = s[3], c.Dv = s[4], c.chunk = 2, c.init = init;
          cases.push_back(c);
        }
    run_cases(cases);
  }

  TEST_CASE("sweep: delta: recurrent form, decoding steps and a chunked prefill handed to the steps") {
    std::vector<DeltaCase> cases;
    const std::vector<Shape> shapes = pick(std::vector<Shape>{{1, 1, 6, 5, 17}, {3, 1, 5, 4, 33}},
                                           std::vector<Shape>{{1, 1, 7, 1, 1},
                                                              {2, 1, 6, 4, 3},
                                                              {1, 3, 5, 8, 16},
                                                              {3, 3, 4, 9, 17},
                                                              {1, 1, 5, 16, 32},
                                                              {1, 1, 5, 17, 33},
                                                              {2, 2, 9, 5, 65}});
    for (const Shape& s : shapes)
      for (Form form : {Form::recurrent, Form::step, Form::prefill_step})
        for (bool masked : {false, true}) {
          DeltaCase c;
          c.form = form, c.B = s[0], c.H = s[1], c.L = s[2], c.Dk = s[3], c.Dv = s[4], c.chunk = 2;
          c.masked = masked, c.init = !masked;
          cases.push_back(c);
        }
    run_cases(cases);
  }

  TEST_CASE("sweep: delta: the CUDA kernels' thresholds (warps over E, strided sums over Dk, the step's grid)") {
    if (!full() && !cuda_requested()) return;  // more sizes on the CPU; they run in the full sweep
    std::vector<DeltaCase> cases;
    for (int64_t Dv : {31, 32, 33, 63, 64, 65}) {
      DeltaCase c;
      c.B = 1, c.H = 2, c.L = 7, c.Dk = 3, c.Dv = Dv, c.chunk = 3, c.init = true;
      cases.push_back(c);
    }
    for (int64_t Dk : {14, 15, 16, 33, 40}) {
      DeltaCase c;
      c.B = 1, c.H = 1, c.L = 7, c.Dk = Dk, c.Dv = 2, c.chunk = 3, c.init = Dk % 2 == 0;
      cases.push_back(c);
    }
    for (const Shape& s : std::vector<Shape>{{5, 1, 2, 2, 51}, {8, 1, 2, 2, 32}, {257, 1, 2, 2, 1}, {16, 1, 2, 2, 32},
                                             {19, 1, 2, 2, 27}}) {
      DeltaCase c;
      c.form = Form::step, c.B = s[0], c.H = s[1], c.L = s[2], c.Dk = s[3], c.Dv = s[4], c.init = true;
      cases.push_back(c);
    }
    run_cases(cases);
  }

  TEST_CASE("sweep: delta: random shapes (property, seeded)") {
    const uint64_t seed = sweep_seed();
    INFO("HH_SWEEP_SEED=" << seed);
    std::mt19937_64 rng(seed + 1);
    auto draw = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
    std::vector<DeltaCase> cases;
    const int n = full() ? 24 : 2;
    for (int i = 0; i < n; ++i) {
      DeltaCase c;
      c.form = draw(0, 4) == 0 ? Form::prefill_step : Form::chunked;
      c.B = draw(1, 3), c.H = draw(1, 3), c.L = draw(1, 150), c.Dk = draw(1, 40), c.Dv = draw(1, 70);
      c.chunk = draw(1, 70), c.masked = draw(0, 1) == 1, c.init = draw(0, 1) == 1;
      c.scale = draw(0, 1) == 1 ? -1 : 0.5;
      cases.push_back(c);
    }
    run_cases(cases);
  }
}

}  // namespace hh::test::sweep
