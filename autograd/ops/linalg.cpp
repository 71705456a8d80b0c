// matmul (torch.matmul semantics) and linear, both on Backend::gemm.
//
// Forward passes strided views straight to the GEMM whenever the matrix dims have a unit stride
// (a transposed operand is just the other storage order), broadcasts batch dims with stride 0
// instead of copying, and folds batch dims into the rows when the right operand is a single
// matrix ((B,L,D)·(D,E) is one (B·L,D)·(D,E) GEMM). Backward: gA = gC·Bᵀ, gB = Aᵀ·gC, with
// broadcast batch dims summed back by sum_to. bf16/f16 operands go to the backend's half GEMM
// (f32 accumulation, one rounding), forward and backward; under autocast (autograd/autocast.h)
// f32 operands are cast to bf16 first.
#include "autograd/ops/linalg.h"

#include "autograd/autocast.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"

namespace hh {

static const OpName reg_matmul("matmul"), reg_linear("linear");

namespace {

// True when a (rows, cols) matrix with strides (rs, cs) is a valid GEMM operand: unit stride in
// one dim and an outer stride no smaller than the inner size (BLAS's lda >= rows rule); size-1
// dims may have any stride. Mirrors the layout rule of the backends' gemm.
bool gemm_ready(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  return ((cs == 1 || cols == 1) && (rows == 1 || rs >= cols)) || ((rs == 1 || rows == 1) && (cols == 1 || cs >= rows));
}
bool gemm_ready(const Tensor& x) { return gemm_ready(x.size(-2), x.size(-1), x.stride(-2), x.stride(-1)); }

// Contiguous copy without autograd (forward internals only).
Tensor raw_contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor out = empty(x.shape(), {x.dtype(), x.device()});
  if (out.numel() > 0) backend_of(x).copy(out, x);
  return out;
}

// Dims [lo, hi) of (shape, strides) as one dim of `size` elements `stride` apart, if they are
// evenly spaced (size-1 dims are ignored; all-broadcast dims collapse to stride 0).
bool collapse(const Shape& s, const Strides& st, size_t lo, size_t hi, int64_t& size, int64_t& stride) {
  size = 1;
  stride = 0;
  bool have = false;
  for (size_t d = hi; d-- > lo;) {
    if (s[d] == 1) continue;
    if (!have) {
      stride = st[d];
      have = true;
    } else if (st[d] != stride * size) {
      return false;
    }
    size *= s[d];
  }
  return true;
}

// a (batch..., M, K) · b (batch..., K, N) -> c (batch..., M, N) contiguous, fresh; a and b are
// GEMM-ready views with the same batch shape (broadcast dims have stride 0). Batch dims that are
// evenly spaced in both operands become one GEMM call's batch; the rest are looped over here.
void batched_gemm(const Tensor& a, const Tensor& b, const Tensor& c, double beta) {
  const size_t nb = a.shape().size() - 2;
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  size_t split = nb;
  int64_t bt = 1, sa = 0, sb = 0;
  for (size_t s = nb; s-- > 0;) {
    int64_t na, nb_, ta, tb;
    if (!collapse(a.shape(), a.strides(), s, nb, na, ta) || !collapse(b.shape(), b.strides(), s, nb, nb_, tb)) break;
    split = s;
    bt = na;
    sa = ta;
    sb = tb;
  }
  int64_t outer = 1;
  for (size_t d = 0; d < split; ++d) outer *= a.shape()[d];
  Backend& be = backend_of(c);
  for (int64_t o = 0; o < outer; ++o) {
    int64_t oa = a.offset(), ob = b.offset(), rem = o;
    for (size_t d = split; d-- > 0;) {
      int64_t i = rem % a.shape()[d];
      rem /= a.shape()[d];
      oa += i * a.strides()[d];
      ob += i * b.strides()[d];
    }
    Tensor va = a.as_strided({bt, m, k}, {sa, a.stride(-2), a.stride(-1)}, oa);
    Tensor vb = b.as_strided({bt, k, n}, {sb, b.stride(-2), b.stride(-1)}, ob);
    Tensor vc = c.as_strided({bt, m, n}, {m * n, n, 1}, c.offset() + o * bt * m * n);
    be.gemm(va, vb, vc, {1.0, beta});
  }
}

// View of x with batch dims expanded to `batch` (stride 0 where broadcast), no autograd.
Tensor expand_batch(const Tensor& x, const Shape& batch) {
  const size_t nx = x.shape().size() - 2, lead = batch.size() - nx;
  Shape s = batch;
  Strides st(batch.size(), 0);
  for (size_t i = 0; i < nx; ++i)
    st[lead + i] = x.shape()[i] == batch[lead + i] ? x.strides()[i] : 0;
  for (int64_t d = -2; d < 0; ++d) {
    s.push_back(x.size(d));
    st.push_back(x.stride(d));
  }
  return x.as_strided(s, st, x.offset());
}

// The forward product of matmul on raw (>= 2-d) views: (..., M, K) · (..., K, N).
Tensor matmul_forward(Tensor a, Tensor b, const Shape& ashape, const Shape& bshape) {
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  if (!gemm_ready(b)) b = raw_contiguous(b);
  // Fold: a single right-hand matrix and a left operand whose batch and row dims are evenly
  // spaced is one big GEMM (rows = batch·M).
  if (b.dim() == 2 && a.dim() > 2) {
    Shape out_shape(a.shape().begin(), a.shape().end() - 1);
    const int64_t rows = numel_of(out_shape);
    int64_t collapsed, rs;
    if (!collapse(a.shape(), a.strides(), 0, out_shape.size(), collapsed, rs) ||
        !gemm_ready(rows, k, rs, a.stride(-1))) {
      a = raw_contiguous(a);
      rs = k;
    }
    out_shape.push_back(n);
    Tensor c = empty(out_shape, {a.dtype(), a.device()});
    if (c.numel() == 0) return c;
    if (k == 0) {
      backend_of(c).fill(c, 0.0);
      return c;
    }
    batched_gemm(a.as_strided({rows, k}, {rs, a.stride(-1)}, a.offset()), b, c.as_strided({rows, n}, {n, 1}, 0), 0.0);
    return c;
  }
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch(std::max(ba.size(), bb.size()));
  for (size_t i = 0; i < batch.size(); ++i) {
    int64_t da = i + ba.size() >= batch.size() ? ba[i + ba.size() - batch.size()] : 1;
    int64_t db = i + bb.size() >= batch.size() ? bb[i + bb.size() - batch.size()] : 1;
    HH_CHECK(da == db || da == 1 || db == 1, "matmul: batch dims of shapes ", ashape, " and ", bshape,
             " cannot be broadcast");
    batch[i] = da == 1 ? db : da;
  }
  if (!gemm_ready(a)) a = raw_contiguous(a);
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor c = empty(out_shape, {a.dtype(), a.device()});
  if (c.numel() == 0) return c;
  if (k == 0) {
    backend_of(c).fill(c, 0.0);
    return c;
  }
  batched_gemm(expand_batch(a, batch), expand_batch(b, batch), c, 0.0);
  return c;
}

void check_pair(const char* op, const char* what_a, const Tensor& a, const char* what_b, const Tensor& b) {
  HH_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch: ", what_a, " is ", a.dtype(), " but ", what_b, " is ",
           b.dtype(), " (shapes ", a.shape(), " and ", b.shape(), ")");
  HH_CHECK(a.device() == b.device(), op, ": device mismatch: ", what_a, " is on ", a.device(), " but ", what_b,
           " is on ", b.device());
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  HH_CHECK(a_in.defined() && b_in.defined(), "matmul: undefined tensor argument");
  const Tensor a = autocast_lower(a_in), b = autocast_lower(b_in);  // autograd/autocast.h
  HH_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dimension, got shapes ", a.shape(),
           " and ", b.shape());
  check_pair("matmul", "a", a, "b", b);
  HH_CHECK(is_floating(a.dtype()), "matmul: expected floating tensors, got ", a.dtype(), " (shapes ", a.shape(),
           " and ", b.shape(), ")");

  const bool a1 = a.dim() == 1, b1 = b.dim() == 1;
  const int64_t ka = a.size(-1), kb = b1 ? b.size(0) : b.size(-2);
  HH_CHECK(ka == kb, "matmul: shapes ", a.shape(), " and ", b.shape(), " cannot be multiplied (inner dims ", ka,
           " and ", kb, " differ)");
  // 1-d operands as matrices: a (K) -> (1,K), b (K) -> (K,1).
  Tensor a2 = a1 ? a.as_strided({1, ka}, {ka * a.stride(0), a.stride(0)}, a.offset()) : a;
  Tensor b2 = b1 ? b.as_strided({kb, 1}, {b.stride(0), 1}, b.offset()) : b;
  Tensor c = matmul_forward(a2, b2, a.shape(), b.shape());
  // Squeeze the promoted dims back out: out = batch + (M unless a1) + (N unless b1).
  Shape out_shape(c.shape().begin(), c.shape().end() - 2);
  if (!a1) out_shape.push_back(c.size(-2));
  if (!b1) out_shape.push_back(c.size(-1));
  Tensor out = c.as_strided(out_shape, contiguous_strides(out_shape), c.offset());

  return record("matmul", out, {a, b}, {a, b}, [a, b](const Tensor& g, const NeedsGrad& needs) {
    const bool a1 = a.dim() == 1, b1 = b.dim() == 1;
    Tensor A = a1 ? unsqueeze(a, 0) : a;  // (..., M, K)
    Tensor B = b1 ? unsqueeze(b, 1) : b;  // (..., K, N)
    Tensor G = g;                         // (batch..., M, N)
    if (b1) G = unsqueeze(G, G.dim());
    if (a1) G = unsqueeze(G, G.dim() - 1);
    Tensor ga, gb;
    if (needs[0]) ga = reshape(sum_to(matmul(G, transpose(B, -1, -2)), A.shape()), a.shape());
    if (needs[1]) {
      if (B.dim() == 2 && A.dim() > 2) {  // shared right matrix: one GEMM over all rows, no sum
        const int64_t k = A.size(-1), n = B.size(-1);
        gb = matmul(transpose(reshape(A, {-1, k}), 0, 1), reshape(G, {-1, n}));
      } else {
        gb = sum_to(matmul(transpose(A, -1, -2), G), B.shape());
      }
      gb = reshape(gb, b.shape());
    }
    return std::vector<Tensor>{ga, gb};
  });
}

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  HH_CHECK(x_in.defined() && weight_in.defined(), "linear: undefined input or weight");
  // autograd/autocast.h: input, weight and bias in the lower-precision dtype.
  const Tensor x = autocast_lower(x_in), weight = autocast_lower(weight_in), bias = autocast_lower(bias_in);
  HH_CHECK(x.dim() >= 1, "linear: input needs at least 1 dimension, got shape ", x.shape());
  HH_CHECK(weight.dim() == 2, "linear: weight must be 2-d (out_features, in_features), got shape ", weight.shape());
  check_pair("linear", "input", x, "weight", weight);
  HH_CHECK(is_floating(x.dtype()), "linear: expected floating tensors, got ", x.dtype());
  const int64_t in = weight.size(1), out_f = weight.size(0);
  HH_CHECK(x.size(-1) == in, "linear: input shape ", x.shape(), " does not match weight shape ", weight.shape(),
           " (last dim ", x.size(-1), " vs in_features ", in, ")");
  if (bias.defined()) {
    check_pair("linear", "bias", bias, "weight", weight);
    HH_CHECK(bias.dim() == 1 && bias.size(0) == out_f, "linear: bias shape ", bias.shape(),
             " does not match weight shape ", weight.shape(), " (expected (", out_f, ",))");
  }

  // x (..., in) as rows (R, in); leading dims folded into the GEMM's rows.
  Tensor xv = x;
  const int64_t rows = numel_of(Shape(x.shape().begin(), x.shape().end() - 1));
  int64_t collapsed, rs;
  if (!collapse(x.shape(), x.strides(), 0, x.shape().size() - 1, collapsed, rs) ||
      !gemm_ready(rows, in, rs, x.stride(-1))) {
    xv = raw_contiguous(x);
    rs = in;
  }
  // weightᵀ (in, out) is a free view: a column-major operand for the GEMM.
  Tensor w = gemm_ready(in, out_f, weight.stride(1), weight.stride(0)) ? weight : raw_contiguous(weight);
  Shape out_shape(x.shape().begin(), x.shape().end() - 1);
  out_shape.push_back(out_f);
  Tensor c = empty(out_shape, {x.dtype(), x.device()});
  if (c.numel() > 0) {
    Backend& be = backend_of(c);
    Tensor c2 = c.as_strided({1, rows, out_f}, {0, out_f, 1}, 0);
    // The bias is broadcast into the output first; the GEMM then accumulates onto it (beta = 1).
    if (bias.defined())
      be.copy(c2, bias.as_strided({1, rows, out_f}, {0, 0, bias.stride(0)}, bias.offset()));
    if (in == 0) {
      if (!bias.defined()) be.fill(c, 0.0);
    } else {
      be.gemm(xv.as_strided({1, rows, in}, {0, rs, xv.stride(-1)}, xv.offset()),
              w.as_strided({1, in, out_f}, {0, w.stride(1), w.stride(0)}, w.offset()), c2,
              {1.0, bias.defined() ? 1.0 : 0.0});
    }
  }

  return record("linear", c, {x, weight, bias}, {x, weight}, [x, weight](const Tensor& g, const NeedsGrad& needs) {
    const int64_t in = weight.size(1), out_f = weight.size(0);
    Tensor g2 = reshape(g, {-1, out_f});  // (R, out)
    Tensor gx, gw, gb;
    if (needs[0]) gx = reshape(matmul(g2, weight), x.shape());
    if (needs[1]) gw = matmul(transpose(g2, 0, 1), reshape(x, {-1, in}));
    if (needs[2]) gb = sum(g2, {0});
    return std::vector<Tensor>{gx, gw, gb};
  });
}

}  // namespace hh
