// UTF-8 validity (see core/utf8.h).
#include "core/utf8.h"

#include <cstdint>

namespace hh {

size_t utf8_sequence_length(const char* data, size_t n, size_t i) {
  const auto* s = reinterpret_cast<const unsigned char*>(data);
  const unsigned c = s[i];
  if (c < 0x80) return 1;
  size_t len;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) {
    len = 2, cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, cp = c & 0x07;
  } else {
    return 0;
  }
  if (n - i < len) return 0;
  for (size_t k = 1; k < len; ++k) {
    const unsigned d = s[i + k];
    if ((d & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3F);
  }
  const bool overlong = (len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
  if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

size_t first_invalid_utf8(const char* data, size_t n) {
  for (size_t i = 0; i < n;) {
    const size_t len = utf8_sequence_length(data, n, i);
    if (len == 0) return i;
    i += len;
  }
  return std::string::npos;
}

}  // namespace hh
