// bench_ops: throughput of the GEMM and of a few memory-bound ops, on the CPU next to the
// machine's measured FMA peak, or on a CUDA device (--device cuda). Companion:
// tools/bench_torch_cpu.py prints the same table for PyTorch (its --device cuda too).
//
//   bench_ops [--threads 1,2] [--reps 7] [--json FILE] [--device cpu|cuda[:N]] [--gemm-dtypes f32,bf16]
//
// --gemm-dtypes adds GEMM rows in bf16 (tensor cores with f32 accumulation on CUDA; on the CPU the
// reference path: operands widened to f32, one f32 GEMM, the result rounded).
//
// GEMM rows time Backend::gemm into a preallocated output (what torch.matmul(a, b, out=c) does),
// so page faults of a fresh 50 MB result do not blur the kernel; op rows call the hh:: op API
// (allocating, like torch's eager ops). Every row: warm-up runs, then the median of --reps.
//
// Besides wall time, every row reports a CPU-time rate: work / (process CPU seconds / threads).
// On an idle machine the two agree; on a shared one (other jobs on the same cores) the wall rate
// drops while the CPU-time rate still estimates what the code does when it has the cores.
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/app.h"
#include "apps/kit/bench_stats.h"
#include "cli/flags.h"
#include "autograd/ops.h"
#include "core/backend.h"
#include "core/cpu_isa.h"
#include "core/device.h"
#include "core/error.h"
#include "core/parallel.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kWarmup = 2;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

using ::hh::apps::median;

struct Timing {
  double wall = 0;  // median wall seconds
  double cpu = 0;   // median process CPU seconds (all threads)
};

// Medians of f over `reps` runs after kWarmup runs. `sync` waits for the device (a no-op on the
// CPU), before the clock starts and before it stops.
Timing time_median(const std::function<void()>& f, int reps, const std::function<void()>& sync = [] {}) {
  for (int i = 0; i < kWarmup; ++i) f();
  std::vector<double> ws, cs;
  for (int i = 0; i < reps; ++i) {
    sync();
    auto t0 = Clock::now();
    double c0 = cpu_seconds();
    f();
    sync();
    cs.push_back(cpu_seconds() - c0);
    ws.push_back(seconds_since(t0));
  }
  return {median(ws), median(cs)};
}

// ---- FMA peak: register-only multiply-add chains, no memory traffic ----
// 12 independent accumulators per thread cover FMA latency (4-5 cycles) × 2 FMA pipes. The
// widest FMA this machine has is chosen at run time (core/cpu_isa.h), like the GEMM kernels.
constexpr int kChains = 12;

// Sum of the chains' first lanes after `iters` rounds (kept, so the loop is not optimised out).
#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2,fma"))) float fma_chains_avx2(int64_t iters, float seed) {
  __m256 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm256_set1_ps(0.01f * static_cast<float>(j) + seed);
  const __m256 mul = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-7f);  // converges to 0.1
  for (int64_t it = 0; it < iters; ++it)
    for (int j = 0; j < kChains; ++j) acc[j] = _mm256_fmadd_ps(acc[j], mul, add);
  float s = 0.0f;
  for (int j = 0; j < kChains; ++j) s += _mm256_cvtss_f32(acc[j]);
  return s;
}
__attribute__((target("avx512f"))) float fma_chains_avx512(int64_t iters, float seed) {
  __m512 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_ps(0.01f * static_cast<float>(j) + seed);
  const __m512 mul = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it)
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], mul, add);
  float s = 0.0f;
  for (int j = 0; j < kChains; ++j) s += _mm512_cvtss_f32(acc[j]);
  return s;
}
#endif

// Lanes of the FMA the peak uses (0 without FMA), and its name.
int fma_lanes() {
#if defined(__x86_64__) || defined(__i386__)
  switch (hh::cpu_isa()) {
    case hh::CpuIsa::avx512: return 16;
    case hh::CpuIsa::avx2: return 8;
    case hh::CpuIsa::scalar: return 0;
  }
#endif
  return 0;
}
const char* fma_name() {
  const int lanes = fma_lanes();
  return lanes == 16 ? "AVX-512 FMA" : lanes == 8 ? "AVX2 FMA" : nullptr;
}

// {wall, CPU-time} GFLOP/s of `threads` threads each running `iters` rounds of kChains FMAs;
// zeros without FMA.
Timing fma_peak_once(int threads, int64_t iters) {
  const int lanes = fma_lanes();
  if (lanes == 0) return {};
  volatile float sink = 0.0f;
  auto t0 = Clock::now();
  double c0 = cpu_seconds();
#pragma omp parallel num_threads(threads)
  {
    float s = 0.0f;
#if defined(__x86_64__) || defined(__i386__)
    const float seed = 0.001f * static_cast<float>(omp_get_thread_num());
    s = lanes == 16 ? fma_chains_avx512(iters, seed) : fma_chains_avx2(iters, seed);
#endif
#pragma omp atomic
    sink += s;
  }
  double dt = seconds_since(t0), dc = cpu_seconds() - c0;
  (void)sink;
  double gflop = 2.0 * lanes * kChains * static_cast<double>(iters) * threads / 1e9;
  return {gflop / dt, gflop / (dc / threads)};
}

Timing fma_peak(int threads, int reps) {
  const int64_t iters = 20'000'000;  // ~4 GFLOP per thread: tens of milliseconds
  for (int i = 0; i < kWarmup; ++i) fma_peak_once(threads, iters / 4);
  std::vector<double> w, c;
  for (int i = 0; i < reps; ++i) {
    Timing t = fma_peak_once(threads, iters);
    w.push_back(t.wall);
    c.push_back(t.cpu);
  }
  return {median(w), median(c)};
}

// ---- GEMM rows ----
struct GemmCase {
  std::string name;
  int64_t batch, m, k, n;
};

std::vector<GemmCase> gemm_cases() {
  return {
      {"(4096x768)·(768x768)", 1, 4096, 768, 768},
      {"(4096x768)·(768x3072)", 1, 4096, 768, 3072},
      {"(4096x3072)·(3072x768)", 1, 4096, 3072, 768},
      {"48x(512x64)·(64x512)", 48, 512, 64, 512},
      {"48x(512x512)·(512x64)", 48, 512, 512, 64},
  };
}

// ---- memory-bound op rows: (rows, cols) f32, 32 MiB per tensor (larger than most L3s) ----
constexpr int64_t kRows = 4096, kCols = 2048;

struct OpCase {
  std::string name;
  double bytes;  // bytes each call must read + write
  std::function<hh::Tensor()> fn;
};

std::vector<OpCase> op_cases(const hh::Tensor& x, const hh::Tensor& y, const hh::Tensor& w, const hh::Tensor& b) {
  const double n = static_cast<double>(x.numel()) * 4.0, row = static_cast<double>(kCols) * 4.0;
  return {
      {"copy (clone)", 2 * n, [&] { return hh::clone(x); }},
      {"add", 3 * n, [&] { return hh::add(x, y); }},
      {"mul", 3 * n, [&] { return hh::mul(x, y); }},
      {"exp", 2 * n, [&] { return hh::exp(x); }},
      {"gelu (erf)", 2 * n, [&] { return hh::gelu(x); }},
      {"sum over last dim", n + n / kCols, [&] { return hh::sum(x, {-1}); }},
      {"softmax (last dim)", 2 * n, [&] { return hh::softmax(x, -1); }},
      {"layer_norm (last dim)", 2 * n + 2 * row, [&] { return hh::layer_norm(x, w, b); }},
  };
}

// ---- flags ----
struct Flags {
  std::vector<int> threads{1, 2};
  int reps = 7;
  std::string json;
  std::string device = "cpu";
  std::vector<hh::DType> gemm_dtypes{hh::DType::f32};
};

// Returns false when --help was given (printed).
bool parse_flags(int argc, char** argv, Flags& out) {
  hh::cli::Flags f("bench_ops", "bench_ops: the engine's op table (GEMM, elementwise, reductions, softmax, norms) timed "
                                 "at each thread count, medians of --reps runs; tools/bench_torch_cpu.py is its PyTorch twin.");
  f.add("threads", "1,2", "CPU thread counts to time, a comma list");
  f.add("reps", "7", "timed repetitions per op (the median is reported)");
  f.add("json", "", "also write the results to this JSON file");
  f.add("device", "cpu", "cpu or cuda[:N]");
  f.add("gemm-dtypes", "f32", "GEMM operand types to time: f32 and/or bf16, a comma list");
  if (!f.parse(argc, argv)) return false;
  out.threads.clear();
  for (int64_t t : f.integers("threads", 1, 4096)) out.threads.push_back(static_cast<int>(t));
  out.reps = static_cast<int>(f.integer("reps", 1, 4096));
  out.json = f.str("json");
  HH_CHECK(!f.given("json") || !out.json.empty(), "flag --json needs a file name");
  out.device = f.str("device");
  out.gemm_dtypes.clear();
  for (const std::string& name : hh::cli::Flags::split_list(f.str("gemm-dtypes"))) {
    HH_CHECK(name == "f32" || name == "bf16", "flag --gemm-dtypes: expects f32 and/or bf16, got '", name, "'");
    out.gemm_dtypes.push_back(name == "f32" ? hh::DType::f32 : hh::DType::bf16);
  }
  HH_CHECK(!out.gemm_dtypes.empty(), "flag --gemm-dtypes: expects f32 and/or bf16");
  return true;
}

int run(const Flags& flags) {
  using nlohmann::json;
  const hh::Device dev = hh::parse_device(flags.device);
  const bool gpu = dev.is_cuda();
  HH_CHECK(!gpu || hh::cuda_available(), "--device ", flags.device, ": no CUDA device available");
  // On a GPU, --threads does not apply: one pass, labelled 0 threads.
  const std::vector<int> threads = gpu ? std::vector<int>{0} : flags.threads;
  const hh::Options opt{hh::DType::f32, dev};
  json out = {{"library", "hedgehog"}, {"dtype", "f32"}, {"reps", flags.reps}, {"warmup", kWarmup},
              {"device", flags.device}};

  std::printf("hedgehog %s benchmark, f32, median of %d runs after %d warm-ups\n", gpu ? flags.device.c_str() : "CPU",
              flags.reps, kWarmup);
  // FMA peak per thread count (CPU only; a GPU row reports plain rates).
  json peaks = json::object(), peaks_cpu = json::object();
  std::vector<Timing> peak(threads.size());
  if (!gpu) {
    std::printf("\nFMA peak (%s, %d register-only chains per thread, measured)\n", fma_name() ? fma_name() : "unavailable",
                kChains);
    std::printf("  %7s %14s %18s\n", "threads", "wall GFLOP/s", "cpu-time GFLOP/s");
    for (size_t i = 0; i < threads.size(); ++i) {
      peak[i] = fma_peak(threads[i], flags.reps);
      std::printf("  %7d %14.1f %18.1f\n", threads[i], peak[i].wall, peak[i].cpu);
      peaks[std::to_string(threads[i])] = peak[i].wall;
      peaks_cpu[std::to_string(threads[i])] = peak[i].cpu;
    }
  }
  out["fma_peak_gflops"] = peaks;
  out["fma_peak_cpu_gflops"] = peaks_cpu;
  out["isa"] = gpu ? "cuda" : (fma_name() ? fma_name() : "none");
  out["cpu_isa"] = hh::cpu_isa_name(hh::cpu_isa());

  // GEMM.
  std::printf("\n%-28s %7s %9s %9s %7s %9s %7s\n", "GEMM (into preallocated C)", "threads", "ms", "GFLOP/s", "%peak",
              "cpu GF/s", "%peak");
  json gemm_rows = json::array();
  hh::Generator gen(42);
  for (hh::DType dt : flags.gemm_dtypes) {
    for (const GemmCase& g : gemm_cases()) {
      hh::Tensor a = hh::uniform({g.batch, g.m, g.k}, -1, 1, gen, opt).to(dt);
      hh::Tensor b = hh::uniform({g.batch, g.k, g.n}, -1, 1, gen, opt).to(dt);
      hh::Tensor c = hh::empty({g.batch, g.m, g.n}, {dt, dev});
      const std::string label = dt == hh::DType::f32 ? g.name : g.name + " bf16";
      hh::Backend& be = hh::backend_of(c);
      auto sync = [&] { be.synchronize(); };
      const double gflop = 2.0 * static_cast<double>(g.batch * g.m) * static_cast<double>(g.k * g.n) / 1e9;
      for (size_t i = 0; i < threads.size(); ++i) {
        const int th = threads[i];
        if (!gpu) hh::set_num_threads(th);
        Timing t = time_median([&] { be.gemm(a, b, c, {1.0, 0.0}); }, flags.reps, sync);
        const double gf = gflop / t.wall, gfc = gpu ? gf : gflop / (t.cpu / th);
        const double pct = peak[i].wall > 0 ? 100.0 * gf / peak[i].wall : 0.0;
        const double pctc = peak[i].cpu > 0 ? 100.0 * gfc / peak[i].cpu : 0.0;
        std::printf("%-28s %7d %9.3f %9.1f %6.1f%% %9.1f %6.1f%%\n", label.c_str(), th, t.wall * 1e3, gf, pct, gfc,
                    pctc);
        gemm_rows.push_back({{"name", g.name}, {"dtype", hh::dtype_name(dt)}, {"batch", g.batch}, {"m", g.m},
                             {"k", g.k}, {"n", g.n}, {"threads", th}, {"ms", t.wall * 1e3}, {"gflops", gf}, {"pct_peak", pct}, {"cpu_gflops", gfc},
                             {"cpu_pct_peak", pctc}});
      }
    }
  }
  out["gemm"] = gemm_rows;

  // Memory-bound ops through the op API.
  std::printf("\n%-28s %7s %9s %9s %9s\n", "op on (4096x2048) f32", "threads", "ms", "GB/s", "cpu GB/s");
  json op_rows = json::array();
  hh::Tensor x = hh::uniform({kRows, kCols}, -2, 2, gen, opt), y = hh::uniform({kRows, kCols}, -2, 2, gen, opt);
  hh::Tensor w = hh::uniform({kCols}, 0.5, 1.5, gen, opt), bias = hh::uniform({kCols}, -0.5, 0.5, gen, opt);
  hh::Backend& be = hh::backend_of(x);
  auto sync = [&] { be.synchronize(); };
  hh::NoGradGuard no_grad;
  for (const OpCase& op : op_cases(x, y, w, bias)) {
    for (int th : threads) {
      if (!gpu) hh::set_num_threads(th);
      json row = {{"name", op.name}, {"threads", th}};
      try {
        Timing t = time_median([&] { op.fn(); }, flags.reps, sync);
        const double gbs = op.bytes / t.wall / 1e9, gbc = gpu ? gbs : op.bytes / (t.cpu / th) / 1e9;
        std::printf("%-28s %7d %9.3f %9.1f %9.1f\n", op.name.c_str(), th, t.wall * 1e3, gbs, gbc);
        row["ms"] = t.wall * 1e3;
        row["gbs"] = gbs;
        row["cpu_gbs"] = gbc;
      } catch (const hh::Error& e) {
        std::printf("%-28s %7d %9s %9s %9s\n", op.name.c_str(), th, "n/a", "n/a", "n/a");
        row["ms"] = nullptr;
        row["gbs"] = nullptr;
        row["error"] = e.what();
      }
      op_rows.push_back(row);
    }
  }
  out["ops"] = op_rows;

  if (!flags.json.empty()) {
    std::ofstream f(flags.json);
    HH_CHECK(static_cast<bool>(f), "cannot write --json file '", flags.json, "'");
    f << out.dump(2) << "\n";
  }
  return 0;
}

int run_cli(int argc, char** argv) {
  Flags flags;
  if (!parse_flags(argc, argv, flags)) return 0;
  return run(flags);
}

}  // namespace

int main(int argc, char** argv) { return hh::cli::run_main(argc, argv, run_cli); }
