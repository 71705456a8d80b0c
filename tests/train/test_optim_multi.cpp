// The multi-tensor AdamW step (Backend::adamw_multi_step) against the per-tensor one, bit for bit
// on the CPU, through train::AdamW, its argument errors, and CUDA against the CPU.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/backend.h"
#include "tests/cuda_compare.h"
#include "tests/op_table.h"
#include "train/optim.h"

namespace hh::test {
namespace {

// Sizes around the CPU chunk (8192) and the CUDA chunk (16384), with empty tensors.
const std::vector<int64_t> kSizes = {0, 1, 7, 8191, 8192, 8193, 0, 3 * 8192 + 5, 16385, 40000, 33};

struct Slots {
  std::vector<Tensor> p, m, v;
};

Slots make_slots(DType t, Device d, uint64_t seed) {
  Slots s;
  for (size_t i = 0; i < kSizes.size(); ++i) {
    const uint64_t k = seed + 3 * i;
    s.p.push_back(place(input({kSizes[i]}, -1, 1, t, k), d).clone().detach());
    s.m.push_back(place(input({kSizes[i]}, -0.1, 0.1, t, k + 1), d).clone().detach());
    s.v.push_back(place(input({kSizes[i]}, 0, 0.01, t, k + 2), d).clone().detach());
  }
  return s;
}

// Three decay groups: tensor i gets lr / weight decay of group i % 3.
double lr_of(size_t i) { return 1e-2 * static_cast<double>(1 + i % 3); }
double wd_of(size_t i) { return i % 3 == 2 ? 0.0 : 0.05 * static_cast<double>(1 + i % 3); }

Tensor grad_at(size_t i, int64_t step, DType t, Device d) {
  return place(input({kSizes[i]}, -1, 1, t, 500 + 17 * i + static_cast<uint64_t>(step)), d);
}

void multi_steps(Backend& be, Slots& s, DType t, Device d, int64_t steps) {
  for (int64_t step = 1; step <= steps; ++step) {
    std::vector<AdamWTensor> list;
    for (size_t i = 0; i < s.p.size(); ++i)
      list.push_back({s.p[i], grad_at(i, step, t, d), s.m[i], s.v[i], lr_of(i), wd_of(i)});
    AdamWParams ap;
    ap.lr = 123.0;  // unused: each entry carries its own
    ap.weight_decay = 9.0;
    ap.step = step;
    be.adamw_multi_step(list, ap);
  }
}

void check_equal_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  std::vector<double> g = to_vector<double>(got), w = to_vector<double>(want);
  REQUIRE(g.size() == w.size());
  size_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i) bad += g[i] != w[i];
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", g.size(), " elements differ");
}

}  // namespace

TEST_CASE("adamw_multi_step: equals the per-tensor step bit for bit over several steps and decay groups") {
  for (DType t : {DType::f32, DType::f64}) {
    Slots multi = make_slots(t, Device::cpu(), 1), single = make_slots(t, Device::cpu(), 1);
    multi_steps(cpu(), multi, t, Device::cpu(), 4);
    for (int64_t step = 1; step <= 4; ++step)
      for (size_t i = 0; i < single.p.size(); ++i) {
        AdamWParams ap;
        ap.lr = lr_of(i);
        ap.weight_decay = wd_of(i);
        ap.step = step;
        cpu().adamw_step(single.p[i], grad_at(i, step, t, Device::cpu()), single.m[i], single.v[i], ap);
      }
    for (size_t i = 0; i < kSizes.size(); ++i) {
      const std::string what = std::string(dtype_name(t)) + " tensor " + std::to_string(i);
      check_equal_bits(multi.p[i], single.p[i], what + " param");
      check_equal_bits(multi.m[i], single.m[i], what + " m");
      check_equal_bits(multi.v[i], single.v[i], what + " v");
    }
    // And it moved: the parameters are no longer the initial ones.
    CHECK(to_vector<double>(multi.p[3]) != to_vector<double>(make_slots(t, Device::cpu(), 1).p[3]));
  }
}

TEST_CASE("adamw_multi_step: bad arguments are named") {
  Tensor p = zeros({4}), g = zeros({4}), m = zeros({4}), v = zeros({4});
  AdamWParams ap;
  CHECK_THROWS_WITH(cpu().adamw_multi_step({{p, g, m, v, 1e-3, 0.0}, {zeros({3}, {DType::f64}), zeros({3}, {DType::f64}),
                                                                     zeros({3}, {DType::f64}), zeros({3}, {DType::f64}),
                                                                     1e-3, 0.0}},
                                           ap),
                    doctest::Contains("one dtype"));
  CHECK_THROWS_WITH(cpu().adamw_multi_step({{p, zeros({5}), m, v, 1e-3, 0.0}}, ap), doctest::Contains("shape"));
  CHECK_THROWS_WITH(cpu().adamw_multi_step({{p, Tensor(), m, v, 1e-3, 0.0}}, ap), doctest::Contains("undefined"));
  ap.step = 0;
  CHECK_THROWS_WITH(cpu().adamw_multi_step({{p, g, m, v, 1e-3, 0.0}}, ap), doctest::Contains("1-based"));
  cpu().adamw_multi_step({}, AdamWParams{});  // nothing to do
}

TEST_CASE("train::AdamW: the multi-tensor step equals per-tensor steps with each group's lr and decay") {
  Generator gen(3);
  std::vector<Tensor> params;
  for (int64_t n : {5, 9000, 1, 300}) {
    Tensor p = uniform({n}, -1, 1, gen);
    p.requires_grad_(true);
    params.push_back(p);
  }
  std::vector<Tensor> copies;
  for (const Tensor& p : params) copies.push_back(p.detach().clone());
  std::vector<train::ParamGroup> groups = {{{{"a", params[0]}, {"b", params[1]}}, 0.1, 1.0},
                                           {{{"c", params[2]}, {"d", params[3]}}, 0.0, 0.5}};
  train::AdamW opt(groups, 1e-2);
  std::vector<Tensor> m, v;
  for (const Tensor& c : copies) {
    m.push_back(zeros_like(c));
    v.push_back(zeros_like(c));
  }
  for (int64_t step = 1; step <= 3; ++step) {
    opt.zero_grad();
    for (size_t i = 0; i < params.size(); ++i) {
      if (i == 3 && step == 2) continue;  // no gradient this step: skipped
      Tensor(params[i]).set_grad(uniform(params[i].shape(), -1, 1, gen));
      AdamWParams ap;
      ap.lr = 1e-2 * (i < 2 ? 1.0 : 0.5);
      ap.weight_decay = i < 2 ? 0.1 : 0.0;
      ap.step = step;
      cpu().adamw_step(copies[i], params[i].grad(), m[i], v[i], ap);
    }
    opt.step();
  }
  for (size_t i = 0; i < params.size(); ++i) check_equal_bits(params[i].detach(), copies[i], "param " + std::to_string(i));
}

TEST_CASE("cuda: multi-tensor AdamW step against the CPU" * doctest::skip(!cuda_requested())) {
  // More tensors than one launch's table holds (36), so the batching is exercised too.
  for (DType t : {DType::f32, DType::f64}) {
    std::vector<Slots> on(2);
    const Device devs[2] = {Device::cpu(), test_device()};
    for (int r = 0; r < 4; ++r)  // 4 × 11 = 44 tensors
      for (int k = 0; k < 2; ++k) {
        Slots s = make_slots(t, devs[k], 7 + static_cast<uint64_t>(r) * 100);
        for (size_t i = 0; i < s.p.size(); ++i) {
          on[static_cast<size_t>(k)].p.push_back(s.p[i]);
          on[static_cast<size_t>(k)].m.push_back(s.m[i]);
          on[static_cast<size_t>(k)].v.push_back(s.v[i]);
        }
      }
    for (int k = 0; k < 2; ++k) {
      Backend& be = backend_for(devs[k]);
      Slots& s = on[static_cast<size_t>(k)];
      for (int64_t step = 1; step <= 3; ++step) {
        std::vector<AdamWTensor> list;
        for (size_t i = 0; i < s.p.size(); ++i) {
          const size_t j = i % kSizes.size();
          list.push_back({s.p[i], grad_at(j, step, t, devs[k]), s.m[i], s.v[i], lr_of(i), wd_of(i)});
        }
        AdamWParams ap;
        ap.step = step;
        be.adamw_multi_step(list, ap);
      }
    }
    const double rtol = t == DType::f32 ? 1e-5 : 1e-12, atol = t == DType::f32 ? 1e-6 : 1e-14;
    for (size_t i = 0; i < on[0].p.size(); ++i) {
      const std::string what = std::string("adamw multi ") + dtype_name(t) + " tensor " + std::to_string(i);
      expect_close(on[1].p[i], on[0].p[i], rtol, atol, what + " param");
      expect_close(on[1].m[i], on[0].m[i], rtol, atol, what + " m");
      expect_close(on[1].v[i], on[0].v[i], rtol, atol, what + " v");
    }
  }
}

}  // namespace hh::test
