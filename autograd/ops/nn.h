// Fused neural-network ops with fused backwards: softmax, log-softmax, layer_norm, rms_norm,
// cross_entropy, mse_loss, dropout. Each also has a composed reference in tests.
#pragma once
#include <cstdint>
#include <string>

#include "core/generator.h"
#include "core/tensor.h"

namespace hh {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// Normalizes over the last dim (size C); weight/bias (C) optional.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);

enum class Reduction { mean, sum, none };
// logits (N,V) or (..., V); target (N) / (...) i64 class ids. mean averages over non-ignored rows.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100,
                     double label_smoothing = 0.0, Reduction reduction = Reduction::mean);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// Inverted dropout: keeps with prob. 1-p and scales by 1/(1-p); identity when !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);

}  // namespace hh
