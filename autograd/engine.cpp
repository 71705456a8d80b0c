// The backward engine: iterative topological order (no recursion), gradient accumulation,
// release of saved tensors, the in-place check of saved tensors (storage versions), and
// iterative teardown of deep graphs.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/ops.h"

namespace hh {

namespace {
thread_local bool g_grad_enabled = true;

// Nodes and closures whose destruction was deferred by a Node destructor; drained by the
// outermost one, so a chain of any length unwinds in a loop.
thread_local std::vector<std::shared_ptr<Node>>* g_node_queue = nullptr;
thread_local std::vector<MultiBackwardFn>* g_fn_queue = nullptr;
}  // namespace

bool GradMode::is_enabled() { return g_grad_enabled; }
void GradMode::set_enabled(bool on) { g_grad_enabled = on; }

Node::~Node() {
  std::vector<std::shared_ptr<Node>> nodes;
  std::vector<MultiBackwardFn> fns;
  bool outermost = g_node_queue == nullptr;
  if (outermost) {
    g_node_queue = &nodes;
    g_fn_queue = &fns;
  }
  for (Edge& e : inputs)
    if (e.fn) g_node_queue->push_back(std::move(e.fn));
  if (backward) g_fn_queue->push_back(std::move(backward));
  if (!outermost) return;
  while (!nodes.empty() || !fns.empty()) {
    if (!fns.empty()) {
      MultiBackwardFn f = std::move(fns.back());
      fns.pop_back();
    } else {
      std::shared_ptr<Node> n = std::move(nodes.back());
      nodes.pop_back();
    }
  }
  g_node_queue = nullptr;
  g_fn_queue = nullptr;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Tensor record(const char* name, Tensor out, const std::vector<Tensor>& inputs, BackwardFn backward) {
  return record(name, std::move(out), inputs, {}, std::move(backward));
}

namespace {
// A node for `inputs` (edges, shapes, dtypes, saved versions) or null when none requires grad.
std::shared_ptr<Node> make_node(const char* name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& saved,
                                int num_outputs, MultiBackwardFn backward) {
  if (!any_requires_grad(inputs)) return nullptr;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->num_outputs = num_outputs;
  for (const Tensor& t : saved)
    if (t.defined()) node->saved.push_back({t.storage(), t.storage()->version});
  for (const Tensor& t : inputs) {
    Edge e;
    if (t.defined() && t.requires_grad()) {
      if (t.grad_fn()) {
        e.fn = t.grad_fn();
        e.output = t.grad_output();
      } else {
        e.leaf = t.impl_ptr();
      }
    }
    node->inputs.push_back(std::move(e));
    node->input_shapes.push_back(t.defined() ? t.shape() : Shape{});
    node->input_dtypes.push_back(t.defined() ? t.dtype() : DType::f32);
  }
  node->backward = std::move(backward);
  return node;
}

// `out` as output `index` of `node`. `out` may share its impl with nothing else yet; it gets a
// fresh impl so views of inputs returned as-is never get their grad_fn overwritten.
Tensor as_output(const Tensor& out, const std::shared_ptr<Node>& node, int index) {
  auto impl = std::make_shared<TensorImpl>(*out.impl_ptr());
  impl->grad.reset();
  impl->requires_grad = true;
  impl->grad_fn = node;
  impl->grad_output = index;
  return Tensor(impl);
}
}  // namespace

Tensor record(const char* name, Tensor out, const std::vector<Tensor>& inputs, const std::vector<Tensor>& saved,
              BackwardFn backward) {
  std::shared_ptr<Node> node =
      make_node(name, inputs, saved, 1, [fn = std::move(backward)](const std::vector<Tensor>& g, const NeedsGrad& n) {
        return fn(g[0], n);
      });
  return node ? as_output(out, node, 0) : out;
}

std::vector<Tensor> record_outputs(const char* name, std::vector<Tensor> outs, const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& saved, MultiBackwardFn backward) {
  HH_CHECK(!outs.empty(), "record_outputs: '", name, "' has no outputs");
  std::shared_ptr<Node> node = make_node(name, inputs, saved, static_cast<int>(outs.size()), std::move(backward));
  if (!node) return outs;
  for (size_t i = 0; i < outs.size(); ++i) outs[i] = as_output(outs[i], node, static_cast<int>(i));
  return outs;
}

int64_t Tensor::add_grad_ready_hook(std::function<void()> fn) const {
  HH_CHECK(impl_, "add_grad_ready_hook: undefined tensor");
  HH_CHECK(is_leaf(), "add_grad_ready_hook: only a leaf tensor gets a final gradient (this one has grad_fn)");
  GradReadyHooks& h = impl_->grad_ready_hooks;
  h.list.emplace_back(h.next_id, std::move(fn));
  return h.next_id++;
}

void Tensor::remove_grad_ready_hook(int64_t id) const {
  HH_CHECK(impl_, "remove_grad_ready_hook: undefined tensor");
  auto& list = impl_->grad_ready_hooks.list;
  list.erase(std::remove_if(list.begin(), list.end(), [id](const auto& h) { return h.first == id; }), list.end());
}

namespace {
void run_grad_ready_hooks(TensorImpl& leaf) {
  // A copy: a hook may remove hooks of this leaf while it runs.
  std::vector<std::pair<int64_t, std::function<void()>>> hooks = leaf.grad_ready_hooks.list;
  for (auto& h : hooks) h.second();
}

void accumulate_leaf(TensorImpl& leaf, const Tensor& g) {
  Tensor grad = g;
  if (grad.dtype() != leaf.dtype) grad = grad.to(leaf.dtype);
  if (leaf.grad)
    leaf.grad = add(Tensor(leaf.grad), grad).impl_ptr();
  else
    leaf.grad = (grad.is_contiguous() ? grad.detach() : grad.contiguous()).impl_ptr();
}
}  // namespace

void run_backward(const Tensor& root, const Tensor& gradient, bool retain_graph) {
  HH_CHECK(root.requires_grad(), "backward: tensor does not require grad and has no grad_fn");
  Tensor g = gradient;
  if (!g.defined()) {
    HH_CHECK(root.numel() == 1, "backward: grad can be implied only for a one-element output, got shape ",
             root.shape(), "; pass a gradient tensor");
    g = ones(root.shape(), {root.dtype(), root.device()});
  }
  HH_CHECK(g.shape() == root.shape(), "backward: gradient shape ", g.shape(), " does not match output shape ",
           root.shape());
  NoGradGuard no_grad;
  // Backward runs outside autocast (as torch's): each backward computes in the dtypes its forward
  // saved, and the casts autocast inserted carry the gradients back to the f32 leaves.
  AutocastGuard no_autocast(DType::bf16, false);
  if (!root.grad_fn()) {
    accumulate_leaf(*root.impl_ptr(), g);
    run_grad_ready_hooks(*root.impl_ptr());
    return;
  }
  // Count, for every node reachable from the root, how many edges point at it, and for every leaf
  // with grad-ready hooks how many edges lead to it (its hooks run after the last one).
  std::unordered_map<Node*, int> deps;
  std::unordered_map<TensorImpl*, int> leaf_edges;
  auto count_leaf = [&leaf_edges](const Edge& e) {
    if (e.leaf && !e.leaf->grad_ready_hooks.list.empty()) ++leaf_edges[e.leaf.get()];
  };
  std::vector<Node*> stack{root.grad_fn().get()};
  deps[root.grad_fn().get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (Edge& e : n->inputs) {
      count_leaf(e);
      if (!e.fn) continue;
      auto it = deps.find(e.fn.get());
      if (it == deps.end()) {
        deps[e.fn.get()] = 1;
        stack.push_back(e.fn.get());
      } else {
        ++it->second;
      }
    }
  }
  // Process in reverse topological order: a node runs once every consumer has sent its grad.
  std::unordered_set<TensorImpl*> got_grad;  // hooked leaves that received a gradient so far
  // The gradients each waiting node has received so far, one slot per output (summed per slot).
  std::unordered_map<Node*, std::vector<Tensor>> pending;
  pending[root.grad_fn().get()].resize(static_cast<size_t>(root.grad_fn()->num_outputs));
  pending[root.grad_fn().get()][static_cast<size_t>(root.grad_output())] = g;
  std::vector<Node*> ready{root.grad_fn().get()};
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    std::vector<Tensor> gouts = std::move(pending[n]);
    pending.erase(n);
    // A node reached only by zero (undefined) gradients still releases its inputs' counts.
    std::vector<Tensor> grads(n->inputs.size());
    if (std::any_of(gouts.begin(), gouts.end(), [](const Tensor& t) { return t.defined(); })) {
      HH_CHECK(n->backward, "backward: trying to backward through the graph a second time (op '", n->name,
               "'); its saved tensors were freed. Pass retain_graph=true to the first backward");
      for (const SavedVersion& sv : n->saved) {
        std::shared_ptr<Storage> st = sv.storage.lock();  // expired: nothing can have written it
        HH_CHECK(!st || st->version == sv.version, "backward: a tensor saved by ", n->name,
                 " was modified in place after it was saved: version ", st->version, ", expected ", sv.version,
                 " (write into a clone, or before the forward that reads it)");
      }
      NeedsGrad needs(n->inputs.size());
      for (size_t i = 0; i < needs.size(); ++i) needs[i] = n->inputs[i].active();
      grads = n->backward(gouts, needs);
      HH_CHECK(grads.size() == n->inputs.size(), "backward of '", n->name, "' returned ", grads.size(),
               " gradients for ", n->inputs.size(), " inputs");
    }
    if (!retain_graph) {
      n->backward = nullptr;
      n->saved.clear();
    }
    for (size_t i = 0; i < grads.size(); ++i) {
      Edge& e = n->inputs[i];
      if (grads[i].defined() && e.active())
        HH_CHECK(grads[i].shape() == n->input_shapes[i], "backward of '", n->name, "' returned gradient shape ",
                 grads[i].shape(), " for input ", i, " of shape ", n->input_shapes[i]);
      if (e.fn) {
        std::vector<Tensor>& slots = pending[e.fn.get()];
        if (slots.empty()) slots.resize(static_cast<size_t>(e.fn->num_outputs));
        Tensor& acc = slots[static_cast<size_t>(e.output)];
        if (grads[i].defined()) acc = acc.defined() ? add(acc, grads[i]) : grads[i];
        if (--deps[e.fn.get()] == 0) ready.push_back(e.fn.get());
      } else if (e.leaf) {
        if (grads[i].defined()) accumulate_leaf(*e.leaf, grads[i]);
        auto it = leaf_edges.find(e.leaf.get());
        if (it == leaf_edges.end()) continue;
        if (grads[i].defined()) got_grad.insert(e.leaf.get());
        if (--it->second == 0 && got_grad.count(e.leaf.get())) run_grad_ready_hooks(*e.leaf);
      }
    }
  }
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const { run_backward(*this, gradient, retain_graph); }

namespace {
std::vector<std::string>& op_names() {
  static std::vector<std::string> names;
  return names;
}
}  // namespace
OpName::OpName(const char* name) { op_names().emplace_back(name); }
const std::vector<std::string>& registered_ops() { return op_names(); }

}  // namespace hh
