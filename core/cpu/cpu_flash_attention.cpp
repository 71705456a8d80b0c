// Fused softmax attention on the CPU, FlashAttention-2 style: no (Lq,Lk) buffer, only tiles of
// kTile queries × kTile keys. Forward: online softmax per query tile (running max m, running sum
// l, unnormalized output O rescaled when the max grows). Backward: P is recomputed per tile from
// the saved lse; dK, dV are accumulated per key tile (one pass) and dQ per query tile (a second
// pass), so every output tile has one owner and the result is deterministic. OpenMP runs over
// (G × tiles); Eigen works on Maps of the tiles, single-threaded inside our parallel region.
#include <Eigen/Dense>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu/cpu_backend.h"

namespace hh {

namespace {

constexpr int64_t kTile = 64;  // queries and keys per tile

template <typename T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using CMap = Eigen::Map<const Mat<T>>;
template <typename T>
using MapM = Eigen::Map<Mat<T>>;
template <typename T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

// exp of an Eigen array expression that is exactly 0 at -inf (masked scores). Eigen's SSE exp
// (the portable build's) returns ~3e-39 there, which would give a fully masked row weight.
template <class Expr>
auto exp_masked(const Expr& x) {
  using S = typename Expr::Scalar;
  return (x == -std::numeric_limits<S>::infinity()).select(S(0), x.exp());
}

struct Dims {
  int64_t G, Lq, Lk, D, Dv;
};
Dims dims_of(const Tensor& q, const Tensor& v) { return {q.size(0), q.size(1), v.size(1), q.size(2), v.size(2)}; }

// Keys a query tile [q0, q0+nq) can see: all of them, or (causal, Lq == Lk) those j < q0 + nq.
int64_t key_end(const Dims& d, bool causal, int64_t q0, int64_t nq) { return causal ? std::min(d.Lk, q0 + nq) : d.Lk; }

// Sets the entries of an (nq,nk) score tile at (q0, k0) that a causal query may not see to `fill`.
template <typename T>
void mask_tile(Mat<T>& S, bool causal, int64_t q0, int64_t k0, T fill) {
  if (!causal || k0 + S.cols() - 1 <= q0) return;  // tile entirely at or below the diagonal
  for (int64_t i = 0; i < S.rows(); ++i)
    for (int64_t j = std::max<int64_t>(0, q0 + i - k0 + 1); j < S.cols(); ++j) S(i, j) = fill;
}

template <typename T>
void forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, T scale, const Tensor& out,
             const Tensor& lse) {
  const Dims d = dims_of(q, v);
  const T* qp = q.data<T>();
  const T* kp = k.data<T>();
  const T* vp = v.data<T>();
  T* op = out.data<T>();
  T* lp = lse.data<T>();
  const T ninf = -std::numeric_limits<T>::infinity();
  const int64_t nqt = (d.Lq + kTile - 1) / kTile, tasks = d.G * nqt;
  const int64_t work = d.G * d.Lq * d.Lk * (d.D + d.Dv);
#pragma omp parallel for schedule(dynamic) if (tasks > 1 && work > kParallelGrain)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t g = t / nqt, q0 = (t % nqt) * kTile, nq = std::min(kTile, d.Lq - q0);
    CMap<T> Q(qp + (g * d.Lq + q0) * d.D, nq, d.D);               // (nq,D)
    CMap<T> K(kp + g * d.Lk * d.D, d.Lk, d.D);                    // (Lk,D)
    CMap<T> V(vp + g * d.Lk * d.Dv, d.Lk, d.Dv);                  // (Lk,Dv)
    Mat<T> O = Mat<T>::Zero(nq, d.Dv);                            // unnormalized output (nq,Dv)
    Vec<T> m = Vec<T>::Constant(nq, ninf), l = Vec<T>::Zero(nq);  // running max and sum (nq)
    Mat<T> S;
    const int64_t kend = key_end(d, causal, q0, nq);
    for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
      const int64_t nk = std::min(kTile, kend - k0);
      S.noalias() = Q * K.middleRows(k0, nk).transpose();  // (nq,nk)
      S *= scale;
      mask_tile(S, causal, q0, k0, ninf);
      for (int64_t i = 0; i < nq; ++i) {
        const T mn = std::max(m(i), S.row(i).maxCoeff());
        const T shift = mn == ninf ? T(0) : mn;  // a row with every key masked so far stays at 0
        S.row(i) = exp_masked(S.row(i).array() - shift).matrix();
        const T alpha = std::exp(m(i) - shift);
        l(i) = l(i) * alpha + S.row(i).sum();
        O.row(i) *= alpha;
        m(i) = mn;
      }
      O.noalias() += S * V.middleRows(k0, nk);
    }
    MapM<T> Out(op + (g * d.Lq + q0) * d.Dv, nq, d.Dv);
    for (int64_t i = 0; i < nq; ++i) {
      const bool any = l(i) > T(0);
      if (any)
        Out.row(i) = O.row(i) / l(i);
      else
        Out.row(i).setZero();
      lp[g * d.Lq + q0 + i] = any ? m(i) + std::log(l(i)) : ninf;
    }
  }
}

// P (nq,nk) = exp(scale·Q Kᵀ - lse) for the tile at (q0, k0), masked entries and rows 0; dS = P ∘ (dO Vᵀ - Δ).
template <typename T>
void tile_probs(const Eigen::Ref<const Mat<T>>& Q, const Eigen::Ref<const Mat<T>>& K, const Eigen::Ref<const Mat<T>>& V,
                const Eigen::Ref<const Mat<T>>& dO, const T* lse, const T* delta, bool causal, int64_t q0, int64_t k0,
                T scale, Mat<T>& P, Mat<T>& dS) {
  P.noalias() = Q * K.transpose();
  for (int64_t i = 0; i < P.rows(); ++i) {
    if (lse[i] == -std::numeric_limits<T>::infinity())  // no visible key: the output is a constant 0
      P.row(i).setZero();
    else
      P.row(i) = exp_masked(P.row(i).array() * scale - lse[i]).matrix();
  }
  mask_tile(P, causal, q0, k0, T(0));
  dS.noalias() = dO * V.transpose();
  for (int64_t i = 0; i < P.rows(); ++i) dS.row(i) = (P.row(i).array() * (dS.row(i).array() - delta[i])).matrix();
}

template <typename T>
void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
              const Tensor& gout, bool causal, T scale, const Tensor& gq, const Tensor& gk, const Tensor& gv) {
  const Dims d = dims_of(q, v);
  const T* qp = q.data<T>();
  const T* kp = k.data<T>();
  const T* vp = v.data<T>();
  const T* op = out.data<T>();
  const T* lp = lse.data<T>();
  const T* gp = gout.data<T>();
  T* gqp = gq.data<T>();
  T* gkp = gk.data<T>();
  T* gvp = gv.data<T>();
  const int64_t work = d.G * d.Lq * d.Lk * (d.D + d.Dv);
  const bool par = work > kParallelGrain;

  // Δ_i = Σ_c dO_ic O_ic (G,Lq): the softmax backward's row term.
  std::vector<T> delta(static_cast<size_t>(d.G * d.Lq));
#pragma omp parallel for if (par && d.G * d.Lq > 1)
  for (int64_t r = 0; r < d.G * d.Lq; ++r) {
    T s = 0;
    for (int64_t c = 0; c < d.Dv; ++c) s += gp[r * d.Dv + c] * op[r * d.Dv + c];
    delta[static_cast<size_t>(r)] = s;
  }

  // Pass 1, per key tile: dV = Σ_q Pᵀ dO, dK = scale Σ_q dSᵀ Q.
  const int64_t nkt = (d.Lk + kTile - 1) / kTile;
#pragma omp parallel for schedule(dynamic) if (par && d.G * nkt > 1)
  for (int64_t t = 0; t < d.G * nkt; ++t) {
    const int64_t g = t / nkt, k0 = (t % nkt) * kTile, nk = std::min(kTile, d.Lk - k0);
    CMap<T> Q(qp + g * d.Lq * d.D, d.Lq, d.D), dO(gp + g * d.Lq * d.Dv, d.Lq, d.Dv);
    CMap<T> K(kp + (g * d.Lk + k0) * d.D, nk, d.D), V(vp + (g * d.Lk + k0) * d.Dv, nk, d.Dv);
    MapM<T> dK(gkp + (g * d.Lk + k0) * d.D, nk, d.D), dV(gvp + (g * d.Lk + k0) * d.Dv, nk, d.Dv);
    dK.setZero();
    dV.setZero();
    Mat<T> P, dS;
    for (int64_t q0 = causal ? k0 : 0; q0 < d.Lq; q0 += kTile) {  // causal: queries before k0 see none
      const int64_t nq = std::min(kTile, d.Lq - q0);
      tile_probs<T>(Q.middleRows(q0, nq), K, V, dO.middleRows(q0, nq), lp + g * d.Lq + q0, delta.data() + g * d.Lq + q0,
                    causal, q0, k0, scale, P, dS);
      dV.noalias() += P.transpose() * dO.middleRows(q0, nq);
      dK.noalias() += dS.transpose() * Q.middleRows(q0, nq);
    }
    dK *= scale;
  }

  // Pass 2, per query tile: dQ = scale Σ_k dS K.
  const int64_t nqt = (d.Lq + kTile - 1) / kTile;
#pragma omp parallel for schedule(dynamic) if (par && d.G * nqt > 1)
  for (int64_t t = 0; t < d.G * nqt; ++t) {
    const int64_t g = t / nqt, q0 = (t % nqt) * kTile, nq = std::min(kTile, d.Lq - q0);
    CMap<T> Q(qp + (g * d.Lq + q0) * d.D, nq, d.D), dO(gp + (g * d.Lq + q0) * d.Dv, nq, d.Dv);
    CMap<T> K(kp + g * d.Lk * d.D, d.Lk, d.D), V(vp + g * d.Lk * d.Dv, d.Lk, d.Dv);
    MapM<T> dQ(gqp + (g * d.Lq + q0) * d.D, nq, d.D);
    dQ.setZero();
    Mat<T> P, dS;
    const int64_t kend = key_end(d, causal, q0, nq);
    for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
      const int64_t nk = std::min(kTile, kend - k0);
      tile_probs<T>(Q, K.middleRows(k0, nk), V.middleRows(k0, nk), dO, lp + g * d.Lq + q0, delta.data() + g * d.Lq + q0,
                    causal, q0, k0, scale, P, dS);
      dQ.noalias() += dS * K.middleRows(k0, nk);
    }
    dQ *= scale;
  }
}

void check_args(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                std::initializer_list<const Tensor*> rest) {
  for (const Tensor* t : {&q, &k, &v})
    HH_CHECK(t->dim() == 3 && t->is_contiguous() && t->dtype() == q.dtype(), op,
             ": expected contiguous (G,L,D) tensors of one dtype, got ", t->shape(), " ", t->dtype());
  for (const Tensor* t : rest)
    HH_CHECK(t->is_contiguous() && t->dtype() == q.dtype(), op, ": expected contiguous ", q.dtype(),
             " outputs/saved tensors, got ", t->shape(), " ", t->dtype());
  HH_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0) && k.size(2) == q.size(2) && v.size(1) == k.size(1), op,
           ": q ", q.shape(), ", k ", k.shape(), ", v ", v.shape(), " do not fit (G,Lq,D), (G,Lk,D), (G,Lk,Dv)");
  HH_CHECK(!causal || q.size(1) == k.size(1), op, ": causal needs Lq == Lk, got q ", q.shape(), " and k ", k.shape());
}

}  // namespace

void CpuBackend::flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                                 const Tensor& out, const Tensor& lse) {
  check_args("flash_attention", q, k, v, causal, {&out, &lse});
  dispatch_float(q.dtype(), "flash_attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    forward<T>(q, k, v, causal, static_cast<T>(scale), out, lse);
  });
}

void CpuBackend::flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                          const Tensor& lse, const Tensor& gout, bool causal, double scale,
                                          const Tensor& gq, const Tensor& gk, const Tensor& gv) {
  check_args("flash_attention_backward", q, k, v, causal, {&out, &lse, &gout, &gq, &gk, &gv});
  dispatch_float(q.dtype(), "flash_attention_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    backward<T>(q, k, v, out, lse, gout, causal, static_cast<T>(scale), gq, gk, gv);
  });
}

}  // namespace hh
