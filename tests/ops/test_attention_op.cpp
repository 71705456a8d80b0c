// Op-table row for the fused chunked causal linear attention op.
#include "tests/op_table.h"

namespace hh::test {
namespace {

// Plain causal linear attention: y_i = Σ_{j<=i} (q_i·k_j) v_j / (Σ_{j<=i} q_i·k_j + eps).
Host causal_linear_ref(const std::vector<Host>& in, double eps) {
  const Host &q = in[0], &k = in[1], &v = in[2];
  const int64_t B = q.shape[0], H = q.shape[1], L = q.shape[2], F = q.shape[3], D = v.shape[3];
  Host out{v.shape, std::vector<double>(v.v.size())};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        double den = eps;
        std::vector<double> num(static_cast<size_t>(D), 0.0);
        for (int64_t j = 0; j <= i; ++j) {
          double a = 0;
          for (int64_t f = 0; f < F; ++f) a += q.at({b, h, i, f}) * k.at({b, h, j, f});
          den += a;
          for (int64_t d = 0; d < D; ++d) num[static_cast<size_t>(d)] += a * v.at({b, h, j, d});
        }
        for (int64_t d = 0; d < D; ++d)
          out.v[static_cast<size_t>(((b * H + h) * L + i) * D + d)] = num[static_cast<size_t>(d)] / den;
      }
  return out;
}

OpSpec spec(const std::string& variant, Shape qs, Shape vs, int64_t chunk) {
  OpSpec s;
  s.op = "linear_attention_causal";
  s.variant = variant;
  s.shapes = {qs, qs, vs};
  s.lo = 0.05;  // positive features, like every feature map's output
  s.hi = 1.0;
  s.fn = [chunk](const std::vector<Tensor>& x) { return linear_attention_causal(x[0], x[1], x[2], chunk, 1e-6); };
  s.reference = [](const std::vector<Host>& in) { return causal_linear_ref(in, 1e-6); };
  s.errors = [] {
    Tensor q = ones({1, 1, 4, 3}), v = ones({1, 1, 5, 2});
    check_throws([&] { linear_attention_causal(q, q, v); }, {"linear_attention_causal", "(1, 1, 5, 2)"});
    check_throws([&] { linear_attention_causal(q, ones({1, 1, 4, 2}), ones({1, 1, 4, 2})); },
                 {"linear_attention_causal", "(1, 1, 4, 3)", "(1, 1, 4, 2)"});
    check_throws([&] { linear_attention_causal(q, q, ones({1, 1, 4, 2}), 0); }, {"linear_attention_causal", "chunk"});
    check_throws([&] { linear_attention_causal(q, q, ones({1, 1, 4, 2}, DType::f64)); },
                 {"linear_attention_causal", "f32", "f64"});
  };
  return s;
}

const bool reg = add_specs({
    spec("one chunk", {1, 2, 5, 3}, {1, 2, 5, 2}, 64),
    spec("chunk 2, ragged tail", {2, 1, 7, 3}, {2, 1, 7, 4}, 2),
    spec("chunk 1", {1, 1, 4, 2}, {1, 1, 4, 3}, 1),
});

}  // namespace
}  // namespace hh::test
