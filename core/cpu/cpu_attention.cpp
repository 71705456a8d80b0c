// Chunked causal linear attention on the CPU: one (batch, head) per OpenMP iteration, Eigen for
// the per-chunk matrix products (single-threaded inside our parallel region).
#include <Eigen/Dense>
#include <cmath>

#include "core/cpu/cpu_backend.h"

namespace hh {

namespace {

template <typename T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using MapM = Eigen::Map<Mat<T>>;
template <typename T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

template <typename T>
void causal_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t C, double eps, const Tensor& y,
                    const Tensor& den) {
  const int64_t G = q.size(0), L = q.size(1), F = q.size(2), D = v.size(2);
  T *qp = q.data<T>(), *kp = k.data<T>(), *vp = v.data<T>(), *yp = y.data<T>(), *dp = den.data<T>();
  bool finite = true;
#pragma omp parallel for reduction(&& : finite) if (G > 1)
  for (int64_t g = 0; g < G; ++g) {
    MapM<T> Q(qp + g * L * F, L, F), K(kp + g * L * F, L, F), V(vp + g * L * D, L, D), Y(yp + g * L * D, L, D);
    Eigen::Map<Vec<T>> den_g(dp + g * L, L);
    Mat<T> S = Mat<T>::Zero(F, D);  // running Σ φk vᵀ  (F,D)
    Vec<T> z = Vec<T>::Zero(F);     // running Σ φk     (F)
    for (int64_t c0 = 0; c0 < L; c0 += C) {
      const int64_t n = std::min(C, L - c0);
      auto Qc = Q.middleRows(c0, n);
      auto Kc = K.middleRows(c0, n);
      auto Vc = V.middleRows(c0, n);
      Mat<T> A = (Qc * Kc.transpose()).template triangularView<Eigen::Lower>();  // (n,n) causal
      Vec<T> dc = A.rowwise().sum();
      Mat<T> num = A * Vc;
      // The state is zero before the first chunk and unused after the last: skip those products
      // (for L <= C this is all of the F×D work).
      if (c0 > 0) {
        dc.noalias() += Qc * z;
        num.noalias() += Qc * S;
      }
      dc.array() += static_cast<T>(eps);
      Y.middleRows(c0, n) = num.array().colwise() / dc.array();
      den_g.segment(c0, n) = dc;
      if (c0 + n < L) {
        S.noalias() += Kc.transpose() * Vc;
        z += Kc.colwise().sum().transpose();
      }
    }
    finite = finite && den_g.allFinite() && Y.allFinite();
  }
  HH_CHECK(finite, "linear_attention: the state or normalizer became NaN/Inf (feature map overflow?)");
}

template <typename T>
void causal_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& y, const Tensor& den,
                     const Tensor& gy, int64_t C, const Tensor& gq, const Tensor& gk, const Tensor& gv) {
  const int64_t G = q.size(0), L = q.size(1), F = q.size(2), D = v.size(2);
  T *qp = q.data<T>(), *kp = k.data<T>(), *vp = v.data<T>(), *yp = y.data<T>(), *dp = den.data<T>();
  T *gyp = gy.data<T>(), *gqp = gq.data<T>(), *gkp = gk.data<T>(), *gvp = gv.data<T>();
#pragma omp parallel for if (G > 1)
  for (int64_t g = 0; g < G; ++g) {
    MapM<T> Q(qp + g * L * F, L, F), K(kp + g * L * F, L, F), V(vp + g * L * D, L, D), Y(yp + g * L * D, L, D);
    MapM<T> GY(gyp + g * L * D, L, D), GQ(gqp + g * L * F, L, F), GK(gkp + g * L * F, L, F), GV(gvp + g * L * D, L, D);
    Eigen::Map<Vec<T>> den_g(dp + g * L, L);
    // y = n / d: dL/dn = gy / d (GN), dL/dd = -(gy·y) / d (gd).
    Mat<T> GN = GY.array().colwise() / den_g.array();
    Vec<T> gd = -(GY.array() * Y.array()).rowwise().sum().matrix().cwiseQuotient(den_g);
    // Within a chunk, M_ij = v_j·gn_i + gd_i for j <= i couples query i and key j.
    auto chunk_M = [&](int64_t c0, int64_t n) {
      Mat<T> M = GN.middleRows(c0, n) * V.middleRows(c0, n).transpose();
      M.colwise() += gd.segment(c0, n);
      return Mat<T>(M.template triangularView<Eigen::Lower>());
    };
    // Forward sweep: gq_i = S_{<chunk} gn_i + z_{<chunk} gd_i + Σ_{j<=i in chunk} M_ij k_j.
    Mat<T> S = Mat<T>::Zero(F, D);
    Vec<T> z = Vec<T>::Zero(F);
    for (int64_t c0 = 0; c0 < L; c0 += C) {
      const int64_t n = std::min(C, L - c0);
      auto Kc = K.middleRows(c0, n);
      Mat<T> M = chunk_M(c0, n);
      auto GQc = GQ.middleRows(c0, n);
      GQc.noalias() = M * Kc;
      if (c0 > 0) {  // zero state before the first chunk
        GQc.noalias() += GN.middleRows(c0, n) * S.transpose();
        GQc.noalias() += gd.segment(c0, n) * z.transpose();
      }
      if (c0 + n < L) {  // no later chunk reads the state
        S.noalias() += Kc.transpose() * V.middleRows(c0, n);
        z += Kc.colwise().sum().transpose();
      }
    }
    // Reverse sweep with R = Σ_{later} φq gnᵀ (F,D) and r = Σ_{later} φq gd (F):
    // gk_j = R v_j + r + Σ_{i>=j in chunk} M_ij q_i;  gv_j = Rᵀ k_j + Σ_{i>=j in chunk} (q_i·k_j) gn_i.
    Mat<T> R = Mat<T>::Zero(F, D);
    Vec<T> r = Vec<T>::Zero(F);
    const int64_t last = ((L - 1) / C) * C;
    for (int64_t c0 = last; c0 >= 0; c0 -= C) {
      const int64_t n = std::min(C, L - c0);
      auto Qc = Q.middleRows(c0, n);
      auto Kc = K.middleRows(c0, n);
      auto Vc = V.middleRows(c0, n);
      auto GNc = GN.middleRows(c0, n);
      Mat<T> M = chunk_M(c0, n);
      Mat<T> A = (Qc * Kc.transpose()).template triangularView<Eigen::Lower>();
      auto GKc = GK.middleRows(c0, n);
      auto GVc = GV.middleRows(c0, n);
      GKc.noalias() = M.transpose() * Qc;
      GVc.noalias() = A.transpose() * GNc;
      if (c0 != last) {  // R, r are zero in the last chunk
        GKc.noalias() += Vc * R.transpose();
        GKc.rowwise() += r.transpose();
        GVc.noalias() += Kc * R;
      }
      if (c0 > 0) {  // no earlier chunk reads R, r
        R.noalias() += Qc.transpose() * GNc;
        r.noalias() += Qc.transpose() * gd.segment(c0, n);
      }
    }
  }
}

}  // namespace

void CpuBackend::linear_attention_causal(const Tensor& q, const Tensor& k, const Tensor& v, int64_t chunk,
                                         double eps, const Tensor& y, const Tensor& den) {
  dispatch_float(q.dtype(), "linear_attention", [&](auto tag) {
    causal_forward<typename decltype(tag)::type>(q, k, v, chunk, eps, y, den);
  });
}

void CpuBackend::linear_attention_causal_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& y,
                                                  const Tensor& den, const Tensor& gy, int64_t chunk, const Tensor& gq,
                                                  const Tensor& gk, const Tensor& gv) {
  dispatch_float(q.dtype(), "linear_attention backward", [&](auto tag) {
    causal_backward<typename decltype(tag)::type>(q, k, v, y, den, gy, chunk, gq, gk, gv);
  });
}

}  // namespace hh
