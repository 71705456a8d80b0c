// Node: one recorded op in the graph. It holds the backward closure (which owns exactly the
// tensors its backward needs) and one edge per input: to the input's producing node (and which of
// its outputs the input is), to a leaf that accumulates a gradient, or nothing when the input
// needs no gradient. A node has one output, or several (record_outputs: unbind, split), whose
// gradients reach one backward call together, as PyTorch's multi-output nodes and mlx's siblings.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hh {

using NeedsGrad = std::vector<bool>;
// Returns one gradient per input (an undefined Tensor where none is needed or it is zero).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_out, const NeedsGrad& needs)>;
// The same for a node of several outputs: grad_outs holds one gradient per output, undefined for
// an output no consumer sent a gradient to (zero); at least one is defined.
using MultiBackwardFn =
    std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outs, const NeedsGrad& needs)>;

struct Edge {
  std::shared_ptr<Node> fn;            // input produced by an op
  std::shared_ptr<TensorImpl> leaf;    // input is a leaf that requires grad
  int output = 0;                      // which of fn's outputs the input is
  bool active() const { return fn || leaf; }
};

// A saved tensor's storage and its version when saved (weak: the closure holds the tensor).
struct SavedVersion {
  std::weak_ptr<Storage> storage;
  uint64_t version = 0;
};

struct Node {
  const char* name = "";
  std::vector<Edge> inputs;
  std::vector<Shape> input_shapes;
  std::vector<DType> input_dtypes;
  int num_outputs = 1;
  MultiBackwardFn backward;  // empty once released (after a backward without retain_graph)
  std::vector<SavedVersion> saved;  // checked before backward runs: an in-place write is an error
  // Deep graphs (100,000 chained ops) are torn down iteratively, never by recursion.
  ~Node();
};

// Records `name` as the producer of `out` when grad mode is on and any input requires grad;
// returns `out` (marked requires_grad in that case). Inputs may be undefined tensors. `saved`
// lists the tensors the backward reads that could be written in place later (inputs, the
// output, user-visible indices); their storage versions are checked when backward runs.
Tensor record(const char* name, Tensor out, const std::vector<Tensor>& inputs, BackwardFn backward);
Tensor record(const char* name, Tensor out, const std::vector<Tensor>& inputs, const std::vector<Tensor>& saved,
              BackwardFn backward);
// The same for an op of several outputs: one node; output i is outs[i] with grad_output() == i.
// Returns outs (each marked requires_grad) when something requires grad, else outs as given.
std::vector<Tensor> record_outputs(const char* name, std::vector<Tensor> outs, const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& saved, MultiBackwardFn backward);
// True when grad mode is on and some input requires grad (lets an op skip saving tensors).
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Runs backward from `root` (autograd/engine.cpp).
void run_backward(const Tensor& root, const Tensor& gradient, bool retain_graph);

// Every public differentiable op registers its name once next to its definition, so the test
// table can prove it covers every op: `static const OpName reg_add("add");`.
struct OpName {
  explicit OpName(const char* name);
};
const std::vector<std::string>& registered_ops();

}  // namespace hh
