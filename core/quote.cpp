// quote_text (see core/quote.h).
#include "core/quote.h"

#include <cstdint>
#include <cstdio>

#include "core/utf8.h"

namespace hh {

std::string quote_text(std::string_view s, size_t max) {
  std::string out = "'";
  size_t i = 0;
  while (i < s.size() && i < max) {
    const auto c = static_cast<uint8_t>(s[i]);
    const size_t n = utf8_sequence_length(s.data(), s.size(), i);
    if (n == 0 || c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out + (i < s.size() ? "...'" : "'");
}

}  // namespace hh
