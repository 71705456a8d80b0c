// The Python module's shared pieces (python/src/*.cpp, one nanobind module `hedgehog._hedgehog`):
// the Tensor <-> numpy / DLPack conversions every binding uses. The module sits above experiments/
// like an app (scripts/check-layers); python/hedgehog/__init__.py is its Python face.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "core/tensor.h"

namespace hh::py {
namespace nb = nanobind;

// Any array a Python caller hands in (numpy, torch through DLPack, anything with the buffer
// protocol) as a new contiguous CPU tensor of the same dtype: f32, f64, i32, i64, u8, bool; f16 and
// bf16 arrays are read as such. Other dtypes, or memory not on the CPU, raise naming them.
Tensor tensor_from_array(const nb::ndarray<nb::ro>& a);
// A CPU view of `t` for numpy / DLPack without a copy (bf16 and f16 are widened to f32 first: numpy
// has no bf16), kept alive by the view; a tensor on another device is copied to the CPU.
nb::ndarray<> array_view(const Tensor& t);  // returned to Python: a DLPack capsule
nb::ndarray<nb::numpy> numpy_view(const Tensor& t);  // the same view as a numpy array
// ids (a list of ints, a list of lists, or an integer array) -> (B,L) i64.
Tensor token_ids(const nb::handle& ids);

void bind_tensor(nb::module_& m);
void bind_ops(nb::module_& m);
void bind_models(nb::module_& m);
void bind_drivers(nb::module_& m);  // hedgehog.convert, hedgehog.evaluate

}  // namespace hh::py
