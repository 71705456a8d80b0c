// The sweep harness (see sweep.h).
#include "tests/sweep/sweep.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/parallel.h"

namespace hh::test::sweep {

bool full() {
  static const bool on = [] {
    const char* e = std::getenv("HH_SWEEP");
    return e && std::string(e) == "full";
  }();
  return on;
}

uint64_t sweep_seed() {
  static const uint64_t seed = [] {
    const char* e = std::getenv("HH_SWEEP_SEED");
    uint64_t s = e ? std::strtoull(e, nullptr, 10)
                   : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) % 1000000007u;
    std::printf("sweep: random shapes use HH_SWEEP_SEED=%llu\n", static_cast<unsigned long long>(s));
    std::fflush(stdout);
    return s;
  }();
  return seed;
}

std::string Config::name() const {
  if (cuda_requested()) return "cuda";
  return std::to_string(threads) + " thread" + (threads == 1 ? "" : "s") + ", " + cpu_isa_name(isa);
}

std::vector<Config> configs(bool isa_paths) {
  if (cuda_requested()) return {Config{}};
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::scalar, CpuIsa::avx2, CpuIsa::avx512})
    if (cpu_isa_supported(isa)) isas.push_back(isa);
  if (!isa_paths) isas = {isas.back()};
  if (!full()) return {Config{1, isas.back()}, Config{4, isas.front()}};
  std::vector<Config> out;
  for (int t : {1, 2, 4})
    for (CpuIsa isa : isas) out.push_back(Config{t, isa});
  return out;
}

void for_each_config(const std::function<void(const Config&)>& fn, bool isa_paths) {
  struct Restore {
    int threads = num_threads();
    CpuIsa isa = cpu_isa();
    ~Restore() {
      set_num_threads(threads);
      set_cpu_isa(isa);
    }
  } restore;
  for (const Config& c : configs(isa_paths)) {
    if (!cuda_requested()) {
      set_num_threads(c.threads);
      set_cpu_isa(c.isa);
    }
    const std::string name = c.name();
    INFO("config: " << name);
    fn(c);
  }
}

std::vector<int64_t> around(int64_t t) {
  std::vector<int64_t> out;
  for (int64_t v : {t - 1, t, t + 1})
    if (v >= 0) out.push_back(v);
  return out;
}

std::vector<int64_t> crossing(const std::vector<int64_t>& thresholds, const std::vector<int64_t>& extra) {
  std::vector<int64_t> out = extra;
  for (int64_t t : thresholds)
    for (int64_t v : around(t)) out.push_back(v);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Tensor input(const Shape& s, Generator& g, DType t, double lo, double hi) {
  return rand_input(s, lo, hi, g, t).to(test_device());
}

std::vector<Tensor> layout(const std::vector<Tensor>& xs, bool noncontig) {
  if (!noncontig) return xs;
  std::vector<Tensor> out;
  for (const Tensor& x : xs) out.push_back(x.defined() ? non_contiguous(x) : x);
  return out;
}

void check_forward(const OpFn& fn, const RefFn& ref, const std::vector<Tensor>& inputs, const std::string& label,
                   double rtol, double atol) {
  std::vector<Host> hosts;
  for (const Tensor& x : inputs) hosts.push_back(x.defined() ? to_host(x) : Host{});
  const Host want = ref(hosts);
  for (bool nc : {false, true}) {
    NoGradGuard ng;
    compare(fn(layout(inputs, nc)), want, rtol, atol, label + (nc ? " (non-contiguous)" : ""));
  }
}

void check_directional(const OpFn& fn, const std::vector<Tensor>& inputs, const std::vector<int>& which,
                       const std::string& label, double tol) {
  INFO("directional gradient " << label);
  std::vector<Tensor> xs;
  for (const Tensor& x : inputs) xs.push_back(x.defined() ? clone(x).detach() : x);
  for (int i : which) {
    REQUIRE_MESSAGE(xs[static_cast<size_t>(i)].dtype() == DType::f64, "input ", i, " must be f64");
    xs[static_cast<size_t>(i)].requires_grad_(true);
  }
  Tensor y = fn(xs);
  Generator g(sweep_seed() + 17);
  Tensor w = rand_input(y.shape(), -1.0, 1.0, g, DType::f64).to(y.device());
  sum(mul(y, w)).backward();
  const double h = 1e-5;
  for (int i : which) {
    const Tensor& x = xs[static_cast<size_t>(i)];
    REQUIRE_MESSAGE(x.grad().defined(), "input ", i, " got no gradient");
    Tensor v = rand_input(x.shape(), -1.0, 1.0, g, DType::f64).to(x.device());
    auto loss_at = [&](double step) {
      NoGradGuard ng;
      std::vector<Tensor> ys = xs;
      ys[static_cast<size_t>(i)] = add(x.detach(), mul(v, step));
      return sum(mul(fn(ys), w)).item<double>();
    };
    const double numeric = (loss_at(h) - loss_at(-h)) / (2 * h);
    const double analytic = sum(mul(x.grad(), v)).item<double>();
    const double scale = std::max(1.0, sum(abs(mul(x.grad(), v))).item<double>());
    CHECK_MESSAGE(std::fabs(analytic - numeric) <= tol * scale, "input ", i, ": <grad, v> = ", analytic,
                  ", finite difference ", numeric, " (scale ", scale, ")");
  }
}

Tensor key_mask_of(int64_t B, int64_t L, int64_t front) {
  std::vector<double> m(static_cast<size_t>(B * L), 1.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l) {
      bool real = true;
      switch (b % 4) {
        case 0: real = !(l % 4 == 2 || l >= L - 3); break;
        case 1: real = l >= 3; break;
        case 2: real = l >= front; break;
        default: real = false;
      }
      m[static_cast<size_t>(b * L + l)] = real ? 1.0 : 0.0;
    }
  return from_vector(m, {B, L}, {DType::boolean}).to(test_device());
}

// fn with every floating input of rank >= 2 made non-contiguous by differentiable ops (a
// transposed copy, transposed back), so the backward runs through the strided layouts too.
OpFn strided(const OpFn& fn) {
  return [fn](const std::vector<Tensor>& xs) {
    std::vector<Tensor> ys;
    for (const Tensor& x : xs)
      ys.push_back(x.defined() && x.dim() >= 2 && is_floating(x.dtype())
                       ? transpose(contiguous(transpose(x, -1, -2)), -1, -2)
                       : x);
    return fn(ys);
  };
}

// The f32 backward (its own kernel instantiation) against the f64 one on the same values, which
// check_directional verifies: loss = sum(w · fn(x)), every input in `which`, max |g32 - g64| <= tol
// times max |g64|, or times 1 when that is smaller (check_directional's floor too: a gradient that
// cancels to rounding, as pq's does with one feature and the normalizer, has no relative error).
void check_f32_grads(const OpFn& fn, const std::vector<Tensor>& x64, const std::vector<int>& which,
                     const std::string& label, double tol) {
  INFO("f32 gradients against f64 " << label);
  auto grads = [&](DType t) {
    std::vector<Tensor> xs;
    for (const Tensor& x : x64) xs.push_back(x.defined() && is_floating(x.dtype()) ? to_dtype(x, t).detach() : x);
    for (int i : which) xs[static_cast<size_t>(i)].requires_grad_(true);
    Tensor y = fn(xs);
    Generator g(sweep_seed() + 29);
    // The same weights in both dtypes: drawn in f64, rounded to t.
    sum(mul(y, to_dtype(rand_input(y.shape(), -1.0, 1.0, g, DType::f64), t).to(y.device()))).backward();
    std::vector<Tensor> out;
    for (int i : which) out.push_back(to_dtype(xs[static_cast<size_t>(i)].grad(), DType::f64));
    return out;
  };
  const std::vector<Tensor> g32 = grads(DType::f32), g64 = grads(DType::f64);
  for (size_t j = 0; j < which.size(); ++j) {
    INFO("input " << which[j]);
    const double err = amax(abs(sub(g32[j], g64[j]))).item<double>();
    const double scale = std::max(1.0, amax(abs(g64[j])).item<double>());
    CHECK_MESSAGE(err <= tol * scale, "max |g32 - g64| = ", err, " against max |g64| = ", scale);
  }
}

}  // namespace hh::test::sweep
