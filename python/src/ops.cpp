// The ops a Python user writes an attention experiment with, listed once: each table row binds one
// autograd op (autograd/ops.h) under its engine name, so a gradient flows through it as in C++.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <nanobind/stl/shared_ptr.h>

#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/ops/attention.h"
#include "autograd/ops/delta_attention.h"
#include "autograd/ops/fused.h"
#include "autograd/ops/gated_attention.h"
#include "autograd/ops/hybrid_attention.h"
#include "nn/feature_maps.h"
#include "nn/layers.h"
#include "python/src/bind.h"

namespace hh::py {

namespace {

using Unary = Tensor (*)(const Tensor&);
using Binary = Tensor (*)(const Tensor&, const Tensor&);

// Elementwise and matrix ops of one or two tensors.
const struct {
  const char* name;
  Unary fn;
} kUnary[] = {{"neg", neg},         {"abs", abs},     {"exp", exp},   {"log", log},   {"sqrt", sqrt},
              {"tanh", tanh},       {"sigmoid", sigmoid}, {"relu", relu}, {"silu", silu},
              {"hedgehog_features", hedgehog_features}};
const struct {
  const char* name;
  Binary fn;
} kBinary[] = {{"add", add}, {"sub", sub}, {"mul", mul}, {"div", div}, {"maximum", maximum}, {"matmul", matmul}};

Dims dims_arg(const nb::handle& h) {
  if (h.is_none()) return {};
  if (nb::isinstance<nb::int_>(h)) return {nb::cast<int64_t>(h)};
  const std::vector<int64_t> v = nb::cast<std::vector<int64_t>>(h);
  return Dims(v.begin(), v.end());
}

// A feature map of nn/feature_maps.h as a Python object: call it on (B,H,L,D); its weights
// (Hedgehog's, T2R's) are tensors that require gradients, to train with any optimizer.
struct PyFeatureMap {
  std::shared_ptr<nn::FeatureMap> map;
  Tensor call(const Tensor& x, bool is_query) { return map->forward(x, is_query, nn::FeatureContext()); }
};

}  // namespace

void bind_ops(nb::module_& m) {
  for (const auto& op : kUnary) m.def(op.name, op.fn, nb::arg("x"));
  for (const auto& op : kBinary) m.def(op.name, op.fn, nb::arg("a"), nb::arg("b"));
  m.def("gelu", [](const Tensor& x, const std::string& approximate) { return gelu(x, approximate); }, nb::arg("x"),
        nb::arg("approximate") = "none");
  m.def("elu", [](const Tensor& x, double alpha) { return elu(x, alpha); }, nb::arg("x"), nb::arg("alpha") = 1.0);
  m.def("pow", [](const Tensor& x, double e) { return pow(x, e); }, nb::arg("x"), nb::arg("exponent"));
  m.def("softmax", [](const Tensor& x, int64_t dim) { return softmax(x, dim); }, nb::arg("x"), nb::arg("dim") = -1);
  m.def("log_softmax", [](const Tensor& x, int64_t dim) { return log_softmax(x, dim); }, nb::arg("x"),
        nb::arg("dim") = -1);
  m.def("sum", [](const Tensor& x, nb::handle dims, bool keepdim) { return sum(x, dims_arg(dims), keepdim); },
        nb::arg("x"), nb::arg("dim") = nb::none(), nb::arg("keepdim") = false);
  m.def("mean", [](const Tensor& x, nb::handle dims, bool keepdim) { return mean(x, dims_arg(dims), keepdim); },
        nb::arg("x"), nb::arg("dim") = nb::none(), nb::arg("keepdim") = false);
  m.def("amax", [](const Tensor& x, nb::handle dims, bool keepdim) { return amax(x, dims_arg(dims), keepdim); },
        nb::arg("x"), nb::arg("dim") = nb::none(), nb::arg("keepdim") = false);
  m.def("transpose", [](const Tensor& x, int64_t a, int64_t b) { return transpose(x, a, b); });
  m.def("reshape", [](const Tensor& x, const std::vector<int64_t>& s) { return reshape(x, Shape(s.begin(), s.end())); });
  // Attention, every form (shapes as in C++: q, k (B,H,L,D), v (B,H,L,Dv); features (B,H,L,F)).
  m.def(
      "softmax_attention",
      [](const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
        return scaled_dot_product_attention(q, k, v, causal, scale);
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("causal") = true, nb::arg("scale") = -1.0,
      "softmax(scale q k^T) v, fused (never the (L,L) weights); scale -1: 1/sqrt(D)");
  m.def(
      "linear_attention",
      [](const Tensor& pq, const Tensor& pk, const Tensor& v, int64_t chunk, double eps) {
        return linear_attention_causal(pq, pk, v, chunk, eps);
      },
      nb::arg("pq"), nb::arg("pk"), nb::arg("v"), nb::arg("chunk") = 64, nb::arg("eps") = 1e-6,
      "causal linear attention of feature maps pq, pk, chunked");
  m.def(
      "hybrid_attention",
      [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pq, const Tensor& pk, const Tensor& wf,
         const Tensor& lf, int64_t window, int64_t chunk) {
        return hybrid_attention_chunked(q, k, v, pq, pk, wf, lf, window, -1, Tensor(), chunk);
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("pq"), nb::arg("pk"), nb::arg("wf"), nb::arg("lf"),
      nb::arg("window"), nb::arg("chunk") = 64, "LoLCATs' sliding window + linear attention, chunked");
  m.def(
      "gated_attention",
      [](const Tensor& pq, const Tensor& pk, const Tensor& v, const Tensor& log_a, bool normalize, int64_t chunk) {
        return gated_attention_chunked(pq, pk, v, log_a, normalize, 1e-6, Tensor(), chunk);
      },
      nb::arg("pq"), nb::arg("pk"), nb::arg("v"), nb::arg("log_a"), nb::arg("normalize") = false,
      nb::arg("chunk") = 64, "gated linear attention (GLA, RetNet decay): log_a (B,H,L,F) or (B,H,L,1), <= 0");
  m.def(
      "delta_attention",
      [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& log_alpha, int64_t chunk) {
        return delta_attention_chunked(q, k, v, beta, log_alpha, -1, Tensor(), Tensor(), nullptr, chunk);
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("beta"), nb::arg("log_alpha"), nb::arg("chunk") = 64,
      "the gated delta rule (Gated DeltaNet): beta, log_alpha (B,H,L)");
  nb::class_<PyFeatureMap>(m, "FeatureMap", "A feature map of the Hedgehog paper (hedgehog.feature_map makes one)")
      .def("__call__", &PyFeatureMap::call, nb::arg("x"), nb::arg("is_query") = true)
      .def_prop_ro("feature_dim", [](const PyFeatureMap& f) { return f.map->feature_dim(); })
      .def_prop_ro("name", [](const PyFeatureMap& f) { return f.map->name(); })
      .def("parameters", [](const PyFeatureMap& f) {
        std::vector<Tensor> out;
        for (auto& [name, t] : f.map->named_parameters()) out.push_back(t);
        return out;
      });
  m.def(
      "feature_map",
      [](const std::string& name, int64_t heads, int64_t head_dim, int64_t feature_dim, uint64_t seed) {
        nn::FeatureMapConfig c;
        c.name = name;
        c.heads = heads;
        c.head_dim = head_dim;
        c.feature_dim = feature_dim;
        c.seed = seed;
        Generator g(seed);
        return PyFeatureMap{nn::make_feature_map(c, nn::Init{g})};
      },
      nb::arg("name"), nb::arg("heads"), nb::arg("head_dim"), nb::arg("feature_dim") = 0, nb::arg("seed") = 0,
      "A feature map by the engine's name (hedgehog, t2r, elu, performer, taylor, ...)");
}

}  // namespace hh::py
