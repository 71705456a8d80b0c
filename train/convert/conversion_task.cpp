// The conversion tasks' shared parts (train/convert/convert.h): ConversionTask's refusals for
// what a task does not support, CausalLmTask's transfer batches, logit losses and top-k teacher
// logits, and the fidelity measurements (KL, entropy, monotonicity) of any task's student.
#include "train/convert/convert.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "autograd/ops.h"
#include "nn/attention.h"
#include "nn/diagnostics.h"
#include "train/convert/logit_cache.h"

namespace hh::train {

Tensor ConversionTask::logit_loss(Split, int64_t, double) {
  fail("convert: this task has no teacher logits to distill (--logit-distill-tokens)");
}

std::vector<Tensor> CausalLmTask::transfer_batches() {
  std::vector<Tensor> out;
  for (int64_t i = 0; i < batches(Split::train); ++i) {
    Tensor inputs, targets;
    batch(Split::train, i, inputs, targets);
    out.push_back(inputs);
  }
  return out;
}

Tensor CausalLmTask::logit_loss(Split s, int64_t i, double temperature) {
  nn::CausalLM* t = teacher();
  HH_CHECK(t != nullptr, "convert: logit distillation needs the softmax teacher (no teacher given)");
  Tensor inputs, targets;
  batch(s, i, inputs, targets);
  Tensor teacher_logits;
  {
    NoGradGuard ng;
    t->eval();
    teacher_logits = t->forward(inputs);  // (B,L,V)
  }
  return nn::logit_distillation_loss(teacher_logits, lm().forward(inputs), temperature, ne(targets, -100));
}

TopkLogits ConversionTask::teacher_topk(Split, int64_t, int64_t, double) {
  fail("convert: this task has no teacher logits to cache (--logit-cache topk)");
}
uint64_t ConversionTask::batch_key(Split, int64_t) const {
  fail("convert: this task has no teacher logits to cache (--logit-cache topk)");
}
Tensor ConversionTask::topk_logit_loss(Split, int64_t, const TopkLogits&, double) {
  fail("convert: this task has no teacher logits to cache (--logit-cache topk)");
}

namespace {
// The rows of logits (B,L,V) at the positions targets (B,L) scores (not -100), row-major: (N,V).
Tensor scored_rows(const Tensor& logits, const Tensor& targets) {
  std::vector<int64_t> at;
  const std::vector<int64_t> t = to_vector<int64_t>(targets);
  for (size_t p = 0; p < t.size(); ++p)
    if (t[p] != -100) at.push_back(static_cast<int64_t>(p));
  HH_CHECK(!at.empty(), "convert: a batch scores no position");
  const int64_t n = static_cast<int64_t>(at.size());
  return index_select(reshape(logits, {-1, logits.size(logits.dim() - 1)}), 0,
                      from_vector(at, {n}, {DType::i64, logits.device()}));
}
}  // namespace

TopkLogits CausalLmTask::teacher_topk(Split s, int64_t i, int64_t k, double temperature) {
  nn::CausalLM* t = teacher();
  HH_CHECK(t != nullptr, "convert: logit distillation needs the softmax teacher (no teacher given)");
  Tensor inputs, targets;
  batch(s, i, inputs, targets);
  NoGradGuard ng;
  t->eval();
  TopkLogits out = topk_logits(scored_rows(t->forward(inputs), targets), k, temperature);
  out.batch = batch_checksum({inputs, targets});
  return out;
}

uint64_t CausalLmTask::batch_key(Split s, int64_t i) const {
  Tensor inputs, targets;
  batch(s, i, inputs, targets);
  return batch_checksum({inputs, targets});
}

Tensor CausalLmTask::topk_logit_loss(Split s, int64_t i, const TopkLogits& teacher, double temperature) {
  Tensor inputs, targets;
  batch(s, i, inputs, targets);
  return nn::topk_logit_distillation_loss(teacher.values, teacher.indices, teacher.lse,
                                          scored_rows(lm().forward(inputs), targets), temperature);
}

void ConversionTask::keep_softmax(const std::vector<int64_t>&) {
  fail("convert: this task's model cannot keep softmax layers (--softmax-layers)");
}

namespace {
// Mean over batch and query rows of KL(P‖Q) per head: P, Q (B,H,L,L) -> H values.
std::vector<double> kl_per_head(const Tensor& teacher, const Tensor& student) {
  Tensor P = teacher.detach().to(DType::f64), Q = student.detach().to(DType::f64);
  Tensor logP = log(clamp(P, 1e-300, 1e300)), logQ = log(clamp(Q, 1e-12, 1e300));
  Tensor row = sum(mul(P, sub(logP, logQ)), {-1});  // (B,H,L); P = 0 entries contribute 0
  return to_vector<double>(mean(row, {0, 2}));
}
}  // namespace

Fidelity measure_fidelity(ConversionTask& task, Split s, int64_t batches, bool causal, int64_t pic_layer,
                          int64_t pic_head) {
  NoGradGuard ng;
  task.model().eval();
  int64_t n = task.batches(s);
  if (batches > 0) n = std::min(n, batches);
  HH_CHECK(n > 0, "measure_fidelity: the split has no batches");
  Fidelity fd;
  for (int64_t i = 0; i < n; ++i) {
    nn::TraceRequest tr;
    tr.weights = tr.teacher = tr.scores = true;
    task.trace(s, i, tr);
    HH_CHECK(!tr.layers.empty(), "measure_fidelity: the model traced no attention layer");
    if (i == 0) {
      fd.layers = static_cast<int64_t>(tr.layers.size());
      fd.heads = tr.layers[0].weights.size(1);
      fd.kl.assign(static_cast<size_t>(fd.layers * fd.heads), 0.0);
      fd.pic_layer = std::clamp<int64_t>(pic_layer, 0, fd.layers - 1);
      fd.pic_head = std::clamp<int64_t>(pic_head, 0, fd.heads - 1);
      const nn::AttentionTrace& t = tr.layers[static_cast<size_t>(fd.pic_layer)];
      fd.pic_len = t.weights.size(2);
      fd.pic_teacher = to_vector<double>(select(select(t.teacher, 0, 0), 0, fd.pic_head));
      fd.pic_student = to_vector<double>(select(select(t.weights, 0, 0), 0, fd.pic_head));
    }
    HH_CHECK(static_cast<int64_t>(tr.layers.size()) == fd.layers, "measure_fidelity: layer count changed");
    for (int64_t l = 0; l < fd.layers; ++l) {
      const nn::AttentionTrace& t = tr.layers[static_cast<size_t>(l)];
      std::vector<double> kl = kl_per_head(t.teacher, t.weights);
      for (int64_t h = 0; h < fd.heads; ++h) fd.kl[static_cast<size_t>(l * fd.heads + h)] += kl[static_cast<size_t>(h)];
      fd.entropy_student += nn::attention_entropy(t.weights);
      fd.entropy_teacher += nn::attention_entropy(t.teacher);
      fd.monotonicity_student += nn::attention_monotonicity(t.scores, t.weights, causal);
      fd.monotonicity_teacher += nn::attention_monotonicity(t.scores, t.teacher, causal);
    }
  }
  const double per_layer = static_cast<double>(n * fd.layers);
  for (double& v : fd.kl) v /= static_cast<double>(n);
  double total = 0;
  for (double v : fd.kl) total += v;
  fd.kl_mean = total / static_cast<double>(fd.kl.size());
  fd.entropy_student /= per_layer;
  fd.entropy_teacher /= per_layer;
  fd.monotonicity_student /= per_layer;
  fd.monotonicity_teacher /= per_layer;
  return fd;
}

}  // namespace hh::train
