// Quoting input text in error messages: at most `max` bytes between single quotes, with control
// characters and bytes that are not valid UTF-8 written as \xNN (so a message never carries raw
// binary from a bad file to the terminal), and "..." when cut.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace hh {

std::string quote_text(std::string_view s, size_t max = 60);

}  // namespace hh
