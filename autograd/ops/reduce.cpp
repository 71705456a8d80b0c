// PLACEHOLDER (to be replaced)
#include "autograd/ops.h"
namespace hh {
Tensor sum(const Tensor&, const Dims&, bool) { fail("sum: not implemented yet"); }
Tensor mean(const Tensor&, const Dims&, bool) { fail("mean: not implemented yet"); }
}  // namespace hh
