// Op-table rows for matmul and linear, plus direct tests of the GEMM kernel (storage orders,
// alpha/beta, broadcast batch, threaded batch split) at sizes too large for the table.
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "autograd/ops/linalg.h"
#include "core/backend.h"
#include "core/parallel.h"
#include "tests/op_table.h"

namespace hh::test {
namespace {

// Plain-loop torch.matmul on host values: 1-d promotion, batch broadcasting, squeeze back.
Host matmul_ref(const Host& a, const Host& b) {
  Shape as = a.shape, bs = b.shape;
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  Shape ba(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "matmul_ref");
  Strides sa = contiguous_strides(as), sb = contiguous_strides(bs);
  const int64_t nbatch = numel_of(batch);
  Host out;
  out.v.assign(static_cast<size_t>(nbatch * m * n), 0.0);
  for (int64_t t = 0; t < nbatch; ++t) {
    int64_t rem = t, oa = 0, ob = 0;
    for (size_t d = batch.size(); d-- > 0;) {
      int64_t i = rem % batch[d];
      rem /= batch[d];
      int64_t da = static_cast<int64_t>(d) - static_cast<int64_t>(batch.size() - ba.size());
      int64_t db = static_cast<int64_t>(d) - static_cast<int64_t>(batch.size() - bb.size());
      if (da >= 0 && ba[static_cast<size_t>(da)] != 1) oa += i * sa[static_cast<size_t>(da)];
      if (db >= 0 && bb[static_cast<size_t>(db)] != 1) ob += i * sb[static_cast<size_t>(db)];
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < k; ++p)
          acc += a.v[static_cast<size_t>(oa + i * k + p)] * b.v[static_cast<size_t>(ob + p * n + j)];
        out.v[static_cast<size_t>((t * m + i) * n + j)] = acc;
      }
  }
  out.shape = batch;
  if (!a1) out.shape.push_back(m);
  if (!b1) out.shape.push_back(n);
  return out;
}

// x (..., in) · w (out, in)ᵀ + bias (out).
Host linear_ref(const Host& x, const Host& w, const Host* bias) {
  const int64_t in = w.shape[1], out_f = w.shape[0], rows = x.numel() / in;
  Host out;
  out.shape = Shape(x.shape.begin(), x.shape.end() - 1);
  out.shape.push_back(out_f);
  out.v.assign(static_cast<size_t>(rows * out_f), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out_f; ++o) {
      double acc = bias ? bias->v[static_cast<size_t>(o)] : 0.0;
      for (int64_t i = 0; i < in; ++i)
        acc += x.v[static_cast<size_t>(r * in + i)] * w.v[static_cast<size_t>(o * in + i)];
      out.v[static_cast<size_t>(r * out_f + o)] = acc;
    }
  return out;
}

void matmul_errors() {
  Tensor a = zeros({3, 4}), b = zeros({5, 6});
  check_throws([&] { matmul(a, b); }, {"matmul", "(3, 4)", "(5, 6)"});
  check_throws([&] { matmul(zeros({4}), zeros({5})); }, {"matmul", "(4,)", "(5,)"});
  check_throws([&] { matmul(zeros({3, 4}), zeros({4, 2}, DType::f64)); }, {"matmul", "f32", "f64"});
  check_throws([&] { matmul(zeros({2, 3, 4}), zeros({3, 4, 5})); }, {"matmul", "(2, 3, 4)", "(3, 4, 5)"});
  check_throws([&] { matmul(scalar_tensor(1.0), zeros({3})); }, {"matmul", "()", "(3,)"});
  check_throws([&] { matmul(zeros({3, 4}, DType::i64), zeros({4, 2}, DType::i64)); }, {"matmul", "i64"});
}

void linear_errors() {
  check_throws([&] { linear(zeros({2, 3}), zeros({5, 4})); }, {"linear", "(2, 3)", "(5, 4)"});
  check_throws([&] { linear(zeros({2, 4}), zeros({5, 4}), zeros({4})); }, {"linear", "(4,)", "(5, 4)"});
  check_throws([&] { linear(zeros({2, 4}), zeros({5, 4}, DType::f64)); }, {"linear", "f32", "f64"});
  check_throws([&] { linear(zeros({2, 4}), zeros({4})); }, {"linear", "weight", "(4,)"});
  check_throws([&] { linear(zeros({2, 4}), zeros({5, 4}), zeros({5}, DType::f64)); }, {"linear", "f64", "f32"});
}

OpSpec mm_row(const std::string& variant, std::vector<Shape> shapes) {
  OpSpec s;
  s.op = "matmul";
  s.variant = variant;
  s.shapes = std::move(shapes);
  s.fn = [](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); };
  s.reference = [](const std::vector<Host>& h) { return matmul_ref(h[0], h[1]); };
  s.errors = matmul_errors;
  return s;
}

// Inputs built as views: `make` turns two fresh contiguous tensors into the operands.
OpSpec mm_view_row(const std::string& variant, Shape sa, Shape sb, std::function<Tensor(const Tensor&)> va,
                   std::function<Tensor(const Tensor&)> vb) {
  OpSpec s = mm_row(variant, {});
  s.inputs = [sa, sb, va, vb](Generator& g, DType t) {
    return std::vector<Tensor>{va(rand_input(sa, -1, 1, g, t)), vb(rand_input(sb, -1, 1, g, t))};
  };
  return s;
}

OpSpec linear_row(const std::string& variant, std::vector<Shape> shapes) {
  OpSpec s;
  s.op = "linear";
  s.variant = variant;
  const bool has_bias = shapes.size() == 3;
  s.shapes = std::move(shapes);
  s.fn = [has_bias](const std::vector<Tensor>& x) { return linear(x[0], x[1], has_bias ? x[2] : Tensor()); };
  s.reference = [has_bias](const std::vector<Host>& h) { return linear_ref(h[0], h[1], has_bias ? &h[2] : nullptr); };
  s.errors = linear_errors;
  return s;
}

Tensor tr(const Tensor& x) { return transpose(x, -1, -2); }

const bool registered = add_specs({
    mm_row("2-d (3,4)x(4,5)", {{3, 4}, {4, 5}}),
    mm_row("1-d x 2-d (4)x(4,3)", {{4}, {4, 3}}),
    mm_row("2-d x 1-d (3,4)x(4)", {{3, 4}, {4}}),
    mm_row("1-d x 1-d (5)x(5)", {{5}, {5}}),
    mm_row("batched (2,3,4)x(2,4,3)", {{2, 3, 4}, {2, 4, 3}}),
    mm_row("broadcast batch (1,3,4)x(2,4,5)", {{1, 3, 4}, {2, 4, 5}}),
    mm_row("broadcast both (2,1,3,2)x(3,2,2)", {{2, 1, 3, 2}, {3, 2, 2}}),
    mm_row("attention (2,2,5,4)x(2,2,4,3)", {{2, 2, 5, 4}, {2, 2, 4, 3}}),
    mm_row("folded 3-d x 2-d (2,3,4)x(4,5)", {{2, 3, 4}, {4, 5}}),
    mm_row("2-d x 3-d (3,4)x(2,4,2)", {{3, 4}, {2, 4, 2}}),
    mm_row("1-d x 3-d (4)x(2,4,3)", {{4}, {2, 4, 3}}),
    mm_row("3-d x 1-d (2,3,4)x(4)", {{2, 3, 4}, {4}}),
    mm_row("empty inner (3,0)x(0,2)", {{3, 0}, {0, 2}}),
    mm_view_row("transposed (4,3)^T x (5,4)^T", {4, 3}, {5, 4}, tr, tr),
    mm_view_row("transposed batched (2,4,3)^T x (2,4,5)", {2, 4, 3}, {2, 4, 5}, tr, [](const Tensor& x) { return x; }),
    // Batch dims not evenly spaced (a permuted (B,L,H,D) -> (B,H,L,D)): one GEMM per outer batch.
    mm_view_row("permuted batch (2,5,2,3)->(2,2,5,3) x (2,2,3,2)", {2, 5, 2, 3}, {2, 2, 3, 2},
                [](const Tensor& x) { return permute(x, {0, 2, 1, 3}); }, [](const Tensor& x) { return x; }),
    // Strided rows (every other row): unit stride kept, leading dimension 2·K.
    mm_view_row("row-sliced (6,4)[::2] x (4,3)", {6, 4}, {4, 3}, [](const Tensor& x) { return slice(x, 0, 0, 6, 2); },
                [](const Tensor& x) { return x; }),
    // No unit stride in the matrix dims: the op copies first.
    mm_view_row("column-sliced (3,8)[:, ::2] x (4,2)", {3, 8}, {4, 2},
                [](const Tensor& x) { return slice(x, 1, 0, 8, 2); }, [](const Tensor& x) { return x; }),
    linear_row("bias (3,4) w(5,4)", {{3, 4}, {5, 4}, {5}}),
    linear_row("no bias (3,4) w(5,4)", {{3, 4}, {5, 4}}),
    linear_row("3-d input (2,3,4) w(5,4) bias", {{2, 3, 4}, {5, 4}, {5}}),
    linear_row("1-d input (4) w(3,4) bias", {{4}, {3, 4}, {3}}),
});

// ---- kernel-level checks at sizes the op table cannot gradcheck ----

Tensor randm(const Shape& s, uint64_t seed, DType t = DType::f64) {
  Generator g(seed);
  return uniform(s, -1, 1, g, {t});
}

double max_rel_err(const Tensor& got, const Host& want) {
  auto g = to_vector<double>(got);
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i)
    worst = std::max(worst, std::fabs(g[i] - want.v[i]) / (1.0 + std::fabs(want.v[i])));
  return worst;
}

}  // namespace

// f32 products of this size take the packed AVX2 engine (on x86 -march=native builds); k = 300
// spans two depth blocks (KC = 256), so the accumulate-onto-c path runs too.
TEST_CASE("gemm: storage orders, strided rows, odd sizes, both dtypes") {
  const int64_t m = 67, k = 300, n = 45;
  for (DType t : {DType::f64, DType::f32}) {
    Tensor a = randm({m, k}, 1, t), b = randm({k, n}, 2, t);
    Host want = matmul_ref(to_host(a), to_host(b));
    Tensor at = randm({k, m}, 0, t), bt = randm({n, k}, 0, t);  // column-major copies
    copy_(tr(at), a);
    copy_(tr(bt), b);
    Tensor a2 = randm({2 * m, k}, 0, t);  // every other row: leading dimension 2k
    copy_(slice(a2, 0, 0, 2 * m, 2), a);
    const double tol = t == DType::f64 ? 1e-12 : 2e-5;
    for (int combo = 0; combo < 6; ++combo) {
      CAPTURE(combo);
      CAPTURE(dtype_name(t));
      Tensor A = combo & 1 ? tr(at) : combo & 4 ? slice(a2, 0, 0, 2 * m, 2) : a, B = combo & 2 ? tr(bt) : b;
      CHECK(max_rel_err(matmul(A, B), want) < tol);
    }
  }
}

TEST_CASE("gemm: f32 wider than one packed panel, thin and tall edges") {
  // n = 3100 > NC = 3072 columns; m = 13 and k = 40 leave partial 6x16 tiles everywhere.
  for (Shape s : {Shape{13, 40, 3100}, Shape{301, 20, 17}, Shape{5, 9, 1000}, Shape{1000, 7, 5}}) {
    CAPTURE(shape_str(s));
    Tensor a = randm({s[0], s[1]}, 20, DType::f32), b = randm({s[1], s[2]}, 21, DType::f32);
    CHECK(max_rel_err(matmul(a, b), matmul_ref(to_host(a), to_host(b))) < 2e-5);
    CHECK(max_rel_err(matmul(tr(tr(a).contiguous()), tr(tr(b).contiguous())), matmul_ref(to_host(a), to_host(b))) <
          2e-5);
  }
}

TEST_CASE("gemm: alpha/beta and broadcast batch stride through the backend") {
  // f64 (Eigen) and f32 at a size the packed engine takes (k > KC: beta applies once, not per block).
  for (auto [t, bt, m, k, n] : {std::tuple<DType, int64_t, int64_t, int64_t, int64_t>{DType::f64, 5, 9, 13, 7},
                                {DType::f32, 5, 30, 270, 40}}) {
    const char* tname = dtype_name(t);  // clang 14 cannot capture a structured binding in CAPTURE's lambda
    CAPTURE(tname);
    Tensor a = randm({bt, m, k}, 3, t), b = randm({1, k, n}, 4, t), c0 = randm({bt, m, n}, 5, t);
    Tensor c = clone(c0);
    Tensor bb = b.as_strided({bt, k, n}, {0, n, 1}, 0);
    backend_of(a).gemm(a, bb, c, {0.5, -2.0});
    Host prod = matmul_ref(to_host(a), to_host(b));
    auto c0v = to_vector<double>(c0), cv = to_vector<double>(c);
    double worst = 0;
    for (size_t i = 0; i < cv.size(); ++i)
      worst = std::max(worst, std::fabs(cv[i] - (0.5 * prod.v[i] - 2.0 * c0v[i])) / (1.0 + std::fabs(prod.v[i])));
    CHECK(worst < (t == DType::f64 ? 1e-12 : 2e-5));
  }
}

TEST_CASE("gemm: threaded batch split and Eigen's split agree with the single-threaded result") {
  const int prev = num_threads();
  // 16 matrices of 64x48x40 (batch split), one 301x250x200 f32 product (split by rows, uneven),
  // the same in f64 (Eigen's own split), a 20x64x900 one (split by columns); 2 and 3 threads.
  Tensor a = randm({16, 64, 40}, 6, DType::f32), b = randm({16, 40, 48}, 7, DType::f32);
  Tensor x = randm({301, 250}, 8, DType::f32), y = randm({250, 200}, 9, DType::f32);
  Tensor xd = x.to(DType::f64), yd = y.to(DType::f64);
  Tensor u = randm({20, 64}, 10, DType::f32), v = randm({64, 900}, 11, DType::f32);  // few rows: split columns
  set_num_threads(1);
  Tensor r1 = matmul(a, b), s1 = matmul(x, y), d1 = matmul(xd, yd), w1 = matmul(u, v);
  for (int th : {2, 3}) {
    CAPTURE(th);
    set_num_threads(th);
    CHECK(num_threads() == th);
    CHECK(max_rel_err(matmul(a, b), to_host(r1)) < 1e-5);
    CHECK(max_rel_err(matmul(x, y), to_host(s1)) < 1e-5);
    CHECK(max_rel_err(matmul(xd, yd), to_host(d1)) < 1e-12);
    CHECK(max_rel_err(matmul(u, v), to_host(w1)) < 1e-5);
  }
  set_num_threads(prev);
  CHECK(max_rel_err(r1, matmul_ref(to_host(a), to_host(b))) < 1e-5);
  CHECK(max_rel_err(s1, matmul_ref(to_host(x), to_host(y))) < 2e-5);
  CHECK(max_rel_err(d1, matmul_ref(to_host(xd), to_host(yd))) < 1e-12);
  CHECK(max_rel_err(w1, matmul_ref(to_host(u), to_host(v))) < 2e-5);
  check_throws([] { set_num_threads(0); }, {"set_num_threads", "0"});
}

TEST_CASE("matmul/linear: bf16 computes in f32 and rounds once") {
  Tensor a = randm({4, 6}, 10, DType::f32), b = randm({6, 3}, 11, DType::f32), w = randm({3, 6}, 12, DType::f32);
  Tensor ab = a.to(DType::bf16), bb = b.to(DType::bf16), wb = w.to(DType::bf16);
  Tensor want = matmul(ab.to(DType::f32), bb.to(DType::f32)).to(DType::bf16);
  Tensor got = matmul(ab, bb);
  CHECK(got.dtype() == DType::bf16);
  CHECK(max_abs_diff(got, want) == 0.0);
  Tensor lw = linear(ab, wb).to(DType::f32);
  Tensor lr = matmul(ab.to(DType::f32), wb.to(DType::f32).t());
  CHECK(allclose(lw, lr, 1e-2, 1e-2));
}

TEST_CASE("gemm: k = 0 gives beta c in every dtype (the bf16/f16 path copies empty operands)") {
  // The half path converts a (Bt,M,0) and b (Bt,0,N) to f32 first; copying a tensor whose last dim
  // is 0 once divided by zero in the strided walk (SIGFPE, seen on the first H200 run).
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(t));
    Tensor a = empty({2, 5, 0}, {t}), b = empty({2, 0, 7}, {t});
    Tensor c0 = randm({2, 5, 7}, 13, DType::f32).to(t);
    Tensor c = clone(c0);
    backend_of(a).gemm(a, b, c, {1.0, 0.5});
    CHECK(max_abs_diff(c.to(DType::f64), mul(c0.to(DType::f64), 0.5)) == 0.0);
    Tensor z = clone(c0);
    backend_of(a).gemm(a, b, z, {});
    CHECK(max_abs_diff(z.to(DType::f64), zeros({2, 5, 7}, {DType::f64})) == 0.0);
  }
  Tensor e = empty({3, 0}, {DType::bf16});  // copy, fill and casts of an empty tensor are no-ops
  CHECK(e.to(DType::f32).numel() == 0);
  backend_of(e).fill(e, 1.0);
  CHECK(e.contiguous().numel() == 0);
}

TEST_CASE("linear: gradients at a larger size match the composed matmul") {
  Tensor x = randm({3, 7, 10}, 13), w = randm({6, 10}, 14), bias = randm({6}, 15);
  Tensor gy = randm({3, 7, 6}, 16);
  x.requires_grad_(true);
  w.requires_grad_(true);
  bias.requires_grad_(true);
  linear(x, w, bias).backward(gy);
  Tensor gx = x.grad(), gw = w.grad(), gb = bias.grad();
  // gx = gy·W, gW = Σ gyᵀ·x, gb = Σ gy, by plain loops.
  Host hx = to_host(x), hw = to_host(w), hg = to_host(gy);
  std::vector<double> ex(hx.v.size(), 0.0), ew(hw.v.size(), 0.0), eb(6, 0.0);
  for (int64_t r = 0; r < 21; ++r)
    for (int64_t o = 0; o < 6; ++o) {
      double g = hg.v[static_cast<size_t>(r * 6 + o)];
      eb[static_cast<size_t>(o)] += g;
      for (int64_t i = 0; i < 10; ++i) {
        ex[static_cast<size_t>(r * 10 + i)] += g * hw.v[static_cast<size_t>(o * 10 + i)];
        ew[static_cast<size_t>(o * 10 + i)] += g * hx.v[static_cast<size_t>(r * 10 + i)];
      }
    }
  CHECK(max_rel_err(gx, Host{x.shape(), ex}) < 1e-12);
  CHECK(max_rel_err(gw, Host{w.shape(), ew}) < 1e-12);
  CHECK(max_rel_err(gb, Host{bias.shape(), eb}) < 1e-12);
}

}  // namespace hh::test

namespace hh::test {
namespace {

// a·b with the product and the sum as elementwise ops (no GEMM): an independent reference for
// matmul's values and, through autograd, its gradients. a (..., M, K), b (..., K, N).
Tensor matmul_by_sum(const Tensor& a, const Tensor& b) { return sum(mul(unsqueeze(a, -1), unsqueeze(b, -3)), {-2}); }

// |got - want| <= tol (1 + |want|) everywhere, same shape.
void check_near(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  REQUIRE_MESSAGE(got.shape() == want.shape(), what, ": shape ", shape_str(got.shape()), " vs ", shape_str(want.shape()));
  std::vector<double> g = to_vector<double>(got), w = to_vector<double>(want);
  double worst = 0.0;
  for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::fabs(g[i] - w[i]) / (1.0 + std::fabs(w[i])));
  CHECK_MESSAGE(worst <= tol, what, ": worst relative difference ", worst);
}

// One operand of a pattern: made contiguous with `storage` shape, then permuted by `perm`
// (a strided view), then expanded to `expand_to` when given (stride-0 dims).
struct OperandSpec {
  Shape storage;
  std::vector<int64_t> perm;
  Shape expand_to;
};

Tensor make_operand(const OperandSpec& s, DType t, uint64_t seed) {
  Generator g(seed);
  Tensor x = uniform(s.storage, -1, 1, g, {t});
  if (!s.perm.empty()) x = permute(x, s.perm);
  if (!s.expand_to.empty()) x = expand(x, s.expand_to);
  Tensor leaf = x.detach();
  leaf.requires_grad_(true);
  return leaf;
}

}  // namespace

TEST_CASE("matmul: stride and broadcast patterns match an elementwise reference, values and gradients") {
  // (a, b) pairs: batch dims that both operands have, that only a has (folded into the rows), that
  // only b has (folded into the cols), summed in the backward; transposed and permuted views,
  // stride-0 expands, 1-d operands, 2-d operands against batched ones, odd sizes.
  const std::vector<std::pair<OperandSpec, OperandSpec>> patterns = {
      {{{2, 3, 5, 4}, {}, {}}, {{1, 3, 4, 6}, {}, {}}},                 // the feature map, contiguous x
      {{{2, 5, 3, 4}, {0, 2, 1, 3}, {}}, {{1, 3, 4, 6}, {}, {}}},       // the feature map, heads view x
      {{{2, 5, 3, 4}, {0, 2, 1, 3}, {}}, {{3, 4, 6}, {}, {}}},          // a 3-d weight
      {{{3, 5, 4}, {}, {}}, {{2, 3, 4, 6}, {}, {}}},                    // only b has B
      {{{2, 1, 5, 4}, {}, {}}, {{1, 3, 4, 6}, {}, {}}},                 // a has B, b has H
      {{{5, 4}, {}, {}}, {{2, 3, 4, 6}, {}, {}}},                       // 2-d a
      {{{2, 5, 3, 4}, {0, 2, 1, 3}, {}}, {{4, 6}, {}, {}}},             // 2-d b, permuted a
      {{{2, 3, 4, 5}, {0, 1, 3, 2}, {}}, {{2, 3, 6, 4}, {0, 1, 3, 2}, {}}},  // transposed matrices
      {{{2, 5, 3, 4}, {0, 2, 1, 3}, {}}, {{2, 6, 3, 4}, {0, 2, 3, 1}, {}}},  // q·kᵀ on heads views
      {{{1, 3, 5, 4}, {}, {2, 3, 5, 4}}, {{2, 3, 4, 6}, {}, {}}},       // a expanded (stride 0)
      {{{2, 5, 4}, {}, {}}, {{3, 1, 4, 6}, {}, {3, 2, 4, 6}}},          // b expanded, extra dim
      {{{4}, {}, {}}, {{2, 3, 4, 6}, {}, {}}},                          // 1-d a
      {{{2, 3, 5, 4}, {}, {}}, {{4}, {}, {}}},                          // 1-d b
      {{{7, 1, 5, 4}, {}, {}}, {{2, 4, 3}, {}, {}}},                    // odd sizes both sides
      {{{2, 3, 5, 0}, {}, {}}, {{1, 3, 0, 6}, {}, {}}},                 // K = 0
      {{{0, 3, 5, 4}, {}, {}}, {{1, 3, 4, 6}, {}, {}}},                 // an empty batch
  };
  for (DType t : {DType::f64, DType::f32}) {
    const double tol = t == DType::f64 ? 1e-12 : 2e-5;
    for (size_t i = 0; i < patterns.size(); ++i) {
      const std::string what = std::string(dtype_name(t)) + " pattern " + std::to_string(i);
      Tensor a = make_operand(patterns[i].first, t, 10 + i), b = make_operand(patterns[i].second, t, 50 + i);
      Tensor out = matmul(a, b);
      Tensor a2 = a.dim() == 1 ? unsqueeze(a, 0) : a, b2 = b.dim() == 1 ? unsqueeze(b, 1) : b;
      Tensor ref = matmul_by_sum(a2, b2);
      if (a.dim() == 1) ref = squeeze(ref, -2);
      if (b.dim() == 1) ref = squeeze(ref, -1);
      check_near(out, ref, tol, what + " forward");
      Generator g(90 + i);
      Tensor gy = uniform(out.shape(), -1, 1, g, {t});
      out.backward(gy);
      Tensor ga = a.grad(), gb = b.grad();
      a.zero_grad();
      b.zero_grad();
      ref.backward(gy);
      check_near(ga, a.grad(), tol, what + " grad a");
      check_near(gb, b.grad(), tol, what + " grad b");
    }
  }
}

TEST_CASE("matmul: the per-head feature-map product and both its gradients are one GEMM call each") {
  // (B,H,L,D)·(1,H,D,F), as nn/feature_maps.cpp's head_affine; before, a broadcast leading batch
  // dim split each product into B GEMM calls.
  const int64_t B = 4, H = 3, L = 5, D = 4, F = 6;
  int calls = 0;
  GemmCall counting = [&calls](const Tensor& a, const Tensor& b, const Tensor& c) {
    ++calls;
    backend_of(c).gemm(a, b, c, {1.0, 0.0});
  };
  Generator g(7);
  Tensor W = unsqueeze(uniform({H, D, F}, -1, 1, g, {DType::f64}), 0);
  Tensor G = uniform({B, H, L, F}, -1, 1, g, {DType::f64});
  auto swap_last = [](const Tensor& x) { return transpose(x, -1, -2); };
  Tensor contiguous_x = uniform({B, H, L, D}, -1, 1, g, {DType::f64});
  Tensor heads_x = transpose(uniform({B, L, H, D}, -1, 1, g, {DType::f64}), 1, 2);
  for (const Tensor& x : {contiguous_x, heads_x}) {
    calls = 0;
    Tensor z = gemm_product(x, W, {B, H}, counting);
    CHECK(calls == 1);
    check_near(z, matmul_by_sum(x, W), 1e-12, "forward");
    calls = 0;
    Tensor gx = gemm_product(G, swap_last(W), {B, H}, counting);  // gx = G·Wᵀ
    CHECK(calls == 1);
    check_near(gx, matmul_by_sum(G, swap_last(W)), 1e-12, "grad x");
    calls = 0;
    Tensor gw = gemm_product(swap_last(x), G, {1, H}, counting);  // gW = Σ_b xᵀ·G
    CHECK(calls == 1);
    check_near(gw, sum(matmul_by_sum(swap_last(x), G), {0}, true), 1e-12, "grad W");
    // The layout the forward wrote: heads outermost, B·L rows per head.
    CHECK(z.stride(1) == B * L * F);
    CHECK(z.stride(0) == L * F);
  }
  // matmul runs its forward and backward through exactly these products; its gradient matches.
  Tensor x = heads_x.detach(), w = W.detach();
  x.requires_grad_(true);
  w.requires_grad_(true);
  Tensor z = matmul(x, w);
  z.backward(G);
  check_near(w.grad(), sum(matmul_by_sum(swap_last(heads_x), G), {0}, true), 1e-12, "matmul grad W");
}

}  // namespace hh::test
