#include "core/internal/json_read.h"

#include "core/error.h"

namespace hh {

int64_t json_int(const nlohmann::json& v, const std::string& what) {
  HH_CHECK(v.is_number_integer() && (!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)),
           what, " must be an integer, got ", v.is_number() ? v.dump() : std::string(v.type_name()));
  return v.get<int64_t>();
}

std::vector<int64_t> json_ints(const nlohmann::json& v, const std::string& what) {
  HH_CHECK(v.is_array(), what, " must be an array of integers, got ", v.type_name());
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) out.push_back(json_int(v[i], str(what, "[", i, "]")));
  return out;
}

}  // namespace hh
