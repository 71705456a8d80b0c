// Views and data movement: reshape/view, permute, transpose, slice, select, expand, squeeze,
// unsqueeze, flatten (metadata only when possible), contiguous, clone, casts, device copies,
// cat/stack/split/chunk/unbind, tril/triu.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace hh {

Tensor reshape(const Tensor& x, Shape shape);  // one -1 allowed; copies only when it must
Tensor view(const Tensor& x, Shape shape);     // never copies; throws when strides do not allow it
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);  // clamps like Python
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor expand(const Tensor& x, const Shape& shape);  // -1 keeps a dim; backward sums to x's shape
Tensor broadcast_to(const Tensor& x, const Shape& shape);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x);  // all size-1 dims
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
Tensor detach(const Tensor& x);
Tensor to_dtype(const Tensor& x, DType t);
Tensor to_device(const Tensor& x, Device d);
// Sums `g` down to `shape` (the backward of broadcasting).
Tensor sum_to(const Tensor& g, const Shape& shape);

Tensor cat(const std::vector<Tensor>& xs, int64_t dim);
Tensor stack(const std::vector<Tensor>& xs, int64_t dim);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim);
// The slices x[i] along dim, without that dim (PyTorch's unbind): views, one node for all.
std::vector<Tensor> unbind(const Tensor& x, int64_t dim = 0);
Tensor tril(const Tensor& x, int64_t k = 0);  // over the last two dims
Tensor triu(const Tensor& x, int64_t k = 0);

}  // namespace hh
