// core/batch_invariant.h: under the guard, a GEMM row is bit-identical whatever the number of rows
// in the product, for every ISA path and thread count (the packed kernel, the plain loop of f64 and
// the scalar ISA, n or k below 4), with the weight read as linear reads it (a transposed view) and
// as a row-major matrix.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "autograd/ops.h"
#include "core/batch_invariant.h"
#include "core/generator.h"
#include "tests/sweep/sweep.h"

namespace hh::test {

TEST_CASE("batch invariance: a row of a GEMM under the guard does not depend on the other rows") {
  struct Shape3 {
    int64_t k, n;
  };
  sweep::for_each_config([](const sweep::Config&) {
    for (DType dt : {DType::f32, DType::f64})
      for (Shape3 s : {Shape3{64, 96}, Shape3{3, 5}, Shape3{300, 200}, Shape3{129, 7}}) {
        Generator g(17);
        const Tensor x = randn({64, s.k}, g).to(dt);
        const Tensor w = randn({s.n, s.k}, g).to(dt);  // linear's (out, in)
        const Tensor b = randn({s.k, s.n}, g).to(dt);  // a row-major right operand
        BatchInvariant guard;
        const Tensor all_lin = linear(x, w, Tensor());
        const Tensor all_mm = matmul(x, b);
        for (int64_t m : {1, 2, 3, 4, 5, 17, 63}) {
          CAPTURE(m);
          CAPTURE(s.k);
          CAPTURE(s.n);
          const Tensor part_lin = linear(slice(x, 0, 0, m), w, Tensor());
          const Tensor part_mm = matmul(slice(x, 0, 0, m), b);
          const auto same_bits = [&](const Tensor& part, const Tensor& all) {
            const std::vector<double> p = to_vector<double>(part), a = to_vector<double>(slice(all, 0, 0, m));
            return std::memcmp(p.data(), a.data(), p.size() * sizeof(double)) == 0;
          };
          CHECK(same_bits(part_lin, all_lin));
          CHECK(same_bits(part_mm, all_mm));
        }
      }
  });
}

}  // namespace hh::test
