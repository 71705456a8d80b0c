// The ops' initial-state inputs (a started sequence): gated_attention_chunked and
// hybrid_attention_chunked from the state gated_decode_state / hybrid_decode_state leave after a
// first part give the rest of the run over the whole sequence, values and gradients (f64 to 1e-10),
// and the decode-state functions continued from that state give the whole run's state.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "tests/op_table.h"

using namespace hh;

namespace {
double err(const Tensor& a, const Tensor& b) {
  const double scale = amax(abs(b)).item<double>();
  return amax(abs(sub(a, b))).item<double>() / std::max(scale, 1e-30);
}
Tensor rows(const Tensor& x, int64_t from, int64_t to) { return contiguous(slice(x, 2, from, to)); }
Tensor leaf(const Tensor& x) { return x.detach().clone().requires_grad_(true); }
}  // namespace

TEST_CASE("gated_attention_chunked from an initial state: the rest of the whole run, values and gradients") {
  const int64_t B = 2, H = 2, L = 13, F = 4, Dv = 3;
  for (int64_t A : {int64_t{1}, F})  // a per-head decay, a per-channel gate
    for (bool normalize : {true, false})
      for (int64_t s : {int64_t{1}, int64_t{4}, int64_t{9}}) {
        CAPTURE(A);
        CAPTURE(normalize);
        CAPTURE(s);
        Generator g(static_cast<uint64_t>(10 * s + A));
        const Options o{DType::f64};
        const Tensor pq = uniform({B, H, L, F}, 0.1, 1, g, o), pk = uniform({B, H, L, F}, 0.1, 1, g, o);
        const Tensor v = uniform({B, H, L, Dv}, -1, 1, g, o), la = uniform({B, H, L, A}, -0.8, -0.01, g, o);
        const Tensor w = uniform({B, H, L - s, Dv}, -1, 1, g, o);
        // The whole run; its last L - s rows and their gradients.
        std::vector<Tensor> x = {leaf(pq), leaf(pk), leaf(v), leaf(la)};
        const Tensor whole = rows(gated_attention_chunked(x[0], x[1], x[2], x[3], normalize, 1e-6, Tensor(), 4), s, L);
        sum(mul(whole, w)).backward();
        // The first s rows' state, then the rest from it.
        GatedDecodeState first = gated_decode_state(rows(pk, 0, s), rows(v, 0, s), rows(la, 0, s), normalize);
        std::vector<Tensor> y = {leaf(rows(pq, s, L)), leaf(rows(pk, s, L)), leaf(rows(v, s, L)), leaf(rows(la, s, L))};
        const Tensor rest = gated_attention_chunked(y[0], y[1], y[2], y[3], normalize, 1e-6, Tensor(), 4, &first);
        CHECK(err(rest, whole) < 1e-10);
        sum(mul(rest, w)).backward();
        for (size_t i = 0; i < 4; ++i) {
          CAPTURE(i);
          CHECK(err(y[i].grad(), rows(x[i].grad(), s, L)) < 1e-10);
        }
        NoGradGuard ng;
        const GatedDecodeState end = gated_decode_state(rows(pk, s, L), rows(v, s, L), rows(la, s, L), normalize, &first);
        const GatedDecodeState want = gated_decode_state(pk, v, la, normalize);
        CHECK(end.tokens == L);
        CHECK(err(end.S, want.S) < 1e-10);
        if (normalize) CHECK(err(end.z, want.z) < 1e-10);
      }
}

TEST_CASE("hybrid_attention_chunked from an initial state: the rest of the whole run, and the state") {
  const int64_t B = 1, H = 2, L = 13, D = 4, F = 5, Dv = 3;
  for (int64_t W : {int64_t{1}, int64_t{3}, int64_t{20}})
    for (int64_t s : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{9}}) {
      CAPTURE(W);
      CAPTURE(s);
      Generator g(static_cast<uint64_t>(100 * W + s));
      const Options o{DType::f64};
      const Tensor q = uniform({B, H, L, D}, -1, 1, g, o), k = uniform({B, H, L, D}, -1, 1, g, o);
      const Tensor v = uniform({B, H, L, Dv}, -1, 1, g, o);
      const Tensor pq = uniform({B, H, L, F}, 0.1, 1, g, o), pk = uniform({B, H, L, F}, 0.1, 1, g, o);
      const Tensor wf = uniform({H}, 0.2, 0.8, g, o), lf = uniform({H}, 0.2, 0.8, g, o);
      const Tensor w = uniform({B, H, L - s, Dv}, -1, 1, g, o);
      std::vector<Tensor> x = {leaf(q), leaf(k), leaf(v), leaf(pq), leaf(pk)};
      const Tensor whole = rows(hybrid_attention_chunked(x[0], x[1], x[2], x[3], x[4], wf, lf, W, -1, Tensor(), 4), s, L);
      sum(mul(whole, w)).backward();
      const HybridDecodeState first = hybrid_decode_state(rows(k, 0, s), rows(v, 0, s), rows(pk, 0, s), W);
      std::vector<Tensor> y = {leaf(rows(q, s, L)), leaf(rows(k, s, L)), leaf(rows(v, s, L)), leaf(rows(pq, s, L)),
                               leaf(rows(pk, s, L))};
      const Tensor rest = hybrid_attention_chunked(y[0], y[1], y[2], y[3], y[4], wf, lf, W, -1, Tensor(), 4, &first);
      CHECK(err(rest, whole) < 1e-10);
      sum(mul(rest, w)).backward();
      for (size_t i = 0; i < 5; ++i) {
        CAPTURE(i);
        CHECK(err(y[i].grad(), rows(x[i].grad(), s, L)) < 1e-10);
      }
      NoGradGuard ng;
      const HybridDecodeState end = hybrid_decode_state(rows(k, s, L), rows(v, s, L), rows(pk, s, L), W, &first);
      const HybridDecodeState want = hybrid_decode_state(k, v, pk, W);
      CHECK(end.tokens == want.tokens);
      REQUIRE(end.k.shape() == want.k.shape());
      CHECK(err(end.k, want.k) == 0.0);  // the ring holds the same tokens in the same slots
      CHECK(err(end.v, want.v) == 0.0);
      CHECK(err(end.pk, want.pk) == 0.0);
      CHECK(err(end.S, want.S) < 1e-10);
      CHECK(err(end.z, want.z) < 1e-10);
    }
}

TEST_CASE("initial states that do not match the tokens are errors") {
  Generator g(1);
  const Options o{DType::f64};
  const Tensor pq = uniform({1, 2, 3, 4}, 0.1, 1, g, o), v = uniform({1, 2, 3, 5}, -1, 1, g, o);
  const Tensor la = full({1, 2, 3, 1}, -0.1, o);
  GatedDecodeState bad{zeros({1, 2, 4, 4}, o), zeros({1, 2, 4, 1}, o), 3};  // Dv 4, not 5
  CHECK_THROWS_WITH_AS(gated_attention_chunked(pq, pq, v, la, true, 1e-6, Tensor(), 4, &bad),
                       doctest::Contains("initial state S"), Error);
  GatedDecodeState no_z{zeros({1, 2, 4, 5}, o), Tensor(), 3};
  CHECK_THROWS_WITH_AS(gated_attention_chunked(pq, pq, v, la, true, 1e-6, Tensor(), 4, &no_z),
                       doctest::Contains("z"), Error);
  const Tensor k = uniform({1, 2, 3, 4}, -1, 1, g, o), f = full({2}, 0.5, o);
  HybridDecodeState st = hybrid_decode_state(k, v, pq, 2);
  CHECK_THROWS_WITH_AS(hybrid_attention_chunked(k, k, v, pq, pq, f, f, 3, -1, Tensor(), 4, &st),
                       doctest::Contains("window"), Error);
  CHECK_THROWS_WITH_AS(hybrid_attention_chunked(k, k, v, pq, pq, f, f, 2, -1, full({1, 3}, 1.0, o), 4, &st),
                       doctest::Contains("key mask"), Error);
}
