// matmul (torch.matmul semantics) and linear, both on Backend::gemm; unit_lower_inverse, composed
// of matmuls.
//
// Every matmul product, forward or backward, is one Backend::gemm call (gemm_product): strided
// views go straight to the GEMM whenever the matrix dims have a unit stride (a transposed operand
// is just the other storage order); batch dims that both operands have become the GEMM's batch;
// a batch dim that only the left operand has is folded into its rows ((B,H,L,D)·(1,H,D,F) is one
// H-batched GEMM of B·L rows, its output written heads-outermost and returned as a strided view);
// one only the right operand has is folded into its columns; one summed over in the backward
// (a broadcast operand's gradient) is folded into the inner dim. An operand whose dims cannot be
// grouped that way is copied once into the needed order, instead of looping over GEMM calls.
// bf16/f16 operands go to the backend's half GEMM (f32 accumulation, one rounding), forward and
// backward; under autocast (autograd/autocast.h) f32 operands are cast to bf16 first.
#include "autograd/ops/linalg.h"

#include <algorithm>
#include <array>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/backend.h"

namespace hh {

static const OpName reg_matmul("matmul"), reg_linear("linear"), reg_unit_lower_inverse("unit_lower_inverse");

namespace {

// True when a (rows, cols) matrix with strides (rs, cs) is a valid GEMM operand: unit stride in
// one dim and an outer stride no smaller than the inner size (BLAS's lda >= rows rule); size-1
// dims may have any stride. Mirrors the layout rule of the backends' gemm.
bool gemm_ready(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  return ((cs == 1 || cols == 1) && (rows == 1 || rs >= cols)) || ((rs == 1 || rows == 1) && (cols == 1 || cs >= rows));
}

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

// Contiguous copy of the view (shape, strides) of x, without autograd.
Tensor copy_of_view(const Tensor& x, const Shape& shape, const Strides& strides) {
  Tensor out = empty(shape, {x.dtype(), x.device()});
  if (out.numel() > 0) backend_of(x).copy(out, x.as_strided(shape, strides, x.offset()));
  return out;
}

// x's size and stride at batch dim d of an nd-dim batch, x's batch dims right-aligned (size 1
// where x has no such dim).
void batch_dim(const Tensor& x, size_t nd, size_t d, int64_t& size, int64_t& stride) {
  const size_t nx = x.shape().size() - 2;
  size = 1;
  stride = 0;
  if (d + nx < nd) return;
  size = x.shape()[d + nx - nd];
  stride = x.strides()[d + nx - nd];
}

// x with its last two dims swapped (a free view, no autograd).
Tensor swap_last(const Tensor& x) {
  Shape s = x.shape();
  Strides st = x.strides();
  std::swap(s[s.size() - 1], s[s.size() - 2]);
  std::swap(st[st.size() - 1], st[st.size() - 2]);
  return x.as_strided(s, st, x.offset());
}

// matmul's GEMM: the backend's, c = a·b.
void backend_gemm(const Tensor& a, const Tensor& b, const Tensor& c) { backend_of(c).gemm(a, b, c, {1.0, 0.0}); }

// True when x has `strides` in every dim of size > 1.
bool same_layout(const Tensor& x, const Strides& strides) {
  for (size_t d = 0; d < strides.size(); ++d)
    if (x.shape()[d] != 1 && x.strides()[d] != strides[d]) return false;
  return true;
}

// One GEMM operand as the backend sees it: (bt, rows, cols) with strides (sb, sr, sc).
struct Operand {
  Tensor base;
  int64_t sb = 0, sr = 0, sc = 0;
};

// Groups the view (shape, strides) of x as [batch dims][row dims][col dims] (the counts in
// `groups`) into one (batch, rows, cols) GEMM operand; when the dims of a group are not evenly
// spaced, or the matrix is not GEMM-ready, x is first copied into that dim order (row-major).
Operand group_operand(const Tensor& x, const Shape& shape, const Strides& strides,
                      const std::array<size_t, 3>& groups) {
  const size_t lo[3] = {0, groups[0], groups[0] + groups[1]}, hi[3] = {groups[0], groups[0] + groups[1], shape.size()};
  int64_t size[3], stride[3];
  bool ok = true;
  for (int i = 0; i < 3 && ok; ++i) ok = collapse(shape, strides, lo[i], hi[i], size[i], stride[i]);
  if (ok && gemm_ready(size[1], size[2], stride[1], stride[2]))
    return {x.as_strided(shape, strides, x.offset()), stride[0], stride[1], stride[2]};
  Tensor c = copy_of_view(x, shape, strides);
  for (int i = 0; i < 3; ++i) collapse(c.shape(), c.strides(), lo[i], hi[i], size[i], stride[i]);
  return {c, stride[0], stride[1], stride[2]};
}

}  // namespace

// Each batch dim (right-aligned over x, y and out_batch; n = its larger size in x and y) plays one
// of four roles, and the whole product is ONE backend GEMM call of batch R, rows Fm·M, inner S·K
// and cols Fn·N:
//   R  (x, y and the output have it)        -> the GEMM's batch
//   Fm (x and the output have it, y is 1)   -> folded into the rows, next to M
//   Fn (y and the output have it, x is 1)   -> folded into the cols, next to N
//   S  (x and y have it, the output is 1)   -> folded into the inner dim: the sum over it is the GEMM's
// The output is written in the storage order [R..., Fm..., M, Fn..., N] (contiguous) and returned
// as a view in the logical order out_batch + (M, N): a strided view when the order differs. An
// operand whose dims of one role are not evenly spaced is first copied into that order (one copy
// instead of one GEMM call per batch entry).
Tensor gemm_product(const Tensor& x, const Tensor& y, const Shape& out_batch, const GemmCall& gemm) {
  HH_CHECK(x.dim() >= 2 && y.dim() >= 2 && x.size(-1) == y.size(-2), "gemm_product: shapes ", x.shape(), " and ",
           y.shape(), " cannot be multiplied");
  const int64_t m = x.size(-2), k = x.size(-1), n = y.size(-1);
  const size_t nd = std::max({x.shape().size() - 2, y.shape().size() - 2, out_batch.size()});
  const size_t lead = nd - out_batch.size();  // out_batch's dim i is batch dim lead + i
  std::vector<size_t> R, Fm, Fn, S;
  int64_t bt = 1, fm = 1, fn = 1, kk = k;
  for (size_t d = 0; d < nd; ++d) {
    int64_t nx, ny, sx, sy;
    batch_dim(x, nd, d, nx, sx);
    batch_dim(y, nd, d, ny, sy);
    const int64_t no = d >= lead ? out_batch[d - lead] : 1;
    const int64_t full = nx == 1 ? ny : nx;
    HH_CHECK((nx == full || nx == 1) && (ny == full || ny == 1) && (no == full || no == 1), "gemm_product: batch dims of ",
             x.shape(), " and ", y.shape(), " do not broadcast to ", out_batch);
    HH_CHECK(no == full || (nx == full && ny == full), "gemm_product: a batch dim summed over only one operand (",
             x.shape(), " and ", y.shape(), " to ", out_batch, ")");
    if (full == 1) continue;
    if (no != full) {
      S.push_back(d);
      kk *= full;
    } else if (nx == ny) {
      R.push_back(d);
      bt *= full;
    } else if (nx == full) {
      Fm.push_back(d);
      fm *= full;
    } else {
      Fn.push_back(d);
      fn *= full;
    }
  }
  // The output: storage order [R, Fm, M, Fn, N] contiguous, viewed in the logical order.
  Shape out_shape = out_batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Strides out_strides(out_shape.size(), 0);
  int64_t next = 1;  // the stride of the next dim placed, innermost first
  auto place = [&](size_t logical) {
    out_strides[logical] = next;
    next *= out_shape[logical];
  };
  place(out_shape.size() - 1);
  for (size_t i = Fn.size(); i-- > 0;) place(Fn[i] - lead);
  place(out_shape.size() - 2);
  for (size_t i = Fm.size(); i-- > 0;) place(Fm[i] - lead);
  for (size_t i = R.size(); i-- > 0;) place(R[i] - lead);
  const int64_t total = numel_of(out_shape);
  Tensor store = empty({total}, {x.dtype(), x.device()});
  Tensor out = store.as_strided(out_shape, out_strides, 0);
  if (total == 0) return out;
  if (kk == 0) {  // an empty sum
    backend_of(store).fill(store, 0.0);
    return out;
  }
  // The operands' dims in call order: x [R, Fm, M, S, K], y [R, S, K, Fn, N] (nd, nd + 1 = the
  // matrix dims).
  auto view = [nd](const Tensor& t, const std::vector<std::vector<size_t>>& parts, Shape& shape, Strides& strides) {
    for (const auto& part : parts)
      for (size_t d : part) {
        int64_t size = 0, stride = 0;
        if (d < nd) {
          batch_dim(t, nd, d, size, stride);
        } else {
          size = t.size(d == nd ? -2 : -1);
          stride = t.stride(d == nd ? -2 : -1);
        }
        shape.push_back(size);
        strides.push_back(stride);
      }
  };
  Shape xs, ys;
  Strides xst, yst;
  view(x, {R, Fm, {nd}, S, {nd + 1}}, xs, xst);
  view(y, {R, S, {nd}, Fn, {nd + 1}}, ys, yst);
  const Operand a = group_operand(x, xs, xst, {R.size(), Fm.size() + 1, S.size() + 1});
  const Operand b = group_operand(y, ys, yst, {R.size(), S.size() + 1, Fn.size() + 1});
  const int64_t rows = fm * m, cols = fn * n;
  gemm(a.base.as_strided({bt, rows, kk}, {a.sb, a.sr, a.sc}, a.base.offset()),
       b.base.as_strided({bt, kk, cols}, {b.sb, b.sr, b.sc}, b.base.offset()),
       store.as_strided({bt, rows, cols}, {rows * cols, cols, 1}, 0));
  return out;
}

namespace {

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
  Shape ba(a2.shape().begin(), a2.shape().end() - 2), bb(b2.shape().begin(), b2.shape().end() - 2);
  Shape batch(std::max(ba.size(), bb.size()));
  for (size_t i = 0; i < batch.size(); ++i) {
    int64_t da = i + ba.size() >= batch.size() ? ba[i + ba.size() - batch.size()] : 1;
    int64_t db = i + bb.size() >= batch.size() ? bb[i + bb.size() - batch.size()] : 1;
    HH_CHECK(da == db || da == 1 || db == 1, "matmul: batch dims of shapes ", a.shape(), " and ", b.shape(),
             " cannot be broadcast");
    batch[i] = da == 1 ? db : da;
  }
  Tensor c = gemm_product(a2, b2, batch, backend_gemm);
  // Squeeze the promoted dims back out: out = batch + (M unless a1) + (N unless b1).
  Shape out_shape(c.shape().begin(), c.shape().end() - 2);
  Strides out_strides(c.strides().begin(), c.strides().end() - 2);
  for (int64_t d = -2; d < 0; ++d)
    if (!(d == -2 ? a1 : b1)) {
      out_shape.push_back(c.size(d));
      out_strides.push_back(c.stride(d));
    }
  Tensor out = c.as_strided(out_shape, out_strides, c.offset());

  return record("matmul", out, {a, b}, {a, b}, [a, b, out_strides](const Tensor& g, const NeedsGrad& needs) {
    const bool a1 = a.dim() == 1, b1 = b.dim() == 1;
    // Both products read G in the layout the forward wrote its output in (e.g. heads outermost
    // after a fold): one copy of G here, when it arrives in another layout, serves both.
    Tensor G = g;
    if (needs[0] && needs[1] && g.numel() > 0 && !same_layout(g, out_strides)) {
      G = empty({g.numel()}, {g.dtype(), g.device()}).as_strided(g.shape(), out_strides, 0);
      backend_of(g).copy(G, g);
    }
    Tensor A = a1 ? unsqueeze(a, 0) : a;  // (..., M, K)
    Tensor B = b1 ? unsqueeze(b, 1) : b;  // (..., K, N)
    if (b1) G = unsqueeze(G, G.dim());    // (batch..., M, N)
    if (a1) G = unsqueeze(G, G.dim() - 1);
    const Shape ab(A.shape().begin(), A.shape().end() - 2), bb(B.shape().begin(), B.shape().end() - 2);
    // gA = G·Bᵀ and gB = Aᵀ·G, each one GEMM; batch dims that A (B) broadcast are summed inside it.
    Tensor ga, gb;
    if (needs[0]) ga = reshape(gemm_product(G, swap_last(B), ab, backend_gemm), a.shape());
    if (needs[1]) gb = reshape(gemm_product(swap_last(A), G, bb, backend_gemm), b.shape());
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
    // R spelled out, not -1: with in_features or out_features 0 (which the forward takes) a -1
    // next to a 0 is ambiguous and reshape threw in the backward.
    const int64_t rows = numel_of(Shape(x.shape().begin(), x.shape().end() - 1));
    Tensor g2 = reshape(g, {rows, out_f});  // (R, out)
    Tensor gx, gw, gb;
    if (needs[0]) gx = reshape(matmul(g2, weight), x.shape());
    if (needs[1]) gw = matmul(transpose(g2, 0, 1), reshape(x, {rows, in}));
    if (needs[2]) gb = sum(g2, {0});
    return std::vector<Tensor>{gx, gw, gb};
  });
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, WeightCache& cache, WeightFormat format) {
  const auto cpu_f32 = [](const Tensor& t) { return t.device().is_cpu() && t.dtype() == DType::f32; };
  const bool records = GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad() ||
                                                  (bias.defined() && bias.requires_grad()));
  if (!x.defined() || !weight.defined() || records || AutocastMode::is_enabled() || !cpu_f32(x) ||
      !cpu_f32(weight) || (bias.defined() && (!cpu_f32(bias) || bias.dim() != 1)) || weight.dim() != 2 ||
      x.dim() < 1 || x.size(-1) != weight.size(1) || weight.size(0) == 0 || weight.size(1) == 0 ||
      (bias.defined() && bias.size(0) != weight.size(0)))
    return linear(x, weight, bias);  // (its checks report whatever does not fit)
  const int64_t in = weight.size(1), out_f = weight.size(0);
  const int64_t rows = numel_of(Shape(x.shape().begin(), x.shape().end() - 1));
  const std::shared_ptr<const PreparedWeight> w = cache.get(weight, format);
  if (!w || (format == WeightFormat::f32 && !prepared_f32_applies(*w, rows))) return linear(x, weight, bias);
  // x (..., in) as rows (R, in) with unit column stride.
  Tensor xv = x;
  int64_t collapsed, rs;
  if (!collapse(x.shape(), x.strides(), 0, x.shape().size() - 1, collapsed, rs) || x.stride(-1) != 1 ||
      (rows > 1 && rs < in)) {
    xv = raw_contiguous(x);
    rs = in;
  }
  Shape out_shape(x.shape().begin(), x.shape().end() - 1);
  out_shape.push_back(out_f);
  Tensor c = empty(out_shape, {DType::f32, x.device()});
  if (rows > 0)
    linear_prepared(xv.as_strided({rows, in}, {rows == 1 ? in : rs, 1}, xv.offset()), *w, bias,
                    c.as_strided({rows, out_f}, {out_f, 1}, 0));
  return c;
}

namespace {

// (G,n,n) -> (I + tril(a, -1))⁻¹ (G,n,n), n a power of two; no autograd of its own (the caller
// runs it under NoGradGuard). The two diagonal halves of every matrix are inverted together as
// one batch of 2G, so each level is one product per step over all blocks.
Tensor unit_lower_inverse_pow2(const Tensor& a) {
  const int64_t G = a.size(0), n = a.size(1);
  if (n == 1) return ones({G, 1, 1}, {a.dtype(), a.device()});
  const int64_t h = n / 2;
  Tensor top = slice(a, 1, 0, h), bottom = slice(a, 1, h, n);
  Tensor x = unit_lower_inverse_pow2(cat({slice(top, 2, 0, h), slice(bottom, 2, h, n)}, 0));  // (2G,h,h)
  Tensor x1 = slice(x, 0, 0, G), x2 = slice(x, 0, G, 2 * G);
  Tensor y = neg(matmul(matmul(x2, slice(bottom, 2, 0, h)), x1));  // −X2 N21 X1
  return cat({cat({x1, zeros({G, h, h}, {a.dtype(), a.device()})}, 2), cat({y, x2}, 2)}, 1);
}

}  // namespace

Tensor unit_lower_inverse(const Tensor& a) {
  HH_CHECK(a.defined(), "unit_lower_inverse: undefined input");
  HH_CHECK(a.dim() >= 2 && a.size(-1) == a.size(-2),
           "unit_lower_inverse: expected square matrices (..., n, n), got shape ", a.shape());
  HH_CHECK(is_floating(a.dtype()), "unit_lower_inverse: expected a floating tensor, got ", a.dtype());
  const int64_t n = a.size(-1);
  Tensor t;
  {
    NoGradGuard no_grad;
    AutocastGuard no_autocast(DType::bf16, false);  // the products in a's own dtype
    if (a.numel() == 0) {
      t = zeros(a.shape(), {a.dtype(), a.device()});
    } else {
      int64_t p = 1;
      while (p < n) p *= 2;
      Tensor a3 = reshape(detach(a), {-1, n, n});  // (G,n,n)
      const int64_t G = a3.size(0);
      const Options o{a.dtype(), a.device()};
      // Padding with zeros extends N by an identity block, whose inverse is the identity.
      if (p > n) a3 = cat({cat({a3, zeros({G, n, p - n}, o)}, 2), zeros({G, p - n, p}, o)}, 1);
      Tensor inv = unit_lower_inverse_pow2(a3);
      if (p > n) inv = slice(slice(inv, 1, 0, n), 2, 0, n);
      t = reshape(contiguous(inv), a.shape());
    }
  }
  return record("unit_lower_inverse", t, {a}, {t}, [t](const Tensor& g, const NeedsGrad&) {
    Tensor tt = transpose(t, -1, -2);
    return std::vector<Tensor>{neg(tril(matmul(matmul(tt, g), tt), -1))};
  });
}

}  // namespace hh
