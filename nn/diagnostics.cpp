#include "nn/diagnostics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "autograd/ops/index.h"
#include "autograd/ops/reduce.h"

namespace hh::nn {

namespace {
// −Σ_j P log max(Q, 1e-12) per row: (B,H,L).
Tensor row_cross_entropy(const Tensor& P, const Tensor& Q) { return neg(sum(mul(P, log(clamp(Q, 1e-12, 1e30))), {-1})); }
void check_pair(const Tensor& P, const Tensor& Q, const char* op) {
  HH_CHECK(P.defined() && Q.defined(), op, ": teacher or student weights missing (trace with teacher=true)");
  HH_CHECK(P.dim() == 4 && P.shape() == Q.shape(), op, ": expected teacher and student (B,H,L,L) of equal shape, got ",
           P.shape(), " and ", Q.shape());
}
}  // namespace

Tensor soft_cross_entropy_per_head(const Tensor& teacher, const Tensor& student) {
  check_pair(teacher, student, "soft_cross_entropy");
  return mean(row_cross_entropy(teacher.detach(), student), {0, 2});  // (H)
}

Transfer parse_transfer(const std::string& s) {
  if (s == "xent") return Transfer::xent;
  if (s == "mse") return Transfer::mse;
  if (s == "both") return Transfer::both;
  fail(str("unknown transfer loss '", s, "' (xent, mse or both)"));
}

const char* transfer_name(Transfer t) {
  switch (t) {
    case Transfer::xent: return "xent";
    case Transfer::mse: return "mse";
    case Transfer::both: return "both";
  }
  return "?";
}

DistillOptions transfer_options(Transfer t, double mse_weight, bool kl, bool mean_over_heads) {
  DistillOptions o;
  o.kl = kl;
  o.mean_over_heads = mean_over_heads;
  o.weights = t != Transfer::mse;
  if (t != Transfer::xent) {
    HH_CHECK(mse_weight > 0, "transfer '", transfer_name(t), "': the output-MSE weight must be > 0, got ", mse_weight);
    o.output_mse = mse_weight;
  }
  return o;
}

TraceRequest distill_trace_request(const DistillOptions& o) {
  HH_CHECK(o.weights || o.output_mse > 0, "distillation: no loss term (neither the weights term nor an output MSE)");
  TraceRequest tr;
  tr.weights = tr.teacher = o.weights;
  tr.outputs = o.output_mse > 0;
  return tr;
}

namespace {
// One layer's loss (summed over heads) and its head count.
Tensor layer_distillation_loss(const AttentionTrace& t, const DistillOptions& o, int64_t& heads) {
  Tensor layer;
  if (o.weights) {
    Tensor per_head = soft_cross_entropy_per_head(t.teacher, t.weights);
    if (o.kl) {  // KL = soft CE - the teacher's entropy (a constant; the subtraction keeps the graph)
      Tensor entropy;
      {
        NoGradGuard ng;
        Tensor P = t.teacher.detach();
        entropy = mean(row_cross_entropy(P, P), {0, 2});
      }
      per_head = sub(per_head, entropy);
    }
    layer = sum(per_head);
  }
  if (o.output_mse > 0) {
    HH_CHECK(t.output.defined() && t.teacher_output.defined(),
             "distillation_loss: outputs missing from the trace (TraceRequest::outputs)");
    Tensor mse = mul(mse_loss(t.output, t.teacher_output.detach()), o.output_mse);
    layer = layer.defined() ? add(layer, mse) : mse;
  }
  HH_CHECK(layer.defined(), "distillation_loss: no loss term (neither the weights term nor an output MSE)");
  heads = o.weights ? t.teacher.size(1) : t.teacher_output.size(1);
  return layer;
}
}  // namespace

Tensor distillation_loss(const TraceRequest& trace, const DistillOptions& o) {
  HH_CHECK(!trace.layers.empty(), "distillation_loss: no traced attention layers");
  Tensor total;
  int64_t heads = 0;
  for (const AttentionTrace& t : trace.layers) {
    int64_t h = 0;
    Tensor layer = layer_distillation_loss(t, o, h);
    heads += h;
    total = total.defined() ? add(total, layer) : layer;
  }
  return o.mean_over_heads ? div(total, static_cast<double>(heads)) : total;
}

std::vector<double> distillation_loss_per_layer(const TraceRequest& trace, const DistillOptions& o) {
  NoGradGuard ng;
  std::vector<double> out;
  for (const AttentionTrace& t : trace.layers) {
    int64_t h = 0;
    out.push_back(layer_distillation_loss(t, o, h).to(DType::f64).item<double>());
  }
  return out;
}

Tensor logit_distillation_loss(const Tensor& teacher_logits, const Tensor& student_logits, double temperature,
                               const Tensor& mask) {
  HH_CHECK(temperature > 0, "logit_distillation_loss: temperature must be > 0, got ", temperature);
  HH_CHECK(teacher_logits.shape() == student_logits.shape() && teacher_logits.dim() >= 1,
           "logit_distillation_loss: teacher and student logits differ in shape: ", teacher_logits.shape(), " and ",
           student_logits.shape());
  Tensor log_q = log_softmax(div(student_logits.to(DType::f32), temperature), -1);
  Tensor log_p, p;
  {
    NoGradGuard ng;
    log_p = log_softmax(div(teacher_logits.detach().to(DType::f32), temperature), -1);
    p = exp(log_p);
  }
  Tensor kl = sum(mul(p, sub(log_p, log_q)), {-1});  // (...)
  Tensor mean_kl;
  if (mask.defined()) {
    HH_CHECK(mask.shape() == kl.shape(), "logit_distillation_loss: mask ", mask.shape(), " does not match positions ",
             kl.shape());
    Tensor m = mask.to(DType::f32);
    const double n = sum(m).item<double>();
    HH_CHECK(n > 0, "logit_distillation_loss: the mask keeps no position");
    mean_kl = div(sum(mul(kl, m)), n);
  } else {
    mean_kl = mean(kl);
  }
  return mul(mean_kl, temperature * temperature);
}

Tensor topk_logit_distillation_loss(const Tensor& topk_values, const Tensor& topk_indices, const Tensor& teacher_lse,
                                    const Tensor& student_logits, double temperature) {
  HH_CHECK(temperature > 0, "topk_logit_distillation_loss: temperature must be > 0, got ", temperature);
  HH_CHECK(student_logits.dim() == 2 && topk_values.dim() == 2 && topk_indices.shape() == topk_values.shape() &&
               teacher_lse.shape() == Shape{topk_values.size(0)} && student_logits.size(0) == topk_values.size(0),
           "topk_logit_distillation_loss: expected values and indices (N,K), lse (N) and student logits (N,V), got ",
           topk_values.shape(), ", ", topk_indices.shape(), ", ", teacher_lse.shape(), " and ", student_logits.shape());
  const int64_t K = topk_values.size(1), V = student_logits.size(1);
  HH_CHECK(K >= 1 && K <= V, "topk_logit_distillation_loss: ", K, " cached logits for a vocabulary of ", V);
  HH_CHECK(topk_values.size(0) > 0, "topk_logit_distillation_loss: no rows");
  const Device dev = student_logits.device();
  const bool bucket = K < V;
  // The teacher's side, in f64 (constants): log p and p over the top-k, p_other, and
  // Σ p log p over the K + 1 buckets (0 log 0 = 0).
  Tensor p, p_other, teacher_xlogx;
  {
    NoGradGuard ng;
    Tensor log_p = sub(div(topk_values.detach().to(dev).to(DType::f64), temperature),
                       unsqueeze(teacher_lse.detach().to(dev).to(DType::f64), -1));  // (N,K)
    p = exp(log_p);
    teacher_xlogx = sum(mul(p, log_p), {-1});  // (N)
    if (bucket) {
      p_other = clamp(sub(1.0, sum(p, {-1})), 0.0, 1.0);  // (N)
      teacher_xlogx = add(teacher_xlogx, mul(p_other, log(clamp(p_other, 1e-300, 1.0))));
      p_other = p_other.to(DType::f32);
    }
    p = p.to(DType::f32);
    teacher_xlogx = teacher_xlogx.to(DType::f32);
  }
  // The student's log-probabilities of the same buckets.
  Tensor index = topk_indices.detach().to(dev);
  Tensor log_q_all = log_softmax(div(student_logits.to(DType::f32), temperature), -1);  // (N,V)
  Tensor cross = sum(mul(p, gather(log_q_all, 1, index)), {-1});                          // (N): Σ p log q
  if (bucket) {
    Tensor in_topk;
    {
      NoGradGuard ng;
      in_topk = gt(scatter_add(zeros({log_q_all.size(0), V}, {DType::f32, dev}), 1, index,
                               ones(index.shape(), {DType::f32, dev})),
                   0.5);
    }
    Tensor log_q_other = logsumexp(masked_fill(log_q_all, in_topk, -INFINITY), {-1});  // (N)
    cross = add(cross, mul(p_other, log_q_other));
  }
  return mul(mean(sub(teacher_xlogx, cross)), temperature * temperature);
}

double attention_entropy(const Tensor& weights) {
  HH_CHECK(weights.dim() == 4, "attention_entropy: expected weights (B,H,L,L), got ", weights.shape());
  NoGradGuard ng;
  Tensor w = weights.detach().to(DType::f64);
  return mean(row_cross_entropy(w, w)).item<double>();
}

double attention_kl(const Tensor& teacher, const Tensor& student) {
  check_pair(teacher, student, "attention_kl");
  NoGradGuard ng;
  Tensor P = teacher.detach().to(DType::f64), Q = student.detach().to(DType::f64);
  return mean(sub(row_cross_entropy(P, Q), row_cross_entropy(P, P))).item<double>();
}

namespace {
// Ranks with ties averaged (1-based), as scipy.stats.spearmanr.
std::vector<double> ranks(const std::vector<double>& x) {
  std::vector<size_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  std::vector<double> r(x.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && x[idx[j + 1]] == x[idx[i]]) ++j;
    double avg = 0.5 * static_cast<double>(i + j) + 1.0;
    for (size_t t = i; t <= j; ++t) r[idx[t]] = avg;
    i = j + 1;
  }
  return r;
}
double pearson(const std::vector<double>& a, const std::vector<double>& b, bool& ok) {
  double n = static_cast<double>(a.size());
  double ma = std::accumulate(a.begin(), a.end(), 0.0) / n, mb = std::accumulate(b.begin(), b.end(), 0.0) / n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  ok = saa > 0 && sbb > 0;
  return ok ? sab / std::sqrt(saa * sbb) : 0.0;
}
}  // namespace

double attention_monotonicity(const Tensor& scores, const Tensor& weights, bool causal) {
  HH_CHECK(scores.dim() == 4 && scores.shape() == weights.shape(), "attention_monotonicity: expected scores and weights ",
           "(B,H,L,L) of equal shape, got ", scores.shape(), " and ", weights.shape());
  auto s = to_vector<double>(scores), w = to_vector<double>(weights);
  const int64_t rows = scores.numel() / scores.size(-1), Lk = scores.size(-1), Lq = scores.size(-2);
  double total = 0;
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t i = r % Lq;
    int64_t n = causal ? std::min(i + 1, Lk) : Lk;
    if (n < 3) continue;
    std::vector<double> a(s.begin() + r * Lk, s.begin() + r * Lk + n), b(w.begin() + r * Lk, w.begin() + r * Lk + n);
    bool ok = false;
    double rho = pearson(ranks(a), ranks(b), ok);
    if (!ok) continue;
    total += rho;
    ++counted;
  }
  return counted ? total / static_cast<double>(counted) : 0.0;
}

}  // namespace hh::nn
