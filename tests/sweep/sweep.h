// Threshold sweeps (issue 41): every kernel's path-choosing constants crossed, not a few shapes.
//
// Each kernel family has a file here (tests/sweep/sweep_<family>.cpp) whose header comment lists the
// constants that choose a path in the kernel and the sizes that cross them. A sweep case:
//   - runs under every Config of configs(): CPU thread counts 1, 2 and 4 crossed with the ISA paths
//     this machine has (scalar, avx2, avx512), or the device under test alone with HH_DEVICE=cuda;
//   - compares the op's forward, f32 and f64, on contiguous and non-contiguous inputs, against a
//     naive host loop in f64 (Host, tests/op_table.h);
//   - checks the backward with directional derivatives in f64 (check_directional below), which cost
//     two forwards whatever the size, so a gradient that drops rows past a threshold is caught.
// The default suite runs the fast subset (fewer configs and sizes); HH_SWEEP=full runs everything
// (CTest: `ctest -L sweep`, the hh_sweep_full test). Random shapes on top draw from sweep_seed(),
// which is printed; HH_SWEEP_SEED=N replays one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/cpu_isa.h"
#include "tests/op_table.h"

namespace hh::test::sweep {

// HH_SWEEP=full: every config and size; otherwise the fast subset of the default suite.
bool full();
// Picks the fast or the full list (a copy: `for (x : pick(list{...}, list{...}))` is safe).
template <typename T>
T pick(const T& fast, const T& all) {
  return full() ? all : fast;
}

// The seed of the random-shape (property) cases: HH_SWEEP_SEED, else drawn from the clock. Printed
// once per process (and in every failing case's context) so a failure can be replayed.
uint64_t sweep_seed();

struct Config {
  int threads = 1;
  CpuIsa isa = CpuIsa::scalar;
  std::string name() const;
};
// CPU: threads {1, 2, 4} x the ISA paths this machine supports (fast subset: 1 thread on the best
// path and 4 threads on the scalar path). CUDA: one config (threads and ISA do not apply).
std::vector<Config> configs(bool isa_paths = true);
// Runs fn once per config with the thread count and ISA set (restored afterwards, also on throw).
// The config's name is in doctest's context for every check inside fn. A kernel with no per-ISA
// copies (core/cpu/cpu_kernels.h lists those that have them) passes isa_paths = false: thread
// counts 1, 2, 4 (fast subset: 1 and 4) on the best path only.
void for_each_config(const std::function<void(const Config&)>& fn, bool isa_paths = true);

// Sizes around a threshold t: {t - 1, t, t + 1}, the ones >= 0.
std::vector<int64_t> around(int64_t t);
// around() of each threshold plus the extras, sorted, without duplicates.
std::vector<int64_t> crossing(const std::vector<int64_t>& thresholds, const std::vector<int64_t>& extra = {});

// The dtypes a forward is compared in.
inline std::vector<DType> float_dtypes() { return {DType::f32, DType::f64}; }
// Forward tolerances: f32 against the f64 reference, relative and absolute; f64 tight.
inline double rtol_of(DType t) { return t == DType::f32 ? 1e-4 : 1e-10; }
inline double atol_of(DType t) { return t == DType::f32 ? 1e-4 : 1e-10; }

// Random U(lo, hi) input of dtype t on the device under test.
Tensor input(const Shape& s, Generator& g, DType t, double lo = -1.0, double hi = 1.0);
// Inputs as the op sees them in one layout pass: contiguous or each non_contiguous().
std::vector<Tensor> layout(const std::vector<Tensor>& xs, bool noncontig);

// Forward check: fn on the inputs (contiguous, then non-contiguous) against ref on their host values.
void check_forward(const OpFn& fn, const RefFn& ref, const std::vector<Tensor>& inputs, const std::string& label,
                   double rtol, double atol);

// Backward check in f64 by directional derivatives: with loss = sum(w * fn(x)) for a random w, for
// each input i in `which` and a random direction v, <grad_i, v> must equal
// (loss(x_i + h v) - loss(x_i - h v)) / 2h within tol relative to sum |grad_i| |v| (at least 1).
// The inputs must be f64. Two forwards per input, so it runs at any size.
void check_directional(const OpFn& fn, const std::vector<Tensor>& inputs, const std::vector<int>& which,
                       const std::string& label, double tol = 1e-6);

// Multi-index of flat position i in a row-major shape s, and back.
inline std::vector<int64_t> unravel(int64_t i, const Shape& s) {
  std::vector<int64_t> c(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    c[d] = i % s[d];
    i /= s[d];
  }
  return c;
}
inline int64_t ravel(const std::vector<int64_t>& c, const Shape& s) {
  int64_t f = 0;
  for (size_t d = 0; d < s.size(); ++d) f = f * s[d] + c[d];
  return f;
}

// Index of (b, h, i, c) in a row-major (B,H,L,C) host tensor of shape s.
inline size_t at4(const Shape& s, int64_t b, int64_t h, int64_t i, int64_t c) {
  return static_cast<size_t>(((b * s[1] + h) * s[2] + i) * s[3] + c);
}

// A (B,L) bool key mask on the device under test: batch entry b % 4 == 0 has holes (every 4th key
// from the third) and a padded tail of 3; 1: the first 3 keys padded (causal queries 0..2 see no
// key); 2: the first `front` keys padded (64: a whole flash tile; 20: more than a band of queries
// with no real key in their window); 3: every key padded.
Tensor key_mask_of(int64_t B, int64_t L, int64_t front);

// fn with every floating input of rank >= 2 made non-contiguous by differentiable ops (a
// transposed copy, transposed back), so the backward runs through the strided layouts too.
OpFn strided(const OpFn& fn);

// The f32 backward (its own kernel instantiation) against the f64 one on the same values, which
// check_directional verifies: loss = sum(w · fn(x)), every input in `which`, max |g32 - g64| <= tol
// times max |g64|, or times 1 when that is smaller (a gradient that cancels to rounding has no
// relative error).
void check_f32_grads(const OpFn& fn, const std::vector<Tensor>& x64, const std::vector<int>& which,
                     const std::string& label, double tol);

}  // namespace hh::test::sweep
