// Ctrl-C during a long call that released the GIL (generate, retrieval): Python only sees SIGINT
// once the call returns, so while an InterruptScope lives SIGINT sets a flag instead, which the
// engine's callbacks poll (GenerateOptions::should_stop, a per-trial callback); when the call is
// back, finish() raises KeyboardInterrupt in Python if it was pressed. Python's own handler is put
// back when the scope ends. Only the main thread installs the handler (Python's rule for signals).
#pragma once
#include <nanobind/nanobind.h>

#include <atomic>
#include <csignal>

namespace hh::py {

class InterruptScope {
 public:
  InterruptScope() {
    flag() = false;
    struct sigaction sa {};
    sa.sa_handler = [](int) { flag() = true; };
    sigemptyset(&sa.sa_mask);
    installed_ = sigaction(SIGINT, &sa, &previous_) == 0;
  }
  ~InterruptScope() {
    if (installed_) sigaction(SIGINT, &previous_, nullptr);
  }
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

  static bool requested() { return flag().load(); }
  // With the GIL held, after the call: KeyboardInterrupt when Ctrl-C was pressed during it.
  void finish() const {
    if (!requested()) return;
    PyErr_SetNone(PyExc_KeyboardInterrupt);
    throw nanobind::python_error();
  }

 private:
  static std::atomic<bool>& flag() {
    static std::atomic<bool> f{false};
    return f;
  }
  struct sigaction previous_ {};
  bool installed_ = false;
};

}  // namespace hh::py
