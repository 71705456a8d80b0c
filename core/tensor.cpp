#include "core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/backend.h"
#include "core/checked.h"
#include "core/philox.h"

namespace hh {

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda") return Device::cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    std::string idx = s.substr(5);
    HH_CHECK(!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos,
             "device: bad device string '", s, "' (expected cpu, cuda or cuda:N)");
    return Device::cuda(std::stoi(idx));
  }
  fail(str("device: bad device string '", s, "' (expected cpu, cuda or cuda:N)"));
}

uint32_t Generator::next_u32() {
  uint64_t o = advance(1);
  return philox4x32_10(o, 0, seed_).v[0];
}
double Generator::next_uniform() {
  uint64_t o = advance(1);
  Philox4 r = philox4x32_10(o, 0, seed_);
  return philox_uniform53(r.v[0], r.v[1]);
}
int64_t Generator::next_int(int64_t lo, int64_t hi) {
  HH_CHECK(hi > lo, "Generator::next_int: empty range [", lo, ", ", hi, ")");
  uint64_t o = advance(1);
  Philox4 r = philox4x32_10(o, 0, seed_);
  uint64_t x = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
  return lo + static_cast<int64_t>(x % static_cast<uint64_t>(hi - lo));
}

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  return static_cast<char*>(impl().storage->data.get()) + offset() * static_cast<int64_t>(itemsize(dtype()));
}

Tensor Tensor::as_strided(Shape shape, Strides strides, int64_t offset) const {
  HH_CHECK(shape.size() == strides.size(), "as_strided: shape ", shape, " and strides ", strides, " differ in rank");
  // Bounds: the furthest element must lie inside storage.
  int64_t lo = offset, hi = offset;
  bool empty = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    HH_CHECK(shape[i] >= 0, "as_strided: negative size in ", shape);
    if (shape[i] == 0) empty = true;
    int64_t span = (shape[i] - 1) * strides[i];
    (span < 0 ? lo : hi) += span;
  }
  int64_t cap = static_cast<int64_t>(storage()->nbytes / itemsize(dtype()));
  HH_CHECK(empty || (lo >= 0 && hi < cap), "as_strided: view ", shape, " strides ", strides, " offset ", offset,
           " reaches outside a storage of ", cap, " elements");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage();
  impl->offset = offset;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = dtype();
  return Tensor(impl);
}

Tensor& Tensor::requires_grad_(bool on) {
  HH_CHECK(!on || is_floating(dtype()), "requires_grad_: only floating tensors can require grad, got ", dtype());
  HH_CHECK(is_leaf() || on, "requires_grad_: cannot turn off requires_grad on a non-leaf tensor");
  impl_->requires_grad = on;
  return *this;
}

double Tensor::item_double() const {
  HH_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ", shape());
  auto host = to_vector<double>(*this);
  return host[0];
}

namespace {
Tensor make_tensor(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) HH_CHECK(d >= 0, "empty: negative dimension in shape ", shape);
  auto impl = std::make_shared<TensorImpl>();
  const int64_t n = numel_of(shape);  // checked: an error naming the shape when it overflows
  const size_t nbytes = static_cast<size_t>(
      checked_mul(n, static_cast<int64_t>(itemsize(dtype)), [&] { return str("empty: the bytes of shape ", shape); }));
  impl->storage = std::make_shared<Storage>();
  impl->storage->data = backend_for(device).allocate(nbytes);
  impl->storage->nbytes = nbytes;
  impl->storage->device = device;
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(impl);
}
}  // namespace

Tensor empty(const Shape& shape, Options o) { return make_tensor(shape, o.dtype, o.device); }
Tensor full(const Shape& shape, double value, Options o) {
  Tensor t = empty(shape, o);
  if (t.numel() > 0) backend_of(t).fill(t, value);
  return t;
}
Tensor zeros(const Shape& shape, Options o) { return full(shape, 0.0, o); }
Tensor ones(const Shape& shape, Options o) { return full(shape, 1.0, o); }
Tensor scalar_tensor(double value, Options o) { return full({}, value, o); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), {t.dtype(), t.device()}); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), {t.dtype(), t.device()}); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), {t.dtype(), t.device()}); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, {t.dtype(), t.device()}); }

Tensor empty_in_layout(const Shape& shape, const Strides& order_of, Options o) {
  const size_t n = shape.size();
  HH_CHECK(order_of.size() == n, "empty_in_layout: ", n, " dims but ", order_of.size(), " strides to follow");
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return order_of[a] > order_of[b]; });
  Shape mem(n);
  for (size_t i = 0; i < n; ++i) mem[i] = shape[order[i]];
  Tensor buf = empty(mem, o);
  Strides st(n);
  for (size_t i = 0; i < n; ++i) st[order[i]] = buf.strides()[i];
  return buf.as_strided(shape, st, buf.offset());
}

Tensor from_vector(const std::vector<double>& values, const Shape& shape, Options o) {
  HH_CHECK(static_cast<int64_t>(values.size()) == numel_of(shape), "from_vector: ", values.size(),
           " values do not fill shape ", shape);
  Tensor host = empty(shape, {DType::f64, Device::cpu()});
  std::copy(values.begin(), values.end(), host.data<double>());
  if (o.dtype == DType::f64 && o.device.is_cpu()) return host;
  Tensor cast = empty(shape, {o.dtype, Device::cpu()});
  if (cast.numel() > 0) backend_for(Device::cpu()).copy(cast, host);
  return o.device.is_cpu() ? cast : cast.to(o.device);
}
Tensor from_vector(const std::vector<float>& values, const Shape& shape, Options o) {
  return from_vector(std::vector<double>(values.begin(), values.end()), shape, o);
}
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape, Options o) {
  HH_CHECK(static_cast<int64_t>(values.size()) == numel_of(shape), "from_vector: ", values.size(),
           " values do not fill shape ", shape);
  Tensor host = empty(shape, {DType::i64, Device::cpu()});
  std::copy(values.begin(), values.end(), host.data<int64_t>());
  if (o.dtype == DType::i64 && o.device.is_cpu()) return host;
  Tensor cast = empty(shape, {o.dtype, Device::cpu()});
  if (cast.numel() > 0) backend_for(Device::cpu()).copy(cast, host);
  return o.device.is_cpu() ? cast : cast.to(o.device);
}

Tensor arange(double start, double end, double step, Options o) {
  HH_CHECK(step != 0.0, "arange: step must be non-zero");
  int64_t n = static_cast<int64_t>(std::ceil((end - start) / step));
  if (n < 0) n = 0;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + static_cast<double>(i) * step;
  return from_vector(v, {n}, o);
}
Tensor arange(int64_t n, Options o) { return arange(0.0, static_cast<double>(n), 1.0, o); }

Tensor eye(int64_t n, Options o) {
  std::vector<double> v(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i * n + i)] = 1.0;
  return from_vector(v, {n, n}, o);
}

template <typename T>
std::vector<T> to_vector(const Tensor& t) {
  Tensor src = t;
  if (!src.device().is_cpu()) src = src.to(Device::cpu());  // differentiable op; fine outside graphs
  Tensor host = empty(src.shape(), {dtype_of<T>::value, Device::cpu()});
  if (host.numel() > 0) backend_for(Device::cpu()).copy(host, src);
  const T* p = host.data<T>();
  return std::vector<T>(p, p + host.numel());
}
template std::vector<float> to_vector<float>(const Tensor&);
template std::vector<double> to_vector<double>(const Tensor&);
template std::vector<int64_t> to_vector<int64_t>(const Tensor&);
template std::vector<int32_t> to_vector<int32_t>(const Tensor&);
template std::vector<uint8_t> to_vector<uint8_t>(const Tensor&);

namespace {
Tensor random_tensor(const Shape& shape, Options o, RandomParams p, int64_t per_block, Generator& gen) {
  Tensor t = empty(shape, o);
  int64_t n = t.numel();
  p.seed = gen.seed();
  p.offset = gen.advance(static_cast<uint64_t>((n + per_block - 1) / per_block));
  if (n > 0) backend_of(t).random(t, p);
  return t;
}
}  // namespace

Tensor uniform(const Shape& shape, double lo, double hi, Generator& gen, Options o) {
  HH_CHECK(is_floating(o.dtype), "uniform: dtype must be floating, got ", o.dtype);
  HH_CHECK(hi > lo, "uniform: empty range [", lo, ", ", hi, ")");
  DType kernel = o.dtype == DType::f64 ? DType::f64 : DType::f32;
  Tensor t = random_tensor(shape, {kernel, o.device}, {RandomKind::uniform, lo, hi},
                           kernel == DType::f64 ? PhiloxLayout::uniform_f64 : PhiloxLayout::uniform_f32, gen);
  return kernel == o.dtype ? t : t.to(o.dtype);
}
Tensor rand(const Shape& shape, Generator& gen, Options o) { return uniform(shape, 0.0, 1.0, gen, o); }
Tensor randn(const Shape& shape, Generator& gen, Options o) {
  HH_CHECK(is_floating(o.dtype), "randn: dtype must be floating, got ", o.dtype);
  DType kernel = o.dtype == DType::f64 ? DType::f64 : DType::f32;
  Tensor t = random_tensor(shape, {kernel, o.device}, {RandomKind::normal, 0.0, 1.0}, PhiloxLayout::normal, gen);
  return kernel == o.dtype ? t : t.to(o.dtype);
}
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& gen, Options o) {
  HH_CHECK(o.dtype == DType::i64 || o.dtype == DType::i32, "randint: dtype must be i32 or i64, got ", o.dtype);
  HH_CHECK(high > low, "randint: empty range [", low, ", ", high, ")");
  return random_tensor(shape, o, {RandomKind::randint, static_cast<double>(low), static_cast<double>(high)},
                       PhiloxLayout::uniform_f32, gen);
}
Tensor bernoulli(const Shape& shape, double p, Generator& gen, Options o) {
  HH_CHECK(p >= 0.0 && p <= 1.0, "bernoulli: probability ", p, " outside [0, 1]");
  Tensor u = rand(shape, gen, {DType::f32, o.device});
  // u in (0,1]: u <= p has probability p.
  Tensor out = empty(shape, {DType::f32, o.device});
  Tensor pt = full({}, p, {DType::f32, o.device}).as_strided(shape, Strides(shape.size(), 0), 0);
  Tensor mask = empty(shape, {DType::boolean, o.device});
  backend_of(u).binary(BinaryOp::le, u, pt, mask);
  Tensor res = empty(shape, o);
  backend_of(res).copy(res, mask);
  return res;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  HH_CHECK(a.shape() == b.shape(), "max_abs_diff: shapes ", a.shape(), " and ", b.shape(), " differ");
  auto va = to_vector<double>(a), vb = to_vector<double>(b);
  double m = 0.0;
  for (size_t i = 0; i < va.size(); ++i) {
    double d = std::fabs(va[i] - vb[i]);
    if (std::isnan(d)) return d;
    m = std::max(m, d);
  }
  return m;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  HH_CHECK(a.shape() == b.shape(), "allclose: shapes ", a.shape(), " and ", b.shape(), " differ");
  auto va = to_vector<double>(a), vb = to_vector<double>(b);
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) || std::isnan(vb[i])) return false;
    if (std::fabs(va[i] - vb[i]) > atol + rtol * std::fabs(vb[i])) return false;
  }
  return true;
}

int64_t first_non_finite(const Tensor& t) {
  const Tensor c = t.device().is_cpu() ? t.contiguous() : t.to(Device::cpu());
  const int64_t n = c.numel();
  const void* p = c.raw_data();
  switch (c.dtype()) {
    case DType::f32: {
      const float* f = static_cast<const float*>(p);
      for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(f[i])) return i;
      return -1;
    }
    case DType::f64: {
      const double* f = static_cast<const double*>(p);
      for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(f[i])) return i;
      return -1;
    }
    case DType::f16:
    case DType::bf16: {  // all exponent bits set: infinity or NaN
      const uint16_t mask = c.dtype() == DType::f16 ? 0x7C00 : 0x7F80;
      const uint16_t* h = static_cast<const uint16_t*>(p);
      for (int64_t i = 0; i < n; ++i)
        if ((h[i] & mask) == mask) return i;
      return -1;
    }
    default: return -1;
  }
}

std::string non_finite_text(const Tensor& t, int64_t i) {
  const Tensor c = t.device().is_cpu() ? t.contiguous() : t.to(Device::cpu());
  double v = 0;
  if (c.dtype() == DType::f32) v = static_cast<const float*>(c.raw_data())[i];
  else if (c.dtype() == DType::f64) v = static_cast<const double*>(c.raw_data())[i];
  else {
    const uint16_t h = static_cast<const uint16_t*>(c.raw_data())[i];
    const uint16_t frac = c.dtype() == DType::f16 ? 0x03FF : 0x007F;
    return (h & frac) ? "nan" : (h & 0x8000) ? "-inf" : "inf";
  }
  return std::isnan(v) ? "nan" : v < 0 ? "-inf" : "inf";
}

namespace {
// Prints dims longer than 2*kEdge as "first kEdge, ..., last kEdge". Recursion depth = rank.
constexpr int64_t kEdge = 3;
void print_dim(std::ostringstream& os, const std::vector<double>& v, const Shape& shape, const Strides& st,
               size_t d, int64_t base, bool fp) {
  if (d == shape.size()) {
    char buf[64];
    if (fp)
      snprintf(buf, sizeof buf, "%.4f", v[static_cast<size_t>(base)]);
    else
      snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v[static_cast<size_t>(base)]));
    os << buf;
    return;
  }
  std::string sep = d + 1 == shape.size() ? ", " : ",\n" + std::string(8 + d, ' ');
  os << "[";
  int64_t len = shape[d];
  for (int64_t i = 0; i < len; ++i) {
    if (len > 2 * kEdge && i == kEdge) {
      os << "..." << sep;
      i = len - kEdge;
    }
    print_dim(os, v, shape, st, d + 1, base + i * st[d], fp);
    if (i + 1 < len) os << sep;
  }
  os << "]";
}
}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  os << "tensor(";
  print_dim(os, to_vector<double>(*this), shape(), contiguous_strides(shape()), 0, 0, is_floating(dtype()));
  os << ", dtype=" << dtype_name(dtype());
  if (!device().is_cpu()) os << ", device=" << device();
  if (requires_grad()) os << ", requires_grad=true";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace hh
