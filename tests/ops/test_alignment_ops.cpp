// Each CPU op, forward and backward, gives the same bits whatever its operands' addresses (issue 35
// item 3): inputs are copied into blocks the allocator hands out 8, 24 or 40 bytes past a 64-byte
// boundary (cpu_alloc::set_offset_for_testing) and the output and every gradient compared bit for
// bit with the aligned run. The op-by-op view of tests/test_alignment_determinism.cpp's training.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "autograd/ops/attention.h"
#include "autograd/ops/delta_attention.h"
#include "autograd/ops/fused.h"
#include "autograd/ops/gated_attention.h"
#include "autograd/ops/hybrid_attention.h"
#include "autograd/ops/nn.h"
#include "core/cpu/cpu_allocator.h"
#include "core/generator.h"
#include "tests/sweep/sweep.h"

namespace hh::test {

namespace {

struct OffsetOp {
  std::string name;
  std::vector<Shape> shapes;  // of the differentiable inputs, drawn U(-1, 1) (f32)
  std::function<Tensor(const std::vector<Tensor>&)> fn;
};

std::vector<uint32_t> bits(const Tensor& t) {
  const Tensor c = contiguous(t.to(DType::f32));
  std::vector<uint32_t> b(static_cast<size_t>(c.numel()));
  std::memcpy(b.data(), c.data<float>(), b.size() * sizeof(float));
  return b;
}

// The output's bits, then each input's gradient's, of sum(w ⊙ op(inputs)) for a fixed w.
std::vector<std::vector<uint32_t>> run(const OffsetOp& op, const std::vector<Tensor>& host) {
  std::vector<Tensor> xs;
  for (const Tensor& h : host) xs.push_back(clone(h).requires_grad_());  // a fresh block: the offset applies
  const Tensor y = op.fn(xs);
  Generator g(3);
  const Tensor w = uniform(y.shape(), -1.0, 1.0, g);
  sum(mul(y, w)).backward();
  std::vector<std::vector<uint32_t>> out{bits(y)};
  for (const Tensor& x : xs) out.push_back(bits(x.grad()));
  return out;
}

Tensor feat(const Tensor& x) { return hedgehog_features(x); }

// Attention shapes (B,H,L,D): short rows of 12 (48 bytes: rows start at every 16-byte offset), and
// odd rows of 13 over several chunks of 8 (the linear forms' chunk; the hybrid window is 5).
std::vector<OffsetOp> offset_ops(int64_t B, int64_t H, int64_t L, int64_t D) {
  const Shape qkv{B, H, L, D}, rows{3, 37};
  std::vector<OffsetOp> ops = {
      {"exp", {rows}, [](auto& x) { return exp(x[0]); }},
      {"gelu", {rows}, [](auto& x) { return gelu(x[0]); }},
      {"gelu tanh", {rows}, [](auto& x) { return gelu(x[0], "tanh"); }},
      {"elu", {rows}, [](auto& x) { return elu(x[0]); }},
      {"silu", {rows}, [](auto& x) { return silu(x[0]); }},
      {"add mul", {rows, rows}, [](auto& x) { return add(mul(x[0], x[1]), x[0]); }},
      {"sum rows", {rows}, [](auto& x) { return sum(x[0], {1}); }},
      {"sum all", {rows}, [](auto& x) { return sum(x[0]); }},
      {"mean cols", {rows}, [](auto& x) { return mean(x[0], {0}); }},
      {"softmax", {rows}, [](auto& x) { return softmax(x[0], -1); }},
      {"log_softmax", {rows}, [](auto& x) { return log_softmax(x[0], -1); }},
      {"layer_norm", {rows, {37}, {37}}, [](auto& x) { return layer_norm(x[0], x[1], x[2]); }},
      {"rms_norm", {rows, {37}}, [](auto& x) { return rms_norm(x[0], x[1]); }},
      {"add_layer_norm", {rows, rows, {37}, {37}},
       [](auto& x) {
         const AddNormOut o = add_layer_norm(x[0], x[1], x[2], x[3]);
         return add(o.h, o.y);
       }},
      {"bias_gelu", {rows, {37}}, [](auto& x) { return bias_gelu(x[0], x[1]); }},
      {"cross_entropy", {rows},
       [](auto& x) {
         Generator g(9);
         return cross_entropy(x[0], randint(0, 37, {3}, g));
       }},
      {"matmul", {{5, 37}, {37, 19}}, [](auto& x) { return matmul(x[0], x[1]); }},
      {"linear", {{5, 37}, {19, 37}, {19}}, [](auto& x) { return linear(x[0], x[1], x[2]); }},
      {"hedgehog_features", {qkv}, [](auto& x) { return feat(x[0]); }},
      {"flash attention", {qkv, qkv, qkv},
       [](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); }},
      {"flash attention bidirectional", {qkv, qkv, qkv},
       [](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], false); }},
      {"linear attention", {qkv, qkv, qkv},
       [](auto& x) { return linear_attention_causal(feat(x[0]), feat(x[1]), x[2], 8); }},
      {"gated attention", {qkv, qkv, qkv, {B, H, L, 2 * D}},
       [](auto& x) {
         return gated_attention_chunked(feat(x[0]), feat(x[1]), x[2], mul(sigmoid(x[3]), -0.5), true, 1e-6,
                                        Tensor(), 8);
       }},
      {"hybrid window", {qkv, qkv, qkv},
       [](auto& x) {
         const std::vector<Tensor> nd = hybrid_window_attention(x[0], x[1], x[2], 5);
         return add(nd[0], nd[1]);
       }},
      {"delta attention", {qkv, qkv, qkv, {B, H, L}, {B, H, L}},
       [](auto& x) {
         return delta_attention_chunked(div(x[0], add(norm(x[0], 2.0, {-1}, true), 1.0)),
                                        div(x[1], add(norm(x[1], 2.0, {-1}, true), 1.0)), x[2], sigmoid(x[3]),
                                        mul(sigmoid(x[4]), -0.3), -1, Tensor(), Tensor(), nullptr, 8);
       }},
  };
  if (D % 2 == 0)
    ops.push_back({"rope", {qkv, {L, D / 2}, {L, D / 2}}, [](auto& x) { return rope(x[0], x[1], x[2]); }});
  return ops;
}

}  // namespace

TEST_CASE("determinism: every op gives the same bits whatever its operands' addresses") {
  std::vector<OffsetOp> ops = offset_ops(2, 2, 21, 12);
  for (OffsetOp& op : offset_ops(1, 3, 43, 13)) ops.push_back(std::move(op));
  sweep::for_each_config([&](const sweep::Config&) {
    for (const OffsetOp& op : ops) {
      CAPTURE(op.name);
      CAPTURE(op.shapes[0]);
      Generator g(11);
      std::vector<Tensor> host;
      for (const Shape& s : op.shapes) host.push_back(uniform(s, -1.0, 1.0, g));
      const auto aligned = run(op, host);
      for (size_t offset : {8, 24, 40}) {
        CAPTURE(offset);
        cpu_alloc::set_offset_for_testing(offset);
        const auto shifted = run(op, host);
        cpu_alloc::set_offset_for_testing(0);
        REQUIRE(shifted.size() == aligned.size());
        for (size_t i = 0; i < aligned.size(); ++i) {
          CAPTURE(i);  // 0: the output; i: the gradient of input i - 1
          CHECK(shifted[i] == aligned[i]);
        }
      }
    }
  });
}

}  // namespace hh::test
