// A request to stop the long run in progress, made from outside it: the Python module's Ctrl-C
// handler sets it while an engine call runs with the GIL released. A lock-free flag, safe to set
// from a signal handler. Who polls it: the Trainer after every optimizer step (it writes its
// checkpoint and returns "interrupted", as --stop-after-epochs does), the conversion driver before
// each row, generation after every token, and evaluation loops between items, which throw
// StopRequested (their run folder then keeps the previous result). Nothing sets it in the apps:
// there Ctrl-C ends the process, and the checkpoints already written stay whole (atomic writes).
#pragma once
#include <string>

#include "core/error.h"

namespace hh {

void request_stop() noexcept;        // async-signal-safe
void clear_stop_request() noexcept;  // at the start of a call that honours it
bool stop_requested() noexcept;

// What an evaluation loop throws when a stop was requested (`where` names the loop).
class StopRequested : public Error {
 public:
  explicit StopRequested(const std::string& where) : Error(where + ": stopped (a stop was requested)") {}
};

inline void throw_if_stop_requested(const char* where) {
  if (stop_requested()) throw StopRequested(where);
}

}  // namespace hh
