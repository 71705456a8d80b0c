// Errors thrown by the library: one type, a message that names the op, shapes, dtypes or devices.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace hh {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  append(os, rest...);
}
}  // namespace detail

// Builds a message from streamable pieces: throw Error(str("matmul: shapes ", a, " and ", b)).
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  return os.str();
}

[[noreturn]] inline void fail(const std::string& msg) { throw Error(msg); }

}  // namespace hh

// The one error-check macro: HH_CHECK(cond, pieces...) throws hh::Error built from the pieces.
#define HH_CHECK(cond, ...)                                  \
  do {                                                       \
    if (!(cond)) ::hh::fail(::hh::str(__VA_ARGS__));         \
  } while (0)
