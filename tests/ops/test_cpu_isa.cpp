// Every CPU instruction-set path this machine supports, against the scalar one and an f64
// reference: the packed f32 GEMM per ISA (core/cpu/sgemm_*.cpp) over storage orders, edge tiles,
// depth blocks, panels wider than NC, alpha/beta, broadcast batches and threaded splits; and the
// AVX2 copy of the Eigen-backed kernels (core/cpu/cpu_kernels.h) against the baseline copy. A
// path the machine lacks is reported and skipped (run this binary on such a machine to cover it).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/cpu/sgemm_kernels.h"
#include "core/cpu_isa.h"
#include "core/parallel.h"
#include "tests/isa_scope.h"
#include "tests/op_table.h"

namespace hh::test {
namespace {

// c = alpha a·b + beta c0 in f64 for a (bt,m,k), b (bt or 1,k,n), c0 (bt,m,n), all contiguous.
std::vector<double> gemm_ref(const Tensor& a, const Tensor& b, const Tensor& c0, double alpha, double beta) {
  const int64_t bt = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2), bb = b.size(0);
  auto av = to_vector<double>(a), bv = to_vector<double>(b), cv = to_vector<double>(c0);
  std::vector<double> out(static_cast<size_t>(bt * m * n));
  for (int64_t t = 0; t < bt; ++t)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += av[static_cast<size_t>((t * m + i) * k + p)] * bv[static_cast<size_t>(((bb == 1 ? 0 : t) * k + p) * n + j)];
        const size_t o = static_cast<size_t>((t * m + i) * n + j);
        out[o] = alpha * acc + (beta == 0 ? 0.0 : beta * cv[o]);
      }
  return out;
}

// Largest |got - want| / (k · 2^-23 · (1 + |want|)): f32 accumulation over k terms of size <= 1.
double err_in_ulps_of_k(const Tensor& got, const std::vector<double>& want, int64_t k) {
  auto g = to_vector<double>(got);
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::fabs(g[i] - want[i]) / (static_cast<double>(k) * 0x1p-23 * (1 + std::fabs(want[i]))));
  }
  return worst;
}

Tensor rand_f32(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return uniform(s, -1, 1, g, {DType::f32});
}

struct Case {
  int64_t bt, m, k, n;
  bool a_colmajor, b_colmajor, b_broadcast;
  double alpha, beta;
  int threads;
};


// One result per op of the per-ISA kernel copies, with its inputs' gradients where it has any.
std::vector<std::vector<double>> kernel_results() {
  Generator g(7);
  Tensor x = uniform({37, 300}, -4, 4, g, {DType::f32}).requires_grad_();
  Tensor row = uniform({300}, -1, 1, g, {DType::f32});
  Tensor w = uniform({300}, 0.5, 1.5, g, {DType::f32}).requires_grad_();
  Tensor b = uniform({300}, -1, 1, g, {DType::f32}).requires_grad_();
  Tensor target = from_vector(std::vector<int64_t>(37, 5), {37});
  Tensor q = uniform({2, 3, 70, 16}, -1, 1, g, {DType::f32}).requires_grad_();
  Tensor k = uniform({2, 3, 70, 16}, -1, 1, g, {DType::f32}).requires_grad_();
  Tensor v = uniform({2, 3, 70, 16}, -1, 1, g, {DType::f32}).requires_grad_();
  std::vector<std::vector<double>> out;
  auto run = [&](const Tensor& y, std::vector<Tensor> inputs) {
    out.push_back(to_vector<double>(y));
    if (inputs.empty()) return;
    for (Tensor& t : inputs) t.zero_grad();
    sum(mul(y, uniform(y.shape(), -1, 1, g, {DType::f32}))).backward();
    for (Tensor& t : inputs) out.push_back(to_vector<double>(t.grad()));
  };
  run(gelu(x), {x});
  run(exp(x), {x});
  run(mul(add(x, row), x), {x});
  run(to_dtype(lt(x, row), DType::f32), {});
  run(where(gt(x, 0.0), x, neg(x)), {x});
  run(softmax(x, -1), {x});
  run(hedgehog_features(x), {x});
  run(elu(x), {x});
  run(log_softmax(x, -1), {x});
  run(layer_norm(x, w, b), {x, w, b});
  run(rms_norm(x, w), {x, w});
  run(cross_entropy(x, target), {x});
  run(scaled_dot_product_attention(q, k, v, true), {q, k, v});
  std::vector<Tensor> qkv = unbind(stack({q, k, v}, 0), 0);
  run(scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], true), {q, k, v});
  run(linear_attention_causal(exp(q), exp(k), v, 16), {q, k, v});
  return out;
}

}  // namespace

TEST_CASE("cpu isa: names, parsing and the cap") {
  IsaScope scope;
  CHECK(parse_cpu_isa("avx2") == CpuIsa::avx2);
  check_throws([] { parse_cpu_isa("sse9"); }, {"sse9", "scalar, avx2 or avx512"});
  CHECK(cpu_isa_supported(CpuIsa::scalar));
  CHECK(cpu_isa() <= cpu_isa_detected());
  set_cpu_isa(CpuIsa::scalar);
  CHECK(cpu_isa() == CpuIsa::scalar);
  if (!cpu_isa_supported(CpuIsa::avx512)) check_throws([] { set_cpu_isa(CpuIsa::avx512); }, {"avx512", "at most"});
}

namespace {

std::vector<Case> gemm_cases() {
  return {
      {1, 67, 300, 45, false, false, false, 1.0, 0.0, 1},   // two depth blocks for every kernel (kc <= 256)
      {1, 67, 300, 45, true, false, false, 1.0, 0.0, 1},    // A column-major (a transposed view)
      {1, 67, 300, 45, false, true, false, 1.0, 0.0, 1},    // B column-major (linear's weightᵀ)
      {1, 67, 300, 45, true, true, false, 0.5, -2.0, 1},    // both, with alpha and beta
      {1, 13, 40, 3100, false, false, false, 1.0, 0.0, 1},  // wider than one B panel (nc = 3072)
      {1, 301, 20, 17, false, true, false, 1.0, 1.0, 1},    // tall, partial tiles in n
      {1, 5, 9, 1000, false, false, false, 1.0, 0.0, 1},    // fewer rows than one micro-tile
      {1, 6, 16, 32, false, false, false, 1.0, 0.0, 1},     // exactly one tile of each kernel
      {1, 7, 17, 33, true, true, false, 1.0, 0.0, 1},       // one past it in every dim
      {5, 30, 270, 40, false, false, true, 0.5, -2.0, 1},   // broadcast B (batch stride 0)
      {16, 64, 40, 48, false, false, false, 1.0, 0.0, 2},   // threaded split by batch
      {1, 301, 250, 200, false, false, false, 1.0, 0.0, 3}, // threaded grid split (uneven)
      {1, 20, 64, 900, false, true, false, 1.0, 0.0, 2},    // few rows: split by columns
      {1, 50, 500, 70, false, false, false, 1.0, 1.0, 1},   // three depth blocks accumulated onto c
  };
}

// c = alpha A·B + beta c0 for case ci on the path set now, through the backend's gemm.
Tensor run_gemm_case(const Case& c, size_t ci) {
  set_num_threads(c.threads);
  Tensor a = rand_f32({c.bt, c.m, c.k}, 100 + ci), b = rand_f32({c.b_broadcast ? 1 : c.bt, c.k, c.n}, 200 + ci);
  Tensor c0 = rand_f32({c.bt, c.m, c.n}, 300 + ci);
  // Column-major operands: the same values read through a transposed view of a (.., k, m) buffer.
  Tensor A = c.a_colmajor ? transpose(contiguous(transpose(a, 1, 2)), 1, 2) : a;
  Tensor B = c.b_colmajor ? transpose(contiguous(transpose(b, 1, 2)), 1, 2) : b;
  if (c.b_broadcast) B = B.as_strided({c.bt, c.k, c.n}, {0, B.stride(1), B.stride(2)}, 0);
  Tensor out = c.beta == 0 ? full({c.bt, c.m, c.n}, std::nan(""), {DType::f32}) : clone(c0);  // beta 0 never reads c
  backend_of(a).gemm(A, B, out, {c.alpha, c.beta});
  return out;
}

}  // namespace

TEST_CASE("cpu isa: the packed f32 GEMM of every supported path matches the f64 reference") {
  if (test_device().is_cuda()) return;  // CPU kernels only
  IsaScope scope;
  const std::vector<Case> cases = gemm_cases();
  for (CpuIsa isa : supported_isas()) {
    const std::string isa_name = cpu_isa_name(isa);
    CAPTURE(isa_name);
    set_cpu_isa(isa);
    // The product really runs on the path under test (not silently on Eigen's).
    CHECK(std::string(sgemm::engine_for(67, 45, 300)) == (isa == CpuIsa::scalar ? "eigen" : cpu_isa_name(isa)));
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const Case& c = cases[ci];
      CAPTURE(ci);
      const Tensor out = run_gemm_case(c, ci);
      const Tensor a = rand_f32({c.bt, c.m, c.k}, 100 + ci), b = rand_f32({c.b_broadcast ? 1 : c.bt, c.k, c.n}, 200 + ci);
      CHECK(err_in_ulps_of_k(out, gemm_ref(a, b, rand_f32({c.bt, c.m, c.n}, 300 + ci), c.alpha, c.beta), c.k) < 1.0);
    }
  }
}

// The promise of sgemm::kDepthBlock: a machine with AVX-512 and one with AVX2 alone give the same
// product bits (the same depth blocks, each element one fused multiply-add chain over k, edge
// tiles added to c as full tiles are), so a training gives the same table on either.
TEST_CASE("cpu isa: the AVX2 and AVX-512 GEMM kernels give the same bits") {
  if (test_device().is_cuda()) return;  // CPU kernels only
  if (!cpu_isa_supported(CpuIsa::avx512)) {
    MESSAGE("skipped: this machine lacks AVX-512 (the AVX2 and AVX-512 kernels are compared where both run)");
    return;
  }
  IsaScope scope;
  const std::vector<Case> cases = gemm_cases();
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    CAPTURE(ci);
    set_cpu_isa(CpuIsa::avx2);
    const std::vector<float> avx2 = to_vector<float>(run_gemm_case(cases[ci], ci));
    set_cpu_isa(CpuIsa::avx512);
    const std::vector<float> avx512 = to_vector<float>(run_gemm_case(cases[ci], ci));
    REQUIRE(avx2.size() == avx512.size());
    CHECK(std::memcmp(avx2.data(), avx512.data(), avx2.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("cpu isa: the AVX2 copy of the Eigen-backed kernels matches the baseline copy") {
  if (test_device().is_cuda()) return;  // CPU kernels only
  IsaScope scope;
  set_cpu_isa(CpuIsa::scalar);
  const auto want = kernel_results();
  for (CpuIsa isa : supported_isas()) {
    if (isa == CpuIsa::scalar) continue;
    const std::string isa_name = cpu_isa_name(isa);
    CAPTURE(isa_name);
    set_cpu_isa(isa);
    const auto got = kernel_results();
    REQUIRE(got.size() == want.size());
    for (size_t r = 0; r < got.size(); ++r) {
      CAPTURE(r);
      REQUIRE(got[r].size() == want[r].size());
      // f32 kernels that differ in vector width, summation order, FMA contraction and Eigen's
      // exp/erf polynomials: a few ulp of the result's scale (relative to each element would
      // fail where a value cancels to near zero, e.g. GELU far below 0).
      double worst = 0, scale = 0;
      for (size_t i = 0; i < got[r].size(); ++i) {
        worst = std::max(worst, std::fabs(got[r][i] - want[r][i]));
        scale = std::max(scale, std::fabs(want[r][i]));
      }
      CHECK(worst <= 1e-5 * scale);
    }
  }
}

}  // namespace hh::test
