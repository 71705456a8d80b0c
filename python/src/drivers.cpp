// hedgehog.convert and hedgehog.evaluate (python/hedgehog/drivers.py) run the apps' own drivers
// (cli/drivers.h) on the flags they build: the same options, run folder, report and progress lines
// (on the process's stderr) as convert_* and eval_lm. The GIL is released for the run; Ctrl-C
// requests a stop (python/src/interrupt.h): the Trainer writes its checkpoint at the next step and
// the run ends as --stop-after-epochs ends it (the folder kept for resume=True), an evaluation ends
// between items (its folder keeps the previous result); then KeyboardInterrupt is raised.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "cli/drivers.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/stop.h"
#include "python/src/bind.h"
#include "python/src/interrupt.h"

namespace hh::py {
namespace {

using Driver = int (*)(int, char**);

Driver driver_named(const std::string& name) {
  static const std::vector<std::pair<std::string, Driver>> table = {
      {"convert_bert", cli::convert_bert}, {"convert_gpt2", cli::convert_gpt2},
      {"convert_llama", cli::convert_llama}, {"convert_vit", cli::convert_vit}, {"eval_lm", cli::eval_lm}};
  std::string names;
  for (const auto& [n, d] : table) {
    if (n == name) return d;
    names += (names.empty() ? "" : ", ") + n;
  }
  fail(str("no driver '", name, "' (", names, ")"));
}

// Runs driver `name` on `args`; returns its exit status (0) or raises its error / KeyboardInterrupt.
int run_driver(const std::string& name, const std::vector<std::string>& args) {
  const Driver driver = driver_named(name);
  // --threads sets the process's thread count: the caller's is put back after the run.
  struct KeepThreads {
    int n = num_threads();
    ~KeepThreads() { set_num_threads(n); }
  } keep;
  int rc = 0;
  InterruptScope interrupt;
  try {
    nb::gil_scoped_release release;
    rc = cli::run_driver(driver, name, args);
    std::cout.flush();
  } catch (const StopRequested&) {  // an evaluation ended between items: KeyboardInterrupt below
    std::cout.flush();
  }
  interrupt.finish();
  return rc;
}

}  // namespace

void bind_drivers(nb::module_& m) {
  m.def("_run_driver", &run_driver, nb::arg("name"), nb::arg("args"),
        "Runs an app's driver (convert_bert, convert_gpt2, convert_llama, convert_vit, eval_lm) on its flags.");
}

}  // namespace hh::py
