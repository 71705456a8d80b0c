// Threshold sweep (issue 41), family "optim": the fused AdamW step (Backend::adamw_step and
// adamw_multi_step) directly and through the trainer's API (train::AdamW with parameter groups),
// and train::SGD, each against a naive update loop in f64 written here.
//
// The constants that choose a path, and the sizes here that cross them:
//
// core/cpu/cpu_optim.cpp
//   kChunk = 8192 (cpu_optim.cpp:45): the unit of parallel work; a tensor is cut into kChunk pieces,
//     its last one shorter (adamw_step :71-74; adamw_multi_step's chunk table :101-106, every
//     tensor's chunks in one list).
//   kParallelGrain = 32768 (core/cpu/cpu_backend.h:93): adamw_step runs on the threads when
//     numel > it (:70), adamw_multi_step when the total over all tensors is (:108).
//   adamw_range's `#pragma omp simd` loop (:33): vector bodies and scalar tails (odd sizes).
//   Crossed by numel in {0, 1, 2, 3, 7, 8191, 8192, 8193, 16383, 16384, 16385, 24575, 24576, 24577,
//     32767, 32768, 32769, 40961} (fast: {0, 1, 17, 8191, 8193, 32768, 32769}), one tensor per
//     adamw_step, and by multi-step lists of mixed sizes whose totals are just below, at and above
//     kParallelGrain ({16384, 16384}, {16384, 16385}, {8191, 8193, 8192, 8192}, ...), with empty
//     tensors between non-empty ones.
// cuda/cuda_optim.cu
//   adamw_step: a grid-stride loop, kBlock = 256 threads (cuda/cuda_common.cuh:21), blocks_for(n)
//     capped at kMaxGrid = 1 << 20 blocks (cuda_common.cuh:23): numel around 256 multiples here
//     ({255, 256, 257}, full sweep); past 2^28 elements (the grid-stride loop's second lap) is not
//     covered (4 GiB of state per tensor).
//   adamw_multi_step: kMultiTensors = 36 tensors per launch (cuda_optim.cu:39), kMultiChunk = 16384
//     elements per block (:40), empty tensors skipped and not counted (:149): lists of 35, 36, 37 and
//     73 tensors, 37 and 38 entries with empty ones among them, and sizes around 16384 and 32768.
//
// Both dtypes, weight decay on and off (and per tensor / per group), several steps so the bias
// corrections 1 - beta^t change; the step checks compare param, exp_avg and exp_avg_sq. The
// multi-tensor step must also equal adamw_step per tensor bit for bit on the CPU (core/backend.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/backend.h"
#include "tests/sweep/sweep.h"
#include "train/optim.h"

namespace hh::test::sweep {
namespace {

constexpr double kB1 = 0.9, kB2 = 0.95, kEps = 1e-8;  // beta2 0.95: exp_avg_sq well above the f32 atol

// One parameter's naive state: torch.optim.AdamW's update in f64, as written in its docs.
struct NaiveAdam {
  std::vector<double> p, m, v;
  void step(const std::vector<double>& g, double lr, double wd, int64_t t) {
    const double bc1 = 1.0 - std::pow(kB1, static_cast<double>(t)), bc2 = 1.0 - std::pow(kB2, static_cast<double>(t));
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1.0 - lr * wd;
      m[i] = kB1 * m[i] + (1.0 - kB1) * g[i];
      v[i] = kB2 * v[i] + (1.0 - kB2) * g[i] * g[i];
      p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + kEps);
    }
  }
};

Host host_of(const Shape& s, const std::vector<double>& v) { return Host{s, v}; }

std::string sizes_label(const std::vector<int64_t>& ns) {
  std::string s = "{";
  for (size_t i = 0; i < ns.size(); ++i) s += (i ? "," : "") + std::to_string(ns[i]);
  return s + "}";
}

// The per-tensor lr and weight decay of entry i of a multi-step list: decay on and off alternate.
double lr_of(size_t i) { return 1e-2 * (1.0 + 0.5 * static_cast<double>(i % 3)); }
double wd_of(size_t i) { return i % 2 ? 0.0 : 0.5; }

// adamw_multi_step (or adamw_step per tensor when `single`) over tensors of sizes `ns`, `steps`
// steps, under every config, against NaiveAdam. On the CPU the multi step is also compared with
// adamw_step bit for bit.
void run_adamw(const std::vector<int64_t>& ns, int steps, bool single, uint64_t seed) {
  const std::string label = std::string(single ? "adamw_step " : "adamw_multi_step ") + sizes_label(ns);
  for (DType dt : float_dtypes()) {
    Generator g(seed);
    std::vector<Tensor> p0;
    std::vector<std::vector<Tensor>> grads(static_cast<size_t>(steps));
    std::vector<NaiveAdam> want;
    for (int64_t n : ns) {
      p0.push_back(input({n}, g, dt));
      want.push_back({to_host(p0.back()).v, std::vector<double>(static_cast<size_t>(n), 0.0),
                      std::vector<double>(static_cast<size_t>(n), 0.0)});
    }
    for (int s = 0; s < steps; ++s)
      for (size_t i = 0; i < ns.size(); ++i) {
        grads[static_cast<size_t>(s)].push_back(input({ns[i]}, g, dt));
        want[i].step(to_host(grads[static_cast<size_t>(s)][i]).v, lr_of(i), wd_of(i), s + 1);
      }
    const std::string dl = label + " " + dtype_name(dt);
    for_each_config([&](const Config&) {
      std::vector<Tensor> p, m, v, p1, m1, v1;  // p1..: the per-tensor adamw_step twin of a multi step
      for (const Tensor& x : p0) {
        p.push_back(clone(x));
        m.push_back(zeros_like(x));
        v.push_back(zeros_like(x));
        p1.push_back(clone(x));
        m1.push_back(zeros_like(x));
        v1.push_back(zeros_like(x));
      }
      const bool twin = !single && !cuda_requested();
      for (int s = 0; s < steps; ++s) {
        const auto& gs = grads[static_cast<size_t>(s)];
        std::vector<AdamWTensor> ts;
        for (size_t i = 0; i < ns.size(); ++i) {
          AdamWParams ap{lr_of(i), kB1, kB2, kEps, wd_of(i), s + 1};
          if (single) {
            backend_of(p[i]).adamw_step(p[i], gs[i], m[i], v[i], ap);
          } else {
            ts.push_back(AdamWTensor{p[i], gs[i], m[i], v[i], lr_of(i), wd_of(i)});
            if (twin) backend_of(p1[i]).adamw_step(p1[i], gs[i], m1[i], v1[i], ap);
          }
        }
        // The shared lr / weight decay must be ignored in favour of each entry's own.
        if (!single) backend_of(p[0]).adamw_multi_step(ts, AdamWParams{123.0, kB1, kB2, kEps, 7.0, s + 1});
      }
      for (size_t i = 0; i < ns.size(); ++i) {
        const std::string tl = dl + " tensor " + std::to_string(i) + " (" + std::to_string(ns[i]) + ")";
        compare(p[i], host_of({ns[i]}, want[i].p), rtol_of(dt), atol_of(dt), tl + " param");
        compare(m[i], host_of({ns[i]}, want[i].m), rtol_of(dt), atol_of(dt), tl + " exp_avg");
        compare(v[i], host_of({ns[i]}, want[i].v), rtol_of(dt), atol_of(dt), tl + " exp_avg_sq");
        if (twin) {  // bit-identical to adamw_step (core/backend.h)
          compare(p[i], to_host(p1[i]), 0.0, 0.0, tl + " param vs adamw_step");
          compare(v[i], to_host(v1[i]), 0.0, 0.0, tl + " exp_avg_sq vs adamw_step");
        }
      }
    });
  }
}

std::vector<int64_t> single_sizes() {
  static const std::vector<int64_t> fast{0, 1, 17, 8191, 8193, 32768, 32769};
  static const std::vector<int64_t> all =
      crossing({8192, 16384, 24576, 32768, 256}, {0, 1, 2, 3, 7, 5 * 8192 + 1});
  return pick(fast, all);
}

}  // namespace

TEST_SUITE("sweep") {

TEST_CASE("sweep: optim: adamw_step, one tensor across kChunk and kParallelGrain") {
  uint64_t seed = 1000;
  for (int64_t n : single_sizes()) run_adamw({n}, full() ? 4 : 3, /*single=*/true, ++seed);
}

TEST_CASE("sweep: optim: adamw_multi_step, mixed sizes in one call") {
  std::vector<std::vector<int64_t>> lists = {
      {16384, 16384},                  // total = kParallelGrain: serial
      {16384, 16385},                  // total just above: parallel
      {8191, 8193, 8192, 8191},        // chunk tails in every tensor, total 32767
      {0, 1, 8193, 0, 17, 32769, 3},   // empty tensors between, one tensor alone over the grain
      {32768},                         // one tensor at the grain
  };
  if (full()) {
    lists.push_back({16383, 16384, 16385, 1, 0, 24577});  // CUDA kMultiChunk tails
    std::vector<int64_t> l35, l36, l37, l73, e37, e38;     // CUDA kMultiTensors = 36 per launch
    for (int64_t i = 0; i < 73; ++i) {
      const int64_t n = 1 + (i * 977) % 1500;
      if (i < 35) l35.push_back(n);
      if (i < 36) l36.push_back(n);
      if (i < 37) l37.push_back(n);
      l73.push_back(n);
    }
    e37 = l37;  // 37 entries, 2 empty: 35 launched ones
    e37[5] = e37[20] = 0;
    e38 = l37;  // 38 entries, 1 empty: 37 launched ones
    e38.insert(e38.begin() + 36, 0);
    l73.back() = 16385;
    for (const auto& l : {l35, l36, l37, l73, e37, e38}) lists.push_back(l);
  }
  uint64_t seed = 1100;
  for (const auto& l : lists) run_adamw(l, 3, /*single=*/false, ++seed);
}

TEST_CASE("sweep: optim: train::AdamW, parameter groups, both dtypes in one optimizer") {
  // The trainer's API: groups with their own weight decay and lr scale, f32 and f64 parameters in
  // one optimizer (one multi step per dtype), a parameter without a gradient (skipped), grads
  // passed as non-contiguous tensors (the optimizer copies them).
  const std::vector<Shape> shapes = pick(std::vector<Shape>{{7, 5}, {8193}, {3, 11000}, {1}},
                                         std::vector<Shape>{{7, 5}, {8193}, {3, 11000}, {1}, {129, 257}, {0, 4}, {32769}});
  const int steps = full() ? 5 : 3;
  const double lr = 2e-2;
  const double wds[2] = {0.25, 0.0}, scales[2] = {1.0, 0.5};
  Generator g(sweep_seed() + 5);
  // Initial values and every step's gradients, shared by all configs.
  std::vector<Tensor> p0;
  std::vector<std::vector<Tensor>> grads(static_cast<size_t>(steps));
  std::vector<NaiveAdam> want;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const DType dt = i % 2 ? DType::f64 : DType::f32;
    p0.push_back(input(shapes[i], g, dt));
    const size_t n = static_cast<size_t>(p0.back().numel());
    want.push_back({to_host(p0.back()).v, std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)});
  }
  const size_t skipped = 2;  // never gets a gradient
  for (int s = 0; s < steps; ++s)
    for (size_t i = 0; i < shapes.size(); ++i) {
      grads[static_cast<size_t>(s)].push_back(input(shapes[i], g, p0[i].dtype()));
      if (i == skipped) continue;
      want[i].step(to_host(grads[static_cast<size_t>(s)][i]).v, lr * scales[i % 2],
                   wds[i % 2], s + 1);
    }
  for_each_config([&](const Config&) {
    std::vector<Tensor> ps;
    train::ParamGroup g0{{}, wds[0], scales[0]}, g1{{}, wds[1], scales[1]};
    for (size_t i = 0; i < shapes.size(); ++i) {
      ps.push_back(clone(p0[i]).detach().requires_grad_(true));
      (i % 2 == 0 ? g0 : g1).params.emplace_back("p" + std::to_string(i), ps.back());
    }
    train::AdamW opt({g0, g1}, lr, train::AdamWOptions{kB1, kB2, kEps});
    for (int s = 0; s < steps; ++s) {
      opt.zero_grad();
      for (size_t i = 0; i < shapes.size(); ++i)
        if (i != skipped) ps[i].set_grad(non_contiguous(grads[static_cast<size_t>(s)][i]));
      opt.step();
    }
    std::map<std::string, Tensor> state;
    for (const auto& [name, t] : opt.state()) state[name] = t;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const DType dt = p0[i].dtype();
      const std::string n = "p" + std::to_string(i);
      const std::string tl = "train::AdamW " + n + " " + dtype_name(dt) + " numel " + std::to_string(p0[i].numel());
      compare(ps[i], host_of(shapes[i], want[i].p), rtol_of(dt), atol_of(dt), tl + " param");
      compare(state.at(n + ".exp_avg"), host_of(shapes[i], want[i].m), rtol_of(dt), atol_of(dt), tl + " exp_avg");
      compare(state.at(n + ".exp_avg_sq"), host_of(shapes[i], want[i].v), rtol_of(dt), atol_of(dt),
              tl + " exp_avg_sq");
    }
  });
}

TEST_CASE("sweep: optim: train::SGD, momentum and weight decay") {
  const std::vector<int64_t> ns = pick(std::vector<int64_t>{1, 8193, 32769}, crossing({8192, 32768}, {0, 1, 7}));
  const int steps = 3;
  const double lr = 5e-2;
  uint64_t seed = 1300;
  for (double momentum : {0.0, 0.9})
    for (double wd : {0.0, 0.1})
      for (DType dt : float_dtypes()) {
        Generator g(++seed);
        std::vector<Tensor> p0;
        std::vector<std::vector<Tensor>> grads(steps);
        std::vector<std::vector<double>> wp, wbuf;
        for (int64_t n : ns) {
          p0.push_back(input({n}, g, dt));
          wp.push_back(to_host(p0.back()).v);
          wbuf.push_back(std::vector<double>(static_cast<size_t>(n), 0.0));
        }
        for (int s = 0; s < steps; ++s)
          for (size_t i = 0; i < ns.size(); ++i) {
            grads[static_cast<size_t>(s)].push_back(input({ns[i]}, g, dt));
            const std::vector<double> gv = to_host(grads[static_cast<size_t>(s)][i]).v;
            for (size_t j = 0; j < gv.size(); ++j) {  // torch.optim.SGD, dampening 0, no nesterov
              double d = gv[j] + wd * wp[i][j];
              if (momentum > 0) {
                wbuf[i][j] = s == 0 ? d : momentum * wbuf[i][j] + d;
                d = wbuf[i][j];
              }
              wp[i][j] -= lr * d;
            }
          }
        const std::string label = "train::SGD momentum " + std::to_string(momentum) + " wd " + std::to_string(wd) +
                                  " " + dtype_name(dt);
        for_each_config([&](const Config&) {
          std::vector<Tensor> ps;
          train::ParamGroup grp{{}, wd, 1.0};
          for (size_t i = 0; i < ns.size(); ++i) {
            ps.push_back(clone(p0[i]).detach().requires_grad_(true));
            grp.params.emplace_back("p" + std::to_string(i), ps.back());
          }
          train::SGD opt({grp}, lr, momentum);
          for (int s = 0; s < steps; ++s) {
            for (size_t i = 0; i < ns.size(); ++i) ps[i].set_grad(grads[static_cast<size_t>(s)][i]);
            opt.step();
          }
          for (size_t i = 0; i < ns.size(); ++i)
            compare(ps[i], host_of({ns[i]}, wp[i]), rtol_of(dt), atol_of(dt),
                    label + " numel " + std::to_string(ns[i]));
        });
      }
}

TEST_CASE("sweep: optim: seeded random tensor lists (property)") {
  const uint64_t seed = sweep_seed();
  INFO("HH_SWEEP_SEED=" << seed);
  std::mt19937_64 rng(seed + 1);
  auto draw = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int count = full() ? 12 : 2;
  for (int c = 0; c < count; ++c) {
    std::vector<int64_t> ns(static_cast<size_t>(draw(1, full() ? 40 : 8)));
    for (int64_t& n : ns) n = draw(0, 3) == 0 ? draw(0, 40000) : draw(0, 300);
    run_adamw(ns, 2, /*single=*/draw(0, 3) == 0, seed + static_cast<uint64_t>(c));
  }
}

}  // TEST_SUITE("sweep")

}  // namespace hh::test::sweep
