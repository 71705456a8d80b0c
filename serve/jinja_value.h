// Python semantics of the Jinja subset's values (serve/jinja.h), shared by the evaluator: str() and
// repr() as an output tag prints them, truth, the float repr, code points.
#pragma once
#include <string>
#include <vector>

#include "serve/jinja.h"

namespace hh::serve::jinja {

extern const char* const kNamespaceKey;  // marks a namespace() object
extern const char* const kCallableKey;   // a global function (strftime_now, ...)

inline json undefined() { return json(json::value_t::discarded); }
inline bool is_undefined(const json& v) { return v.is_discarded(); }
inline bool is_namespace(const json& v) { return v.is_object() && v.contains(kNamespaceKey); }
inline bool is_int(const json& v) { return v.is_number_integer() || v.is_number_unsigned(); }

std::vector<std::string> code_points(const std::string& s);  // UTF-8 code points (Python's str units)
std::string py_float(double x);                              // Python's repr of a float
std::string py_str(const json& v);                           // str(): what an output tag writes
std::string py_repr(const json& v);                          // repr(): inside lists and dicts
bool truthy(const json& v);                                  // Python's truth of the value
std::string type_name(const json& v);                        // Python's name of its type
// str.strip(chars) (chars empty: whitespace), from the left and/or the right.
std::string strip(const std::string& s, const std::string& chars, bool left, bool right);

}  // namespace hh::serve::jinja
