// Tensor members that forward to the op library, and copy_ (here because it consults grad mode).
#include "autograd/ops.h"
#include "core/backend.h"

namespace hh {

void copy_(const Tensor& dst, const Tensor& src) {
  HH_CHECK(dst.shape() == src.shape(), "copy_: shapes ", dst.shape(), " and ", src.shape(), " differ");
  HH_CHECK(dst.device() == src.device(), "copy_: devices ", dst.device(), " and ", src.device(), " differ");
  HH_CHECK(!dst.requires_grad() || !GradMode::is_enabled(), "copy_: cannot write in place into a tensor that ",
           "requires grad (shape ", dst.shape(), ") while grad mode is on; autograd does not record copy_. Write ",
           "under NoGradGuard (as optimizers do), or copy into a fresh tensor");
  bump_version(dst);
  if (dst.numel() > 0) backend_of(dst).copy(dst, src);
}

Tensor Tensor::reshape(const Shape& s) const { return hh::reshape(*this, s); }
Tensor Tensor::view(const Shape& s) const { return hh::view(*this, s); }
Tensor Tensor::permute(const std::vector<int64_t>& dims) const { return hh::permute(*this, dims); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return hh::transpose(*this, d0, d1); }
Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  return hh::slice(*this, dim, start, end, step);
}
Tensor Tensor::select(int64_t dim, int64_t index) const { return hh::select(*this, dim, index); }
Tensor Tensor::expand(const Shape& s) const { return hh::expand(*this, s); }
Tensor Tensor::squeeze(int64_t dim) const { return hh::squeeze(*this, dim); }
Tensor Tensor::unsqueeze(int64_t dim) const { return hh::unsqueeze(*this, dim); }
Tensor Tensor::flatten(int64_t s, int64_t e) const { return hh::flatten(*this, s, e); }
Tensor Tensor::contiguous() const { return hh::contiguous(*this); }
Tensor Tensor::clone() const { return hh::clone(*this); }
Tensor Tensor::detach() const { return hh::detach(*this); }
Tensor Tensor::to(DType t) const { return hh::to_dtype(*this, t); }
Tensor Tensor::to(Device d) const { return hh::to_device(*this, d); }
Tensor Tensor::sum() const { return hh::sum(*this); }
Tensor Tensor::mean() const { return hh::mean(*this); }

}  // namespace hh
