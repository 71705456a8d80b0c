// Tests of refusals: run f, which must throw hh::Error whose message holds every fragment; returns
// the message (empty, and the check failed, when nothing was thrown).
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

namespace hh::test {

inline std::string error_of(const std::function<void()>& f, const std::vector<std::string>& fragments) {
  std::string msg;
  try {
    f();
  } catch (const Error& e) {
    msg = e.what();
  }
  INFO("message: " << msg);
  CHECK_MESSAGE(!msg.empty(), "expected an hh::Error");
  for (const auto& frag : fragments) CHECK_MESSAGE(msg.find(frag) != std::string::npos, "missing: ", frag);
  return msg;
}

}  // namespace hh::test
