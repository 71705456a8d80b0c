// Integers read from JSON that came from a file (checkpoint metadata, results.json): nlohmann's
// get<int64_t>() casts a float (1e300: undefined behaviour; 1.5: silently 1), so a count or a step
// is checked to be a JSON integer within int64 first. Private to the library (core/internal/ is not
// installed): installed headers carry no nlohmann dependency.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hh {

// v as int64; otherwise hh::Error "<what> must be an integer, got <v>".
int64_t json_int(const nlohmann::json& v, const std::string& what);
// An array of such integers (each named "<what>[i]").
std::vector<int64_t> json_ints(const nlohmann::json& v, const std::string& what);

}  // namespace hh
