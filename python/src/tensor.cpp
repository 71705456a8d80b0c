// hedgehog.Tensor: the engine's tensor with numpy, DLPack and autograd.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "python/src/bind.h"

namespace hh::py {

namespace {

DType dtype_of_array(const nb::dlpack::dtype& d) {
  using C = nb::dlpack::dtype_code;
  const auto code = static_cast<C>(d.code);
  if (d.lanes == 1) {
    if (code == C::Float && d.bits == 32) return DType::f32;
    if (code == C::Float && d.bits == 64) return DType::f64;
    if (code == C::Float && d.bits == 16) return DType::f16;
    if (code == C::Bfloat && d.bits == 16) return DType::bf16;
    if (code == C::Int && d.bits == 32) return DType::i32;
    if (code == C::Int && d.bits == 64) return DType::i64;
    if (code == C::UInt && d.bits == 8) return DType::u8;
    if (code == C::Bool && d.bits == 8) return DType::boolean;
  }
  fail(str("hedgehog.tensor: an array of dtype code ", static_cast<int>(d.code), ", ", static_cast<int>(d.bits),
           " bits, is not one the engine has (float32, float64, float16, bfloat16, int32, int64, uint8, bool)"));
}

nb::dlpack::dtype array_dtype(DType t) {
  using C = nb::dlpack::dtype_code;
  const auto d = [](C c, int bits) { return nb::dlpack::dtype{static_cast<uint8_t>(c), static_cast<uint8_t>(bits), 1}; };
  switch (t) {
    case DType::f32: return d(C::Float, 32);
    case DType::f64: return d(C::Float, 64);
    case DType::i32: return d(C::Int, 32);
    case DType::i64: return d(C::Int, 64);
    case DType::u8: return d(C::UInt, 8);
    case DType::boolean: return d(C::Bool, 8);
    default: fail(str("hedgehog: no array dtype for ", dtype_name(t)));
  }
}

Shape shape_arg(const std::vector<int64_t>& s) { return Shape(s.begin(), s.end()); }

// Python's binary operators: another Tensor or a number.
Tensor other(const nb::handle& h, const Tensor& like) {
  if (nb::isinstance<Tensor>(h)) return nb::cast<Tensor>(h);
  if (nb::isinstance<nb::float_>(h) || nb::isinstance<nb::int_>(h) || nb::isinstance<nb::bool_>(h))
    return full({}, nb::cast<double>(h), {like.dtype(), like.device()});
  if (nb::ndarray_check(h)) return tensor_from_array(nb::cast<nb::ndarray<nb::ro>>(h)).to(like.device());
  throw nb::type_error(("hedgehog.Tensor: cannot combine with " + std::string(nb::type_name(h.type()).c_str())).c_str());
}

}  // namespace

Tensor tensor_from_array(const nb::ndarray<nb::ro>& a) {
  HH_CHECK(a.device_type() == nb::device::cpu::value, "hedgehog.tensor: the array is not in CPU memory (device type ",
           a.device_type(), "); move it to the CPU first");
  const DType dt = dtype_of_array(a.dtype());
  Shape shape;
  for (size_t i = 0; i < a.ndim(); ++i) shape.push_back(static_cast<int64_t>(a.shape(i)));
  Tensor t = empty(shape, {dt});
  const int64_t n = t.numel(), item = static_cast<int64_t>(itemsize(dt)), rank = static_cast<int64_t>(a.ndim());
  char* dst = static_cast<char*>(t.raw_data());
  const char* src = static_cast<const char*>(a.data());
  // An odometer over the array's index, its strides in elements (any layout: views, negative strides).
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int64_t d = 0; d < rank; ++d) off += idx[static_cast<size_t>(d)] * a.stride(static_cast<size_t>(d));
    std::memcpy(dst + i * item, src + off * item, static_cast<size_t>(item));
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++idx[static_cast<size_t>(d)] < shape[static_cast<size_t>(d)]) break;
      idx[static_cast<size_t>(d)] = 0;
    }
  }
  return t;
}

namespace {
// The pieces of a view of t0 (see array_view): the CPU tensor, shape, strides and an owner.
struct ViewParts {
  Tensor t;
  std::vector<size_t> shape;
  std::vector<int64_t> strides;
  nb::capsule owner;
};
ViewParts view_parts(const Tensor& t0) {
  ViewParts v;
  v.t = t0.detach();
  if (!v.t.device().is_cpu()) v.t = v.t.to(Device::cpu());
  if (v.t.dtype() == DType::bf16 || v.t.dtype() == DType::f16) v.t = v.t.to(DType::f32);
  for (int64_t d = 0; d < v.t.dim(); ++d) {
    v.shape.push_back(static_cast<size_t>(v.t.size(d)));
    v.strides.push_back(v.t.stride(d));
  }
  auto* keep = new Tensor(v.t);  // the view's owner: the storage lives as long as the array does
  v.owner = nb::capsule(keep, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  return v;
}
}  // namespace

nb::ndarray<> array_view(const Tensor& t0) {
  ViewParts v = view_parts(t0);
  return nb::ndarray<>(v.t.raw_data(), v.shape.size(), v.shape.data(), v.owner, v.strides.data(),
                       array_dtype(v.t.dtype()), nb::device::cpu::value, 0);
}

nb::ndarray<nb::numpy> numpy_view(const Tensor& t0) {
  ViewParts v = view_parts(t0);
  return nb::ndarray<nb::numpy>(v.t.raw_data(), v.shape.size(), v.shape.data(), v.owner, v.strides.data(),
                                array_dtype(v.t.dtype()), nb::device::cpu::value, 0);
}

Tensor token_ids(const nb::handle& ids) {
  if (nb::ndarray_check(ids)) {
    Tensor t = tensor_from_array(nb::cast<nb::ndarray<nb::ro>>(ids));
    HH_CHECK(t.dtype() == DType::i64 || t.dtype() == DType::i32, "token ids: expected an integer array, got ",
             dtype_name(t.dtype()));
    t = t.to(DType::i64);
    if (t.dim() == 1) t = t.reshape({1, t.size(0)});
    HH_CHECK(t.dim() == 2, "token ids: expected (L) or (B,L), got ", t.shape());
    return t;
  }
  std::vector<std::vector<int64_t>> rows;
  try {
    rows = {nb::cast<std::vector<int64_t>>(ids)};
  } catch (const nb::cast_error&) {
    try {
      rows = nb::cast<std::vector<std::vector<int64_t>>>(ids);
    } catch (const nb::cast_error&) {
      throw nb::type_error("token ids: expected a list of ints, a list of lists of ints or an integer array");
    }
  }
  HH_CHECK(!rows.empty() && !rows[0].empty(), "token ids: empty");
  std::vector<int64_t> flat;
  for (const auto& r : rows) {
    HH_CHECK(r.size() == rows[0].size(), "token ids: rows of different lengths (", rows[0].size(), " and ", r.size(),
             ")");
    flat.insert(flat.end(), r.begin(), r.end());
  }
  return from_vector(flat, {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())});
}

// t[index]: ints (negative from the end) and slices (positive steps) per leading dim, as numpy
// and torch read them; autograd flows through (select and slice views).
Tensor index_tensor(const Tensor& t, const nb::handle& index) {
  std::vector<nb::handle> parts;
  if (nb::isinstance<nb::tuple>(index)) {
    for (nb::handle h : nb::borrow<nb::tuple>(index)) parts.push_back(h);
  } else {
    parts.push_back(index);
  }
  HH_CHECK(static_cast<int64_t>(parts.size()) <= t.dim(), "hedgehog.Tensor: ", parts.size(),
           " indices for a tensor of ", t.dim(), " dims");
  Tensor out = t;
  int64_t dim = 0;  // the dim of `out` the next index applies to
  for (nb::handle h : parts) {
    if (PySlice_Check(h.ptr())) {
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(h.ptr(), &start, &stop, &step) < 0) throw nb::python_error();
      HH_CHECK(step > 0, "hedgehog.Tensor: a slice step must be positive, got ", step);
      const Py_ssize_t len = PySlice_AdjustIndices(static_cast<Py_ssize_t>(out.size(dim)), &start, &stop, step);
      out = slice(out, dim, start, len > 0 ? stop : start, step);
      ++dim;
    } else if (nb::isinstance<nb::int_>(h)) {
      int64_t i = nb::cast<int64_t>(h);
      const int64_t n = out.size(dim);
      HH_CHECK(i >= -n && i < n, "hedgehog.Tensor: index ", i, " is out of range for dim ", dim, " of size ", n);
      out = select(out, dim, i < 0 ? i + n : i);
    } else {
      throw nb::type_error("hedgehog.Tensor: indices are ints and slices (or a tuple of them)");
    }
  }
  return out;
}

// A dtype by its engine name ("f32", "f64", "bf16", "f16", "i32", "i64", "u8", "bool") or numpy's
// spelling of the same ("float32", "int64", ...).
DType dtype_arg(const std::string& name) {
  static const std::pair<const char*, DType> numpy_names[] = {
      {"float32", DType::f32}, {"float64", DType::f64}, {"bfloat16", DType::bf16}, {"float16", DType::f16},
      {"int32", DType::i32},   {"int64", DType::i64},   {"uint8", DType::u8},      {"bool", DType::boolean}};
  for (const auto& [n, d] : numpy_names)
    if (name == n) return d;
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8, DType::boolean})
    if (name == dtype_name(d)) return d;
  fail(str("hedgehog: unknown dtype '", name, "' (f32, f64, bf16, f16, i32, i64, u8, bool or numpy's names)"));
}

void bind_tensor(nb::module_& m) {
  nb::class_<Tensor>(m, "Tensor", "An n-dimensional array of the engine, with autograd (hedgehog.tensor makes one)")
      .def_prop_ro("shape",
                   [](const Tensor& t) {  // a tuple, as torch.Size and numpy's shape compare
                     const nb::object dims = nb::cast(std::vector<int64_t>(t.shape().begin(), t.shape().end()));
                     return nb::steal<nb::tuple>(PyList_AsTuple(dims.ptr()));
                   })
      .def_prop_ro("dtype", [](const Tensor& t) { return std::string(dtype_name(t.dtype())); })
      .def_prop_ro("device", [](const Tensor& t) { return t.device().str(); })
      .def_prop_ro("ndim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("__len__", [](const Tensor& t) {
        HH_CHECK(t.dim() > 0, "len() of a 0-d tensor");
        return t.size(0);
      })
      .def_prop_rw(
          "requires_grad", [](const Tensor& t) { return t.requires_grad(); },
          [](Tensor& t, bool on) { t.requires_grad_(on); })
      .def_prop_ro("grad", [](const Tensor& t) -> nb::object {
        const Tensor g = t.grad();
        return g.defined() ? nb::cast(g) : nb::none();
      })
      .def("zero_grad", &Tensor::zero_grad)
      .def(
          "backward",
          [](const Tensor& t, const Tensor* gradient, bool retain_graph) {
            nb::gil_scoped_release release;
            t.backward(gradient ? *gradient : Tensor(), retain_graph);
          },
          nb::arg("gradient") = nb::none(), nb::arg("retain_graph") = false)
      .def("detach", &Tensor::detach)
      .def("contiguous", &Tensor::contiguous)
      .def("clone", &Tensor::clone)
      .def("item", [](const Tensor& t) { return t.item_double(); })
      .def("numpy", [](const Tensor& t) { return numpy_view(t); },
           "A numpy array sharing this tensor's memory (a copy for bf16/f16 or a non-CPU tensor)")
      .def("__array__", [](const Tensor& t, nb::handle, nb::handle) { return numpy_view(t); },
           nb::arg("dtype") = nb::none(), nb::arg("copy") = nb::none())
      .def("__dlpack__", [](const Tensor& t, nb::kwargs) { return array_view(t); })
      .def("__dlpack_device__", [](const Tensor&) { return nb::make_tuple(1, 0); })
      .def("to", [](const Tensor& t, const std::string& to) {
        for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8,
                        DType::boolean})
          if (to == dtype_name(d)) return t.to(d);
        return t.to(parse_device(to));
      }, nb::arg("dtype_or_device"))
      .def("reshape", [](const Tensor& t, const std::vector<int64_t>& s) { return reshape(t, shape_arg(s)); })
      .def("transpose", [](const Tensor& t, int64_t a, int64_t b) { return transpose(t, a, b); })
      .def("sum", [](const Tensor& t) { return sum(t); })
      .def("mean", [](const Tensor& t) { return mean(t); })
      .def("__getitem__", &index_tensor, nb::arg("index"))
      .def("__repr__", &Tensor::str)
      .def("__neg__", [](const Tensor& a) { return neg(a); })
      .def("__add__", [](const Tensor& a, nb::handle b) { return add(a, other(b, a)); })
      .def("__radd__", [](const Tensor& a, nb::handle b) { return add(other(b, a), a); })
      .def("__sub__", [](const Tensor& a, nb::handle b) { return sub(a, other(b, a)); })
      .def("__rsub__", [](const Tensor& a, nb::handle b) { return sub(other(b, a), a); })
      .def("__mul__", [](const Tensor& a, nb::handle b) { return mul(a, other(b, a)); })
      .def("__rmul__", [](const Tensor& a, nb::handle b) { return mul(other(b, a), a); })
      .def("__truediv__", [](const Tensor& a, nb::handle b) { return div(a, other(b, a)); })
      .def("__rtruediv__", [](const Tensor& a, nb::handle b) { return div(other(b, a), a); })
      .def("__matmul__", [](const Tensor& a, const Tensor& b) { return matmul(a, b); });

  m.def(
      "tensor",
      [](nb::handle data, bool requires_grad, const std::string& device) {
        Tensor t;
        if (nb::isinstance<Tensor>(data)) {
          t = nb::cast<Tensor>(data).detach().clone();
        } else if (nb::ndarray_check(data)) {
          t = tensor_from_array(nb::cast<nb::ndarray<nb::ro>>(data));
        } else {  // nested lists of numbers: through numpy, as torch.tensor reads them
          t = tensor_from_array(nb::cast<nb::ndarray<nb::ro>>(nb::module_::import_("numpy").attr("asarray")(data)));
        }
        if (t.dtype() == DType::f64 && !nb::ndarray_check(data) && !nb::isinstance<Tensor>(data))
          t = t.to(DType::f32);  // Python floats: f32, as torch.tensor([1.0])
        t = t.to(parse_device(device));
        if (requires_grad) t.requires_grad_(true);
        return t;
      },
      nb::arg("data"), nb::arg("requires_grad") = false, nb::arg("device") = "cpu",
      "A tensor holding a copy of `data` (a numpy array, anything with __dlpack__ or the buffer protocol, "
      "nested lists, or a Tensor), in its dtype (lists of floats: float32)");
  m.def(
      "from_dlpack", [](nb::ndarray<nb::ro> a) { return tensor_from_array(a); }, nb::arg("array"),
      "A tensor holding a copy of a DLPack-capable array (e.g. a torch.Tensor on the CPU)");
  // Creation, as torch's: a shape (a list), a dtype name, a device, requires_grad.
  const auto options = [](const std::string& dtype, const std::string& device) {
    return Options{dtype_arg(dtype), parse_device(device)};
  };
  const auto made = [](Tensor t, bool requires_grad) { return requires_grad ? t.requires_grad_(true) : t; };
  m.def(
      "zeros",
      [=](const std::vector<int64_t>& shape, const std::string& dtype, const std::string& device, bool rg) {
        return made(zeros(shape_arg(shape), options(dtype, device)), rg);
      },
      nb::arg("shape"), nb::arg("dtype") = "f32", nb::arg("device") = "cpu", nb::arg("requires_grad") = false);
  m.def(
      "ones",
      [=](const std::vector<int64_t>& shape, const std::string& dtype, const std::string& device, bool rg) {
        return made(ones(shape_arg(shape), options(dtype, device)), rg);
      },
      nb::arg("shape"), nb::arg("dtype") = "f32", nb::arg("device") = "cpu", nb::arg("requires_grad") = false);
  m.def(
      "randn",
      [=](const std::vector<int64_t>& shape, uint64_t seed, const std::string& dtype, const std::string& device,
          bool rg) {
        Generator g(seed);
        return made(randn(shape_arg(shape), g, options(dtype, device)), rg);
      },
      nb::arg("shape"), nb::arg("seed") = 0, nb::arg("dtype") = "f32", nb::arg("device") = "cpu",
      nb::arg("requires_grad") = false, "N(0, 1) draws from the engine's generator seeded with `seed`");
  m.def(
      "arange",
      [=](double start, std::optional<double> end, double step, const std::string& dtype, const std::string& device) {
        return end ? arange(start, *end, step, options(dtype, device)) : arange(0.0, start, step, options(dtype, device));
      },
      nb::arg("start"), nb::arg("end") = nb::none(), nb::arg("step") = 1.0, nb::arg("dtype") = "f32",
      nb::arg("device") = "cpu", "arange(n) or arange(start, end, step), as torch.arange");
  m.def("_grad_enabled", []() { return GradMode::is_enabled(); });
  m.def("_set_grad_enabled", [](bool on) { GradMode::set_enabled(on); });
}

}  // namespace hh::py
