// Threshold sweep (issue 41): LoLCATs' hybrid sliding-window + linear attention
// (autograd/ops/hybrid_attention.h): the window kernel alone (hybrid_window_attention), the chunked
// form, the quadratic reference and the recurrent decoding step, against a naive host loop of the
// semantics written here: for query i, with m_i the max of s·q_i·k_j over the real window keys,
//   window keys i-W < j <= i:  a_ij = wf_h · exp(s·q_i·k_j - m_i)
//   linear keys j <= i-W:      a_ij = lf_h · (pq_i · pk_j)
//   y_i = Σ_j a_ij v_j / Σ_j a_ij  (0 for a query that sees no real key)
// and for the window kernel num_i = Σ_window e_ij v_j, den_i = Σ_window e_ij (0, 0 without a key).
//
// The constants that choose a path, and the sizes that cross them:
//   window kernel, CPU (core/cpu/cpu_attention.inc, baseline and core/cpu/avx2/cpu_attention.cpp):
//     - kWindowBlock = 16 query rows per band (cpu_attention.inc:143); a band reads keys
//       [c0-W+1, c0+n) (:150 WindowBand, clamped at 0): L in crossing({16, 32, 64}, {1, 2}) and W
//       in crossing({16, 32}, {1, 2}) plus W = L-1, L, L+1 and W far beyond L (1000).
//     - the forward's OpenMP `if (G·nb > 1)` over (group, band) (:171), the backward's `if (G > 1)`
//       over groups (:212): G = B·H in {1, 2, 3, 5} under 1, 2 and 4 threads, L = 1 (nb = 1).
//     - the key mask (:161 keep: real keys only; :178 a row without a real key gets num = den = 0
//       and m = 0; :233 the backward skips it): a padded tail and holes, padded front keys (the
//       first queries see none), 20 padded keys (whole bands of rows without a real window key),
//       every key padded.
//     - the max's gradient split among ties (:227): not crossed (a directional derivative at a tie
//       is not defined; random inputs have no ties).
//     - Eigen packets over D and Dv (the band products): D, Dv in crossing({4, 8, 16}, {1}).
//   window kernel, CUDA (cuda/cuda_hybrid_window.cu): one thread per query row, blocks of
//     kRowThreads = 128 (:14): G·L in crossing({128, 256}) (G = 1, 2); loops over W and D, Dv
//     without tiles: the W and D lists above.
//   chunked form (autograd/ops/hybrid_attention.cpp:114, composed of ops around the kernel):
//     - W clamped to L (:124 min(window, L)): W in {1, 16, L-1, L, 1000} (L-1 not with chunk 64).
//     - the linear part's blocks of T = chunk rows (:135), the last one padded (P = nb·T), the
//       exclusive state with nb = 1 (:149): chunk in {1, 7, 16, 64} and L crossing chunk and 2·chunk;
//       with the key mask (B = 4, L = 40, chunk 16, W in {1, 5, 16, 17, 40}).
//   quadratic reference (hybrid_attention.cpp:88, composed): the chunked cases up to L = 33; its
//     reductions over the key dim cross cpu_reduce's split at 128 rows: L in {127, 128, 129, 130}
//     (full; the directional check at 129).
//   recurrent step (hybrid_attention.cpp:224): the ring starts at min(W, 16) slots and doubles up
//     to W (:246); tokens past W move into the linear state (:253): W in {1, 5, 15, 16, 17, 33, 100}
//     over L = 40 tokens (growth at 16 and 32, wrap at W).
// Backward: check_directional in f64 for every differentiable input (q, k, v; and pq, pk, wf, lf
// for the chunked and quadratic forms), the window kernel's num and den both checked (its output
// here is cat(num, den)). The step has no gradient. Random shapes on top (sweep_seed()).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/ops/hybrid_attention.h"
#include "tests/sweep/sweep.h"

namespace hh::test::sweep {
namespace {


struct HybridCase {
  int64_t B = 1, H = 2, L = 1, D = 4, Dv = 3, F = 5, window = 1, chunk = 64;
  bool masked = false;
  double scale = -1;
  bool backward = true;
  std::string label() const {
    std::ostringstream o;
    o << "B=" << B << " H=" << H << " L=" << L << " D=" << D << " Dv=" << Dv << " F=" << F << " W=" << window
      << " chunk=" << chunk << (masked ? " masked" : "") << (scale == -1 ? "" : " scale=" + std::to_string(scale));
    return o.str();
  }
};

// The naive hybrid attention on host values: q, k, v, pq, pk, wf, lf[, mask]. With window_only,
// the window kernel's cat(num, den) (B,H,L,Dv+1) instead (inputs q, k, v[, mask] at 0, 1, 2, 7).
Host hybrid_ref(const std::vector<Host>& in, int64_t W, double scale, bool window_only) {
  const Host &q = in[0], &k = in[1], &v = in[2];
  const Host* mask = in.size() > 7 && (!in[7].v.empty() || !in[7].shape.empty()) ? &in[7] : nullptr;
  const int64_t B = q.shape[0], H = q.shape[1], L = q.shape[2], D = q.shape[3], Dv = v.shape[3];
  const double s = scale == -1 ? 1.0 / std::sqrt(static_cast<double>(D)) : scale;
  Host out{{B, H, L, window_only ? Dv + 1 : Dv}, {}};
  out.v.assign(static_cast<size_t>(B * H * L * out.shape[3]), 0.0);
  std::vector<double> sc(static_cast<size_t>(L)), num(static_cast<size_t>(Dv));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        auto real = [&](int64_t j) { return !mask || mask->v[static_cast<size_t>(b * L + j)] != 0.0; };
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = std::max<int64_t>(0, i - W + 1); j <= i; ++j) {
          if (!real(j)) continue;
          double d = 0;
          for (int64_t c = 0; c < D; ++c) d += q.v[at4(q.shape, b, h, i, c)] * k.v[at4(k.shape, b, h, j, c)];
          sc[static_cast<size_t>(j)] = s * d;
          mx = std::max(mx, s * d);
        }
        std::fill(num.begin(), num.end(), 0.0);
        double den = 0;
        auto add = [&](int64_t j, double a) {
          den += a;
          for (int64_t c = 0; c < Dv; ++c) num[static_cast<size_t>(c)] += a * v.v[at4(v.shape, b, h, j, c)];
        };
        const double wf = window_only ? 1.0 : in[5].v[static_cast<size_t>(h)];
        for (int64_t j = std::max<int64_t>(0, i - W + 1); j <= i; ++j)
          if (real(j)) add(j, wf * std::exp(sc[static_cast<size_t>(j)] - mx));
        if (window_only) {
          for (int64_t c = 0; c < Dv; ++c) out.v[at4(out.shape, b, h, i, c)] = num[static_cast<size_t>(c)];
          out.v[at4(out.shape, b, h, i, Dv)] = den;
          continue;
        }
        const Host &pq = in[3], &pk = in[4];
        const int64_t F = pq.shape[3];
        const double lf = in[6].v[static_cast<size_t>(h)];
        for (int64_t j = 0; j <= i - W; ++j) {
          if (!real(j)) continue;
          double a = 0;
          for (int64_t f = 0; f < F; ++f) a += pq.v[at4(pq.shape, b, h, i, f)] * pk.v[at4(pk.shape, b, h, j, f)];
          add(j, lf * a);
        }
        for (int64_t c = 0; c < Dv; ++c) out.v[at4(out.shape, b, h, i, c)] = den == 0 ? 0.0 : num[static_cast<size_t>(c)] / den;
      }
  return out;
}

// q, k in [-2, 2] (scores spread over the window), v, positive features, factors in [0.2, 0.9]
// (LoLCATs' sigmoid(p) and 1 - sigmoid(p)), the key mask when asked.
std::vector<Tensor> hybrid_inputs(const HybridCase& c, Generator& g, DType t) {
  return {input({c.B, c.H, c.L, c.D}, g, t, -2, 2),   input({c.B, c.H, c.L, c.D}, g, t, -2, 2),
          input({c.B, c.H, c.L, c.Dv}, g, t),         input({c.B, c.H, c.L, c.F}, g, t, 0.05, 1.0),
          input({c.B, c.H, c.L, c.F}, g, t, 0.05, 1.0), input({c.H}, g, t, 0.2, 0.9),
          input({c.H}, g, t, 0.2, 0.9),               c.masked ? key_mask_of(c.B, c.L, 20) : Tensor()};
}

OpFn window_fn(const HybridCase& c) {
  return [c](const std::vector<Tensor>& x) {
    std::vector<Tensor> nd = hybrid_window_attention(x[0], x[1], x[2], c.window, c.scale, x[7]);
    return cat(nd, -1);
  };
}
OpFn chunked_fn(const HybridCase& c) {
  return [c](const std::vector<Tensor>& x) {
    return hybrid_attention_chunked(x[0], x[1], x[2], x[3], x[4], x[5], x[6], c.window, c.scale, x[7], c.chunk);
  };
}
OpFn quadratic_fn(const HybridCase& c) {
  return [c](const std::vector<Tensor>& x) {
    return hybrid_attention_quadratic(x[0], x[1], x[2], x[3], x[4], x[5], x[6], c.window, c.scale, x[7]);
  };
}
// The step over every token (no key mask, no gradient).
OpFn step_fn(const HybridCase& c) {
  return [c](const std::vector<Tensor>& x) {
    NoGradGuard ng;
    HybridDecodeState st(c.window);
    std::vector<Tensor> ys;
    auto tok = [](const Tensor& t, int64_t l) { return slice(t, 2, l, l + 1); };
    for (int64_t l = 0; l < c.L; ++l)
      ys.push_back(hybrid_attention_step(st, tok(x[0], l), tok(x[1], l), tok(x[2], l), tok(x[3], l), tok(x[4], l),
                                         x[5], x[6], c.scale));
    return cat(ys, 2);
  };
}

enum class Form { window, chunked, quadratic, step };

// The smallest gap between a query's two largest window scores s·q·k over its real keys
// (i-W < j <= i): the window part's outputs are unnormalized, exp(s·q·k - m) with m the row max,
// so they have a kink where two scores tie, and a finite difference across it is no derivative.
double min_window_gap(const std::vector<Tensor>& x, const HybridCase& c) {
  const Host q = to_host(x[0]), k = to_host(x[1]);
  const Host m = x[7].defined() ? to_host(x[7]) : Host{};
  const double s = c.scale == -1 ? 1.0 / std::sqrt(static_cast<double>(c.D)) : c.scale;
  double gap = 1e300;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t i = 0; i < c.L; ++i) {
        double top = -1e300, second = -1e300;
        for (int64_t j = std::max<int64_t>(0, i - c.window + 1); j <= i; ++j) {
          if (!m.v.empty() && m.v[static_cast<size_t>(b * c.L + j)] == 0.0) continue;
          double d = 0;
          for (int64_t e = 0; e < c.D; ++e) d += q.v[at4(q.shape, b, h, i, e)] * k.v[at4(k.shape, b, h, j, e)];
          d *= s;
          if (d > top) second = top, top = d;
          else if (d > second) second = d;
        }
        if (second > -1e300) gap = std::min(gap, top - second);
      }
  return gap;
}

void check_hybrid(const HybridCase& c, Form form, uint64_t seed) {
  const char* names[] = {"window kernel", "chunked", "quadratic", "step"};
  const std::string label = std::string(names[static_cast<int>(form)]) + " " + c.label();
  INFO(label);
  for (DType t : float_dtypes()) {
    Generator g(seed);
    const std::vector<Tensor> x = hybrid_inputs(c, g, t);
    const OpFn fn = form == Form::window    ? window_fn(c)
                    : form == Form::chunked ? chunked_fn(c)
                    : form == Form::quadratic ? quadratic_fn(c)
                                              : step_fn(c);
    const RefFn ref = [c, form](const std::vector<Host>& h) { return hybrid_ref(h, c.window, c.scale, form == Form::window); };
    check_forward(fn, ref, x, label, rtol_of(t), atol_of(t));
    if (t != DType::f64 || !c.backward || form == Form::step || c.B * c.L == 0) continue;
    // Inputs with no near tie of a window's row max for the finite differences (a gap of 1.6e-6
    // made one random seed fail; step 1e-5 moves a score by up to ~1e-4 here).
    std::vector<Tensor> xb = x;
    for (uint64_t a = 1; a < 50 && min_window_gap(xb, c) < 1e-3; ++a) {
      Generator g2(seed + 7919 * a);
      xb = hybrid_inputs(c, g2, t);
    }
    check_directional(fn, xb, form == Form::window ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1, 2, 3, 4, 5, 6},
                      label);
  }
}

TEST_SUITE("sweep") {
TEST_CASE("sweep: hybrid: window kernel across kWindowBlock, W, G and the key mask") {
  std::vector<HybridCase> cases;
  // L across the band (16) and W across it, W beyond L.
  for (int64_t L : pick(std::vector<int64_t>{1, 17, 33}, crossing({16, 32, 64}, {1, 2})))
    for (int64_t W : pick(std::vector<int64_t>{1, 16, L + 1}, crossing({16, 32}, {1, 2, L - 1, L, L + 1, 1000}))) {
      if (W < 1) continue;
      HybridCase c;
      c.L = L;
      c.window = W;
      cases.push_back(c);
    }
  // The key mask: rows without a real window key, whole bands of them, a batch entry all padding.
  for (int64_t W : pick(std::vector<int64_t>{4}, std::vector<int64_t>{1, 4, 16, 17, 100})) {
    HybridCase c;
    c.B = 4;
    c.H = 1;
    c.L = 37;
    c.window = W;
    c.masked = true;
    cases.push_back(c);
  }
  // G across the OpenMP split (and the CUDA row blocks of 128: G·L = 127..129, 256, 258).
  for (auto bhl : pick(std::vector<std::vector<int64_t>>{{1, 1, 1}, {1, 3, 20}},
                       std::vector<std::vector<int64_t>>{
                           {1, 1, 1}, {1, 2, 1}, {1, 3, 20}, {1, 5, 20}, {1, 1, 127}, {1, 1, 128}, {1, 1, 129},
                           {1, 2, 128}, {1, 2, 129}})) {
    HybridCase c;
    c.B = bhl[0];
    c.H = bhl[1];
    c.L = bhl[2];
    c.window = 17;
    cases.push_back(c);
  }
  // D and Dv across the packets; an explicit scale; no batch.
  for (int64_t D : pick(std::vector<int64_t>{1, 9}, crossing({4, 8, 16}, {1}))) {
    HybridCase c;
    c.L = 20;
    c.window = 7;
    c.D = D;
    c.Dv = D == 1 ? 17 : D;
    cases.push_back(c);
  }
  {
    HybridCase c;
    c.L = 19;
    c.window = 5;
    c.scale = 0.6;
    cases.push_back(c);
    c.B = 0;
    cases.push_back(c);
  }
  for_each_config([&](const Config&) {
    uint64_t seed = 6000;
    for (const HybridCase& c : cases) check_hybrid(c, Form::window, ++seed);
  });
}

TEST_CASE("sweep: hybrid: chunked and quadratic forms across the chunk, W and L") {
  std::vector<HybridCase> cases;
  // W across kWindowBlock and L (the clamp), L across the chunk and twice the chunk.
  for (int64_t chunk : pick(std::vector<int64_t>{7, 64}, std::vector<int64_t>{1, 7, 16, 64}))
    for (int64_t L : pick(std::vector<int64_t>{chunk + 1}, crossing({chunk, 2 * chunk}, {1})))
      for (int64_t W : pick(std::vector<int64_t>{16, L + 1}, std::vector<int64_t>{1, 16, L - 1, L, 1000})) {
        // W across 16 is the window kernel's sweep; here W against L (the clamp) and the chunk.
        if (W < 1 || (chunk == 1 && L > 3 && W != 16) || (chunk == 64 && W == L - 1)) continue;
        HybridCase c;
        c.L = L;
        c.window = W;
        c.chunk = chunk;
        cases.push_back(c);
      }
  for (int64_t W : pick(std::vector<int64_t>{5}, std::vector<int64_t>{1, 5, 16, 17, 40})) {
    HybridCase c;
    c.B = 4;
    c.H = 1;
    c.L = 40;
    c.window = W;
    c.chunk = 16;
    c.masked = true;
    cases.push_back(c);
  }
  {
    HybridCase c;
    c.L = 21;
    c.window = 6;
    c.chunk = 8;
    c.scale = 0.6;
    c.F = 1;
    c.D = 17;
    c.Dv = 1;
    cases.push_back(c);
  }
  std::vector<HybridCase> quad;  // the composed reference: the shorter cases, and L across 128
  for (const HybridCase& c : cases)
    if (c.L <= 33) quad.push_back(c);
  if (full())  // the quadratic form's reductions over L across 128
    for (int64_t L : crossing({128}, {130})) {
      HybridCase c;
      c.H = 1;
      c.L = L;
      c.window = 17;
      c.backward = L == 129;
      quad.push_back(c);
    }
  for_each_config([&](const Config&) {
    uint64_t seed = 7000;
    for (const HybridCase& c : cases) check_hybrid(c, Form::chunked, ++seed);
    seed = 7500;
    for (const HybridCase& c : quad) check_hybrid(c, Form::quadratic, ++seed);
  });
}

TEST_CASE("sweep: hybrid: recurrent step across the ring's growth and the window") {
  std::vector<HybridCase> cases;
  for (int64_t W : pick(std::vector<int64_t>{1, 17}, std::vector<int64_t>{1, 5, 15, 16, 17, 33, 100})) {
    HybridCase c;
    c.L = pick<int64_t>(20, 40);
    c.window = W;
    cases.push_back(c);
  }
  for_each_config([&](const Config&) {
    uint64_t seed = 8000;
    for (const HybridCase& c : cases) check_hybrid(c, Form::step, ++seed);
  });
}

TEST_CASE("sweep: hybrid: random shapes (seeded)") {
  std::mt19937_64 rng(sweep_seed());
  INFO("HH_SWEEP_SEED=" << sweep_seed());
  auto draw = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  std::vector<HybridCase> cases;
  for (int i = 0; i < (full() ? 8 : 2); ++i) {
    HybridCase c;
    c.B = draw(1, 4);
    c.H = draw(1, 3);
    c.L = draw(1, 90);
    c.D = draw(1, 20);
    c.Dv = draw(1, 20);
    c.F = draw(1, 12);
    c.window = draw(1, 100);
    c.chunk = draw(1, 70);
    c.masked = draw(0, 2) == 0;
    cases.push_back(c);
  }
  for_each_config([&](const Config&) {
    uint64_t seed = sweep_seed();
    for (const HybridCase& c : cases) {
      check_hybrid(c, Form::window, ++seed);
      check_hybrid(c, Form::chunked, ++seed);
    }
  });
}
}  // TEST_SUITE("sweep")

}  // namespace
}  // namespace hh::test::sweep
