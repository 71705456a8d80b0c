// Ctrl-C during a long call that released the GIL (generate, retrieval, convert, evaluate): Python
// only sees SIGINT once the call returns, so while an InterruptScope lives SIGINT requests a stop
// instead (core/stop.h), which the engine polls (the Trainer after each step, generation after each
// token, evaluation between items); when the call is back, finish() raises KeyboardInterrupt in
// Python if it was pressed. Python's own handler is put back when the scope ends. Only the main
// thread installs the handler (Python's rule for signals).
#pragma once
#include <nanobind/nanobind.h>

#include <csignal>

#include "core/stop.h"

namespace hh::py {

class InterruptScope {
 public:
  InterruptScope() {
    clear_stop_request();
    struct sigaction sa {};
    sa.sa_handler = [](int) { request_stop(); };
    sigemptyset(&sa.sa_mask);
    installed_ = sigaction(SIGINT, &sa, &previous_) == 0;
  }
  ~InterruptScope() {
    if (installed_) sigaction(SIGINT, &previous_, nullptr);
    clear_stop_request();
  }
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

  static bool requested() { return stop_requested(); }
  // With the GIL held, after the call: KeyboardInterrupt when Ctrl-C was pressed during it.
  void finish() const {
    if (!requested()) return;
    clear_stop_request();
    PyErr_SetNone(PyExc_KeyboardInterrupt);
    throw nanobind::python_error();
  }

 private:
  struct sigaction previous_ {};
  bool installed_ = false;
};

}  // namespace hh::py
