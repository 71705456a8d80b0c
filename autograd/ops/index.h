// Indexing ops: gather, index_select, embedding lookup (scatter-add backward), one_hot,
// scatter_add.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hh {

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);          // torch.gather
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);    // index 1-D i64/i32
Tensor embedding(const Tensor& weight, const Tensor& ids);                  // weight (V,C), ids (...) -> (..., C)
Tensor one_hot(const Tensor& ids, int64_t num_classes, DType dtype = DType::f32);  // not differentiable

}  // namespace hh
