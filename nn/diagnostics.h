// Attention distillation losses (paper Eq. 4, App. A.3) and the diagnostics of Figures 2-4 and
// Tables 4-5: attention entropy, monotonicity (Spearman between q·k and weights) and KL(P‖Q).
#pragma once
#include <string>
#include <vector>

#include "nn/attention.h"

namespace hh::nn {

// The attention-transfer loss of each layer: the paper's term on the weights (soft cross-entropy or
// KL), LoLCATs' MSE between the attention outputs, or both added. Without the weights term no
// (L,L) matrix is built: the student runs its efficient form and the teacher the fused softmax.
enum class Transfer { xent, mse, both };
Transfer parse_transfer(const std::string& s);  // "xent" | "mse" | "both"; an error names the others
const char* transfer_name(Transfer t);

struct DistillOptions {
  bool kl = false;            // subtract the teacher entropy (KL instead of soft cross-entropy)
  bool mean_over_heads = false;  // mean over layers·heads instead of the sum
  double output_mse = 0.0;    // weight of the MSE between student and teacher attention outputs
  bool weights = true;        // the term on the attention weights (soft cross-entropy, or KL)
};
// The options of a transfer choice: xent = weights term only; mse = the output MSE only (weight
// mse_weight); both = the sum. mse_weight must be > 0 for mse and both.
DistillOptions transfer_options(Transfer t, double mse_weight, bool kl = false, bool mean_over_heads = false);
// What a layer must trace for these options (weights + teacher for the weights term, outputs for
// the MSE); an error when neither term is on.
TraceRequest distill_trace_request(const DistillOptions& o);

// One head-batched term: P, Q (B,H,L,L) -> (H) soft CE per head, −(1/rows)Σ_ij P log max(Q,1e-12),
// averaged over the batch and query rows.
Tensor soft_cross_entropy_per_head(const Tensor& teacher, const Tensor& student);
// Total loss over every traced layer (trace made by distill_trace_request(o)).
Tensor distillation_loss(const TraceRequest& trace, const DistillOptions& o = {});
// The same loss of each traced layer alone (no mean over heads), as doubles: the per-layer transfer
// error that picks the layers kept as softmax.
std::vector<double> distillation_loss_per_layer(const TraceRequest& trace, const DistillOptions& o = {});

// Logit distillation (RADLADS, MOHAWK; Hinton et al.'s temperature): T² · mean over the positions
// where mask is true of KL(softmax(teacher/T) ‖ softmax(student/T)), the teacher detached.
// teacher, student (..., V); mask (...) bool, or undefined = every position.
Tensor logit_distillation_loss(const Tensor& teacher_logits, const Tensor& student_logits, double temperature,
                               const Tensor& mask = Tensor());
// The same against a cached top-k of the teacher (RADLADS' logit cache): T² · mean over rows of the
// KL between teacher and student at temperature T, each coarsened to the K cached tokens plus one
// "other" bucket holding the rest of the mass (teacher: 1 − Σ_top-k p; student: 1 − Σ of its own
// probabilities at those tokens, taken as a log-sum-exp over the other tokens, so no cancellation).
// By the data-processing inequality it is <= the full KL, equal to it when K = V (no bucket).
// topk_values (N,K): the teacher's raw logits at topk_indices (N,K) i32/i64, distinct in a row;
// teacher_lse (N): logsumexp(teacher logits / T) over the whole vocabulary (f64 keeps the bucket's
// mass exact); student_logits (N,V). The gradient flows to the student only.
Tensor topk_logit_distillation_loss(const Tensor& topk_values, const Tensor& topk_indices, const Tensor& teacher_lse,
                                    const Tensor& student_logits, double temperature);

// Mean over batch, heads and rows of −Σ_j a_ij log a_ij; weights (B,H,L,L).
double attention_entropy(const Tensor& weights);
// Mean per-row Spearman rank correlation between scores and weights (B,H,L,L). causal: only keys
// j <= i enter row i. Rows with fewer than 3 keys or constant values are skipped.
double attention_monotonicity(const Tensor& scores, const Tensor& weights, bool causal);
// Mean over rows of KL(P‖Q) = Σ_j P log(P/Q) (0 log 0 = 0, Q floored at 1e-12).
double attention_kl(const Tensor& teacher, const Tensor& student);

}  // namespace hh::nn
