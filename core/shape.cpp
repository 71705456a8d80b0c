#include "core/shape.h"

#include <sstream>

#include "core/checked.h"
#include "core/error.h"

namespace hh {

// Sizes may come from a file (a config, a safetensors header): every product is checked, so a
// shape whose element count does not fit int64 is an error naming it, never a wrapped count.
int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    n = checked_mul(n, d, [&] { return str("the element count of shape ", s); });
  }
  return n;
}

Strides contiguous_strides(const Shape& s) {
  Strides st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc = checked_mul(acc, s[i], [&] { return str("the strides of shape ", s); });
  }
  return st;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t n = ndim == 0 ? 1 : ndim;  // a scalar accepts dim 0 / -1 like PyTorch
  HH_CHECK(dim >= -n && dim < n, op, ": dim ", dim, " out of range for a tensor of ", ndim, " dims");
  return dim < 0 ? dim + n : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    HH_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b, " cannot be broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace hh
