// Indexing ops: op-table rows for gather, scatter_add, index_select, embedding and one_hot (with
// integer index inputs and gradchecks of the float inputs only), plus direct kernel tests for
// the CPU index kernels (all-dtype data movement, race-free accumulation on large inputs,
// range checks that write nothing) and the triangle kernel behind tril/triu.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "core/backend.h"
#include "tests/op_table.h"

namespace hh::test {
namespace {

std::vector<int64_t> unravel(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    idx[d] = flat % s[d];
    flat /= s[d];
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t flat = 0;
  for (size_t d = 0; d < s.size(); ++d) flat = flat * s[d] + idx[d];
  return flat;
}

int64_t wrap(int64_t dim, size_t rank) { return dim < 0 ? dim + static_cast<int64_t>(rank) : dim; }

// out (index's shape)[p] = x[p with p[dim] = index[p]]
Host gather_ref(const Host& x, int64_t dim, const Host& index) {
  dim = wrap(dim, x.shape.size());
  Host out{index.shape, std::vector<double>(index.v.size())};
  for (int64_t f = 0; f < index.numel(); ++f) {
    auto p = unravel(f, index.shape);
    p[static_cast<size_t>(dim)] = static_cast<int64_t>(index.v[static_cast<size_t>(f)]);
    out.v[static_cast<size_t>(f)] = x.at(p);
  }
  return out;
}

// out = x; out[p with p[dim] = index[p]] += src[p] for every position p of index.
Host scatter_add_ref(const Host& x, int64_t dim, const Host& index, const Host& src) {
  dim = wrap(dim, x.shape.size());
  Host out = x;
  for (int64_t f = 0; f < index.numel(); ++f) {
    auto p = unravel(f, index.shape);
    double s = src.at(p);
    p[static_cast<size_t>(dim)] = static_cast<int64_t>(index.v[static_cast<size_t>(f)]);
    out.v[static_cast<size_t>(ravel(p, x.shape))] += s;
  }
  return out;
}

// out[p] = x[p with p[dim] = index[p[dim]]]
Host index_select_ref(const Host& x, int64_t dim, const Host& index) {
  dim = wrap(dim, x.shape.size());
  Shape s = x.shape;
  s[static_cast<size_t>(dim)] = index.numel();
  Host out{s, std::vector<double>(static_cast<size_t>(numel_of(s)))};
  for (int64_t f = 0; f < out.numel(); ++f) {
    auto p = unravel(f, s);
    p[static_cast<size_t>(dim)] = static_cast<int64_t>(index.v[static_cast<size_t>(p[static_cast<size_t>(dim)])]);
    out.v[static_cast<size_t>(f)] = x.at(p);
  }
  return out;
}

Host embedding_ref(const Host& w, const Host& ids) {
  Host out = index_select_ref(w, 0, Host{{ids.numel()}, ids.v});
  out.shape = ids.shape;
  out.shape.push_back(w.shape[1]);
  return out;
}

Host one_hot_ref(const Host& ids, int64_t classes) {
  Shape s = ids.shape;
  s.push_back(classes);
  Host out{s, std::vector<double>(static_cast<size_t>(numel_of(s)), 0.0)};
  for (int64_t i = 0; i < ids.numel(); ++i)
    out.v[static_cast<size_t>(i * classes + static_cast<int64_t>(ids.v[static_cast<size_t>(i)]))] = 1.0;
  return out;
}

Tensor f32(const Shape& s) { return zeros(s, DType::f32); }
Tensor idx64(const std::vector<int64_t>& v, const Shape& s) { return from_vector(v, s); }

const bool registered = add_specs({
    // ---- gather ----
    {"gather", "dim 1, (3,4) <- index (3,5) with repeats", {}, -1, 1,
     [](Generator& g, DType t) {
       return std::vector<Tensor>{rand_input({3, 4}, -1, 1, g, t), randint(0, 4, {3, 5}, g)};
     },
     [](const std::vector<Tensor>& x) { return gather(x[0], 1, x[1]); },
     [](const std::vector<Host>& h) { return gather_ref(h[0], 1, h[1]); }, true, "", {0},
     [] {
       check_throws([] { gather(f32({3, 4}), 1, idx64({0, 4}, {1, 2})); }, {"gather", "index 4", "size 4"});
       check_throws([] { gather(f32({3, 4}), 1, idx64({0, -1}, {1, 2})); }, {"gather", "-1"});
       check_throws([] { gather(f32({3, 4}), 1, f32({3, 2})); }, {"gather", "i64", "f32"});
       check_throws([] { gather(f32({3, 4}), 1, idx64({0, 1}, {2})); }, {"gather", "(2,)", "(3, 4)"});
       check_throws([] { gather(f32({3, 4}), 1, idx64(std::vector<int64_t>(8, 0), {4, 2})); },
                    {"gather", "(4, 2)", "(3, 4)"});
       check_throws([] { gather(f32({3, 4}), 2, idx64({0}, {1, 1})); }, {"gather"});
     }},
    {"gather", "dim 0 of (4,2,3), i32 index (3,2,2) smaller in dim 2", {}, -1, 1,
     [](Generator& g, DType t) {
       return std::vector<Tensor>{rand_input({4, 2, 3}, -1, 1, g, t), randint(0, 4, {3, 2, 2}, g, {DType::i32})};
     },
     [](const std::vector<Tensor>& x) { return gather(x[0], 0, x[1]); },
     [](const std::vector<Host>& h) { return gather_ref(h[0], 0, h[1]); }, true, "", {0},
     [] {
       check_throws([] { gather(f32({4, 2, 3}), 0, from_vector(std::vector<int64_t>{9}, {1, 1, 1}, {DType::i32})); },
                    {"gather", "9"});
     }},
    {"gather", "dim -1 of (2,3,4)", {}, -1, 1,
     [](Generator& g, DType t) {
       return std::vector<Tensor>{rand_input({2, 3, 4}, -1, 1, g, t), randint(0, 4, {2, 3, 2}, g)};
     },
     [](const std::vector<Tensor>& x) { return gather(x[0], -1, x[1]); },
     [](const std::vector<Host>& h) { return gather_ref(h[0], -1, h[1]); }, true, "", {0},
     [] { check_throws([] { gather(f32({2, 3, 4}), -1, zeros({2, 3, 2}, DType::u8)); }, {"gather", "u8"}); }},

    // ---- scatter_add ----
    {"scatter_add", "dim 0, (4,3) += src (5,3) at repeated rows", {}, -1, 1,
     [](Generator& g, DType t) {
       Tensor x = rand_input({4, 3}, -1, 1, g, t);
       Tensor i = randint(0, 4, {5, 3}, g);
       return std::vector<Tensor>{x, i, rand_input({5, 3}, -1, 1, g, t)};
     },
     [](const std::vector<Tensor>& x) { return scatter_add(x[0], 0, x[1], x[2]); },
     [](const std::vector<Host>& h) { return scatter_add_ref(h[0], 0, h[1], h[2]); }, true, "", {0, 2},
     [] {
       check_throws([] { scatter_add(f32({4, 3}), 0, idx64({7, 0, 0}, {1, 3}), f32({1, 3})); },
                    {"scatter_add", "index 7", "size 4"});
       check_throws([] { scatter_add(f32({4, 3}), 0, idx64({0, 0, 0}, {1, 3}), zeros({1, 3}, DType::f64)); },
                    {"scatter_add", "f64", "f32"});
       check_throws([] { scatter_add(f32({4, 3}), 0, f32({1, 3}), f32({1, 3})); }, {"scatter_add", "f32"});
       check_throws([] { scatter_add(f32({4, 3}), 0, idx64({0, 0, 0, 0}, {1, 4}), f32({1, 4})); },
                    {"scatter_add", "(1, 4)", "(4, 3)"});
       check_throws([] { scatter_add(f32({4, 3}), 0, idx64({0, 0, 0}, {1, 3}), f32({1, 2})); },
                    {"scatter_add", "(1, 3)", "(1, 2)"});
       check_throws([] { scatter_add(zeros({4, 3}, DType::boolean), 0, idx64({0, 0, 0}, {1, 3}),
                                     zeros({1, 3}, DType::boolean)); },
                    {"scatter_add", "bool"});
     }},
    {"scatter_add", "dim 1, index (2,4) covers part of x (3,5), src (3,6) larger", {}, -1, 1,
     [](Generator& g, DType t) {
       Tensor x = rand_input({3, 5}, -1, 1, g, t);
       Tensor i = randint(0, 5, {2, 4}, g, {DType::i32});
       return std::vector<Tensor>{x, i, rand_input({3, 6}, -1, 1, g, t)};
     },
     [](const std::vector<Tensor>& x) { return scatter_add(x[0], 1, x[1], x[2]); },
     [](const std::vector<Host>& h) { return scatter_add_ref(h[0], 1, h[1], h[2]); }, true, "", {0, 2},
     [] {
       check_throws([] { scatter_add(f32({3, 5}), 1, idx64({0, 1}, {2}), f32({3, 6})); },
                    {"scatter_add", "rank"});
     }},

    // ---- index_select ----
    {"index_select", "dim 0, (5,3) at 7 indices with repeats", {}, -1, 1,
     [](Generator& g, DType t) {
       return std::vector<Tensor>{rand_input({5, 3}, -1, 1, g, t), randint(0, 5, {7}, g)};
     },
     [](const std::vector<Tensor>& x) { return index_select(x[0], 0, x[1]); },
     [](const std::vector<Host>& h) { return index_select_ref(h[0], 0, h[1]); }, true, "", {0},
     [] {
       check_throws([] { index_select(f32({5, 3}), 0, idx64({1, -1}, {2})); }, {"index_select", "-1", "size 5"});
       check_throws([] { index_select(f32({5, 3}), 0, idx64({0, 5}, {2})); }, {"index_select", "index 5", "size 5"});
       check_throws([] { index_select(f32({5, 3}), 0, idx64({0, 1, 2, 3}, {2, 2})); },
                    {"index_select", "1-D", "(2, 2)"});
       check_throws([] { index_select(f32({5, 3}), 0, f32({2})); }, {"index_select", "f32"});
       check_throws([] { index_select(f32({5, 3}), 2, idx64({0}, {1})); }, {"index_select"});
     }},
    {"index_select", "dim 1 of (2,4,3), i32 index (6)", {}, -1, 1,
     [](Generator& g, DType t) {
       return std::vector<Tensor>{rand_input({2, 4, 3}, -1, 1, g, t), randint(0, 4, {6}, g, {DType::i32})};
     },
     [](const std::vector<Tensor>& x) { return index_select(x[0], 1, x[1]); },
     [](const std::vector<Host>& h) { return index_select_ref(h[0], 1, h[1]); }, true, "", {0},
     [] {
       check_throws([] { index_select(f32({2, 4, 3}), 1, from_vector(std::vector<int64_t>{4}, {1}, {DType::i32})); },
                    {"index_select", "index 4", "size 4"});
     }},

    // ---- embedding ----
    {"embedding", "weight (6,3), ids (2,4): 8 ids over 6 rows repeat", {}, -1, 1,
     [](Generator& g, DType t) {
       return std::vector<Tensor>{rand_input({6, 3}, -1, 1, g, t), randint(0, 6, {2, 4}, g)};
     },
     [](const std::vector<Tensor>& x) { return embedding(x[0], x[1]); },
     [](const std::vector<Host>& h) { return embedding_ref(h[0], h[1]); }, true, "", {0},
     [] {
       check_throws([] { embedding(f32({6, 3}), idx64({0, 10}, {2})); }, {"embedding", "10", "(6, 3)"});
       check_throws([] { embedding(f32({6, 3}), idx64({-3}, {1})); }, {"embedding", "-3"});
       check_throws([] { embedding(f32({6}), idx64({0}, {1})); }, {"embedding", "(6,)"});
       check_throws([] { embedding(f32({6, 3}), f32({2})); }, {"embedding", "ids", "f32"});
     }},
    {"embedding", "weight (4,2), i32 ids (5) over 3 rows", {}, -1, 1,
     [](Generator& g, DType t) {
       return std::vector<Tensor>{rand_input({4, 2}, -1, 1, g, t), randint(0, 3, {5}, g, {DType::i32})};
     },
     [](const std::vector<Tensor>& x) { return embedding(x[0], x[1]); },
     [](const std::vector<Host>& h) { return embedding_ref(h[0], h[1]); }, true, "", {0},
     [] { check_throws([] { embedding(f32({4, 2}), zeros({3}, DType::boolean)); }, {"embedding", "bool"}); }},

    // ---- one_hot ----
    {"one_hot", "ids (2,3) in [0,4), 5 classes", {}, -1, 1,
     [](Generator& g, DType t) {
       // The float input only carries the dtype under test.
       return std::vector<Tensor>{randint(0, 4, {2, 3}, g), zeros({1}, t)};
     },
     [](const std::vector<Tensor>& x) { return one_hot(x[0], 5, x[1].dtype()); },
     [](const std::vector<Host>& h) { return one_hot_ref(h[0], 5); }, false, "integer class ids have no gradient",
     {},
     [] {
       check_throws([] { one_hot(idx64({0, -1}, {2}), 3); }, {"one_hot", "-1"});
       check_throws([] { one_hot(idx64({0, 3}, {2}), 3); }, {"one_hot", "3"});
       check_throws([] { one_hot(idx64({0, -2}, {2}), -1); }, {"one_hot", "-2"});
       check_throws([] { one_hot(f32({2}), 3); }, {"one_hot", "f32"});
       check_throws([] { one_hot(idx64({0}, {1}), 0); }, {"one_hot", "num_classes", "0"});
     }},
    {"one_hot", "i32 ids (7), num_classes inferred", {}, -1, 1,
     [](Generator& g, DType t) {
       return std::vector<Tensor>{randint(0, 6, {7}, g, {DType::i32}), zeros({1}, t)};
     },
     [](const std::vector<Tensor>& x) { return one_hot(x[0], -1, x[1].dtype()); },
     [](const std::vector<Host>& h) {
       double hi = 0;
       for (double v : h[0].v) hi = std::max(hi, v);
       return one_hot_ref(h[0], static_cast<int64_t>(hi) + 1);
     },
     false, "integer class ids have no gradient", {},
     [] { check_throws([] { one_hot(zeros({0}, DType::i64), -1); }, {"one_hot", "empty"}); }},
});

}  // namespace

// ---- direct checks of the ops on non-float data and edge cases ----

TEST_CASE("index ops: move integer, bool and bf16 data") {
  Tensor x = from_vector(std::vector<int64_t>{10, 11, 12, 20, 21, 22}, {2, 3});
  CHECK(to_vector<int64_t>(index_select(x, 1, idx64({2, 0, 2}, {3}))) == std::vector<int64_t>{12, 10, 12, 22, 20, 22});
  CHECK(to_vector<int64_t>(gather(x, 0, idx64({1, 0, 1}, {1, 3}))) == std::vector<int64_t>{20, 11, 22});
  CHECK(to_vector<int64_t>(scatter_add(x, 1, idx64({0, 0}, {1, 2}), from_vector(std::vector<int64_t>{5, 7}, {1, 2}))) ==
        std::vector<int64_t>{22, 11, 12, 20, 21, 22});
  Tensor b = from_vector(std::vector<double>{1, 0, 1}, {3}, {DType::boolean});
  CHECK(to_vector<double>(index_select(b, 0, idx64({1, 2, 1}, {3}))) == std::vector<double>{0, 1, 0});
  Tensor h = from_vector(std::vector<double>{0.5, -2, 3, 4}, {2, 2}, {DType::bf16});
  Tensor e = embedding(h, idx64({1, 1, 0}, {3}));
  CHECK(e.dtype() == DType::bf16);
  CHECK(to_vector<double>(e) == std::vector<double>{3, 4, 3, 4, 0.5, -2});
  // bf16 scatter_add accumulates in f32 and returns bf16.
  Tensor s = scatter_add(h, 0, idx64({0, 0}, {1, 2}), from_vector(std::vector<double>{1, 1}, {1, 2}, {DType::bf16}));
  CHECK(s.dtype() == DType::bf16);
  CHECK(to_vector<double>(s) == std::vector<double>{1.5, -1, 3, 4});
  CHECK(to_vector<double>(one_hot(idx64({2, 0}, {2}), 3, DType::boolean)) == std::vector<double>{0, 0, 1, 1, 0, 0});
  CHECK(one_hot(idx64({2, 0}, {2}), 3, DType::i64).dtype() == DType::i64);
  // Empty index tensors give empty outputs.
  CHECK(index_select(x, 0, zeros({0}, DType::i64)).shape() == Shape{0, 3});
  CHECK(embedding(f32({4, 2}), zeros({0, 3}, DType::i64)).shape() == Shape{0, 3, 2});
  // 0-d inputs.
  Tensor sc = from_vector(std::vector<double>{2.5}, {});
  Tensor zero_d = from_vector(std::vector<int64_t>{0}, {});
  CHECK(gather(sc, 0, zero_d).item<double>() == 2.5);
  CHECK(gather(sc, 0, zero_d).dim() == 0);
  CHECK(scatter_add(sc, -1, zero_d, sc).item<double>() == 5.0);
  CHECK(index_select(sc, 0, zero_d).item<double>() == 2.5);
  CHECK(index_select(x, 1, from_vector(std::vector<int64_t>{2}, {})).shape() == Shape{2, 1});
  CHECK(to_vector<double>(embedding(from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}),
                                    from_vector(std::vector<int64_t>{1}, {}))) == std::vector<double>{3, 4});
  CHECK(one_hot(from_vector(std::vector<int64_t>{1}, {}), 3).shape() == Shape{3});
}

TEST_CASE("index ops: scatter_add does not write into its input; embedding backward accumulates") {
  Tensor x = zeros({3, 2}, DType::f64);
  scatter_add(x, 0, idx64({1, 1}, {1, 2}), ones({1, 2}, DType::f64));
  CHECK(to_vector<double>(x) == std::vector<double>(6, 0.0));
  Tensor w = zeros({4, 2}, DType::f64).requires_grad_();
  Tensor y = embedding(w, idx64({3, 1, 3, 3}, {2, 2}));
  y.backward(ones({2, 2, 2}, DType::f64));
  CHECK(to_vector<double>(w.grad()) == std::vector<double>{0, 0, 1, 1, 0, 0, 3, 3});
}

// ---- CPU kernels called directly ----

TEST_CASE("cpu index kernels: range check runs before any write") {
  Backend& be = backend_for(Device::cpu());
  Tensor out = zeros({1, 4, 2}, DType::f32);
  check_throws([&] { be.index_add(out, idx64({0, 1, 4}, {3}), ones({1, 3, 2}, DType::f32)); },
               {"index_add", "index 4", "size 4"});
  CHECK(to_vector<double>(out) == std::vector<double>(8, 0.0));
  check_throws([&] { be.scatter_add(out, idx64({0, 1, 2, -7}, {1, 2, 2}), ones({1, 2, 2}, DType::f32)); },
               {"scatter_add", "-7"});
  CHECK(to_vector<double>(out) == std::vector<double>(8, 0.0));
  Tensor dst = full({1, 2, 2}, 9.0, DType::f32);
  check_throws([&] { be.index_select(zeros({1, 4, 2}), idx64({0, 6}, {2}), dst); }, {"index_select", "index 6"});
  CHECK(to_vector<double>(dst) == std::vector<double>(4, 9.0));
  check_throws([&] { be.gather(zeros({1, 4, 2}), idx64({0, 1, 2, 5}, {1, 2, 2}), dst); }, {"gather", "index 5"});
  CHECK(to_vector<double>(dst) == std::vector<double>(4, 9.0));
  check_throws([&] { be.index_select(zeros({1, 4, 2}), zeros({2}, DType::f32), dst); }, {"index_select", "f32"});
}

TEST_CASE("cpu index kernels: large accumulations are race-free and exact") {
  // Sizes above kParallelGrain take the OpenMP path; integer-valued f64 sums are exact.
  Backend& be = backend_for(Device::cpu());
  Generator g(42);
  for (auto ori : std::vector<std::array<int64_t, 3>>{{1, 50, 1000}, {3000, 7, 3}, {4, 20, 600}}) {
    const int64_t O = ori[0], R = ori[1], I = ori[2], K = 2 * R + 3;
    INFO("O,R,I = " << O << "," << R << "," << I);
    Tensor idx = randint(0, R, {K}, g);
    Tensor src = uniform({O, K, I}, 0, 8, g, DType::f64);
    auto iv = to_vector<int64_t>(idx);
    std::vector<double> sv = to_vector<double>(src), want(static_cast<size_t>(O * R * I), 0.0);
    for (auto& v : sv) v = std::floor(v);
    src = from_vector(sv, {O, K, I}, {DType::f64});
    for (int64_t o = 0; o < O; ++o)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t i = 0; i < I; ++i)
          want[static_cast<size_t>((o * R + iv[static_cast<size_t>(k)]) * I + i)] +=
              sv[static_cast<size_t>((o * K + k) * I + i)];
    Tensor out = zeros({O, R, I}, DType::f64);
    be.index_add(out, idx, src);
    CHECK(to_vector<double>(out) == want);
    // The same sum through scatter_add with the index broadcast to (O,K,I), stored as i32.
    std::vector<int64_t> full_idx(static_cast<size_t>(O * K * I));
    for (size_t f = 0; f < full_idx.size(); ++f)
      full_idx[f] = iv[static_cast<size_t>((static_cast<int64_t>(f) / I) % K)];
    Tensor out2 = zeros({O, R, I}, DType::f64);
    be.scatter_add(out2, from_vector(full_idx, {O, K, I}, {DType::i32}), src);
    CHECK(to_vector<double>(out2) == want);
    // And gather(index) reads back what index_select reads.
    Tensor x = uniform({O, R, I}, -1, 1, g, DType::f32), a = empty({O, K, I}), b = empty({O, K, I});
    be.index_select(x, idx, a);
    be.gather(x, from_vector(full_idx, {O, K, I}), b);
    CHECK(to_vector<double>(a) == to_vector<double>(b));
  }
}

TEST_CASE("cpu triangle kernel: tril/triu masks on every dtype") {
  Backend& be = backend_for(Device::cpu());
  const int64_t B = 2, M = 3, N = 5;
  std::vector<double> vals(static_cast<size_t>(B * M * N));
  for (size_t f = 0; f < vals.size(); ++f) vals[f] = static_cast<double>(f % 7) + 1.0;  // no zeros
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8, DType::boolean})
    for (bool upper : {false, true})
      for (int64_t k : std::vector<int64_t>{-4, -1, 0, 2, 6, int64_t(1) << 62, -(int64_t(1) << 62)}) {
        INFO(dtype_name(t) << (upper ? " triu" : " tril") << " k=" << k);
        Tensor x = from_vector(vals, {B, M, N}, {t}), out = full({B, M, N}, 3.0, {t});
        be.triangle(x, out, k, upper);
        auto xv = to_vector<double>(x), got = to_vector<double>(out);
        std::vector<double> want(xv.size());
        for (int64_t f = 0; f < B * M * N; ++f) {
          int64_t i = (f / N) % M, j = f % N;
          bool keep = upper ? (j - i >= k) : (j - i <= k);
          want[static_cast<size_t>(f)] = keep ? xv[static_cast<size_t>(f)] : 0.0;
        }
        CHECK(got == want);
      }
  // A large batch takes the parallel path.
  Generator g(1);
  Tensor x = uniform({64, 40, 30}, 1, 2, g, DType::f32), out = empty({64, 40, 30});
  be.triangle(x, out, -3, false);
  auto xv = to_vector<float>(x), got = to_vector<float>(out);
  int64_t bad = 0;
  for (int64_t f = 0; f < 64 * 40 * 30; ++f) {
    int64_t i = (f / 30) % 40, j = f % 30;
    bad += got[static_cast<size_t>(f)] != (j - i <= -3 ? xv[static_cast<size_t>(f)] : 0.0f);
  }
  CHECK(bad == 0);
}

}  // namespace hh::test
