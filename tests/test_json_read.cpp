// core/json_read: integers from files are checked, never cast from floats.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "core/internal/json_read.h"
#include "tests/op_table.h"

namespace hh::test {

TEST_CASE("json_read: integers within int64 pass; floats, huge unsigned values and other types are errors") {
  using nlohmann::json;
  CHECK(json_int(json::parse("42"), "x") == 42);
  CHECK(json_int(json::parse("-7"), "x") == -7);
  CHECK(json_int(json::parse("9223372036854775807"), "x") == INT64_MAX);
  check_throws([] { json_int(json::parse("1.5"), "\"steps\""); }, {"\"steps\" must be an integer, got 1.5"});
  check_throws([] { json_int(json::parse("1e300"), "s"); }, {"s must be an integer", "1e+300"});
  check_throws([] { json_int(json::parse("18446744073709551615"), "s"); }, {"must be an integer"});
  check_throws([] { json_int(json::parse("\"3\""), "s"); }, {"must be an integer, got string"});
  CHECK(json_ints(json::parse("[1, 2, 3]"), "a") == std::vector<int64_t>{1, 2, 3});
  check_throws([] { json_ints(json::parse("[1, 2.5]"), "eval_steps"); }, {"eval_steps[1] must be an integer"});
  check_throws([] { json_ints(json::parse("{}"), "eval_steps"); }, {"eval_steps must be an array"});
}

}  // namespace hh::test
