// CPU kernels for the fused nn ops: softmax / log-softmax, layer_norm, rms_norm and
// cross-entropy, forward and backward. Every kernel works on contiguous rows (N,R) in f32 or f64,
// one row per OpenMP iteration; row sums accumulate in double (Acc) so long f32 rows stay
// accurate. Parameter gradients (layer_norm / rms_norm weight and bias) are reduced over rows
// with per-thread partial sums combined afterwards, so there are no races and the result is
// deterministic for a given thread count.
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/vec_math.h"

namespace hh {

namespace {

using Acc = double;

// Rows of a contiguous tensor viewed as (N, R): R is the last dim (1 for a 0-d tensor).
struct Rows {
  int64_t n = 0, r = 0;
};
Rows rows_of(const Tensor& t) {
  Rows s;
  s.r = t.dim() == 0 ? 1 : t.shape().back();
  s.n = t.dim() <= 1 ? 1 : numel_of(Shape(t.shape().begin(), t.shape().end() - 1));
  return s;
}

template <typename T>
T row_max(const T* x, int64_t r) {
  T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < r; ++j) m = std::max(m, x[j]);
  return m;
}

// log(sum_j exp(x_j)) of one row, max-subtracted; -inf for an all -inf row.
template <typename T>
Acc row_logsumexp(const T* x, int64_t r) {
  T m = row_max(x, r);
  if (std::isinf(m) && m < 0) return -std::numeric_limits<Acc>::infinity();
  if (std::isinf(m)) return std::numeric_limits<Acc>::infinity();
  Acc s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < r; ++j) s += static_cast<Acc>(std::exp(x[j] - m));
  return static_cast<Acc>(m) + std::log(s);
}

// Sizes a per-thread scratch buffer of `width` accumulators for a parallel row reduction.
struct Partials {
  int threads;
  int64_t width;
  std::vector<Acc> buf;
  Partials(int64_t width_, bool parallel)
      : threads(parallel ? omp_get_max_threads() : 1), width(width_),
        buf(static_cast<size_t>(threads) * static_cast<size_t>(width_), Acc(0)) {}
  Acc* of(int t) { return buf.data() + static_cast<int64_t>(t) * width; }
  // Sums the per-thread rows into out (width values of T).
  template <typename T>
  void combine(T* out) const {
    for (int64_t c = 0; c < width; ++c) {
      Acc s = 0;
      for (int t = 0; t < threads; ++t) s += buf[static_cast<size_t>(t * width + c)];
      out[c] = static_cast<T>(s);
    }
  }
};

// Target ids are validated up front (serially) so no exception is thrown inside a parallel loop.
void check_targets(const Tensor& target, int64_t v, int64_t ignore_index, const char* op) {
  const int64_t* t = target.data<int64_t>();
  for (int64_t i = 0; i < target.numel(); ++i)
    HH_CHECK(t[i] == ignore_index || (t[i] >= 0 && t[i] < v), op, ": target ", t[i], " at row ", i,
             " is out of range for ", v, " classes (expected 0 <= target < ", v, " or ignore_index ", ignore_index,
             ")");
}

}  // namespace

// ---- softmax ----

void CpuBackend::softmax(const Tensor& x, const Tensor& y, bool log) {
  dispatch_float(x.dtype(), "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Rows s = rows_of(x);
    const int64_t n = s.n, r = s.r;
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
#pragma omp parallel for if (n * r > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T* xi = xp + i * r;
      T* yi = yp + i * r;
      const T m = row_max(xi, r);
      if (std::isinf(m)) {  // all -inf (or a +inf) row: follow exp(x - lse) without the NaN trap
        const Acc lse = row_logsumexp(xi, r);
        for (int64_t j = 0; j < r; ++j) {
          const Acc lj = static_cast<Acc>(xi[j]) - lse;
          yi[j] = static_cast<T>(log ? lj : std::exp(lj));
        }
        continue;
      }
      Acc sum = 0;
      if (log) {
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < r; ++j) sum += static_cast<Acc>(std::exp(xi[j] - m));
        const T shift = static_cast<T>(static_cast<Acc>(m) + std::log(sum));
#pragma omp simd
        for (int64_t j = 0; j < r; ++j) yi[j] = xi[j] - shift;
      } else if constexpr (std::is_same_v<T, float>) {  // Eigen's vectorized expf
        Eigen::Map<Eigen::ArrayXf> Y(yi, r);
        Y = vec::exp(Eigen::Map<const Eigen::ArrayXf>(xi, r) - m);
        sum = Y.template cast<Acc>().sum();
        Y *= static_cast<float>(1.0 / sum);
      } else {
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < r; ++j) {
          const T e = std::exp(xi[j] - m);
          yi[j] = e;
          sum += static_cast<Acc>(e);
        }
        const T inv = static_cast<T>(1.0 / sum);
#pragma omp simd
        for (int64_t j = 0; j < r; ++j) yi[j] *= inv;
      }
    }
  });
}

// softmax:     gx = y * (gy - sum_j gy_j y_j)
// log-softmax: gx = gy - exp(y) * sum_j gy_j
void CpuBackend::softmax_backward(const Tensor& y, const Tensor& gy, const Tensor& gx, bool log) {
  dispatch_float(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Rows s = rows_of(y);
    const int64_t n = s.n, r = s.r;
    const T* yp = y.data<T>();
    const T* gp = gy.data<T>();
    T* op = gx.data<T>();
#pragma omp parallel for if (n * r > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T* yi = yp + i * r;
      const T* gi = gp + i * r;
      T* oi = op + i * r;
      Acc dot = 0;
      if (log) {
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < r; ++j) dot += static_cast<Acc>(gi[j]);
        const T d = static_cast<T>(dot);
        for (int64_t j = 0; j < r; ++j) oi[j] = gi[j] - std::exp(yi[j]) * d;
      } else {
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < r; ++j) dot += static_cast<Acc>(gi[j]) * static_cast<Acc>(yi[j]);
        const T d = static_cast<T>(dot);
#pragma omp simd
        for (int64_t j = 0; j < r; ++j) oi[j] = yi[j] * (gi[j] - d);
      }
    }
  });
}

// ---- layer_norm ----

// y = (x - mean) * rstd * w + b, rstd = 1 / sqrt(var + eps), var biased (divides by C).
void CpuBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                            const Tensor& mean, const Tensor& rstd) {
  dispatch_float(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Rows s = rows_of(x);
    const int64_t n = s.n, c = s.r;
    const T* xp = x.data<T>();
    const T* w = weight.defined() ? weight.data<T>() : nullptr;
    const T* b = bias.defined() ? bias.data<T>() : nullptr;
    T* yp = y.data<T>();
    T* mp = mean.data<T>();
    T* rp = rstd.data<T>();
#pragma omp parallel for if (n * c > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T* xi = xp + i * c;
      T* yi = yp + i * c;
      Acc sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < c; ++j) sum += static_cast<Acc>(xi[j]);
      const Acc mu = c > 0 ? sum / static_cast<Acc>(c) : 0.0;
      Acc sq = 0;
#pragma omp simd reduction(+ : sq)
      for (int64_t j = 0; j < c; ++j) {
        const Acc d = static_cast<Acc>(xi[j]) - mu;
        sq += d * d;
      }
      const Acc var = c > 0 ? sq / static_cast<Acc>(c) : 0.0;
      const T m = static_cast<T>(mu), rs = static_cast<T>(1.0 / std::sqrt(var + eps));
      mp[i] = m;
      rp[i] = rs;
      if (w && b) {
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) yi[j] = (xi[j] - m) * rs * w[j] + b[j];
      } else if (w) {
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) yi[j] = (xi[j] - m) * rs * w[j];
      } else if (b) {
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) yi[j] = (xi[j] - m) * rs + b[j];
      } else {
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) yi[j] = (xi[j] - m) * rs;
      }
    }
  });
}

// With xhat = (x - mean) * rstd and gh = gy * w:
//   gx = rstd * (gh - mean_j(gh) - xhat * mean_j(gh * xhat))
//   gweight = sum_rows gy * xhat, gbias = sum_rows gy.
void CpuBackend::layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                                     const Tensor& gy, const Tensor& gx, const Tensor& gweight,
                                     const Tensor& gbias) {
  dispatch_float(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Rows s = rows_of(x);
    const int64_t n = s.n, c = s.r;
    const T* xp = x.data<T>();
    const T* w = weight.defined() ? weight.data<T>() : nullptr;
    const T* mp = mean.data<T>();
    const T* rp = rstd.data<T>();
    const T* gp = gy.data<T>();
    T* gxp = gx.data<T>();
    const bool want_w = gweight.defined(), want_b = gbias.defined();
    const bool parallel = n * c > kParallelGrain;
    // Per-thread partial sums: [gweight (c) | gbias (c)].
    Partials part(2 * c, parallel && (want_w || want_b));
#pragma omp parallel if (parallel)
    {
      Acc* pw = part.of(part.threads > 1 ? omp_get_thread_num() : 0);
      Acc* pb = pw + c;
#pragma omp for schedule(static)
      for (int64_t i = 0; i < n; ++i) {
        const T* xi = xp + i * c;
        const T* gi = gp + i * c;
        T* oi = gxp + i * c;
        const Acc m = static_cast<Acc>(mp[i]), rs = static_cast<Acc>(rp[i]);
        Acc sum_gh = 0, sum_ghx = 0;
#pragma omp simd reduction(+ : sum_gh, sum_ghx)
        for (int64_t j = 0; j < c; ++j) {
          const Acc xh = (static_cast<Acc>(xi[j]) - m) * rs;
          const Acc gh = static_cast<Acc>(gi[j]) * (w ? static_cast<Acc>(w[j]) : 1.0);
          sum_gh += gh;
          sum_ghx += gh * xh;
        }
        const Acc a = c > 0 ? sum_gh / static_cast<Acc>(c) : 0.0, bcoef = c > 0 ? sum_ghx / static_cast<Acc>(c) : 0.0;
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) {
          const Acc xh = (static_cast<Acc>(xi[j]) - m) * rs;
          const Acc gh = static_cast<Acc>(gi[j]) * (w ? static_cast<Acc>(w[j]) : 1.0);
          oi[j] = static_cast<T>(rs * (gh - a - xh * bcoef));
        }
        if (want_w) {
#pragma omp simd
          for (int64_t j = 0; j < c; ++j) pw[j] += static_cast<Acc>(gi[j]) * ((static_cast<Acc>(xi[j]) - m) * rs);
        }
        if (want_b) {
#pragma omp simd
          for (int64_t j = 0; j < c; ++j) pb[j] += static_cast<Acc>(gi[j]);
        }
      }
    }
    if (want_w || want_b) {
      std::vector<T> tmp(static_cast<size_t>(2 * c));
      part.combine(tmp.data());
      if (want_w) std::copy(tmp.begin(), tmp.begin() + c, gweight.data<T>());
      if (want_b) std::copy(tmp.begin() + c, tmp.end(), gbias.data<T>());
    }
  });
}

// ---- rms_norm ----

// y = x * rstd * w, rstd = 1 / sqrt(mean_j x_j^2 + eps) (torch.nn.functional.rms_norm).
void CpuBackend::rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) {
  dispatch_float(x.dtype(), "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Rows s = rows_of(x);
    const int64_t n = s.n, c = s.r;
    const T* xp = x.data<T>();
    const T* w = weight.defined() ? weight.data<T>() : nullptr;
    T* yp = y.data<T>();
    T* rp = rstd.data<T>();
#pragma omp parallel for if (n * c > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T* xi = xp + i * c;
      T* yi = yp + i * c;
      Acc sq = 0;
#pragma omp simd reduction(+ : sq)
      for (int64_t j = 0; j < c; ++j) sq += static_cast<Acc>(xi[j]) * static_cast<Acc>(xi[j]);
      const T rs = static_cast<T>(1.0 / std::sqrt((c > 0 ? sq / static_cast<Acc>(c) : 0.0) + eps));
      rp[i] = rs;
      if (w) {
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) yi[j] = xi[j] * rs * w[j];
      } else {
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) yi[j] = xi[j] * rs;
      }
    }
  });
}

// With xhat = x * rstd and gh = gy * w: gx = rstd * (gh - xhat * mean_j(gh * xhat)),
// gweight = sum_rows gy * xhat.
void CpuBackend::rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& gy,
                                   const Tensor& gx, const Tensor& gweight) {
  dispatch_float(x.dtype(), "rms_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Rows s = rows_of(x);
    const int64_t n = s.n, c = s.r;
    const T* xp = x.data<T>();
    const T* w = weight.defined() ? weight.data<T>() : nullptr;
    const T* rp = rstd.data<T>();
    const T* gp = gy.data<T>();
    T* gxp = gx.data<T>();
    const bool want_w = gweight.defined();
    const bool parallel = n * c > kParallelGrain;
    Partials part(c, parallel && want_w);
#pragma omp parallel if (parallel)
    {
      Acc* pw = part.of(part.threads > 1 ? omp_get_thread_num() : 0);
#pragma omp for schedule(static)
      for (int64_t i = 0; i < n; ++i) {
        const T* xi = xp + i * c;
        const T* gi = gp + i * c;
        T* oi = gxp + i * c;
        const Acc rs = static_cast<Acc>(rp[i]);
        Acc sum_ghx = 0;
#pragma omp simd reduction(+ : sum_ghx)
        for (int64_t j = 0; j < c; ++j)
          sum_ghx += static_cast<Acc>(gi[j]) * (w ? static_cast<Acc>(w[j]) : 1.0) * static_cast<Acc>(xi[j]) * rs;
        const Acc bcoef = c > 0 ? sum_ghx / static_cast<Acc>(c) : 0.0;
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) {
          const Acc gh = static_cast<Acc>(gi[j]) * (w ? static_cast<Acc>(w[j]) : 1.0);
          oi[j] = static_cast<T>(rs * (gh - static_cast<Acc>(xi[j]) * rs * bcoef));
        }
        if (want_w) {
#pragma omp simd
          for (int64_t j = 0; j < c; ++j) pw[j] += static_cast<Acc>(gi[j]) * static_cast<Acc>(xi[j]) * rs;
        }
      }
    }
    if (want_w) part.combine(gweight.data<T>());
  });
}

// ---- cross-entropy ----

// Per row, with lse = logsumexp(x) and ε = label_smoothing:
//   loss = (1-ε)·(lse - x_t) + ε·(lse - mean_j x_j);  0 where target == ignore_index.
void CpuBackend::cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyParams& p,
                               const Tensor& loss, const Tensor& lse) {
  dispatch_float(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Rows s = rows_of(logits);
    const int64_t n = s.n, v = s.r;
    check_targets(target, v, p.ignore_index, "cross_entropy");
    const T* xp = logits.data<T>();
    const int64_t* tp = target.data<int64_t>();
    T* lp = loss.data<T>();
    T* sp = lse.data<T>();
    const Acc eps = p.label_smoothing;
#pragma omp parallel for if (n * v > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T* xi = xp + i * v;
      const Acc l = row_logsumexp(xi, v);
      sp[i] = static_cast<T>(l);
      const int64_t t = tp[i];
      if (t == p.ignore_index) {
        lp[i] = T(0);
        continue;
      }
      Acc out = (1.0 - eps) * (l - static_cast<Acc>(xi[t]));
      if (eps != 0.0) {
        Acc sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < v; ++j) sum += static_cast<Acc>(xi[j]);
        out += eps * (l - sum / static_cast<Acc>(v));
      }
      lp[i] = static_cast<T>(out);
    }
  });
}

// glogits_ij = gloss_i * (softmax_ij - (1-ε)·[j == t_i] - ε/V); 0 for ignored rows.
void CpuBackend::cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& lse,
                                        const Tensor& gloss, const CrossEntropyParams& p, const Tensor& glogits) {
  dispatch_float(logits.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Rows s = rows_of(logits);
    const int64_t n = s.n, v = s.r;
    check_targets(target, v, p.ignore_index, "cross_entropy_backward");
    const T* xp = logits.data<T>();
    const int64_t* tp = target.data<int64_t>();
    const T* sp = lse.data<T>();
    const T* gp = gloss.data<T>();
    T* op = glogits.data<T>();
    const T smooth = static_cast<T>(p.label_smoothing / static_cast<double>(v > 0 ? v : 1));
    const T hit = static_cast<T>(1.0 - p.label_smoothing);
#pragma omp parallel for if (n * v > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T* xi = xp + i * v;
      T* oi = op + i * v;
      const int64_t t = tp[i];
      if (t == p.ignore_index) {
        std::fill(oi, oi + v, T(0));
        continue;
      }
      const T g = gp[i], l = sp[i];
#pragma omp simd
      for (int64_t j = 0; j < v; ++j) oi[j] = g * (std::exp(xi[j] - l) - smooth);
      oi[t] -= g * hit;
    }
  });
}

}  // namespace hh
