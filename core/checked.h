// Overflow-checked int64 arithmetic for sizes that come from files, configs and flags: a product
// or sum that does not fit int64 is an hh::Error naming what was being computed and both operands,
// never signed-overflow undefined behaviour (a wrapped size that later allocates or indexes wrongly).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/error.h"

namespace hh {

// a * b; hh::Error "<what>: a x b does not fit a 64-bit integer" on overflow.
inline int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) fail(str(what, ": ", a, " x ", b, " does not fit a 64-bit integer"));
  return r;
}

// a + b; hh::Error "<what>: a + b does not fit a 64-bit integer" on overflow.
inline int64_t checked_add(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) fail(str(what, ": ", a, " + ", b, " does not fit a 64-bit integer"));
  return r;
}

// The same with the description built only on overflow (hot paths: tensor allocation):
// checked_mul(n, d, [&] { return str("shape ", s); }).
template <typename F, typename = std::enable_if_t<std::is_invocable_r_v<std::string, F>>>
int64_t checked_mul(int64_t a, int64_t b, F&& what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) fail(str(what(), ": ", a, " x ", b, " does not fit a 64-bit integer"));
  return r;
}

}  // namespace hh
