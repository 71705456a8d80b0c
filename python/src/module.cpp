// hedgehog._hedgehog: the engine from Python (nanobind). The engine's errors (hh::Error) arrive
// as hedgehog.Error, a RuntimeError carrying the engine's message; long calls release the GIL.
#include "core/error.h"
#include "core/parallel.h"
#include "python/src/bind.h"

NB_MODULE(_hedgehog, m) {
  m.doc() = "hedgehog: tensors, autograd, attention ops and HF models of the hedgehog engine";
  nanobind::exception<hh::Error>(m, "Error", PyExc_RuntimeError);
  m.def("get_num_threads", &hh::num_threads, "The CPU threads the engine's ops use (as torch.get_num_threads)");
  m.def("set_num_threads", &hh::set_num_threads, nanobind::arg("n"),
        "Sets the CPU threads the engine's ops use (as torch.set_num_threads)");
  hh::py::bind_tensor(m);
  hh::py::bind_ops(m);
  hh::py::bind_models(m);
  hh::py::bind_drivers(m);
}
